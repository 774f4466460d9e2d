package report_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/report"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The fixtures are real runs, as stored: testdata/step-run.json is
// `sloprober test run knee --json` against the built-in simulator (the
// embedded default), testdata/soak-run.json an 80 s soak of a simulator
// with the same configuration at 4 req/s, with 503s for 10 s in the
// middle. (Their levels' longest.same_length, added after they ran, is
// what the code computes of them: every prompt was 256 tokens.)
func load(t *testing.T, name string) *capacity.Run {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	run, err := capacity.DecodeRun(b)
	require.NoError(t, err)
	return run
}

// withID is run as stored under id.
func withID(run *capacity.Run, id string) *capacity.Run {
	run.ID = id
	return run
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "run go test ./report/ -update after a deliberate change")
}

// TestGolden: the Markdown and JSON reports of a fixed step and soak run.
func TestGolden(t *testing.T) {
	for _, tc := range []struct{ run, id string }{{"step-run.json", "knee-20261130T172029.946Z-0a1b2c3d"}, {"soak-run.json", ""},
		{"step-both-run.json", "chat-capacity-20261201T090000Z-4c2d"}, {"soak-faults-run.json", ""},
		{"knee-run.json", "knee-20261205T013514.048Z-340661f9"}} {
		t.Run(tc.run, func(t *testing.T) {
			r := report.Build(withID(load(t, tc.run), tc.id))
			var md bytes.Buffer
			require.NoError(t, report.WriteMarkdown(&md, r))
			golden(t, strings.TrimSuffix(tc.run, "-run.json")+".md", md.Bytes())
			j, err := json.MarshalIndent(r, "", "  ")
			require.NoError(t, err)
			golden(t, strings.TrimSuffix(tc.run, "-run.json")+"-report.json", append(j, '\n'))
		})
	}
	// The README's example HTML report (the embedded default's knee
	// test, `sloprober test run knee`, 2026-12-05), kept as the code
	// writes it.
	var h bytes.Buffer
	require.NoError(t, report.WriteHTML(&h, report.Build(withID(load(t, "knee-run.json"), "knee-20261205T013514.048Z-340661f9"))))
	golden(t, "../../examples/reports/knee.html", h.Bytes())
}

// TestSchema: the JSON reports validate against the published schema
// (report/schema/report.json), and the schema rejects what it must.
func TestSchema(t *testing.T) {
	c := jsonschema.NewCompiler()
	sch, err := c.Compile(filepath.Join("schema", "report.json"))
	require.NoError(t, err)
	for _, name := range []string{"step-run.json", "soak-run.json", "step-both-run.json", "soak-faults-run.json"} {
		run := load(t, name)
		// What newer runs record of how they were measured.
		run.Provenance.Runner = "cli"
		run.Provenance.Validity = &capacity.ValiditySetup{WindowSeconds: 60, SustainSeconds: 120, CPU: 0.9,
			SchedulerP99Seconds: 0.005, GCPauseP99Seconds: 0.005, SendLagP99Seconds: 0.01, PoolWaitP99Seconds: 0.001}
		run.Identity.SimulatorConfig = `{"slots":8}`
		// What a step test's levels record of the prober's delays, the
		// sequential looks and the search's ceiling.
		for i := range run.Verify {
			l := &run.Verify[i]
			l.Prober = &capacity.ProberHealth{Sends: 200, LagP99: 0.033, LagMax: 0.05, CPUSeconds: 1, CPUShare: 0.05, GOMAXPROCS: 2,
				Over: []string{"send_lag"}, Rule: "met despite the prober's delays, which only make a level look worse", Diagnosis: "busy host: ...",
				ReadDelayP99: 0.03, ReadDelayMax: 0.041, DecisionIfBetter: "met", DecisionIfWorse: "met", SendDispersion: 1.02, ScheduleDispersion: 1, LateDrops: 1}
			l.Batches, l.Looks, l.ToDecide = 20, 6, &capacity.ToDecide{Requests: 610, Seconds: 163}
			if l.Interval != nil {
				l.Interval.Correlation = 1.7
			}
		}
		if c := run.Capacity; c != nil {
			c.Ceiling, c.CeilingFrom = 12, capacity.CeilingClosedLoop
		}
		r := report.Build(withID(run, "id"))
		b, err := json.Marshal(r)
		require.NoError(t, err)
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		require.NoError(t, err)
		require.NoError(t, sch.Validate(v), name)

		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		m["verdict"] = "great"
		require.Error(t, sch.Validate(m), "an unknown verdict")
		m["verdict"] = "pass"
		m["surprise"] = 1
		require.Error(t, sch.Validate(m), "an undocumented field")
	}
}

