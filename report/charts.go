package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/report/chart"
)

// namedChart is one chart of the HTML report.
type namedChart struct {
	ID, Caption string
	c           *chart.Chart
	svg         string
}

// charts returns the report's charts: for a step test latency against
// throughput with the SLO line, goodput and attainment against load with
// the knee and capacity marked, each level's percentile band with its
// sample count, and the burst's timeline; for a soak its time series.
func charts(r *Report) []namedChart {
	var out []namedChart
	closed, open := split(r.Levels)
	slo, sloName := firstSLO(r)
	if len(closed) > 0 {
		x := func(l Level) float64 { return l.CompletedRate }
		lat := &chart.Chart{ID: "latency-throughput", Title: "TTFT against throughput (closed-loop levels)", XLabel: "completed req/s", YLabel: "TTFT, ms", YLog: true}
		lat.Series = percentileSeries(closed, x, func(l Level) capacity.Percentiles { return l.TTFT })
		// Each level's clients beside its P50: completed req/s need not
		// grow with clients past the knee, and the line goes back and
		// forth in their order.
		lat.Series[0].Labels = nil
		for _, l := range closed {
			lat.Series[0].Labels = append(lat.Series[0].Labels, clients(l.Concurrency))
		}
		// The P99 of the levels whose decision does not stand, marked.
		if s, ok := notJudged(closed, x, func(l Level) float64 { return 1e3 * l.TTFT.P99 }); ok {
			lat.Series = append(lat.Series, s)
		}
		if slo > 0 && sloName == "ttft" {
			lat.HLines = append(lat.HLines, chart.Marker{Value: 1e3 * slo, Label: fmt.Sprintf("SLO: TTFT <= %s", fmtSeconds(slo))})
		}
		// The (open-loop) verified capacity is not drawn on this
		// closed-loop axis: the open-loop charts mark it.
		out = append(out, namedChart{ID: "latency-throughput", Caption: "TTFT P50, P95 and P99 at each closed-loop level against the rate it completed, joined in the order of their clients (labelled; n: the level's sample).", c: lat})

		conc := func(l Level) float64 { return float64(l.Concurrency) }
		gp := &chart.Chart{ID: "goodput-load", Title: "Goodput against load", XLabel: "closed-loop clients", YLabel: "req/s", YZero: true}
		gp.Series = []chart.Series{
			series("completed", closed, conc, func(l Level) float64 { return l.CompletedRate }, nil),
			series("goodput", closed, conc, func(l Level) float64 { return l.Goodput }, nil),
		}
		// Zoomed to the data and the objective (no YZero): attainments in
		// the top 5% on a 0-100% axis are one flat line.
		att := &chart.Chart{ID: "attainment-load", Title: "Attainment against load", XLabel: "closed-loop clients", YLabel: "good / counted, %", YCeil: 100}
		att.Series = []chart.Series{series("attainment", closed, conc, func(l Level) float64 { return 100 * l.Attainment }, nil)}
		// Levels whose decision does not stand are drawn apart, so that a
		// reader does not take them for measurements of the target.
		if s, ok := notJudged(closed, conc, func(l Level) float64 { return 100 * l.Attainment }); ok {
			att.Series = append(att.Series, s)
		}
		if s, ok := notJudged(closed, conc, func(l Level) float64 { return l.Goodput }); ok {
			gp.Series = append(gp.Series, s)
		}
		if obj := objective(r); obj > 0 {
			att.HLines = append(att.HLines, chart.Marker{Value: 100 * obj, Label: fmt.Sprintf("objective %g%%", 100*obj)})
		}
		if k := r.Knee; k != nil && k.Reached {
			gp.VLines = append(gp.VLines, chart.Marker{Value: float64(k.Concurrency), Label: "knee"})
			att.VLines = append(att.VLines, chart.Marker{Value: float64(k.Concurrency), Label: "knee"})
		}
		if c := r.ClosedLoop; c != nil {
			// The closed loop's, not the (open-loop) verified capacity.
			gp.VLines = append(gp.VLines, chart.Marker{Value: float64(c.Concurrency), Label: "closed-loop capacity"})
			att.VLines = append(att.VLines, chart.Marker{Value: float64(c.Concurrency), Label: "closed-loop capacity"})
		}
		out = append(out,
			namedChart{ID: "goodput-load", Caption: goodputCaption(r), c: gp},
			namedChart{ID: "attainment-load", Caption: "The share of requests that met every SLO at each closed-loop level, against the objective.", c: att})

		band := &chart.Chart{ID: "e2e-bands", Title: "E2E percentiles at each level", XLabel: "closed-loop clients", YLabel: "E2E, ms", YLog: true}
		band.Bands = []chart.Band{bandOf("P50 to P99", closed, conc, func(l Level) capacity.Percentiles { return l.E2E })}
		band.Series = []chart.Series{series("P95", closed, conc, func(l Level) float64 { return 1e3 * l.E2E.P95 }, func(l Level) string { return fmt.Sprintf("n=%d", l.E2E.N) })}
		if slo > 0 && sloName == "e2e" {
			band.HLines = append(band.HLines, chart.Marker{Value: 1e3 * slo, Label: fmt.Sprintf("SLO: E2E <= %s", fmtSeconds(slo))})
		}
		out = append(out, namedChart{ID: "e2e-bands", Caption: "The band from P50 to P99 of end-to-end latency at each closed-loop level, its P95 with the sample count.", c: band})
	}
	if len(open) > 0 && r.Kind != "soak" {
		v := &chart.Chart{ID: "verification", Title: "Open-loop verification", XLabel: "offered req/s (Poisson)", YLabel: "TTFT, ms", YLog: true}
		v.Series = percentileSeries(open, offered, func(l Level) capacity.Percentiles { return l.TTFT })
		if slo > 0 && sloName == "ttft" {
			v.HLines = append(v.HLines, chart.Marker{Value: 1e3 * slo, Label: "SLO"})
		}
		v.VLines = openMarkers(r)
		out = append(out, namedChart{ID: "verification", Caption: "TTFT at each open-loop rate of the verification and the burst, by the rate its window offered.", c: v})
		if e, caption := evidence(r, open); e != nil {
			out = append(out, namedChart{ID: "evidence", Caption: caption, c: e})
		}
	}
	if b := r.Risk.Burst; b != nil && b.Timeline != nil && len(b.Timeline.InFlight) > 0 {
		tl := b.Timeline
		xs, ys := make([]float64, len(tl.InFlight)), make([]float64, len(tl.InFlight))
		for i, n := range tl.InFlight {
			xs[i], ys[i] = float64(i)*tl.IntervalSeconds, float64(n)
		}
		c := &chart.Chart{ID: "burst", Title: "Burst and drain", XLabel: "seconds", YLabel: "requests in flight", YZero: true,
			Series: []chart.Series{{Name: "in flight", X: xs, Y: ys}},
			HLines: []chart.Marker{{Value: float64(tl.Normal), Label: "normal (rate x E2E P95)"}},
			VLines: []chart.Marker{{Value: tl.BurstStart, Label: "burst"}, {Value: tl.BurstEnd, Label: "back to rate"}}}
		if tl.Drained > 0 {
			c.VLines = append(c.VLines, chart.Marker{Value: tl.Drained, Label: "drained"})
		}
		out = append(out, namedChart{ID: "burst", Caption: "The test's requests in flight, ten samples a second, through the burst and the drain after it.", c: c})
	}
	if s := r.Soak; s != nil && len(s.Windows) > 0 {
		ws := make([]Level, len(s.Windows))
		for i, w := range s.Windows {
			ws[i] = w.Level
		}
		at := func(l Level) float64 { return l.StartSeconds / 60 }
		lat := &chart.Chart{ID: "soak-latency", Title: "Soak: latency per window", XLabel: "minutes", YLabel: "ms", YLog: true}
		lat.Series = []chart.Series{
			series("TTFT P50", ws, at, func(l Level) float64 { return 1e3 * l.TTFT.P50 }, nil),
			series("TTFT P99", ws, at, func(l Level) float64 { return 1e3 * l.TTFT.P99 }, nil),
			series("E2E P50", ws, at, func(l Level) float64 { return 1e3 * l.E2E.P50 }, nil),
		}
		gp := &chart.Chart{ID: "soak-goodput", Title: "Soak: goodput per window", XLabel: "minutes", YLabel: "req/s", YZero: true}
		gp.Series = []chart.Series{
			series("sent", ws, at, func(l Level) float64 { return l.OfferedRate }, nil),
			series("goodput", ws, at, func(l Level) float64 { return l.Goodput }, nil),
		}
		out = append(out,
			namedChart{ID: "soak-latency", Caption: "TTFT and E2E per window of the soak.", c: lat},
			namedChart{ID: "soak-goodput", Caption: "Requests sent and good requests per second, per window.", c: gp})
	}
	return out
}

