package capacity

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes a run as a text table: its verdict, the capacity
// with its interval and the search that found it, then one row per level
// with its offered rate, its attainment's interval, its decision and the
// sample count beside every percentile. A percentile over too few samples
// is marked *, an insufficient level "(few)".
func WriteTable(w io.Writer, r *Run) {
	// "ABORTED: interrupt signal received", not "ABORTED: aborted: ...".
	reason := strings.TrimPrefix(r.Reason, r.Verdict+": ")
	fmt.Fprintf(w, "test %s (%s) on %s: %s: %s\n", r.Test, r.Kind, r.Target, strings.ToUpper(r.Verdict), reason)
	if c := r.Capacity; c != nil {
		fmt.Fprintf(w, "capacity: %s; closed loop %s at %.3g req/s (%.3g good req/s)\n", verifiedText(r), clients(c.Concurrency), c.Rate, c.Goodput)
		if fc := c.Forecast; fc != nil {
			if _, text := fc.Verdict(); text != "" {
				fmt.Fprintf(w, "forecast: %s\n", text)
			}
		}
	}
	if search := searchText(r.Verify); search != "" {
		fmt.Fprintf(w, "search: %s\n", search)
	}
	if d := r.Soak.drift(); d != nil {
		fmt.Fprintf(w, "drift: %s; %s; prober memory %+.0f%%\n", d.Growth(), d.Attainment(), 100*d.MemoryGrowth)
	}
	if k := r.Knee; k != nil {
		fmt.Fprintf(w, "knee: %s: %s\n", clients(k.Concurrency), k.Reason)
	}
	for _, c := range r.Canary {
		fmt.Fprintf(w, "canary %s during the test: %.2f%% of %d requests good (objective %.2f%%); %.2f%% of its 30-day error budget\n",
			c.Scenario, 100*c.Attainment, c.Counted, 100*c.Objective, 100*c.BudgetConsumed)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// A soak's windows are open loop and follow each other without a
	// drain: no clients, no drain column.
	soak := r.Soak != nil
	if soak {
		fmt.Fprintln(tw, "stage\trate/s\toffered/s\twindow\tsent\tok/s\tgood/s\tin tok/s\tout tok/s\tattained [95% CI]\tTTFT p50/p95/p99 ms (n)\tTPOT p99 ms\tE2E p99 ms\tnote\t")
	} else {
		fmt.Fprintln(tw, "stage\tclients\trate/s\toffered/s\twindow\tsent\tok/s\tgood/s\tin tok/s\tout tok/s\tattained [95% CI]\tTTFT p50/p95/p99 ms (n)\tTPOT p99 ms\tE2E p99 ms\tdrain s\tnote\t")
	}
	levels := []*Level{r.Baseline}
	for i := range r.Sweep {
		levels = append(levels, &r.Sweep[i])
	}
	for i := range r.Verify {
		levels = append(levels, &r.Verify[i])
	}
	levels = append(levels, r.Burst)
	if r.Soak != nil {
		for i := range r.Soak.Windows {
			w := &r.Soak.Windows[i]
			l := w.Level
			l.Note = addNote(l.Note, fmt.Sprintf("prober %d MiB, %d goroutines", w.ProberRSSBytes>>20, w.ProberGoroutines))
			if w.ErrorBurst {
				l.Note = addNote("error burst", l.Note)
			}
			levels = append(levels, &l)
		}
	}
	for _, l := range levels {
		if l == nil {
			continue
		}
		clients, rate, offered := "-", "-", "-"
		if l.Concurrency > 0 {
			clients = fmt.Sprint(l.Concurrency)
		}
		if l.IntendedRate > 0 {
			rate = fmt.Sprintf("%.3g", l.IntendedRate)
		}
		if l.Prober != nil {
			offered = fmt.Sprintf("%.3g", l.OfferedRate)
		}
		note := levelNote(l)
		if soak {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.0fs\t%d\t%.3g\t%.3g\t%.4g\t%.4g\t%s\t%s\t%s\t%s\t%s\t\n",
				l.Stage, rate, offered, l.WindowSeconds, l.Sent, l.CompletedRate, l.Goodput, l.InputTokensRate, l.OutputTokensRate,
				attained(l), ms3(l.TTFT), ms1(l.TPOT, l.TPOT.P99), ms1(l.E2E, l.E2E.P99), note)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0fs\t%d\t%.3g\t%.3g\t%.4g\t%.4g\t%s\t%s\t%s\t%s\t%.2f\t%s\t\n",
			l.Stage, clients, rate, offered, l.WindowSeconds, l.Sent, l.CompletedRate, l.Goodput, l.InputTokensRate, l.OutputTokensRate,
			attained(l), ms3(l.TTFT), ms1(l.TPOT, l.TPOT.P99), ms1(l.E2E, l.E2E.P99), l.DrainSeconds, note)
	}
	tw.Flush()
	fmt.Fprintln(w, "* over too few samples: P95 below 200, P99 below 1,000; [95% CI]: the attainment's interval (batch means), the level's decision against its objective")
}

