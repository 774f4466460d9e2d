package capacity

import (
	"fmt"
	"strings"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
)

// A test level is judged by what the prober's delays could change of its
// decision, not by the delays alone. The canary and `probe` keep the
// --validity.* thresholds as they are (a prober over them says so); a
// step test's level over them is looked at more closely, because on an
// ordinary shared machine nearly every level is over them at times, and a
// level thrown away costs the search a rate it measured:
//
//   - A late read only adds to what a request measured: its TTFT, TTFA and
//     E2E are stamped at or after their bytes arrived, so they can only
//     look worse, by at most the read delay over its flight (stall.go).
//     Two measures are differences of stamps and can look better: TPOT,
//     by at most the read delay over its output tokens less one (the first
//     token read late), and the longest gap between chunks, by the read
//     delay (the chunk before it read late).
//   - A late send does not change what the server sees of one request,
//     but late sends together bunch the arrivals: a prober that stops for
//     870 ms at 4 req/s sends three or four requests at once where
//     Poisson arrivals would have spread them. That makes a level harder,
//     never easier, and only matters when the lag is a sizeable share of
//     the mean gap: 30 ms late sends at 4 req/s (250 ms apart) leave the
//     arrivals as Poisson as their schedule. It is measured, not assumed:
//     the index of dispersion of the sends (the variance over the mean of
//     their counts in bins of the mean gap) against the schedule's own.
//     An arrival dropped as late makes the load lighter.
//
// So a level that met while the prober was late met in spite of it,
// unless its TPOT or longest gap, each made worse by its bound, would
// miss (or, closed loop, the clients waited on the prober for a sizeable
// share of their cycles: fewer requests in flight than the level's
// clients). A level that missed or stayed undecided stands when, with
// every request made better by its bound, the decision would be the same
// and the sends were as Poisson as their schedule; otherwise it was
// measured while the prober was the limit and is measured again. Worked
// numbers: at 4 req/s, sends 30 ms late at their P99 and reads at most
// 41 ms late, a level attaining 100% [96.4, 100] of 248 stands as met; a
// level attaining 88% of 240 with a TTFT SLO of 500 ms stands as missed
// when fewer than a fifth of its misses had a TTFT within 541 ms.

// burstTolerance is how much more dispersed than their schedule the sends
// may be and still count as Poisson: 10%, over the noise of a few hundred
// arrivals (a schedule delayed by iid jitter keeps its dispersion; bursts
// of three or four raise it by half or more).
const burstTolerance = 0.10

// closedIdleShare is the share of a closed-loop client's cycle (its
// request's E2E) the prober may make it wait and its level still count as
// carrying its clients: 5%.
const closedIdleShare = 0.05

// Rules of the prober's effect on a level (ProberHealth.Rule).
const (
	ruleMetDespite = "met despite the prober's delays, which only make a level look worse"
	ruleUnchanged  = "the same decision with every request corrected by its read delay, the sends as Poisson as their schedule"
	ruleChanged    = "the decision could change with the prober's delays"
)

// proberEffect fills what the prober's delays could change of a level's
// decision: each request's read delay (from the stalls of w), the
// decisions with every request made better or worse by it, and the
// dispersion of the sends against their schedule. It does nothing when
// the window's stalls were not tracked.
func proberEffect(l *Level, spec *config.LoadSpec, w windowData, batch time.Duration, level float64) {
	p := l.Prober
	if p == nil || !w.stallsTracked || len(w.records) == 0 {
		return
	}
	spans := make([][2]time.Time, len(w.records))
	for i := range w.records {
		r := &w.records[i]
		spans[i] = [2]time.Time{r.Sent, r.Sent.Add(r.Ended)}
	}
	delays := readDelays(w.stalls, spans)
	ds := make([]float64, len(delays))
	for i := range delays {
		// A goroutine a timer woke (the sampler's) runs ahead of those
		// a read woke: the level's scheduler latency P99 on top.
		delays[i] += w.sched
		ds[i] = delays[i].Seconds()
	}
	pd := percentiles(ds) // sorts ds
	p.ReadDelayP99, p.ReadDelayMax = pd.P99, ds[len(ds)-1]

	slos := sloMap(spec)
	better := make([]bool, len(w.records))
	worse := make([]bool, len(w.records))
	for i := range w.records {
		r := &w.records[i]
		better[i] = r.Good || goodIfEarlier(r, slos[r.Scenario], delays[i])
		worse[i] = r.Good && goodIfLater(r, slos[r.Scenario], delays[i])
	}
	p.DecisionIfBetter = decisionOf(w.records, better, spec, slos, w.start, batch, level)
	p.DecisionIfWorse = decisionOf(w.records, worse, spec, slos, w.start, batch, level)

	if !spec.Closed() && len(w.records) >= minDispersionArrivals {
		sent := make([]time.Time, len(w.records))
		due := make([]time.Time, len(w.records))
		for i := range w.records {
			sent[i] = w.records[i].Sent
			due[i] = sent[i].Add(-w.records[i].Lag)
		}
		bin := time.Duration(float64(w.end.Sub(w.start)) / float64(len(w.records)))
		p.SendDispersion = dispersion(sent, w.start, w.end, bin)
		p.ScheduleDispersion = dispersion(due, w.start, w.end, bin)
	}
	p.LateDrops = w.dropped[prober.DropLate]
}

