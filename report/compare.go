package report

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/internal/human"
)

// Comparison sets two reports side by side: their numbers, and what
// changed between them in the test object and the load model. A change
// should move one variable at a time; the comparison says which moved.
type Comparison struct {
	SchemaVersion int          `json:"schema_version"`
	A             *Report      `json:"a"`
	B             *Report      `json:"b"`
	Rows          []CompareRow `json:"rows"`
	// Changed lists what differs in the test object and the load model,
	// one entry a variable.
	Changed []Change `json:"changed"`
	// ToldApart names the rows whose numbers differ beyond the runs'
	// noise, CannotTell those the runs hold too little to judge, and
	// Compared counts the rows judged: the runs are not told apart when
	// ToldApart is empty.
	ToldApart  []string `json:"told_apart"`
	CannotTell []string `json:"cannot_tell"`
	Compared   int      `json:"compared"`
}

// CompareRow is one number of both reports.
type CompareRow struct {
	Name string `json:"name"`
	A    string `json:"a"`
	B    string `json:"b"`
	// Delta is B against A where both are numbers: relative ("+12%"),
	// or in points for a percentage ("+2.1 pt").
	Delta string `json:"delta,omitempty"`
	// Noise says whether the runs tell the difference apart, and from
	// what: "not told apart" (their intervals or ranges overlap: no
	// difference is shown, which is not that there is none), "beyond
	// noise", or a percentile's sample sizes when they are too small.
	Noise string `json:"noise,omitempty"`
}

// Change is one variable that differs between the two runs.
type Change struct {
	What string `json:"what"`
	A    string `json:"a"`
	B    string `json:"b"`
}