// TestCompare: a run compared with itself changed nothing; with its target
// given two more replicas, one variable moved, and the capacity per
// replica with it; with more changed, the comparison says it cannot tell
// which moved what.
func TestCompare(t *testing.T) {
	run := load(t, "step-run.json")
	a := report.Build(withID(run, "a"))
	c := report.Compare(a, a)
	require.Empty(t, c.Changed)

	other := load(t, "step-run.json")
	other.Setup.Target.Replicas = 4
	b := report.Build(withID(other, "b"))
	c = report.Compare(a, b)
	require.Equal(t, []report.Change{{What: "replicas", A: "1", B: "4"}}, c.Changed)
	var md bytes.Buffer
	require.NoError(t, report.WriteComparison(&md, c))
	require.Contains(t, md.String(), "One variable changed: **replicas**")
	require.Contains(t, md.String(), "| capacity per replica, req/s | 8.88 | 2.22 | -75% |")

	other.Setup.Scenarios[0].Input = "512"
	other.Setup.Test = strings.Replace(other.Setup.Test, "steady: 10s", "steady: 20s", 1)
	c = report.Compare(a, report.Build(withID(other, "b")))
	require.Len(t, c.Changed, 3)
	require.Equal(t, report.Change{What: "test configuration", A: "steady: 10s", B: "steady: 20s"}, c.Changed[2])
	md.Reset()
	require.NoError(t, report.WriteComparison(&md, c))
	require.Contains(t, md.String(), "**3 variables changed**")
}

// TestEvidenceChart: the open-loop evidence the capacity rests on: each
// level's attainment and interval by the rate it offered, apart by what
// it decided, the objective and the verified rate and the rate that
// missed above it marked; no open-loop marker on the closed loop's axis,
// whose points are labelled with their clients.
func TestEvidenceChart(t *testing.T) {
	var h bytes.Buffer
	require.NoError(t, report.WriteHTML(&h, report.Build(load(t, "step-both-run.json"))))
	page := h.String()
	figure := func(id string) string {
		f := page[strings.Index(page, `<figure id="fig-`+id+`">`):]
		return f[:strings.Index(f, "</figure>")]
	}
	ev := figure("evidence")
	for _, want := range []string{"Open-loop evidence", "offered req/s (Poisson)", ">met<", ">missed<", "95% interval", "objective 95%", ">verified<", "n=552"} {
		require.Contains(t, ev, want)
	}
	require.NotContains(t, ev, ">undecided<", "no undecided level: no empty legend entry")
	lt := figure("latency-throughput")
	require.NotContains(t, lt, "verified")
	require.Contains(t, lt, ">8 clients<", "closed-loop points labelled with their clients")
	require.Contains(t, figure("verification"), "offered req/s (Poisson)")
}

