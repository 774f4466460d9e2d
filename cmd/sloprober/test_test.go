package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// TestTestRunExitCodes: `sloprober test run` exits 0 on pass, 1 on an
// infeasible (or failed) test, 2 on an unknown test, a kind it cannot run,
// a usage or a configuration error; it stores the run through the run store, and `report show ID` reads it
// there; --json writes the run too. A soak runs its windows.
// testValidity are the validity thresholds the step tests here run with:
// a sloprober built with -race, on 2 cores shared with the simulator and
// other test binaries, sees scheduler latencies of tens of milliseconds.
// These tests check the procedure, not the prober's health (that is
// capacity's TestStepProberBound and rules' TestEndToEndStarvedProber).
var testValidity = []string{"--validity.cpu=1", "--validity.scheduler-latency=1s", "--validity.gc-pause=1s", "--validity.send-lag=1s"}

func TestTestRunExitCodes(t *testing.T) {
	// 4 slots, a 4 ms prefill and 20-token replies at 8 + 2c ms a step:
	// every TTFT is under 25 ms up to 4 clients (see capacity's ground
	// truth test). The soak's 5 req/s keeps about 1.3 of the 4 slots busy
	// (5 x 0.25 s): Poisson arrivals rarely queue for a slot (at 10 req/s
	// they do, and its TTFT median grows by queueing alone).
	//
	// short's SLO (1 s) and objective (50%) are loose on purpose: this
	// test is about exit codes, and the host alone delays TTFTs. Built
	// with -race beside a CPU burner (make test-busy), TTFT P99 reached
	// 0.6 s, against 25 ms for the engine; at 150 ms and 85% (before),
	// 2 misses of 54 left the 1-client level undecided (96.3% [79.7,
	// 99.4]) and 14 of 51 quick's open-loop level (72.5% [47.2, 88.6])
	// within max_steady: inconclusive, exit 2, in 5 runs of 6. At 50% a level whose requests are all good is met after 8
	// (Wilson's lower end N/(N+z^2) at z 2.81, ten looks: N >= 7.9;
	// 45 at 85%), and misses are borne: 17 good of 20 is met (lower end
	// 54%). quick's open-loop level, 0.4 of the capacity (about 4.7
	// req/s, 3.3 beside the burner), draws 6.6 requests or more on
	// average a 2 s window, so it is decided within one or two
	// extensions; max_steady 20s (66 on average) leaves fewer than 8 a
	// chance below 1e-19.
	sim := simtest.Start(t, "slots: 4\nprefill: {base: 4ms, per_token: 0s}\ndecode: {base: 8ms, per_sequence: 2ms}\n")
	dir := t.TempDir()
	file := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s, simulator: true}]
scenarios:
  - {name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, objective: 0.5, slo: {ttft: 1s}}
  - {name: impossible, input_tokens: 16, output_tokens: 20, ignore_eos: true, slo: {ttft: 1ms}}