// Compare compares report a (the earlier, say) with b.
func Compare(a, b *Report) *Comparison {
	c := &Comparison{SchemaVersion: SchemaVersion, A: a, B: b, Rows: []CompareRow{}, Changed: []Change{}, ToldApart: []string{}, CannotTell: []string{}}
	// num adds a number of both reports, with the noise's verdict on the
	// two: noise is called when either report has the number.
	num := func(name string, get func(*Report) (float64, bool), format string, points bool, noise func(a, b *Report) string) {
		va, oka := get(a)
		vb, okb := get(b)
		row := CompareRow{Name: name, A: "-", B: "-"}
		if oka {
			row.A = fmt.Sprintf(format, va)
		}
		if okb {
			row.B = fmt.Sprintf(format, vb)
		}
		switch {
		case oka && okb && points:
			row.Delta = fmt.Sprintf("%+.1f pt", vb-va)
		case oka && okb && va != 0:
			row.Delta = human.SignedPercent(vb/va - 1)
		}
		if oka || okb {
			row.Noise = noise(a, b)
		}
		c.Rows = append(c.Rows, row)
	}
	str := func(name string, get func(*Report) string) {
		c.Rows = append(c.Rows, CompareRow{Name: name, A: get(a), B: get(b)})
	}
	str("verdict", func(r *Report) string { return r.Verdict })
	str("start", func(r *Report) string { return r.Start.UTC().Format("2006-01-02 15:04Z") })
	capOf := func(f func(*CapacitySummary) float64) func(*Report) (float64, bool) {
		return func(r *Report) (float64, bool) {
			if r.Capacity == nil {
				return 0, false
			}
			return f(r.Capacity), true
		}
	}
	// at judges a number of the two verified levels (atCapacity).
	at := func(dir int, same func(la, lb *Level) string, get func(*Level) float64) func(a, b *Report) string {
		return func(a, b *Report) string { return atCapacity(a, b, dir, same, get) }
	}
	goodput := at(+1, goodputNoise, func(l *Level) float64 { return l.Goodput })
	num("capacity, req/s (verified open loop)", capOf(func(c *CapacitySummary) float64 { return c.VerifiedRate }), "%.3g", false,
		func(a, b *Report) string { return capacityNoise(a, b, false) })
	num("capacity per replica, req/s", capOf(func(c *CapacitySummary) float64 { return c.RatePerReplica }), "%.3g", false,
		func(a, b *Report) string { return capacityNoise(a, b, true) })
	num("goodput at capacity, req/s", capOf(func(c *CapacitySummary) float64 { return c.VerifiedGoodput }), "%.3g", false, goodput)
	num("attainment at capacity, %", capOf(func(c *CapacitySummary) float64 { return 100 * c.VerifiedAttainment }), "%.1f", true,
		at(0, attainmentNoise, func(l *Level) float64 { return l.Attainment }))
	// What the sweep measured is compared whenever both runs measured
	// it, concluded or not.
	closed := func(f func(*ClosedLoop) float64) func(*Report) (float64, bool) {
		return func(r *Report) (float64, bool) {
			if r.ClosedLoop == nil {
				return 0, false
			}
			return f(r.ClosedLoop), true
		}
	}
	num("closed-loop capacity, clients", closed(func(c *ClosedLoop) float64 { return float64(c.Concurrency) }), "%.0f", false, closedLoopNoise)
	num("closed-loop capacity, req/s", closed(func(c *ClosedLoop) float64 { return c.Rate }), "%.3g", false, closedRateNoise)
	num("knee, clients", func(r *Report) (float64, bool) {
		if r.Knee == nil || !r.Knee.Reached {
			return 0, false
		}
		return float64(r.Knee.Concurrency), true
	}, "%.0f", false, kneeNoise)
	if i := len(c.Rows) - 1; a.Knee != nil || b.Knee != nil {
		// A sweep whose goodput still grew has no knee, which is not
		// that it was not measured.
		for _, side := range []struct {
			r *Report
			v *string
		}{{a, &c.Rows[i].A}, {b, &c.Rows[i].B}} {
			if k := side.r.Knee; k != nil && !k.Reached {
				*side.v = fmt.Sprintf("%s (up to %d)", capacity.NoKnee, k.Concurrency)
			}
		}
		if c.Rows[i].Noise == "" {
			c.Rows[i].Noise = kneeNoise(a, b)
		}
	}
	for _, lat := range []struct {
		name string
		get  func(*Level) capacity.Percentiles
	}{
		{"TTFT P99 at capacity, ms", func(l *Level) capacity.Percentiles { return l.TTFT }},
		{"TPOT P99 at capacity, ms", func(l *Level) capacity.Percentiles { return l.TPOT }},
		{"E2E P99 at capacity, ms", func(l *Level) capacity.Percentiles { return l.E2E }},
	} {
		num(lat.name, func(r *Report) (float64, bool) {
			l := verifiedLevel(r)
			if l == nil {
				return 0, false
			}
			return 1e3 * lat.get(l).P99, true
		}, "%.4g", false, at(+1, func(la, lb *Level) string {
			return quantileNoise(lat.get(la), lat.get(lb), 0.99, la.Interval, lb.Interval, 1e3, "ms")
		}, func(l *Level) float64 { return lat.get(l).P99 }))
	}
	// The burst: what may decide a verdict that the numbers above do not.
	num("burst attainment, %", func(r *Report) (float64, bool) {
		if r.Risk.Burst == nil {
			return 0, false
		}
		return 100 * r.Risk.Burst.Attainment, true
	}, "%.1f", true, func(a, b *Report) string {
		la, lb := burstLevel(a), burstLevel(b)
		if la == nil || lb == nil {
			return cannot("only one run has a burst")
		}
		return attainmentNoise(la, lb)
	})
	num("burst drain, s", func(r *Report) (float64, bool) {
		if b := r.Risk.Burst; b != nil && b.Timeline != nil {
			return b.DrainSeconds, true
		}
		return 0, false
	}, "%.1f", false, drainNoise)
	// The cost of a good request is the price over the goodput: told
	// apart as the goodput is.
	num("cost per 1,000 good requests", func(r *Report) (float64, bool) {
		if r.Cost == nil || r.Cost.Per1000Good == 0 {
			return 0, false
		}
		return r.Cost.Per1000Good, true
	}, "%.3g", false, func(a, b *Report) string {
		if a.Cost == nil || b.Cost == nil || a.Cost.Per1000Good == 0 || b.Cost.Per1000Good == 0 {
			return cannot("only one run has a cost (target.cost)")
		}
		v := goodput(a, b)
		if sa, sb := soakSeconds(a), soakSeconds(b); sa > 0 && sb > 0 {
			// A soak's cost rests on its goodput over every window.
			v = rateNoise(a.Cost.Goodput, sa, b.Cost.Goodput, sb, "req/s")
		}
		if v == "" {
			return cannot("the two costs rest on different goodputs (a step test's at capacity, a soak's over its windows)")
		}
		if k := verdictOf(v); k != "" {
			return k + ": as the goodput, " + strings.TrimPrefix(v, k+": ")
		}
		return v
	})
	num("input tokens sent, P50", func(r *Report) (float64, bool) {
		return r.LoadModel.InputTokens.P50, r.LoadModel.InputTokens.N > 0
	}, "%.0f", false, func(a, b *Report) string { return tokensNoise(a.LoadModel.InputTokens, b.LoadModel.InputTokens) })
	num("output tokens received, P50", func(r *Report) (float64, bool) {
		return r.LoadModel.OutputTokens.P50, r.LoadModel.OutputTokens.N > 0
	}, "%.0f", false, func(a, b *Report) string { return tokensNoise(a.LoadModel.OutputTokens, b.LoadModel.OutputTokens) })
	num("cached share of prompt tokens, %", func(r *Report) (float64, bool) {
		if r.LoadModel.CachedShare == nil {
			return 0, false
		}
		return 100 * *r.LoadModel.CachedShare, true
	}, "%.1f", true, func(a, b *Report) string {
		if a.LoadModel.CachedShare == nil || b.LoadModel.CachedShare == nil {
			return cannot("only one run's server said what it cached")
		}
		return shareNoise(*a.LoadModel.CachedShare, a.LoadModel.InputTokens.N, *b.LoadModel.CachedShare, b.LoadModel.InputTokens.N)
	})
	for _, r := range c.Rows {
		switch verdictOf(r.Noise) {
		case beyondNoise:
			c.ToldApart = append(c.ToldApart, r.Name)
		case cannotTell:
			c.CannotTell = append(c.CannotTell, r.Name)
		}
		if r.Noise != "" {
			c.Compared++
		}
	}
	// Who ran a test is no cause of a difference: a row, not a change.
	str("run by", func(r *Report) string { return orUnknown(r.Provenance.Runner) })
	str("measurement", func(r *Report) string {
		if d := r.Provenance.Prober.Distorted; len(d) > 0 {
			return "possibly distorted: " + joinAnd(d)
		}
		return "trustworthy"
	})

	change := func(what, va, vb string) {
		if va != vb {
			c.Changed = append(c.Changed, Change{What: what, A: va, B: vb})
		}
	}
	oa, ob := a.TestObject, b.TestObject
	if oa.Simulator && ob.Simulator && isLoopback(oa.URL) && isLoopback(ob.URL) {
		// A simulator on this machine (the embedded one takes a new port
		// every run) is the same target when its configuration is.
		change("target URL (port aside)", withoutPort(oa.URL), withoutPort(ob.URL))
		change("simulator configuration", orUnknown(oa.Identity.SimulatorConfig), orUnknown(ob.Identity.SimulatorConfig))
	} else {
		change("target URL", oa.URL, ob.URL)
	}
	change("API", oa.API, ob.API)
	change("model", oa.Model, ob.Model)
	change("replicas", fmt.Sprint(oa.Replicas), fmt.Sprint(ob.Replicas))
	for _, k := range slices.Sorted(maps.Keys(union(oa.Metadata, ob.Metadata))) {
		change("metadata "+k, oa.Metadata[k], ob.Metadata[k])
	}
	change("Server header", sayOnly(oa.Identity.Servers), sayOnly(ob.Identity.Servers))
	change("reply model", sayOnly(oa.Identity.ReplyModels), sayOnly(ob.Identity.ReplyModels))
	change("system_fingerprint", sayOnly(oa.Identity.Fingerprints), sayOnly(ob.Identity.Fingerprints))
	change("models listed", modelsListed(&oa), modelsListed(&ob))
	scen := func(r *Report) map[string]Scenario {
		m := map[string]Scenario{}
		for _, s := range r.LoadModel.Scenarios {
			m[s.Name] = s
		}
		return m
	}
	sa, sb := scen(a), scen(b)
	for _, name := range slices.Sorted(maps.Keys(union(sa, sb))) {
		x, inA := sa[name]
		y, inB := sb[name]
		switch {
		case !inA:
			change("scenario "+name, "absent", "present")
		case !inB:
			change("scenario "+name, "present", "absent")
		default:
			change("scenario "+name+" share", fmt.Sprintf("%.0f%%", 100*x.Share), fmt.Sprintf("%.0f%%", 100*y.Share))
			change("scenario "+name+" input_tokens", oneLine(x.Input), oneLine(y.Input))
			change("scenario "+name+" output_tokens", oneLine(x.Output), oneLine(y.Output))
			change("scenario "+name+" ignore_eos", fmt.Sprint(x.IgnoreEOS), fmt.Sprint(y.IgnoreEOS))
			change("scenario "+name+" objective", fmt.Sprint(x.Objective), fmt.Sprint(y.Objective))
			change("scenario "+name+" SLOs", fmt.Sprint(x.SLOs), fmt.Sprint(y.SLOs))
			change("scenario "+name+" prefix", fmt.Sprint(x.Prefix), fmt.Sprint(y.Prefix))
			change("scenario "+name+" conversation", fmt.Sprint(x.Conversation), fmt.Sprint(y.Conversation))
			change("scenario "+name+" cancel", fmt.Sprint(x.Cancel), fmt.Sprint(y.Cancel))
		}
	}
	change("replayed trace", a.LoadModel.Replay, b.LoadModel.Replay)
	la, lb := strings.Split(a.LoadModel.Test, "\n"), strings.Split(b.LoadModel.Test, "\n")
	if a.LoadModel.Test != b.LoadModel.Test {
		change("test configuration", strings.Join(only(la, lb), "; "), strings.Join(only(lb, la), "; "))
	}
	change("sloprober version", a.Provenance.Version, b.Provenance.Version)
	change("prober validity thresholds", validityText(a.Provenance.Validity), validityText(b.Provenance.Validity))
	change("canary beside the test", canaryText(a), canaryText(b))
	return c
}

func isLoopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	return u.Hostname() == "localhost" || ip != nil && ip.IsLoopback()
}

func withoutPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = u.Hostname()
	if strings.Contains(u.Host, ":") {
		u.Host = "[" + u.Host + "]"
	}
	return u.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "not recorded"
	}
	return s
}

// validityText is a run's prober-health rule in one line.
func validityText(v *capacity.ValiditySetup) string {
	if v == nil {
		return "not recorded"
	}
	ms := func(s float64) string { return fmt.Sprintf("%g ms", 1e3*s) }
	return fmt.Sprintf("cpu %g, scheduler latency %s, GC pause %s, send lag %s, connection wait %s (window %gs, sustain %gs)",
		v.CPU, ms(v.SchedulerP99Seconds), ms(v.GCPauseP99Seconds), ms(v.SendLagP99Seconds), ms(v.PoolWaitP99Seconds), v.WindowSeconds, v.SustainSeconds)
}

// canaryText names the canary scenarios that ran on the target during the
// test, "none" without.
func canaryText(r *Report) string {
	var names []string
	for _, c := range r.Risk.Canary {
		names = append(names, c.Scenario)
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// verifiedLevel is the verification level at the verified rate, or nil.
// burstLevel is a run's burst level, nil for none.
func burstLevel(r *Report) *Level {
	for i := range r.Levels {
		if r.Levels[i].Stage == "burst" {
			return &r.Levels[i]
		}
	}
	return nil
}

func verifiedLevel(r *Report) *Level {
	if r.Capacity == nil || r.Capacity.VerifiedRate == 0 {
		return nil
	}
	for i := range r.Levels {
		// Stated at its offered rate; in a schema-1 run at its intended.
		l := &r.Levels[i]
		rate := l.IntendedRate
		if l.Decision != "" {
			rate = l.OfferedRate
		}
		if l.Stage == "verify" && l.Met && rate == r.Capacity.VerifiedRate {
			return l
		}
	}
	return nil
}

// sayOnly writes the values a server stated, sorted, without their
// counts: two runs of the same server differ in those.
func sayOnly(s []capacity.Said) string {
	var v []string
	for _, x := range s {
		if !x.Other {
			v = append(v, x.Value)
		}
	}
	slices.Sort(v)
	return strings.Join(v, ", ")
}

func modelsListed(o *TestObject) string {
	var v []string
	for _, m := range o.Identity.Models {
		v = append(v, m.ID)
	}
	slices.Sort(v)
	return strings.Join(v, ", ")
}

func union[V any](a, b map[string]V) map[string]V {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]V{}
	}
	maps.Copy(out, b)
	return out
}

