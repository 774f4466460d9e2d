package capacity

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// A level is decided as soon as its sample decides it. Its steady window
// is cut into batches (a tenth of window.steady each), and the level is
// looked at, each time the requests of its batches so far have ended, at
// a schedule of batch counts fixed before it starts: 3, then half as many
// again each time (3, 5, 8, 12, 18, 27), up to the most batches the level
// may take (window.max_steady; the search's verify.max_steady, a forecast
// level's verify.forecast_max_steady), where it is looked at once more
// and left undecided if it still is. The load goes on while a look waits
// for its requests, so looking costs no time; a level far from the
// objective stops at its first looks, and one next to it takes the time
// the test allows.
//
// Looking again until something decides must not raise the chance of a
// wrong decision: every look has its own share of the 5% (Bonferroni:
// the chance that any look is wrong is at most the sum of their shares,
// whatever their correlation). Half goes to the last look, where the
// levels next to the objective are decided, and half is shared by the
// others, where only the clear ones are. Worked numbers, 30 batches (the
// default three steady windows): looks at 3, 5, 8, 12, 18, 27 and 30
// batches; each of the first six at 99.58% (a normal quantile of 2.87),
// the last at 97.5% (2.24). Every request good, an objective of 95% is
// met at 156 requests at an early look (Wilson's lower end n / (n + q^2)),
// at 96 at the last; the rule it replaces looked three times at 98.3%
// (2.39: 109 requests), a steady window at a time. The simulation study
// (sequential_test.go) measures the rule's errors on levels with misses
// in bunches: at true attainments a point and a half or more from the
// objective, no more wrong decisions than an error rate of 2.5% a side
// gives.

// The shares of the error of a level's looks: half at the last look, half
// over the others.
const lastLookShare = 0.5

// firstLook is the batches of a level's first look: the batch means need
// minBatches to estimate a variance. lookGrowth is how much more each
// look holds than the one before.
const (
	firstLook  = minBatches
	lookGrowth = 1.5
)

// lookPlan is when a level is looked at, and the confidence of each look.
type lookPlan struct {
	batch time.Duration // a batch's length
	// looks are the batch counts at which the level is looked at,
	// ascending; the last is the most batches the level takes.
	looks []int
	// confidence is each look's confidence (1 less its share of the
	// error).
	confidence []float64
}

// newLookPlan is the plan of a level of batches of batch, at most
// maxBatches of them (at least 1).
func newLookPlan(batch time.Duration, maxBatches int) lookPlan {
	p := lookPlan{batch: batch}
	maxBatches = max(maxBatches, 1)
	for b := firstLook; b < maxBatches; b = int(math.Ceil(float64(b) * lookGrowth)) {
		p.looks = append(p.looks, b)
	}
	p.looks = append(p.looks, maxBatches)
	k := len(p.looks)
	for i := range p.looks {
		share := 1.0
		if k > 1 {
			share = 1 - lastLookShare
			if i == k-1 {
				share = lastLookShare
			} else {
				share /= float64(k - 1)
			}
		}
		p.confidence = append(p.confidence, 1-(1-confidence)*share)
	}
	return p
}

// onceLookPlan is a plan that looks once, at n batches, at 95%.
func onceLookPlan(batch time.Duration, n int) lookPlan {
	return lookPlan{batch: batch, looks: []int{n}, confidence: []float64{confidence}}
}

// max is the most batches of the plan.
func (p lookPlan) max() int { return p.looks[len(p.looks)-1] }

// last is the confidence of the plan's last look.
func (p lookPlan) last() float64 { return p.confidence[len(p.confidence)-1] }

// lookPlan is the plan of a level of stage: batches of a tenth of
// window.steady, up to window.max_steady; a level of the open-loop search
// ("verify") up to verify.max_steady, a forecast level (forecast) up to
// verify.forecast_max_steady.
func (s *Step) lookPlan(stage string, forecast bool) lookPlan {
	batch := s.batch()
	most := s.Test.Window.MaxSteadyTotal()
	switch {
	case forecast:
		most = max(most, s.Test.ForecastMaxSteady())
	case stage == "verify":
		most = s.Test.VerifyMaxSteady()
		if s.capped {
			// verify.max_duration's end, from now: a measurement again
			// after the prober's wait is capped there too.
			most = min(most, max(s.levelRoom(), time.Duration(firstLook)*s.batch()))
		}
	}
	if batch <= 0 {
		return newLookPlan(batch, 1)
	}
	return newLookPlan(batch, int(most/batch))
}