// verifiedText states a run's capacity conclusion with its interval and
// sample, or that there is none: "7.9 req/s verified open loop (attained
// 97.2% [95.3, 98.4] of 412; 7.7 good req/s), below 8.4 req/s
// (inconclusive)".
func verifiedText(r *Run) string {
	c := r.Capacity
	rate, ok := c.Verified()
	concluded := r.Verdict == VerdictPass || r.Verdict == VerdictFail
	switch {
	case !ok || !concluded:
		return "not concluded"
	case rate == 0:
		return "no open-loop rate verified"
	}
	text := fmt.Sprintf("%.3g req/s verified open loop", rate)
	for i := range r.Verify {
		if l := &r.Verify[i]; l.Met && (l.Decision == "" && l.IntendedRate == rate || l.Decision != "" && l.OfferedRate == rate) {
			if l.Decision != "" {
				text += fmt.Sprintf(" (%s; %.3g good req/s)", attainmentText(l), c.VerifiedGoodput)
			} else {
				text += fmt.Sprintf(" (%.3g good req/s)", c.VerifiedGoodput)
			}
			break
		}
	}
	if c.Bound > 0 {
		text += fmt.Sprintf(", below %.3g req/s (%s)", c.Bound, c.BoundDecision)
	}
	return text
}

// searchText is the open-loop search's path, in the order it ran:
// "5.55 met, 8.88 inconclusive, 7.2 met (bisection)".
func searchText(verify []Level) string {
	var parts []string
	for i := range verify {
		l := &verify[i]
		if l.Prober == nil || l.Decision == "" {
			continue // not run, or a schema-1 run (its rows say it)
		}
		part := fmt.Sprintf("%.3g req/s %s", l.OfferedRate, searchDecision(l))
		if strings.HasPrefix(l.Why, "bisection") {
			part += " (bisection)"
		} else if strings.HasPrefix(l.Why, "forecast") {
			part += " (" + strings.SplitN(l.Why, ":", 2)[0] + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// attained is a level's attainment with its interval: "97.3% [95.1,
// 98.6]"; a schema-1 level's without one.
func attained(l *Level) string {
	if iv := l.Interval; iv != nil {
		return fmt.Sprintf("%.1f%% [%.1f, %.1f]", 100*l.Attainment, 100*iv.Lower, 100*iv.Upper)
	}
	return fmt.Sprintf("%.1f%%", 100*l.Attainment)
}

// levelNote is a level's note column: its decision, extensions and
// retries, then what else is to know.
func levelNote(l *Level) string {
	var note string
	switch {
	case l.Decision != "" && l.Prober != nil && l.Stage != "burst": // a burst is judged by its drain
		note = l.Decision
	case l.Decision == "" && l.Met:
		note = "met"
	}
	if l.Extensions > 0 {
		note = addNote(note, fmt.Sprintf("window extended %dx", l.Extensions))
	}
	if n := len(l.Remeasured); n > 0 {
		note = addNote(note, fmt.Sprintf("re-measured %dx (%s)", n, strings.SplitN(l.Remeasured[n-1], ":", 2)[0]))
	}
	if l.Insufficient {
		note = addNote(note, "(few)")
	}
	if l.Note != "" {
		note = addNote(note, l.Note)
	}
	if n := dropped(l); n > 0 {
		note = addNote(note, fmt.Sprintf("dropped %d", n))
	}
	if n := l.LengthMismatches["input"]; n > 0 {
		note = addNote(note, fmt.Sprintf("usage.prompt_tokens off the prompt in %d", n))
	}
	if n := l.LengthMismatches["output"]; n > 0 {
		note = addNote(note, fmt.Sprintf("output off max_tokens in %d", n))
	}
	if tl := l.Timeline; tl != nil {
		switch took := tl.Drained - tl.BurstEnd; {
		case tl.Drained > 0 && took <= tl.DrainWithin:
			note = addNote(note, fmt.Sprintf("drained in %.1fs (within %gs)", took, tl.DrainWithin))
		case tl.Drained > 0:
			note = addNote(note, fmt.Sprintf("drained in %.1fs (over %gs)", took, tl.DrainWithin))
		default:
			note = addNote(note, fmt.Sprintf("did not drain within %gs", tl.DrainWithin))
		}
	}
	if q := l.EngineQueue; q != nil && q.Samples > 0 {
		note = addNote(note, fmt.Sprintf("engine queue mean %.1f, max %d", q.Mean, q.Max))
	}
	if p := l.Prober; p != nil && !l.ProberBound() && (p.LagP99 > ProberLagLimit.Seconds() || p.CPUShare > ProberCPULimit) {
		note = addNote(note, fmt.Sprintf("prober busy: send lag P99 %.0f ms, CPU %.0f%%", 1e3*p.LagP99, 100*p.CPUShare))
	}
	return note
}

// ms3 is p50/p95/p99 in milliseconds with the sample count, a starred
// percentile over too few samples.
func ms3(p Percentiles) string {
	if p.N == 0 {
		return "-"
	}
	star := func(name string) string {
		for _, lc := range p.LowConfidence {
			if lc == name {
				return "*"
			}
		}
		return ""
	}
	return fmt.Sprintf("%.0f/%.0f%s/%.0f%s (%d)", 1e3*p.P50, 1e3*p.P95, star("p95"), 1e3*p.P99, star("p99"), p.N)
}

func ms1(p Percentiles, v float64) string {
	if p.N == 0 {
		return "-"
	}
	star := ""
	if len(p.LowConfidence) > 0 && p.LowConfidence[len(p.LowConfidence)-1] == "p99" {
		star = "*"
	}
	return fmt.Sprintf("%.0f%s", 1e3*v, star)
}

func (s *SoakRun) drift() *Drift {
	if s == nil {
		return nil
	}
	return s.Drift
}

// dropped returns the arrivals a level dropped, for every reason.
func dropped(l *Level) int {
	n := 0
	for _, d := range l.Dropped {
		n += d
	}
	return n
}

// addNote appends s to a level's note.
func addNote(note, s string) string {
	if note == "" {
		return s
	}
	return note + "; " + s
}