// only returns the lines of a that b does not have, trimmed.
func only(a, b []string) []string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// WriteComparison writes a comparison as Markdown.
func WriteComparison(w io.Writer, c *Comparison) error {
	m := &mdWriter{}
	m.P("# Comparison of %s %s (A) and %s %s (B)", mdText(c.A.Test), idOr(c.A), mdText(c.B.Test), idOr(c.B))
	m.P("")
	switch n := len(c.Changed); {
	case n == 0:
		m.P("Nothing changed in the test object, the load model or how the runs were measured: a difference beyond noise is the target's own.")
	case n == 1:
		m.P("One variable changed: **%s**. The differences below are its effect, within the runs' noise.", mdText(c.Changed[0].What))
	default:
		m.P("**%d variables changed**: the differences below cannot be put down to one of them. A change should move one variable at a time.", n)
	}
	m.P("")
	m.P("%s", toldText(c))
	m.P("")
	m.Table("", "A: "+idOr(c.A), "B: "+idOr(c.B), "B against A", "noise")
	for _, r := range c.Rows {
		m.Row(r.Name, r.A, r.B, r.Delta, r.Noise)
	}
	m.P("")
	if len(c.Changed) > 0 {
		m.P("## What changed")
		m.P("")
		m.Table("", "A", "B")
		for _, ch := range c.Changed {
			m.Row(free(ch.What), orNone(free(ch.A)), orNone(free(ch.B)))
		}
		m.P("")
	}
	_, err := io.WriteString(w, m.String())
	return err
}