// minDispersionArrivals: the fewest arrivals whose dispersion is judged
// (20 bins of one arrival each are too few to tell a burst from chance).
const minDispersionArrivals = 50

// goodIfEarlier reports whether a bad request would be good had each of
// its stamps been taken d earlier (a late read, the most it could have
// been): an ok reply with text that missed only latency SLOs, each within
// its threshold once corrected. A failed request, one without text, or
// one that missed a quality check stays bad.
func goodIfEarlier(r *Record, slos []config.SLO, d time.Duration) bool {
	if !r.Counted || r.Outcome != prober.OutcomeOK || !r.HasE2E || len(r.Missed) == 0 {
		return false
	}
	thresholds := map[string]time.Duration{}
	for _, s := range slos {
		thresholds[s.Name] = s.Threshold
	}
	for _, name := range r.Missed {
		t, ok := thresholds[name]
		if !ok {
			return false
		}
		switch name {
		case "ttft":
			ok = r.HasTTFT && r.TTFT-d <= t
		case "ttfa":
			ok = r.HasTTFA && r.TTFA-d <= t
		case "e2e":
			ok = r.E2E-d <= t
		case "tpot":
			ok = r.HasTPOT && r.TPOT-perToken(d, r.OutputTokens) <= t
		case "max_itl":
			ok = r.HasMaxITL && r.MaxITL-d <= t
		default:
			ok = false // a quality check: no delay makes it pass
		}
		if !ok {
			return false
		}
	}
	return true
}

// goodIfLater reports whether a good request would still be good with its
// differences of stamps made worse by d: its TPOT (its first token read d
// late) and its longest gap (the chunk before it read d late). TTFT, TTFA
// and E2E only look worse with a late read: they are as measured.
func goodIfLater(r *Record, slos []config.SLO, d time.Duration) bool {
	for _, s := range slos {
		switch s.Name {
		case "tpot":
			if r.HasTPOT && r.TPOT+perToken(d, r.OutputTokens) > s.Threshold {
				return false
			}
		case "max_itl":
			if r.HasMaxITL && r.MaxITL+d > s.Threshold {
				return false
			}
		}
	}
	return true
}

// perToken is d over a TPOT's n-1 tokens.
func perToken(d time.Duration, n int) time.Duration {
	if n < 2 {
		return d
	}
	return d / time.Duration(n-1)
}

// decisionOf is the decision of a level whose records are good as good
// says, each scenario judged on its own objective as summarize does.
func decisionOf(records []Record, good []bool, spec *config.LoadSpec, slos map[string][]config.SLO, start time.Time, batch time.Duration, level float64) string {
	decisions := map[string]int{}
	counted := 0
	for _, s := range spec.Scenarios {
		var os []outcome
		for i := range records {
			if r := &records[i]; r.Counted && r.Scenario == s.Key.Scenario {
				os = append(os, outcome{sent: r.Sent, good: good[i], pressure: pressure(r, slos[r.Scenario])})
			}
		}
		if len(os) == 0 {
			continue
		}
		counted += len(os)
		decisions[decide(attainmentInterval(os, start, batch, level), s.Objective)]++
	}
	switch {
	case counted == 0:
		return DecisionInconclusive
	case decisions[DecisionMissed] > 0:
		return DecisionMissed
	case decisions[DecisionInconclusive] > 0:
		return DecisionInconclusive
	}
	return DecisionMet
}

// dispersion is the index of dispersion (variance over mean) of the
// counts of times in bins of width bin over [start, end): 1 for Poisson
// arrivals, more when they come in bunches. 0 with fewer than two bins.
func dispersion(times []time.Time, start, end time.Time, bin time.Duration) float64 {
	if bin <= 0 || !end.After(start) {
		return 0
	}
	n := int(end.Sub(start) / bin)
	if n < 2 {
		return 0
	}
	counts := make([]float64, n)
	for _, t := range times {
		if i := int(t.Sub(start) / bin); i >= 0 && i < n {
			counts[i]++
		}
	}
	mean := 0.0
	for _, c := range counts {
		mean += c
	}
	mean /= float64(n)
	if mean == 0 {
		return 0
	}
	v := 0.0
	for _, c := range counts {
		v += (c - mean) * (c - mean)
	}
	return v / float64(n-1) / mean
}