// TestCompareInconclusive: an inconclusive run measured its closed loop
// and its knee as a concluded one does: the comparison sets them side by
// side, not "-", and its report's goodput chart says what its knee was.
func TestCompareInconclusive(t *testing.T) {
	a := report.Build(withID(load(t, "step-run.json"), "a"))
	run := load(t, "step-run.json")
	run.Verdict, run.Reason, run.Capacity.VerifiedRate = capacity.VerdictInconclusive, "not concluded: a test", nil
	b := report.Build(withID(run, "b"))
	require.Nil(t, b.Capacity, "no capacity stated")
	require.Equal(t, a.Knee, b.Knee)
	require.Equal(t, a.ClosedLoop, b.ClosedLoop)
	c := report.Compare(a, b)
	rows := map[string]report.CompareRow{}
	for _, r := range c.Rows {
		rows[r.Name] = r
	}
	for _, name := range []string{"closed-loop capacity, clients", "closed-loop capacity, req/s", "knee, clients"} {
		require.NotEqual(t, "-", rows[name].B, name)
		require.Equal(t, rows[name].A, rows[name].B, name)
		require.True(t, strings.HasPrefix(rows[name].Noise, "not told apart: "), "%s: %s", name, rows[name].Noise)
	}
	// Every row with a number has a verdict; what B did not conclude
	// cannot be told, and the top line says so.
	for _, r := range c.Rows {
		if r.A != "-" || r.B != "-" {
			if _, err := strconv.ParseFloat(r.A, 64); err == nil {
				require.NotEmpty(t, r.Noise, r.Name)
			}
		}
	}
	require.Equal(t, "cannot tell: B verified no rate (inconclusive)", rows["capacity, req/s (verified open loop)"].Noise)
	require.Empty(t, c.ToldApart)
	require.Contains(t, c.CannotTell, "capacity, req/s (verified open loop)")
	var md bytes.Buffer
	require.NoError(t, report.WriteComparison(&md, c))
	// The verdicts that differ lead, with why; the numbers' line says how
	// few of them could be judged.
	require.Contains(t, md.String(), "**The verdicts differ**: A PASS, B INCONCLUSIVE; B: not concluded: a test. ")
	require.Contains(t, md.String(), fmt.Sprintf("**Not told apart** on the %d numbers that could be judged, of %d compared.", c.Compared-len(c.CannotTell), c.Compared))
	require.Contains(t, md.String(), "Cannot tell (the noise column says why): capacity, req/s (verified open loop);")
	require.Equal(t, "not told apart: both drained within the time allowed (10 s, 10 s)", rows["burst drain, s"].Noise)

	// A run against itself: told apart on nothing, every number judged.
	same := report.Compare(a, a)
	require.Empty(t, same.ToldApart)
	require.Equal(t, []string{"attainment at capacity, %", "burst attainment, %"}, same.CannotTell, "a schema-1 run has no intervals")
	var h bytes.Buffer
	require.NoError(t, report.WriteHTML(&h, b))
	require.Contains(t, h.String(), "goodput stops growing at the knee.")
}

