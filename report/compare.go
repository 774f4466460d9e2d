package report

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/sloprober/sloprober/capacity"
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
	c := &Comparison{SchemaVersion: SchemaVersion, A: a, B: b, Rows: []CompareRow{}, Changed: []Change{}}
	// num adds a number of both reports; noise, if set, judges the
	// difference from the two reports.
	numNoise := func(name string, get func(*Report) (float64, bool), format string, points bool, noise func(a, b *Report) string) {
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
			row.Delta = fmt.Sprintf("%+.0f%%", 100*(vb/va-1))
		}
		if oka && okb && noise != nil {
			row.Noise = noise(a, b)
		}
		c.Rows = append(c.Rows, row)
	}
	num := func(name string, get func(*Report) (float64, bool), format string) {
		numNoise(name, get, format, false, nil)
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
	numNoise("capacity, req/s (verified open loop)", capOf(func(c *CapacitySummary) float64 { return c.VerifiedRate }), "%.3g", false, capacityNoise)
	num("capacity per replica, req/s", capOf(func(c *CapacitySummary) float64 { return c.RatePerReplica }), "%.3g")
	numNoise("goodput at capacity, req/s", capOf(func(c *CapacitySummary) float64 { return c.VerifiedGoodput }), "%.3g", false, goodputNoise)
	numNoise("attainment at capacity, %", capOf(func(c *CapacitySummary) float64 { return 100 * c.VerifiedAttainment }), "%.1f", true, attainmentNoise)
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
	num("closed-loop capacity, clients", closed(func(c *ClosedLoop) float64 { return float64(c.Concurrency) }), "%.0f")
	num("closed-loop capacity, req/s", closed(func(c *ClosedLoop) float64 { return c.Rate }), "%.3g")
	num("knee, clients", func(r *Report) (float64, bool) {
		if r.Knee == nil || !r.Knee.Reached {
			return 0, false
		}
		return float64(r.Knee.Concurrency), true
	}, "%.0f")
	for _, lat := range []struct {
		name string
		get  func(*Level) capacity.Percentiles
	}{
		{"TTFT P99 at capacity, ms", func(l *Level) capacity.Percentiles { return l.TTFT }},
		{"TPOT P99 at capacity, ms", func(l *Level) capacity.Percentiles { return l.TPOT }},
		{"E2E P99 at capacity, ms", func(l *Level) capacity.Percentiles { return l.E2E }},
	} {
		numNoise(lat.name, func(r *Report) (float64, bool) {
			l := verifiedLevel(r)
			if l == nil {
				return 0, false
			}
			return 1e3 * lat.get(l).P99, true
		}, "%.4g", false, func(a, b *Report) string {
			return p99Noise(lat.get(verifiedLevel(a)), lat.get(verifiedLevel(b)))
		})
	}
	num("cost per 1,000 good requests", func(r *Report) (float64, bool) {
		if r.Cost == nil || r.Cost.Per1000Good == 0 {
			return 0, false
		}
		return r.Cost.Per1000Good, true
	}, "%.3g")
	num("input tokens sent, P50", func(r *Report) (float64, bool) {
		return r.LoadModel.InputTokens.P50, r.LoadModel.InputTokens.N > 0
	}, "%.0f")
	num("output tokens received, P50", func(r *Report) (float64, bool) {
		return r.LoadModel.OutputTokens.P50, r.LoadModel.OutputTokens.N > 0
	}, "%.0f")
	numNoise("cached share of prompt tokens, %", func(r *Report) (float64, bool) {
		if r.LoadModel.CachedShare == nil {
			return 0, false
		}
		return 100 * *r.LoadModel.CachedShare, true
	}, "%.1f", true, nil)
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

// capacityNoise compares two verified capacities with what each search
// could tell: the capacity lies at or above the verified rate and below
// its ceiling (the first rate above it that missed, or the closed loop's
// peak: no level completed more, and arrivals above it queue without
// end; verified 2.77 req/s, closed-loop peak 3.67: [2.77, 3.67]). A run
// from before ceilings is bounded by the lowest rate above it not
// verified, or without one, when its sweep reached the knee (not the
// test's max_rate), by its closed loop's peak. Ranges that overlap
// cannot tell the two apart.
func capacityNoise(a, b *Report) string {
	hi := func(r *Report) (float64, string) {
		switch c := r.Capacity; {
		case c.Ceiling > 0 && c.CeilingFrom == capacity.CeilingClosedLoop:
			return c.Ceiling, fmt.Sprintf("[%.3g, %.3g] (up to the closed loop's peak)", c.VerifiedRate, c.Ceiling)
		case c.Ceiling > 0:
			// The first rate above that missed: a rate undecided below
			// it is no evidence that the capacity lies lower.
			return c.Ceiling, fmt.Sprintf("[%.3g, %.3g)", c.VerifiedRate, c.Ceiling)
		case c.Bound > 0:
			return c.Bound, fmt.Sprintf("[%.3g, %.3g)", c.VerifiedRate, c.Bound)
		}
		if k := r.Capacity.Knee; k != nil && k.Reached && r.Capacity.LimitedBy == "" {
			peak := 0.0
			for _, l := range r.Levels {
				if l.Concurrency > 0 {
					peak = max(peak, l.CompletedRate)
				}
			}
			if peak > r.Capacity.VerifiedRate {
				return peak, fmt.Sprintf("[%.3g, %.3g] (up to the closed loop's peak)", r.Capacity.VerifiedRate, peak)
			}
		}
		return math.Inf(1), fmt.Sprintf("[%.3g, -)", r.Capacity.VerifiedRate)
	}
	ha, ra := hi(a)
	hb, rb := hi(b)
	if a.Capacity.VerifiedRate < hb && b.Capacity.VerifiedRate < ha {
		return fmt.Sprintf("not told apart: the capacity lies in %s and in %s, which overlap", ra, rb)
	}
	return fmt.Sprintf("beyond noise: %s and %s do not overlap", ra, rb)
}

// attainmentNoise compares the attainments at capacity by their 95%
// intervals.
func attainmentNoise(a, b *Report) string {
	ia, ib := a.Capacity.VerifiedInterval, b.Capacity.VerifiedInterval
	if ia == nil || ib == nil {
		return "no intervals (schema-1 run)"
	}
	iv := func(i *capacity.Interval) string {
		return fmt.Sprintf("[%.1f, %.1f] of %d", lower(i), upper(i), i.N)
	}
	if ia.Lower <= ib.Upper && ib.Lower <= ia.Upper {
		return "not told apart: 95% intervals " + iv(ia) + " and " + iv(ib) + " overlap"
	}
	return "beyond noise: 95% intervals " + iv(ia) + " and " + iv(ib) + " do not overlap"
}

// goodputNoise compares the goodputs at capacity with their Poisson
// noise: n good requests in a window of t seconds are n/t +- sqrt(n)/t
// req/s; two differ beyond noise past twice their combined deviation.
func goodputNoise(a, b *Report) string {
	la, lb := verifiedLevel(a), verifiedLevel(b)
	if la == nil || lb == nil || la.WindowSeconds <= 0 || lb.WindowSeconds <= 0 {
		return ""
	}
	sd := func(l *Level) float64 { return math.Sqrt(l.Goodput*l.WindowSeconds) / l.WindowSeconds }
	lim := 2 * math.Hypot(sd(la), sd(lb))
	if math.Abs(la.Goodput-lb.Goodput) <= lim {
		return fmt.Sprintf("not told apart: within +-%.2g req/s (Poisson, 2 sd)", lim)
	}
	return fmt.Sprintf("beyond noise: +-%.2g req/s (Poisson, 2 sd)", lim)
}

// p99Noise says when the P99s compared rest on too few samples to tell
// a difference: a P99 of fewer than 1,000 is among its sample's few
// largest values.
func p99Noise(a, b capacity.Percentiles) string {
	low := func(p capacity.Percentiles) bool { return slices.Contains(p.LowConfidence, "p99") }
	if low(a) || low(b) {
		return fmt.Sprintf("low confidence: P99 of %d and %d samples (fewer than 1,000)", a.N, b.N)
	}
	return fmt.Sprintf("P99 of %d and %d samples", a.N, b.N)
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