// requestsToDecide says, of a level left undecided, about how many
// requests would decide it at its plan's last look, were its attainment
// and the correlation of its misses (its effective sample over its
// requests) what they were: 95.2% [80.7, 98.9] of 248 (n_eff 55) against
// 95% needs about 1.3 M more, in effect never; 97.6% of 240 (n_eff 120)
// against 95% needs about 120 more. It reports false when no number of
// requests would (the attainment at the objective, or nothing counted).
func requestsToDecide(iv *Interval, attainment, objective, level float64) (int, bool) {
	if iv == nil || iv.N == 0 || attainment == objective {
		return 0, false
	}
	ratio := iv.NEff / float64(iv.N)
	q := distuv.UnitNormal.Quantile(1 - (1-level)/2)
	decides := func(n float64) bool {
		lo, hi := wilson(attainment, n*ratio, q)
		return lo >= objective || hi < objective
	}
	n, ok := leastDeciding(float64(iv.N), 1e9, decides)
	if !ok {
		return 0, false
	}
	return int(math.Ceil(n)) - iv.N, true
}

// leastDeciding is about the least sample from start on that decides:
// it doubles until one does (false past limit), then bisects to within
// 1% (at least 1).
func leastDeciding(start, limit float64, decides func(n float64) bool) (float64, bool) {
	lo, hi := start, start
	for !decides(hi) {
		lo, hi = hi, 2*hi
		if hi > limit {
			return 0, false
		}
	}
	for hi-lo > max(1, lo/100) {
		if m := (lo + hi) / 2; decides(m) {
			hi = m
		} else {
			lo = m
		}
	}
	return hi, true
}

// ToDecide is what would decide a level left undecided: about Requests
// more requests, Seconds at its rate.
type ToDecide struct {
	Requests int     `json:"requests"`
	Seconds  float64 `json:"seconds"`
	// Early: the level stopped before window.max_steady, its requests
	// all good but more than the windows left could bring (a 99%
	// objective wants about 500 good requests in a row; 16 clients that
	// completed 65 in 6 s would bring about 270 in 20).
	Early bool `json:"early,omitempty"`
}

// inEffectNever is how long at a level's rate beyond which what would
// decide it is stated as what it is: no test waits hours for one level
// whose attainment sits at its objective (113,472 more requests, 3h12m).
const inEffectNever = time.Hour

// Text is "about 120 more requests (~33s at this rate) would decide it",
// or, past an hour, "in effect never decided: it sits at its objective
// (about 113472 more requests, ~3h12m at this rate, would decide it)".
func (t *ToDecide) Text() string {
	if t == nil {
		return ""
	}
	d := time.Duration(t.Seconds * float64(time.Second))
	if d > inEffectNever {
		return fmt.Sprintf("in effect never decided: it sits at its objective (about %d more requests, ~%s at this rate, would decide it)", t.Requests, strings.TrimSuffix(d.Round(time.Minute).String(), "0s"))
	}
	return fmt.Sprintf("about %d more requests (~%s at this rate) would decide it", t.Requests, d.Round(time.Second))
}

// toDecide sets what would decide a level left undecided after its
// last look: the most of its scenarios' requests needed, at the rate its
// requests came.
func toDecide(l *Level, level float64) {
	if l.Decision != DecisionInconclusive || l.WindowSeconds <= 0 || l.Counted == 0 {
		return
	}
	most := 0
	for _, sc := range l.Scenarios {
		if sc.Decision != DecisionInconclusive {
			continue
		}
		n, ok := requestsToDecide(sc.Interval, sc.Attainment, sc.Objective, level)
		if !ok {
			return // at the objective: no sample decides it
		}
		// A scenario of a mix draws its share of the level's requests.
		most = max(most, int(math.Ceil(float64(n)*float64(l.Counted)/float64(max(sc.Counted, 1)))))
	}
	if most == 0 {
		return
	}
	rate := float64(l.Counted) / l.WindowSeconds
	l.ToDecide = &ToDecide{Requests: most, Seconds: float64(most) / rate}
}