// TestCompareTrusted: the embedded simulator is compared by its
// configuration, not its port; how the runs were measured is compared
// too; each difference says whether it is within the runs' noise, and a
// percentage moves in points.
func TestCompareTrusted(t *testing.T) {
	measured := func(port, simConfig, runner string, sendLag float64) *capacity.Run {
		run := load(t, "step-run.json")
		run.Setup.Target.URL = "http://127.0.0.1:" + port + "/v1"
		run.Identity.SimulatorConfig = simConfig
		run.Provenance.Runner = runner
		run.Provenance.Validity = &capacity.ValiditySetup{WindowSeconds: 60, SustainSeconds: 120, CPU: 0.9,
			SchedulerP99Seconds: 0.005, GCPauseP99Seconds: 0.005, SendLagP99Seconds: sendLag, PoolWaitP99Seconds: 0.001}
		return run
	}
	a := report.Build(withID(measured("40123", `{"slots":8}`, "cli", 0.01), "a"))
	b := report.Build(withID(measured("41999", `{"slots":8}`, "cli", 0.01), "b"))
	c := report.Compare(a, b)
	require.Empty(t, c.Changed, "the same simulator on another port")
	var md bytes.Buffer
	require.NoError(t, report.WriteComparison(&md, c))
	require.Contains(t, md.String(), "Nothing changed in the test object, the load model or how the runs were measured")
	require.Contains(t, md.String(), "| capacity, req/s (verified open loop) | 8.88 | 8.88 | 0% | not told apart: the capacity lies in")
	require.Contains(t, md.String(), "| attainment at capacity, % | 96.6 | 96.6 | +0.0 pt |")
	row := func(c *report.Comparison, name string) report.CompareRow {
		for _, r := range c.Rows {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no row %q", name)
		return report.CompareRow{}
	}
	// A P99 of 89 requests reaches the sample's top: no upper end.
	require.Equal(t, "not told apart: 95% intervals [269.1, -) ms of 89 and [269.1, -) ms of 89 overlap", row(c, "TTFT P99 at capacity, ms").Noise)
	// 86 good requests in 10 s: 8.6 +- 0.93 req/s each; three times
	// their combined deviation is 3.9.
	require.Equal(t, "not told apart: within +-3.9 req/s (Poisson, 3 sd)", row(c, "goodput at capacity, req/s").Noise)
	require.Equal(t, "not told apart: as the goodput, within +-3.9 req/s (Poisson, 3 sd)", row(c, "cost per 1,000 good requests").Noise)

	d := report.Build(withID(measured("40123", `{"slots":4}`, "daemon", 0.03), "d"))
	c = report.Compare(a, d)
	var what []string
	for _, ch := range c.Changed {
		what = append(what, ch.What)
	}
	require.Equal(t, []string{"simulator configuration", "prober validity thresholds"}, what)
	require.Contains(t, c.Changed[1].B, "send lag 30 ms")
	require.Equal(t, report.CompareRow{Name: "run by", A: "cli", B: "daemon"}, row(c, "run by"), "who ran it is stated, not a cause")

	// Without a bound, a sweep that reached its knee bounds the capacity
	// by the closed loop's peak and its noise: a verified rate above
	// both is beyond noise; one above the peak, within its noise, is not
	// told apart (a busy host measured peaks of 12 and 7.19 req/s of one
	// simulator).
	unbounded := func(verified float64) *report.Report {
		run := measured("40123", `{"slots":8}`, "cli", 0.01)
		run.Capacity.Bound, run.Capacity.VerifiedRate = 0, &verified
		require.True(t, run.Knee.Reached)
		return report.Build(withID(run, fmt.Sprintf("v%g", verified)))
	}
	lowRun := unbounded(8.88)
	peak := 0.0
	for _, l := range lowRun.Levels {
		if l.Concurrency > 0 {
			peak = max(peak, l.CompletedRate)
		}
	}
	c = report.Compare(lowRun, unbounded(2*peak))
	require.Equal(t, fmt.Sprintf("beyond noise: [8.88, %.3g] (up to the closed loop's peak, 14.3 with its noise) and [%.3g, -) do not overlap", peak, 2*peak),
		row(c, "capacity, req/s (verified open loop)").Noise)
	c = report.Compare(lowRun, unbounded(1.2*peak))
	require.Equal(t, fmt.Sprintf("not told apart: the capacity lies in [8.88, %.3g] (up to the closed loop's peak, 14.3 with its noise) and in [%.3g, -), which overlap", peak, 1.2*peak),
		row(c, "capacity, req/s (verified open loop)").Noise)
	// Unless a sweep level was set aside for the prober: its rate is a
	// lower bound, and the peak no ceiling.
	for i := range lowRun.Levels {
		if lowRun.Levels[i].Concurrency > 0 {
			lowRun.Levels[i].ProberBound = true
			break
		}
	}
	c = report.Compare(lowRun, unbounded(2*peak))
	require.NotContains(t, row(c, "capacity, req/s (verified open loop)").Noise, "up to the closed loop's peak")

	// A simulator on another host is another target: compared by its URL.
	e := measured("40123", `{"slots":8}`, "cli", 0.01)
	e.Setup.Target.URL = "http://10.0.0.7:8000/v1"
	c = report.Compare(a, report.Build(withID(e, "e")))
	require.Equal(t, []report.Change{{What: "target URL", A: "http://127.0.0.1:40123/v1", B: "http://10.0.0.7:8000/v1"}}, c.Changed)
}

// TestHostileStrings: what a server says of itself and what the
// configuration holds reach every format as text, never as markup: no
// element in the HTML, no broken table or code span in the Markdown.
func TestHostileStrings(t *testing.T) {
	run := load(t, "step-run.json")
	evil := "<script>alert(1)</script>|`x`<img src=x onerror=alert(2)>[link](http://127.0.0.1/)**bold**"
	run.Identity.Servers = []capacity.Said{{Value: evil, Replies: 3}}
	run.Setup.Target.Metadata = map[string]string{"gpu": evil}
	r := report.Build(run)
	var h, md bytes.Buffer
	require.NoError(t, report.WriteHTML(&h, r))
	require.NotContains(t, h.String(), "<script>")
	require.NotContains(t, h.String(), "<img")
	require.Contains(t, h.String(), "&lt;script&gt;alert(1)&lt;/script&gt;|")
	require.Contains(t, h.String(), "[link](http://127.0.0.1/)**bold**", "as text")
	require.NotContains(t, h.String(), "<strong>bold")
	require.NoError(t, report.WriteMarkdown(&md, r))
	require.NotContains(t, md.String(), "<script>")
	require.Contains(t, md.String(), `| gpu | &lt;script>alert(1)&lt;/script>\|'x'&lt;img src=x onerror=alert(2)>\[link\](http://127.0.0.1/)\*\*bold\*\* |`)
}

// TestNotConcluded: the report of a run that did not conclude (running,
// or aborted during verification) states no capacity, scaling or cost,
// only the levels it measured, and validates against the schema.
func TestNotConcluded(t *testing.T) {
	for _, verdict := range []string{"running", "aborted"} {
		run := load(t, "step-run.json")
		run.Verdict, run.Reason = verdict, "aborted through the API"
		r := report.Build(run)
		require.Nil(t, r.Capacity)
		require.Nil(t, r.Scaling)
		require.Nil(t, r.Cost)
		require.NotEmpty(t, r.Levels)
		var md bytes.Buffer
		require.NoError(t, report.WriteMarkdown(&md, r))
		require.Contains(t, md.String(), "Not concluded: the run is "+verdict)
		require.NotContains(t, md.String(), "Sustainable")

		sch, err := jsonschema.NewCompiler().Compile(filepath.Join("schema", "report.json"))
		require.NoError(t, err)
		b, err := json.Marshal(r)
		require.NoError(t, err)
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		require.NoError(t, err)
		require.NoError(t, sch.Validate(v), verdict)
	}
}

// TestNotesRead: a level the prober limited says first that it is not
// used, never its decision before that ("met ... not used"), then how
// many times it was measured, a clause a fact.
func TestNotesRead(t *testing.T) {
	run := load(t, "step-both-run.json")
	l := &run.Verify[0]
	l.Prober = &capacity.ProberHealth{Invalid: []string{"send_lag"}}
	l.Note = "not used: prober-bound (send_lag, reads up to 49 ms late): with every request corrected by its read delay it would be met"
	l.Remeasured = []string{"busy host: send lag P99 49 ms", "busy host: send lag P99 51 ms"}
	var md bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&md, report.Build(run)))
	// A long note is a footnote under the table, its row keeping the
	// reference (and the decision, where the level is used).
	m := regexp.MustCompile(`\n- \[(\d+)\] verify at 5.8 req/s: (.*)\n`).FindStringSubmatch(md.String())
	require.NotNil(t, m, md.String())
	require.Equal(t, "not used: prober-bound (send_lag, reads up to 49 ms late): with every request corrected by its read delay it would be met; "+
		"0.5 of the closed-loop capacity's rate; measured 3 times (busy host); engine queue mean 0.2, max 1", m[2])
	require.Contains(t, md.String(), `| \[`+m[1]+`\] |`, "no decision before a level not used")
	require.NotContains(t, md.String(), "met not used")
	require.NotContains(t, md.String(), "met: not used")
}

