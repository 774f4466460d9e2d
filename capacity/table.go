package capacity

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes a run as a text table: its verdict, then one row per
// level with the sample count beside every percentile. A percentile over
// too few samples is marked *, an insufficient level "(few)".
func WriteTable(w io.Writer, r *Run) {
	// "ABORTED: interrupt signal received", not "ABORTED: aborted: ...".
	reason := strings.TrimPrefix(r.Reason, r.Verdict+": ")
	fmt.Fprintf(w, "test %s (%s) on %s: %s: %s\n", r.Test, r.Kind, r.Target, strings.ToUpper(r.Verdict), reason)
	if c := r.Capacity; c != nil {
		fmt.Fprintf(w, "capacity: %.3g req/s verified open loop (%.3g good req/s); closed loop %s at %.3g req/s (%.3g good req/s)\n",
			c.VerifiedRate, c.VerifiedGoodput, clients(c.Concurrency), c.Rate, c.Goodput)
	}
	if d := r.Soak.drift(); d != nil {
		fmt.Fprintf(w, "drift: %s; goodput per request %+.0f%%; prober memory %+.0f%%\n", d.Growth(), -100*d.GoodputDrop, 100*d.MemoryGrowth)
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
		fmt.Fprintln(tw, "stage\trate/s\twindow\tsent\tok/s\tgood/s\tin tok/s\tout tok/s\tattained\tTTFT p50/p95/p99 ms (n)\tTPOT p99 ms\tE2E p99 ms\tnote\t")
	} else {
		fmt.Fprintln(tw, "stage\tclients\trate/s\twindow\tsent\tok/s\tgood/s\tin tok/s\tout tok/s\tattained\tTTFT p50/p95/p99 ms (n)\tTPOT p99 ms\tE2E p99 ms\tdrain s\tnote\t")
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
		clients, rate := "-", "-"
		if l.Concurrency > 0 {
			clients = fmt.Sprint(l.Concurrency)
		}
		if l.IntendedRate > 0 {
			rate = fmt.Sprintf("%.3g", l.IntendedRate)
		}
		var note string
		if l.Met {
			note = "met"
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
		if p := l.Prober; p != nil && (p.LagP99 > ProberLagLimit.Seconds() || p.CPUShare > ProberCPULimit) {
			note = addNote(note, fmt.Sprintf("prober busy: send lag P99 %.0f ms, CPU %.0f%%", 1e3*p.LagP99, 100*p.CPUShare))
		}
		if soak {
			fmt.Fprintf(tw, "%s\t%s\t%.0fs\t%d\t%.3g\t%.3g\t%.4g\t%.4g\t%.1f%%\t%s\t%s\t%s\t%s\t\n",
				l.Stage, rate, l.WindowSeconds, l.Sent, l.CompletedRate, l.Goodput, l.InputTokensRate, l.OutputTokensRate,
				100*l.Attainment, ms3(l.TTFT), ms1(l.TPOT, l.TPOT.P99), ms1(l.E2E, l.E2E.P99), note)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0fs\t%d\t%.3g\t%.3g\t%.4g\t%.4g\t%.1f%%\t%s\t%s\t%s\t%.2f\t%s\t\n",
			l.Stage, clients, rate, l.WindowSeconds, l.Sent, l.CompletedRate, l.Goodput, l.InputTokensRate, l.OutputTokensRate,
			100*l.Attainment, ms3(l.TTFT), ms1(l.TPOT, l.TPOT.P99), ms1(l.E2E, l.E2E.P99), l.DrainSeconds, note)
	}
	tw.Flush()
	fmt.Fprintln(w, "* over too few samples: P95 below 200, P99 below 1,000")
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
