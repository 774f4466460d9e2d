package capacity

import (
	"fmt"
	"slices"
	"strings"
)

// A level of the open-loop search left undecided is judged again with the
// levels above it pooled. A target's attainment does not rise with the
// rate it is offered (the search already takes it so: a lower rate than
// one that met is implied), so what a higher rate attained is evidence
// for a lower one: pooled, the attainment expected is at most the lower
// rate's own, and a pooled interval whose lower end is at or above the
// objective shows that rate to meet it. Near the capacity a level is
// worth a sixth of its requests (the queue's swings: 2,352 requests of 12
// minutes at 3.27 req/s are worth about 250 independent ones), and 12
// minutes leave a level at 97.9% undecided against 95% ([94.7, 99.2]);
// the level above it, 3.69 req/s at 96.9% of 2,658 (NEff 332), left
// undecided too, doubles its sample: pooled, 97.3% [95.3, 98.5], met.
//
// Only the met side is pooled: a higher rate's attainment bounds a lower
// one's from below, never from above, so a level misses on its own
// requests alone. The pool is the levels above it by offered rate, in
// order, up to the first that missed (it would only drag the pool under
// the objective: a rate that missed is evidence of nothing but that):
// each measured validly (not prober-bound, no arrival dropped: a lighter
// load than offered is no bound) and left undecided (a level above that
// met implies this one outright). An undecided level below its objective
// stays in: leaving it out would pick the pool by what it attained.
// The simulation study (TestPoolErrors) holds its errors to the rule's.

// Pooled is the evidence of a level met only with the levels above it
// pooled: their offered rates, the pooled attainment (each level's
// weighed by its effective sample) and its interval.
type Pooled struct {
	Rates      []float64 `json:"rates"`
	Attainment float64   `json:"attainment"`
	Interval   *Interval `json:"interval"`
}

// Text is "with 3.69 req/s above it pooled, 97.3% [95.3, 98.5] of 5010".
func (p *Pooled) Text() string {
	if p == nil || p.Interval == nil {
		return ""
	}
	return fmt.Sprintf("with %s req/s above it pooled, %.1f%% [%.1f, %.1f] of %d",
		p.rates(), 100*p.Attainment, lower(p.Interval), upper(p.Interval), p.Interval.N)
}

// rates is the pooled levels' offered rates: "3.5 and 3.69".
func (p *Pooled) rates() string {
	rates := make([]string, len(p.Rates))
	for i, r := range p.Rates {
		rates[i] = fmt.Sprintf("%.3g", r)
	}
	return strings.Join(rates, " and ")
}

// poolAbove judges an open-loop level of the search (stage verify) left
// undecided at the look of confidence level again with the pool of
// Verify's levels above it (see the top of this file): met when every
// scenario it left undecided meets with them pooled.
func (s *Step) poolAbove(l *Level, level float64) {
	if s.run == nil || l.Stage != "verify" {
		return
	}
	poolLevel(l, poolOf(l, s.run.Verify), level)
}

// poolOf is the levels of verify that pool with l, by offered rate (see
// the top of this file).
func poolOf(l *Level, verify []Level) []*Level {
	var pool []*Level
	for _, u := range ladderOf(verify) {
		if u == l || u.Stage != "verify" || u.Concurrency > 0 || u.OfferedRate < l.OfferedRate {
			continue
		}
		if u.Decided() == DecisionMissed {
			break
		}
		if !u.ProberBound() && len(u.Dropped) == 0 && u.Counted > 0 && u.Decided() == DecisionInconclusive {
			pool = append(pool, u)
		}
	}
	return pool
}

// poolLevel judges l, undecided, with pool (poolOf) at level: met when
// every scenario it left undecided, pooled with the same scenario of
// each level of pool that counted requests of it, meets its objective.
func poolLevel(l *Level, pool []*Level, level float64) {
	if len(pool) == 0 || l.Decision != DecisionInconclusive || l.Counted == 0 || l.ProberBound() || len(l.Dropped) > 0 || l.Concurrency > 0 {
		return
	}
	for i := range l.Scenarios {
		sc := &l.Scenarios[i]
		if sc.Counted == 0 || sc.Decision == DecisionMet {
			continue
		}
		if sc.Decision != DecisionInconclusive {
			return
		}
		ivs := []*Interval{sc.Interval}
		for _, u := range pool {
			if j := slices.IndexFunc(u.Scenarios, func(o ScenarioResult) bool { return o.Scenario == sc.Scenario }); j >= 0 && u.Scenarios[j].Counted > 0 {
				ivs = append(ivs, u.Scenarios[j].Interval)
			}
		}
		if len(ivs) == 1 || decide(pooledInterval(level, ivs...), sc.Objective) != DecisionMet {
			return
		}
	}
	ivs := []*Interval{l.Interval}
	rates := make([]float64, len(pool))
	for i, u := range pool {
		ivs = append(ivs, u.Interval)
		rates[i] = u.OfferedRate
	}
	iv := pooledInterval(level, ivs...)
	if iv == nil {
		return // a level without its attainment (read from a file)
	}
	l.Pooled = &Pooled{Rates: rates, Attainment: iv.p, Interval: iv}
	l.Decision, l.Met = DecisionMet, true
	l.Note = addNote(l.Note, "met "+l.Pooled.Text()+": a higher rate attains no more")
}