// TestEngineQueue: the engine's own queue depth of a level's window (from
// its metrics) is in the Markdown levels table and in the JSON report,
// which the schema takes.
func TestEngineQueue(t *testing.T) {
	run := load(t, "step-run.json")
	run.Sweep[0].EngineQueue = &capacity.EngineQueue{Samples: 30, Mean: 3.25, Max: 7}
	r := report.Build(run)
	var md bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&md, r))
	require.Contains(t, md.String(), "engine queue mean 3.2, max 7")
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.Contains(t, string(b), `"engine_queue":{"samples":30,"mean":3.25,"max":7}`)
	sch, err := jsonschema.NewCompiler().Compile(filepath.Join("schema", "report.json"))
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	require.NoError(t, sch.Validate(v))
}

// TestChartsSayWhatWasFound: a level whose decision does not stand is
// drawn apart and named in the legend; the attainment axis is zoomed to
// the data; the goodput chart's caption names a knee only when one was
// found.
func TestChartsSayWhatWasFound(t *testing.T) {
	run := load(t, "step-run.json")
	for i := range run.Sweep {
		if run.Sweep[i].Concurrency == 4 {
			run.Sweep[i].Prober.Invalid = []string{"send_lag"}
		}
	}
	var h bytes.Buffer
	require.NoError(t, report.WriteHTML(&h, report.Build(run)))
	page := h.String()
	att := page[strings.Index(page, `<figure id="fig-attainment-load">`):]
	att = att[:strings.Index(att, "</figure>")]
	require.Contains(t, att, "not judged (prober-bound or inconclusive)")
	for _, fig := range []string{"latency-throughput", "goodput-load"} {
		f := page[strings.Index(page, `<figure id="fig-`+fig+`">`):]
		require.Contains(t, f[:strings.Index(f, "</figure>")], "not judged (prober-bound or inconclusive)", fig)
	}
	require.Contains(t, page, "goodput stops growing at the knee.")
	require.NotContains(t, page, `<figure id="fig-evidence">`, "a schema-1 run: no intervals to draw")

	// Goodput still grew at the last level: no knee, as the run says.
	run.Knee = &capacity.Knee{Concurrency: 16, Reason: "goodput still grew at 16 clients, the highest level"}
	h.Reset()
	require.NoError(t, report.WriteHTML(&h, report.Build(run)))
	require.Contains(t, h.String(), "knee: none within the levels run")
	require.NotContains(t, h.String(), "stops growing at the knee")

	// Every closed-loop level at 97-100%: the axis is not 0-100%.
	for i := range run.Sweep {
		run.Sweep[i].Attainment = 0.97 + 0.03*float64(i%2)
	}
	h.Reset()
	require.NoError(t, report.WriteHTML(&h, report.Build(run)))
	page = h.String()
	att = page[strings.Index(page, `<figure id="fig-attainment-load">`):]
	att = att[:strings.Index(att, "</figure>")]
	require.NotContains(t, att, `text-anchor="end">0</text>`, "zoomed to the data and the objective")
	require.NotContains(t, att, `text-anchor="end">20</text>`)
}