// bursty reports whether a level's sends were burstier than their
// schedule beyond burstTolerance.
func (p *ProberHealth) bursty() bool {
	return p.ScheduleDispersion > 0 && p.SendDispersion > p.ScheduleDispersion*(1+burstTolerance)
}

// judgeEffect judges the prober's health over a test level by v (nil:
// none): a level over v's thresholds is prober-bound only when the
// prober's delays could change its decision (see the top of this file),
// and its note says which rule held. effect, if set, fills what they
// could change (proberEffect), only for a level over the thresholds: it
// costs the prober CPU while it measures. A level whose stalls were not
// tracked is judged by the thresholds alone, as judgeProber does.
func judgeEffect(l *Level, v *validity.Config, effect func()) {
	p := l.Prober
	if p == nil || v == nil {
		return
	}
	over := overThresholds(p, v)
	if len(over) == 0 {
		return
	}
	if effect != nil {
		effect()
	}
	if p.DecisionIfBetter == "" {
		judgeProber(l, v, notUsed)
		return
	}
	p.Over = over
	p.Diagnosis = diagnose(p, over, v)
	late := lateness(p)
	decision := l.Decided()
	switch {
	case decision == DecisionMet && p.DecisionIfWorse == DecisionMet && !l.idleClients():
		p.Rule = ruleMetDespite
		l.Note = addNote(l.Note, fmt.Sprintf("prober late (%s): met all the same: its delays only make a level look worse", late))
		return
	case decision != DecisionMet && p.DecisionIfBetter == decision && !p.bursty():
		p.Rule = ruleUnchanged
		l.Note = addNote(l.Note, fmt.Sprintf("prober late (%s): %s all the same with every request corrected by its read delay", late, decision))
		return
	}
	p.Rule = ruleChanged
	p.Invalid = over
	why := ""
	switch {
	case decision == DecisionMet && l.idleClients():
		why = fmt.Sprintf("its clients waited on the prober (reads up to %.0f ms late, E2E median %.0f ms); its completed rate, a lower bound, counts toward the closed loop's peak", 1e3*p.ReadDelayP99, 1e3*l.E2E.P50)
	case decision == DecisionMet:
		why = "with every request's TPOT and longest gap made worse by its read delay it would be " + p.DecisionIfWorse
	case p.DecisionIfBetter != decision:
		why = "with every request corrected by its read delay it would be " + p.DecisionIfBetter
	default:
		why = fmt.Sprintf("the sends came in bunches (dispersion %.2f against the schedule's %.2f)", p.SendDispersion, p.ScheduleDispersion)
	}
	l.Note = addNote(l.Note, fmt.Sprintf("%s: prober-bound (%s): %s", notUsed, boundBy(p, over, late), why))
}

// idleClients reports whether a closed-loop level's clients waited on the
// prober for more than closedIdleShare of their cycles (its read delay
// P99 against its E2E median): fewer requests were in flight than its
// clients, and a met level may owe it to that.
func (l *Level) idleClients() bool {
	p := l.Prober
	return l.Concurrency > 0 && l.E2E.P50 > 0 && p.ReadDelayP99 > closedIdleShare*l.E2E.P50
}

// overThresholds are the thresholds of v the prober's health p was over.
func overThresholds(p *ProberHealth, v *validity.Config) []string {
	sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	lag := sec(p.LagP99)
	if p.Sends < minSendsForLag {
		lag = sec(p.LagP50) // the P99 of a few sends is their largest: one hiccup
	}
	return v.Judge(p.CPUShare, sec(p.SchedulerP99), sec(p.GCPauseP99), lag, 0)
}

// lateness says how late the prober was over a level: "send lag P99 33
// ms, reads up to 41 ms late".
func lateness(p *ProberHealth) string {
	var parts []string
	if p.Sends > 0 {
		parts = append(parts, fmt.Sprintf("send lag P99 %.0f ms", 1e3*p.LagP99))
	}
	if p.SchedulerP99 > 0 {
		parts = append(parts, fmt.Sprintf("scheduler latency P99 %.0f ms", 1e3*p.SchedulerP99))
	}
	parts = append(parts, fmt.Sprintf("reads up to %.0f ms late", 1e3*p.ReadDelayMax))
	if p.LateDrops > 0 {
		parts = append(parts, fmt.Sprintf("%d arrivals dropped late", p.LateDrops))
	}
	return strings.Join(parts, ", ")
}