// clients writes a number of closed-loop clients: "1 client", "8
// clients".
func clients(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}

// offered is an open-loop level's rate on a chart's axis: what its window
// offered, as every sentence states it (the rate it was run at for a
// level that offered none).
func offered(l Level) float64 {
	if l.OfferedRate > 0 {
		return l.OfferedRate
	}
	return l.IntendedRate
}

// openMarkers are the verified rate and where the capacity lies above
// it, for an open-loop axis, as the report's sentence states them
// (capacity.Capacity.BoundText): the most it can be (the first rate
// above it that missed, "10.9 missed", or the closed loop's peak) and
// the lowest rate above it that did not verify, with its decision
// ("10.1 undecided"), each marked where it is not the other.
func openMarkers(r *Report) []chart.Marker {
	c := r.Capacity
	if c == nil || c.VerifiedRate <= 0 {
		return nil
	}
	m := []chart.Marker{{Value: c.VerifiedRate, Label: "verified"}}
	switch {
	case c.Ceiling > 0 && c.CeilingFrom == capacity.CeilingClosedLoop:
		m = append(m, chart.Marker{Value: c.Ceiling, Label: "closed loop's peak"})
	case c.Ceiling > 0:
		m = append(m, chart.Marker{Value: c.Ceiling, Label: fmt.Sprintf("%.3g missed", c.Ceiling)})
	}
	if c.Bound > 0 && c.Bound != c.Ceiling {
		m = append(m, chart.Marker{Value: c.Bound, Label: fmt.Sprintf("%.3g %s", c.Bound, boundDecision(c.BoundDecision))})
	}
	return m
}