// TestComparisonHTML: the comparison as a page: its tables, then each chart
// of A beside B's, every id in the page unique.
func TestComparisonHTML(t *testing.T) {
	a := report.Build(withID(load(t, "step-run.json"), "a"))
	soak := report.Build(withID(load(t, "soak-run.json"), "b"))
	var h bytes.Buffer
	require.NoError(t, report.WriteComparisonHTML(&h, report.Compare(a, soak)))
	page := h.String()
	require.Contains(t, page, `<meta http-equiv="Content-Security-Policy" content="default-src 'none'`)
	require.Contains(t, page, "<td>capacity, req/s (verified open loop)</td>")
	require.Contains(t, page, `id="a-latency-throughput"`)
	require.Contains(t, page, `id="b-soak-latency"`)
	require.Contains(t, page, "<figure><figcaption>Not in this run.</figcaption></figure>", "a step's chart beside a soak")
	ids := regexp.MustCompile(` id="([^"]+)"`).FindAllStringSubmatch(page, -1)
	seen := map[string]bool{}
	for _, m := range ids {
		require.False(t, seen[m[1]], "id %s twice", m[1])
		seen[m[1]] = true
	}
	require.NotContains(t, page, "<script")
}

// TestMarkdownCharts: a Markdown report written with its charts links
// each chart's SVG file at the end of the section the HTML draws it in,
// and returns the files to write beside it.
func TestMarkdownCharts(t *testing.T) {
	var md bytes.Buffer
	files, err := report.WriteMarkdownWithCharts(&md, report.Build(load(t, "step-both-run.json")), "knee")
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		require.True(t, strings.HasPrefix(f.SVG, "<svg"), f.Name)
		require.Contains(t, md.String(), "]("+f.Name+")", "%s linked", f.Name)
	}
	require.Contains(t, names, "knee-evidence.svg")
	text := md.String()
	conclusion := text[strings.Index(text, ". Capacity conclusion"):]
	conclusion = conclusion[:strings.Index(conclusion, "\n## ")]
	require.Contains(t, conclusion, "![Open-loop evidence](knee-evidence.svg)")
	var plain bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&plain, report.Build(load(t, "step-both-run.json"))))
	require.NotContains(t, plain.String(), ".svg)", "without files, no links to none")
}