// soakSeconds is the length of a soak's windows together, 0 for a step
// test.
func soakSeconds(r *Report) float64 {
	if r.Soak == nil {
		return 0
	}
	t := 0.0
	for _, w := range r.Soak.Windows {
		t += w.WindowSeconds
	}
	return t
}

// toldText is the comparison's top line: whether the runs are told apart
// at all, and on which numbers.
//
// Verdicts that differ are said first, with why: two runs whose numbers
// are all within noise may still differ in what decided a verdict (a
// burst that drained in 34.1 s against 30 allowed, where the other's took
// 11.9). Where fewer numbers could be judged than not, the line says how
// few it rests on.
func toldText(c *Comparison) string {
	var b strings.Builder
	if c.A.Verdict != c.B.Verdict {
		fmt.Fprintf(&b, "**The verdicts differ**: A %s, B %s", strings.ToUpper(c.A.Verdict), strings.ToUpper(c.B.Verdict))
		for _, r := range []struct {
			side string
			r    *Report
		}{{"A", c.A}, {"B", c.B}} {
			if r.r.Verdict != capacity.VerdictPass && r.r.Reason != "" {
				fmt.Fprintf(&b, "; %s: %s", r.side, mdText(r.r.Reason))
			}
		}
		b.WriteString(". ")
	}
	judged := c.Compared - len(c.CannotTell)
	switch n := len(c.ToldApart); {
	case c.Compared == 0:
		b.WriteString("**Nothing to tell apart**: the runs have no number in common.")
	case judged == 0:
		fmt.Fprintf(&b, "**Cannot tell**: no number compared (%d) holds enough to judge.", c.Compared)
	case n == 0 && judged < len(c.CannotTell):
		fmt.Fprintf(&b, "**Not told apart** on the %d numbers that could be judged, of %d compared.", judged, c.Compared)
	case n == 0:
		fmt.Fprintf(&b, "**Not told apart**: every number compared (%d) is within the runs' noise.", judged)
	default:
		fmt.Fprintf(&b, "**Told apart** (%d of %d numbers compared) on: %s.", n, c.Compared, mdText(strings.Join(c.ToldApart, "; ")))
	}
	if len(c.CannotTell) > 0 {
		fmt.Fprintf(&b, " Cannot tell (the noise column says why): %s.", mdText(strings.Join(c.CannotTell, "; ")))
	}
	return b.String()
}