tests:
  - name: quick
    kind: step
    target: sim
    scenario: short
    baseline: {requests: 3}
    sweep: {concurrency: [1, 4], refine: 0}
    window: {warmup: 200ms, steady: 2s, min_requests: 5, max_steady: 20s}
    verify: {rates: [0.4], max_levels: 1, burst: {factor: 1}}
  - {name: hopeless, kind: step, target: sim, scenario: impossible, baseline: {requests: 3}}
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 5, duration: 2s, window: 1s, drift: {p99_growth: 10, goodput_drop: 0.99}}
`, sim.URL)), 0o600))
	out := filepath.Join(dir, "run.json")
	storage := filepath.Join(dir, "data")
	testRun := func(name string, args ...string) []string {
		return append(append([]string{"test", "run", name, "--config.file", file, "--storage.path", storage}, args...), testValidity...)
	}

	code, stdout, stderr := runCLI(t, testRun("quick", "--json", out)...)
	require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
	require.Contains(t, stdout, "test quick (step) on sim: PASS")
	require.Contains(t, stderr, "Running step test quick on target sim: sweep [1 4], windows 200ms + 2s a level")
	require.Contains(t, stderr, "level 2 of about")
	var run capacity.Run
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &run))
	require.Equal(t, capacity.VerdictPass, run.Verdict)
	require.Equal(t, 4, run.Capacity.Concurrency)
	require.Equal(t, capacity.SchemaVersion, run.SchemaVersion)
	require.NotNil(t, run.VerifiedRate)
	require.Equal(t, *run.Capacity.VerifiedRate, *run.VerifiedRate)
	// How it was measured, for report compare: by the CLI, with the
	// validity flags given, against a simulator of this configuration.
	require.Equal(t, "cli", run.Provenance.Runner)
	require.Equal(t, 1.0, run.Provenance.Validity.SchedulerP99Seconds, "--validity.scheduler-latency=1s")
	require.Contains(t, run.Identity.SimulatorConfig, `"slots":4`)

	// The run is stored, under the id it prints, and its report is read
	// from the store by that id.
	require.Regexp(t, `Run quick-\d{8}T\d{6}\.\d{3}Z-[0-9a-f]{8} stored in `, stderr)
	require.Equal(t, "quick", run.Test)
	stored, err := filepath.Glob(filepath.Join(storage, "runs", run.ID+".json"))
	require.NoError(t, err)
	require.Len(t, stored, 1, "the run is stored as %s", run.ID)
	require.Contains(t, stderr, "sloprober report show "+run.ID+" --storage.path="+storage)
	code, stdout, stderr = runCLI(t, "report", "show", run.ID, "--storage.path", storage)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "# Capacity report: quick (step test): PASS")
	require.Contains(t, stdout, run.ID, "a stored run's report names its id")
	require.NotContains(t, stdout, "(not stored)")

	// A daemon holding the storage directory: see TestTestRunBesideDaemon.

	// Its report, from the run file, in each format; a comparison with
	// itself; runs that are not there.
	code, stdout, stderr = runCLI(t, "report", "show", out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "# Capacity report: quick (step test): PASS")
	require.Contains(t, stdout, "Closed loop: 4 clients completed")
	html := filepath.Join(dir, "report.html")
	code, _, stderr = runCLI(t, "report", "show", out, "--format", "html", "-o", html)
	require.Equal(t, 0, code, stderr)
	b, err = os.ReadFile(html)
	require.NoError(t, err)
	require.Contains(t, string(b), `<figure id="fig-latency-throughput">`)
	// Markdown to a file: its charts as SVG files beside it, linked.
	code, _, stderr = runCLI(t, "report", "show", out, "-o", filepath.Join(dir, "report.md"))
	require.Equal(t, 0, code, stderr)
	b, err = os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(b), "![Open-loop evidence](report-evidence.svg)")
	svg, err := os.ReadFile(filepath.Join(dir, "report-evidence.svg"))
	require.NoError(t, err)
	require.Contains(t, string(svg), "Open-loop evidence")
	code, stdout, stderr = runCLI(t, "report", "show", out, "--format", "json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"schema_version": 2`)
	code, stdout, stderr = runCLI(t, "report", "compare", out, out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "Nothing changed in the test object, the load model or how the runs were measured")
	code, _, stderr = runCLI(t, "report", "show", "quick-20000101T000000.000Z-00000000", "--storage.path", dir)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "run not found")
	code, _, stderr = runCLI(t, "report", "show", "../../etc/passwd")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "is no run file, nor a run in data/")
	code, stdout, stderr = runCLI(t, "report", "compare", out, out, "--format", "html")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "<h2>Charts, A left and B right</h2>")
	require.Contains(t, stdout, `<svg xmlns="http://www.w3.org/2000/svg" id="a-latency-throughput"`)
	require.Contains(t, stdout, `<svg xmlns="http://www.w3.org/2000/svg" id="b-latency-throughput"`)

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{testRun("hopeless", "--output=md"), 1, ""},
		{testRun("nope"), 2, `no test "nope" in the configuration (tests: quick, hopeless, soak)`},
		{testRun("soak", "--output=json"), 0, "Running soak test soak on target sim: 5 req/s for 2s, windows of 1s"},
		{[]string{"test", "run"}, 2, "test run needs a test's name (sloprober test run knee) or an endpoint's --target URL"},
		{[]string{"test", "run", "quick", "--config.file", filepath.Join(dir, "missing.yml")}, 2, "missing.yml"},
	} {
		code, stdout, stderr := runCLI(t, tc.args...)
		require.Equal(t, tc.code, code, "%v: %s\n%s", tc.args, stdout, stderr)
		require.Contains(t, stderr, tc.msg, tc.args)
		if tc.code == 1 {
			// --output md: the summary as a list, every column.
			require.Contains(t, stdout, "- test hopeless (step) on sim: INFEASIBLE")
			require.Contains(t, stdout, "| stage | clients | intended/s | offered/s | window |")
		}
		if tc.code == 0 {
			// --output json: the run itself.
			var run capacity.Run
			require.NoError(t, json.Unmarshal([]byte(stdout), &run), stdout)
			require.Equal(t, capacity.VerdictPass, run.Verdict)
			require.Len(t, run.Soak.Windows, 2)
		}
	}
}