// TestOneSource: the terminal's summary, the report (JSON and
// Markdown) and the comparison read the verdict, the verified capacity,
// the closed loop, the knee and the forecast from the stored run and
// state them alike, on the golden runs and on an inconclusive one and one
// whose goodput still grew at its last level.
func TestOneSource(t *testing.T) {
	inconclusive := load(t, "step-run.json")
	inconclusive.Verdict, inconclusive.Reason, inconclusive.Capacity.VerifiedRate = capacity.VerdictInconclusive, "not concluded: a test", nil
	growing := load(t, "step-both-run.json")
	growing.Knee = &capacity.Knee{Concurrency: 16, Goodput: 5.8, Reason: "goodput still grew at 16 clients, the highest level"}
	for name, run := range map[string]*capacity.Run{
		"step-run": load(t, "step-run.json"), "step-both-run": load(t, "step-both-run.json"),
		"inconclusive": inconclusive, "knee not reached": growing,
		// Stored runs of the starter test against the README's example
		// server: a PASS, and one with a 99% objective in 20 s windows
		// that concluded nothing.
		"example server": load(t, "evidence-run.json"), "example server, inconclusive": load(t, "inconclusive-run.json"),
	} {
		t.Run(name, func(t *testing.T) {
			var cli0, md, html, js bytes.Buffer
			capacity.WriteTable(&cli0, run)
			// The terminal wraps its lines at 120 columns, a continuation
			// indented by four.
			cli := strings.NewReplacer("\n    ", " ").Replace(cli0.String())
			r := report.Build(run)
			require.NoError(t, report.WriteMarkdown(&md, r))
			require.NoError(t, report.Write(&html, r, "html"))
			require.NoError(t, report.Write(&js, r, "json"))
			var back report.Report
			require.NoError(t, json.Unmarshal(js.Bytes(), &back))
			rows := map[string]report.CompareRow{}
			for _, row := range report.Compare(r, r).Rows {
				rows[row.Name] = row
			}
			// The verdict.
			require.Contains(t, cli, ": "+strings.ToUpper(run.Verdict)+": ")
			require.Contains(t, md.String(), strings.ToUpper(run.Verdict))
			require.Equal(t, run.Verdict, back.Verdict)
			require.Equal(t, run.Verdict, rows["verdict"].A)
			// The verified capacity, or none.
			if run.Capacity == nil {
				// A run whose sweep concluded nothing: no capacity,
				// open or closed loop, stated anywhere; its knee is.
				require.Nil(t, back.Capacity)
				require.Nil(t, back.ClosedLoop)
				require.Equal(t, "-", rows["capacity, req/s (verified open loop)"].A)
				require.Equal(t, "-", rows["closed-loop capacity, clients"].A)
				require.NotContains(t, md.String(), "req/s verified open loop")
				require.NotContains(t, md.String(), "Closed loop: ")
				require.Contains(t, md.String(), "**Not concluded**: ")
				require.Contains(t, cli, ": INCONCLUSIVE: "+run.Reason)
			} else if v := run.Capacity.VerifiedRate; v != nil {
				text := fmt.Sprintf("%.3g req/s verified open loop", *v)
				require.Contains(t, cli, text)
				require.Contains(t, md.String(), text)
				require.Equal(t, *v, back.Capacity.VerifiedRate)
				require.Equal(t, fmt.Sprintf("%.3g", *v), rows["capacity, req/s (verified open loop)"].A)
			} else {
				require.Nil(t, back.Capacity)
				require.Equal(t, "-", rows["capacity, req/s (verified open loop)"].A)
				require.NotContains(t, md.String(), "req/s verified open loop")
			}
			// The closed loop, concluded or not.
			if c := run.Capacity; c != nil {
				require.Contains(t, cli, fmt.Sprintf("closed loop %d clients at %.3g req/s", c.Concurrency, c.Rate))
				require.Contains(t, md.String(), fmt.Sprintf("Closed loop: %d clients completed %.3g req/s", c.Concurrency, c.Rate))
				require.Equal(t, &report.ClosedLoop{Concurrency: c.Concurrency, Rate: c.Rate, Goodput: c.Goodput}, back.ClosedLoop)
				require.Equal(t, fmt.Sprint(c.Concurrency), rows["closed-loop capacity, clients"].A)
				require.Equal(t, fmt.Sprintf("%.3g", c.Rate), rows["closed-loop capacity, req/s"].A)
			}
			// The knee, reached or not.
			k := run.Knee
			require.Equal(t, k, back.Knee)
			require.Contains(t, cli, "knee: "+k.Text())
			require.Contains(t, md.String(), "Knee: "+k.Text())
			require.Contains(t, html.String(), "Knee: "+template.HTMLEscapeString(k.Text()))
			if k.Reached {
				require.Contains(t, k.Text(), fmt.Sprintf("%d clients: ", k.Concurrency))
				require.Equal(t, fmt.Sprint(k.Concurrency), rows["knee, clients"].A)
			} else {
				require.Equal(t, fmt.Sprintf("none within the levels run (up to %d)", k.Concurrency), rows["knee, clients"].A)
				require.True(t, strings.HasPrefix(k.Text(), "none within the levels run: "), "a knee not reached is not stated as one: %s", k.Text())
				require.NotContains(t, md.String()+cli, "before its knee")
			}
			// The forecast: holds true, false or null, one text.
			if c := run.Capacity; c != nil && c.Forecast != nil {
				fc := c.Forecast
				_, text := fc.Verdict()
				require.Contains(t, cli, "forecast: "+text)
				require.Contains(t, md.String(), text)
				require.Equal(t, fc.Holds, back.Capacity.Forecast.Holds)
			}
		})
	}
}