func idOr(r *Report) string {
	if r.ID != "" {
		return r.ID
	}
	return r.Start.UTC().Format("2006-01-02 15:04Z")
}

// WriteComparisonHTML writes a comparison as one self-contained HTML page,
// with the same policy as a report's: the comparison's tables, then each
// chart of the two runs side by side (A left, B right), drawn alike.
func WriteComparisonHTML(w io.Writer, c *Comparison) error {
	var md bytes.Buffer
	if err := WriteComparison(&md, c); err != nil {
		return err
	}
	var b strings.Builder
	title := fmt.Sprintf("Comparison of %s (A) and %s (B)", idOr(c.A), idOr(c.B))
	pageHead(&b, title, "", `
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
.pair figure { margin: .5em 0; }
`)
	renderMarkdown(&b, md.String(), "verdict-unknown", func(string) {})
	// Charts by id, A's order first; a chart one run has and the other not
	// (a soak beside a step test) stands alone.
	byID := func(r *Report, side string) (map[string]namedChart, []string, error) {
		m := map[string]namedChart{}
		var ids []string
		for _, nc := range charts(r) {
			id := nc.ID
			nc.c.ID = side + "-" + id // unique in the page
			svg, err := nc.c.SVG()
			if err != nil {
				return nil, nil, fmt.Errorf("chart %s of %s: %w", id, side, err)
			}
			nc.svg = svg
			m[id] = nc
			ids = append(ids, id)
		}
		return m, ids, nil
	}
	ca, ida, err := byID(c.A, "a")
	if err != nil {
		return err
	}
	cb, idb, err := byID(c.B, "b")
	if err != nil {
		return err
	}
	for _, id := range idb {
		if !slices.Contains(ida, id) {
			ida = append(ida, id)
		}
	}
	b.WriteString("<section>\n<h2>Charts, A left and B right</h2>\n")
	for _, id := range ida {
		b.WriteString(`<div class="pair">` + "\n")
		for _, side := range []map[string]namedChart{ca, cb} {
			if nc, ok := side[id]; ok {
				fmt.Fprintf(&b, "<figure>\n%s\n<figcaption>%s</figcaption>\n</figure>\n", nc.svg, html.EscapeString(nc.Caption))
			} else {
				b.WriteString("<figure><figcaption>Not in this run.</figcaption></figure>\n")
			}
		}
		b.WriteString("</div>\n")
	}
	b.WriteString("</section>\n</main>\n</body>\n</html>\n")
	_, err = io.WriteString(w, b.String())
	return err
}