// TestSIGTERMAbortsRunningTest: SIGTERM ends a test running in the daemon
// at once, before the canary drains: its run is stored as aborted, with
// the reason and the levels it measured; the next start restores nothing
// from it and marks nothing running.
func TestSIGTERMAbortsRunningTest(t *testing.T) {
	sim := simtest.Start(t, "slots: 4\nprefill: {base: 4ms, per_token: 0s}\ndecode: {base: 8ms, per_sequence: 2ms}\n")
	dir := t.TempDir()
	file := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s}]
scenarios: [{name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, objective: 0.85, slo: {ttft: 150ms}}]
canary: [{target: sim, scenario: short, rate: 2, arrival: constant}]
tests:
  - {name: long, kind: step, target: sim, scenario: short, baseline: {requests: 3}, sweep: {concurrency: [1, 2]}, window: {warmup: 0s, steady: 5m}}
`, sim.URL)), 0o600))
	storage := filepath.Join(dir, "runs")
	p := startProcess(t, append([]string{"--config.file=" + file, "--storage.path=" + storage, "--web.enable-test-api", "--shutdown.grace-period=5s"}, testValidity...)...)
	p.waitReady(t)
	code, body := p.post(t, "/api/v1/tests/long/run")
	require.Equal(t, http.StatusAccepted, code, body)
	require.Eventually(t, func() bool {
		return p.metric(t, `sloprober_requests_sent_total{scenario="short",target="sim",test="long"}`) > 5
	},
		20*time.Second, 20*time.Millisecond, "the test's sweep is under way")
	// The landing page lists the test with its running run's level.
	code, page := p.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `<td>long</td><td>step</td><td>sim</td><td>on demand</td>\n<td>-</td>\n<td>running: level \d+ of about \d+, (baseline|sweep) at (1 client|\d+ clients); [0-9hms]+ elapsed, about [0-9hms]+ left \(up to [0-9hms]+\)</td>`, page)
	start := time.Now()
	require.Equal(t, 0, p.stop(t))
	require.Less(t, time.Since(start), 10*time.Second, "within the grace period and the linger")
	require.Contains(t, p.logs(), `msg="Test ended" test=long`)

	runs, err := filepath.Glob(filepath.Join(storage, "runs", "long-*.json"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	b, err := os.ReadFile(runs[0])
	require.NoError(t, err)
	var run capacity.Run
	require.NoError(t, json.Unmarshal(b, &run))
	require.Equal(t, capacity.VerdictAborted, run.Verdict)
	require.Equal(t, "aborted: sloprober is stopping", run.Reason)
	require.NotNil(t, run.Baseline, "the partial results are kept")
	require.NotEmpty(t, run.Sweep)
}

// TestTestRunUnreachable: a target that never answers is an error (exit
// 2), not a verdict on what it can serve. Before, `test run --target` of a
// closed port said INFEASIBLE ("one request at a time already misses the
// objective") and exited 1, as a target too slow for its SLOs does.
func TestTestRunUnreachable(t *testing.T) {
	closed := httptest.NewServer(nil)
	url := closed.URL + "/v1"
	closed.Close()
	code, stdout, stderr := runCLI(t, append([]string{"test", "run", "--target", url, "--model", "m", "--storage.path", t.TempDir()}, testValidity...)...)
	require.Equal(t, 2, code, "%s\n%s", stdout, stderr)
	require.Contains(t, strings.Join(strings.Fields(stdout), " "), "ABORTED: the target never answered: all 10 baseline requests failed to connect (connect_error): is "+url+" up, and reachable from here?")
}