// TestEveryNumberJudged: in a comparison of any two golden runs (step
// and soak, one against the other), every row with a number on either
// side has a noise verdict, and the top line counts them; a run against
// itself is told apart on nothing.
func TestEveryNumberJudged(t *testing.T) {
	runs := []string{"step-run.json", "step-both-run.json", "soak-run.json", "soak-faults-run.json"}
	for _, x := range runs {
		for _, y := range runs {
			c := report.Compare(report.Build(withID(load(t, x), "a")), report.Build(withID(load(t, y), "b")))
			judged := 0
			for _, r := range c.Rows {
				_, errA := strconv.ParseFloat(r.A, 64)
				_, errB := strconv.ParseFloat(r.B, 64)
				if errA == nil || errB == nil {
					require.Regexp(t, `^(not told apart|beyond noise|cannot tell): `, r.Noise, "%s against %s: %s", x, y, r.Name)
					judged++
				}
			}
			require.Equal(t, judged, c.Compared, "%s against %s", x, y)
			if x == y {
				require.Empty(t, c.ToldApart, "%s against itself", x)
			}
		}
	}
}

// TestKneeBelowClosedLoop: a knee below the closed-loop capacity (a
// compute-bound engine: a second client adds no goodput, yet two still
// meet the objectives) is tied to it in one sentence; a knee at the
// capacity needs none.
func TestKneeBelowClosedLoop(t *testing.T) {
	run := load(t, "step-run.json")
	run.Capacity.Concurrency = 2
	run.Knee = &capacity.Knee{Reached: true, Concurrency: 1, Goodput: 0.7, Reason: "goodput 0.7 -> 0.7 good req/s from 1 to 2 clients (+0% for +100% clients)"}
	var md bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&md, report.Build(run)))
	require.Contains(t, md.String(), "The two differ: goodput stopped growing at 1 client (the knee), while up to 2 clients the objectives still held (the closed-loop capacity)")

	run.Knee.Concurrency = 2
	md.Reset()
	require.NoError(t, report.WriteMarkdown(&md, report.Build(run)))
	require.NotContains(t, md.String(), "The two differ")
}

// TestCompareVerdictsDiffer: two runs whose numbers are within noise but
// whose verdicts differ (a burst that drained in time, one that did not:
// what decided the second's FAIL) lead with the verdicts and why, and
// compare the burst, whose drain row says it cannot tell.
func TestCompareVerdictsDiffer(t *testing.T) {
	a, b := withID(load(t, "knee-run.json"), "a"), withID(load(t, "knee-run.json"), "b")
	b.Verdict = capacity.VerdictFail
	b.Reason = "burst: the backlog of the 2x burst did not drain within 10s"
	b.Burst.Timeline.Drained, b.Burst.DrainSeconds = 0, 10
	c := report.Compare(report.Build(a), report.Build(b))
	rows := map[string]report.CompareRow{}
	for _, r := range c.Rows {
		rows[r.Name] = r
	}
	require.Equal(t, "cannot tell: one drain a run has no interval: A's within 10 s, B's not", rows["burst drain, s"].Noise)
	require.True(t, strings.HasPrefix(rows["burst attainment, %"].Noise, "not told apart: "), rows["burst attainment, %"].Noise)
	var md bytes.Buffer
	require.NoError(t, report.WriteComparison(&md, c))
	require.Contains(t, md.String(), "**The verdicts differ**: A PASS, B FAIL; B: burst: the backlog of the 2x burst did not drain within 10s. **Not told apart**")
	require.NotContains(t, md.String(), "**The verdicts differ**: A PASS, B PASS")

	// Runs whose verdicts agree say nothing of them.
	same := report.Compare(report.Build(a), report.Build(withID(load(t, "knee-run.json"), "c")))
	md.Reset()
	require.NoError(t, report.WriteComparison(&md, same))
	require.NotContains(t, md.String(), "verdicts differ")
	require.Contains(t, md.String(), "**Not told apart**: every number compared")
}