// boundDecision is a rate's decision as the evidence chart's legend
// names it: "undecided" for inconclusive.
func boundDecision(d string) string {
	if d == capacity.DecisionInconclusive || d == "" {
		return "undecided"
	}
	return d
}

// evidence is the chart of the open-loop levels the capacity rests on,
// and its caption: each verification level's attainment (%) at the rate
// it offered, apart by what it decided (met, missed, undecided,
// prober-bound: points not joined, since each level is a sample of its
// own), its 95% interval a bar in its decision's colour and dash, the
// objective, and the verified rate and the rates above it marked; with
// no verified rate, the level nearest to a decision, and the caption
// says that none was verified. Nil without a verification level with an
// interval.
func evidence(r *Report, open []Level) (*chart.Chart, string) {
	var ls []Level
	for _, l := range open {
		if l.Stage == "verify" && l.Interval != nil && l.Decision != "" {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		return nil, ""
	}
	c := &chart.Chart{ID: "evidence", Title: "Open-loop evidence", XLabel: "offered req/s (Poisson)", YLabel: "attainment, % (95% interval)", YCeil: 100}
	const proberBound = "prober-bound (not used)"
	kind := func(l Level) string {
		switch {
		case l.Prober != nil && len(l.Prober.Invalid) > 0:
			return proberBound
		case l.Decision == capacity.DecisionMet || l.Decision == capacity.DecisionMissed:
			return l.Decision
		}
		return "undecided"
	}
	// Each decision in a place of its own, so that met is drawn alike
	// in every report (a decision no level took has no name: no legend
	// entry): met blue and solid, missed vermilion and dashed,
	// prober-bound green and dotted, undecided purple and dash-dotted,
	// each level's interval as its point.
	for _, name := range []string{capacity.DecisionMet, capacity.DecisionMissed, proberBound, "undecided"} {
		s := chart.Series{Points: true}
		for _, l := range ls {
			if kind(l) == name {
				// A gap after each point: a level stands alone.
				s.X, s.Y = append(s.X, offered(l), math.NaN()), append(s.Y, 100*l.Attainment, math.NaN())
				s.Low, s.High = append(s.Low, 100*l.Interval.Lower, math.NaN()), append(s.High, 100*l.Interval.Upper, math.NaN())
				s.Labels = append(s.Labels, fmt.Sprintf("n=%d", l.Interval.N), "")
				s.Name = name
			}
		}
		c.Series = append(c.Series, s)
	}
	if obj := objective(r); obj > 0 {
		c.HLines = append(c.HLines, chart.Marker{Value: 100 * obj, Label: fmt.Sprintf("objective %g%%", 100*obj)})
	}
	const levels = "each open-loop level's attainment with its 95% interval against the rate it offered. " +
		"A level is met when its interval lies above the objective, missed when below; an undecided one, or one the prober limited, is no evidence either way."
	caption := "What the capacity rests on: " + levels
	c.VLines = openMarkers(r)
	if len(c.VLines) == 0 {
		caption = "No rate was verified: " + levels
		if n, ok := nearestDecision(ls, kind); ok {
			c.VLines = []chart.Marker{{Value: offered(n), Label: "nearest to a decision"}}
			caption += fmt.Sprintf(" Marked: the undecided level nearest to a decision, %.3g req/s", offered(n))
			if t := n.ToDecide; t != nil && t.Requests > 0 {
				caption += fmt.Sprintf(" (about %d more requests would decide it)", t.Requests)
			}
			caption += "."
		}
	}
	return c, caption
}

// nearestDecision is the undecided level, of those the prober did not
// limit, nearest to a decision, as the run's reason names it: the least
// time more would decide, else the largest sample.
func nearestDecision(ls []Level, kind func(Level) string) (Level, bool) {
	var best Level
	ok := false
	for _, l := range ls {
		if kind(l) != "undecided" {
			continue
		}
		switch {
		case !ok:
		case l.ToDecide != nil && best.ToDecide != nil:
			if l.ToDecide.Seconds >= best.ToDecide.Seconds {
				continue
			}
		case l.ToDecide != nil || best.ToDecide != nil:
			if l.ToDecide == nil {
				continue
			}
		case l.Counted <= best.Counted:
			continue
		}
		best, ok = l, true
	}
	return best, ok
}

// split returns the closed-loop sweep levels by concurrency and the
// open-loop verification and burst levels by rate.
func split(levels []Level) (closed, open []Level) {
	for _, l := range levels {
		switch l.Stage {
		case "sweep", "refine":
			closed = append(closed, l)
		case "verify", "burst":
			open = append(open, l)
		}
	}
	slices.SortStableFunc(closed, func(a, b Level) int { return a.Concurrency - b.Concurrency })
	slices.SortStableFunc(open, func(a, b Level) int {
		switch {
		case offered(a) < offered(b):
			return -1
		case offered(a) > offered(b):
			return 1
		}
		return 0
	})
	return closed, open
}

func series(name string, ls []Level, x, y func(Level) float64, label func(Level) string) chart.Series {
	s := chart.Series{Name: name, Points: true}
	for _, l := range ls {
		s.X, s.Y = append(s.X, x(l)), append(s.Y, y(l))
		if label != nil {
			s.Labels = append(s.Labels, label(l))
		}
	}
	return s
}

// notJudged is a series of the levels whose decision does not stand: the
// prober limited them (its own delays, not the target's, shaped their
// numbers) or their interval could not decide (inconclusive). Their
// points only (NaN elsewhere: no line through the judged levels), in a
// style of their own, named in the legend; ok is false when there are
// none.
func notJudged(ls []Level, x, y func(Level) float64) (chart.Series, bool) {
	s := chart.Series{Name: "not judged (prober-bound or inconclusive)", Points: true}
	ok := false
	for _, l := range ls {
		v := math.NaN()
		if (l.Prober != nil && len(l.Prober.Invalid) > 0) || l.Decision == "inconclusive" {
			v, ok = y(l), true
		}
		s.X, s.Y = append(s.X, x(l)), append(s.Y, v)
	}
	return s, ok
}

// goodputCaption says what the goodput chart shows: the knee only where
// one was found.
func goodputCaption(r *Report) string {
	const c = "Completed and good requests per second at each closed-loop level"
	switch k := r.Knee; {
	case k == nil:
		return c + "."
	case k.Reached:
		return c + "; goodput stops growing at the knee."
	}
	return c + "; knee: " + capacity.NoKnee + ": goodput still grew at the last."
}

// percentileSeries is P50, P95 and P99 (ms) of a latency, the P99
// labelled with the sample count.
func percentileSeries(ls []Level, x func(Level) float64, p func(Level) capacity.Percentiles) []chart.Series {
	ms := func(v float64) float64 { return 1e3 * v }
	return []chart.Series{
		series("P50", ls, x, func(l Level) float64 { return ms(p(l).P50) }, nil),
		series("P95", ls, x, func(l Level) float64 { return ms(p(l).P95) }, nil),
		series("P99", ls, x, func(l Level) float64 { return ms(p(l).P99) }, func(l Level) string { return fmt.Sprintf("n=%d", p(l).N) }),
	}
}

func bandOf(name string, ls []Level, x func(Level) float64, p func(Level) capacity.Percentiles) chart.Band {
	b := chart.Band{Name: name}
	for _, l := range ls {
		b.X, b.Low, b.High = append(b.X, x(l)), append(b.Low, 1e3*p(l).P50), append(b.High, 1e3*p(l).P99)
	}
	return b
}

// firstSLO returns the first scenario's TTFT SLO (else its E2E SLO), in
// seconds, and its name.
func firstSLO(r *Report) (float64, string) {
	if len(r.SLOs.Scenarios) == 0 {
		return 0, ""
	}
	for _, want := range []string{"ttft", "e2e"} {
		for _, s := range r.SLOs.Scenarios[0].SLOs {
			if s.Name == want {
				return s.ThresholdSeconds, want
			}
		}
	}
	return 0, ""
}

// objective is the highest objective of the scenarios.
func objective(r *Report) float64 {
	o := 0.0
	for _, s := range r.SLOs.Scenarios {
		o = max(o, s.Objective)
	}
	return o
}
