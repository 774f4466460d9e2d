package capacity

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/stat/distuv"
)

// pooledDecision looks at outcomes as a level's plan does, as
// sequentialDecision, and returns its decision alone and with pool's
// intervals pooled (poolLevel): a look its own interval leaves undecided
// meets when the pool does.
func pooledDecision(outcomes []outcome, start time.Time, plan lookPlan, objective float64, pool []*Interval) (alone, pooled string) {
	for i := range plan.looks {
		iv := attainmentInterval(atLook(outcomes, start, plan, i), start, plan.batch, plan.confidence[i])
		d, last := decide(iv, objective), i == len(plan.looks)-1
		if alone == "" && (d != DecisionInconclusive || last) {
			alone = d
		}
		if d == DecisionInconclusive && iv != nil && decide(pooledInterval(plan.confidence[i], append([]*Interval{iv}, pool...)...), objective) == DecisionMet {
			d = DecisionMet
		}
		if pooled == "" && (d != DecisionInconclusive || last) {
			pooled = d
		}
		if alone != "" && pooled != "" {
			return alone, pooled
		}
	}
	panic("no look")
}

// TestPoolErrors is the simulation study of pooling (pool.go): the
// search's levels of regime a (M/D/8 of 1.368 s, a TTFT SLO of 500 ms at
// 95%, 12-minute levels in 12 s batches, with and without a prefill that
// blurs the queue in the TTFTs), a level above run first at 5% or 15%
// more; where it is left undecided, the level below is judged with it
// pooled. At each true attainment below the objective the levels met are
// no evidence of an error rate above 2.5% (at most as many as a rate of
// 2.5% gives 1 time in 100), and none more than alone; below the truth
// pooling meets more levels than alone (logged: docs/capacity-tests.md).
func TestPoolErrors(t *testing.T) {
	t.Parallel()
	const objective = 0.95
	t0, plan, duration, models, full := searchLevelStudy()
	// Below the truth, the level above at 10% more, as a bisection's
	// bracket has it; just above it, the level above at the same rate:
	// the pool's hardest case (it attains as much as the level itself).
	type row struct{ share, gap float64 }
	rows, levels := []row{{0.9, 1.1}, {1.01, 1}}, 60
	if full { // the study's table (docs/capacity-tests.md): minutes
		rows, levels = nil, 200
		for _, share := range []float64{0.85, 0.9, 0.95, 1.01, 1.03} {
			for _, gap := range []float64{1, 1.05, 1.15} {
				rows = append(rows, row{share, gap})
			}
		}
	}
	for _, model := range models {
		t.Run(fmt.Sprintf("M/D/8 prefill %gs", model.prefill), func(t *testing.T) {
			t.Parallel()
			truth := rateAt(model, objective)
			for _, row := range rows {
				share, gap := row.share, row.gap
				rate := share * truth
				want := model.attainment(rate, 300_000)
				r := rand.New(rand.NewPCG(uint64(1000*share), uint64(100*gap)))
				n, pooledMet, aloneMet := 0, 0, 0
				for range levels {
					up := model.level(r, rate*gap, duration, t0)
					if d, _ := sequentialDecision(up, t0, plan, objective); d != DecisionInconclusive {
						continue // met implies the level below; missed pools nothing
					}
					upper := attainmentInterval(up, t0, plan.batch, plan.last())
					alone, pooled := pooledDecision(model.level(r, rate, duration, t0), t0, plan, objective, []*Interval{upper})
					n++
					if pooled == DecisionMet {
						pooledMet++
					}
					if alone == DecisionMet {
						aloneMet++
					}
				}
				t.Logf("%.2f of the truth %.3g req/s (attains %.4f), the level above at %.2fx: of %d under one left undecided, met %d pooled, %d alone",
					share, truth, want, gap, n, pooledMet, aloneMet)
				if want < objective && n > 0 {
					p := distuv.Binomial{N: float64(n), P: 0.025}
					require.GreaterOrEqual(t, 1-p.CDF(float64(pooledMet)-1), 0.01,
						"attaining %.4f: %d of %d levels met pooled, more than an error rate of 2.5%% gives", want, pooledMet, n)
				}
			}
		})
	}
}

// searchLevelStudy is what the pool's studies share: regime a's search
// levels (12 minutes in 12 s batches from t0, duration in seconds), its
// queue with a prefill of up to 100 ms, and with SLOPROBER_POOL_STUDY
// (full: the tables of docs/capacity-tests.md, a minute) without it too.
func searchLevelStudy() (t0 time.Time, plan lookPlan, duration float64, models []queueModel, full bool) {
	t0, plan = time.Unix(1_700_000_000, 0), newLookPlan(12*time.Second, 60)
	duration = (time.Duration(plan.max()) * plan.batch).Seconds()
	models = []queueModel{{8, 1.368, 0.55, 0.1}}
	if full = os.Getenv("SLOPROBER_POOL_STUDY") != ""; full {
		models = append(models, queueModel{8, 1.368, 0.5, 0})
	}
	return t0, plan, duration, models, full
}

// rateAt is the rate at which m attains objective in the long run, to a
// thousandth of its slots' throughput.
func rateAt(m queueModel, objective float64) float64 {
	lo, hi := 0.3, 1.0
	for hi-lo > 1e-3 {
		mid := (lo + hi) / 2
		if m.attainment(mid*float64(m.slots)/m.service, 200_000) >= objective {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo * float64(m.slots) / m.service
}

// TestPooledInterval: the worked numbers of pooledInterval, and a pool
// never claims more than its parts' samples.
func TestPooledInterval(t *testing.T) {
	a := &Interval{N: 2352, NEff: 254, Confidence: 0.975, p: 0.979, q: 2.2414}
	b := &Interval{N: 2658, NEff: 332, Confidence: 0.975, p: 0.969, q: 2.2414}
	iv := pooledInterval(0.975, a, b)
	require.Equal(t, 5010, iv.N)
	require.InDelta(t, 586, iv.NEff, 0.5)
	require.InDelta(t, 0.9733, iv.p, 5e-4)
	require.InDelta(t, 0.954, iv.Lower, 1e-3)
	require.Equal(t, DecisionMet, decide(iv, 0.95))
	// A sample judged with Student's t weighs less than its NEff.
	c := &Interval{N: 2352, NEff: 254, Confidence: 0.975, p: 0.979, q: 2.5}
	require.Less(t, pooledInterval(0.975, c, b).NEff, iv.NEff)
	require.Nil(t, pooledInterval(0.975, a, &Interval{N: 10, NEff: 10}), "read from a file: no attainment to pool")
	require.False(t, math.IsNaN(pooledInterval(0.95, a).Lower))
}

// poolTestLevel is an open-loop level of the search at offered rate,
// decided as decision, attaining p of n requests whose effective sample
// is neff (the interval at 97.5%, the normal quantile).
func poolTestLevel(rate float64, decision string, p float64, n int, neff float64) Level {
	iv := &Interval{N: n, NEff: neff, Confidence: 0.975, p: p, q: 2.2414}
	iv.Lower, iv.Upper = wilson(p, neff, iv.q)
	return Level{Stage: "verify", OfferedRate: rate, Decision: decision, Met: decision == DecisionMet, Prober: &ProberHealth{},
		Counted: n, Attainment: p, Interval: iv,
		Scenarios: []ScenarioResult{{Scenario: "s", Counted: n, Attainment: p, Objective: 0.95, Decision: decision, Interval: iv}}}
}

// TestPoolLevel: which levels pool with an undecided one, and when the
// pool meets. Regime c's run whose 3.27 req/s (97.9% of 2,352, NEff 254)
// stayed undecided under 3.69 (96.9% of 2,658, NEff 332), and the search
// bisected below it to 3.13.
func TestPoolLevel(t *testing.T) {
	under := poolTestLevel(3.27, DecisionInconclusive, 0.9787, 2352, 254)
	bound := poolTestLevel(3.69, DecisionInconclusive, 0.9691, 2658, 332)
	bound.Prober.Invalid = []string{"send_lag"}
	dropped := poolTestLevel(3.69, DecisionInconclusive, 0.9691, 2658, 332)
	dropped.Dropped = map[string]int{"max_in_flight": 3}
	for _, tc := range []struct {
		name  string
		above []Level
		met   bool
		rates []float64
	}{
		{"the undecided level above", []Level{poolTestLevel(3.69, DecisionInconclusive, 0.9691, 2658, 332), poolTestLevel(4.48, DecisionMissed, 0.899, 3228, 189)}, true, []float64{3.69}},
		{"alone above it: 12 minutes at 97.9% do not show 95%", nil, false, nil},
		{"only a level that missed above it", []Level{poolTestLevel(4.48, DecisionMissed, 0.899, 3228, 189)}, false, nil},
		{"nothing above the first that missed", []Level{poolTestLevel(3.5, DecisionMissed, 0.93, 2600, 300), poolTestLevel(3.69, DecisionInconclusive, 0.9691, 2658, 332)}, false, nil},
		{"an undecided level below the objective drags it under", []Level{poolTestLevel(3.69, DecisionInconclusive, 0.9433, 2647, 300)}, false, nil},
		{"two undecided levels", []Level{poolTestLevel(3.5, DecisionInconclusive, 0.97, 2500, 300), poolTestLevel(3.69, DecisionInconclusive, 0.9691, 2658, 332)}, true, []float64{3.5, 3.69}},
		{"two undecided levels that do not show it", []Level{poolTestLevel(3.64, DecisionInconclusive, 0.958, 2617, 227), poolTestLevel(3.7, DecisionInconclusive, 0.964, 2666, 292)}, false, nil},
		{"prober-bound above: no evidence", []Level{bound}, false, nil},
		{"arrivals dropped above: a lighter load than offered", []Level{dropped}, false, nil},
		{"a level below it is no bound", []Level{poolTestLevel(3.1, DecisionInconclusive, 0.99, 2300, 400)}, false, nil},
		{"a closed-loop level is not in it", []Level{func() Level {
			l := poolTestLevel(3.69, DecisionInconclusive, 0.9691, 2658, 332)
			l.Concurrency = 8
			return l
		}()}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := under
			l.Scenarios = slices.Clone(under.Scenarios)
			s := &Step{run: &Run{Stages: Stages{Verify: tc.above}}}
			s.poolAbove(&l, 0.975)
			require.Equal(t, tc.met, l.Met)
			if !tc.met {
				require.Equal(t, DecisionInconclusive, l.Decision)
				require.Nil(t, l.Pooled)
				return
			}
			require.Equal(t, DecisionMet, l.Decision)
			require.Equal(t, tc.rates, l.Pooled.Rates)
			require.Equal(t, DecisionInconclusive, l.Scenarios[0].Decision, "the scenario's own decision stays its own")
			require.Contains(t, l.Note, "met with ")
		})
	}
	// A missed level is never pooled: a higher rate bounds a lower one
	// from below only.
	l := poolTestLevel(3.27, DecisionMissed, 0.93, 2352, 254)
	(&Step{run: &Run{Stages: Stages{Verify: []Level{poolTestLevel(3.69, DecisionInconclusive, 0.99, 2658, 332)}}}}).poolAbove(&l, 0.975)
	require.Equal(t, DecisionMissed, l.Decision)
	// The worked numbers of pool.go, as sentences state them.
	l = under
	l.Scenarios = slices.Clone(under.Scenarios)
	(&Step{run: &Run{Stages: Stages{Verify: []Level{poolTestLevel(3.69, DecisionInconclusive, 0.9691, 2658, 332)}}}}).poolAbove(&l, 0.975)
	require.Equal(t, "attained 97.9% [94.7, 99.2] of 2352; with 3.69 req/s above it pooled, 97.3% [95.3, 98.5] of 5010", attainmentText(&l))
	// A stored run says the same.
	b, err := json.Marshal(&l)
	require.NoError(t, err)
	var stored Level
	require.NoError(t, json.Unmarshal(b, &stored))
	require.Equal(t, attainmentText(&l), attainmentText(&stored))
}

// TestMeasuredAgainErrors is the simulation study of the bracket's top
// measured again (againAtTop): a search level of regime a's queue (as
// TestPoolErrors) left undecided at its last look with its attainment at
// or above the objective, and about one more window to decide it, runs
// again with arrivals of its own, and the two windows pool: the second
// judged at each of its looks with the first pooled, and the first with
// the second's. Counted met is a level met alone, or its second window
// met either way (both ways, where the search takes one: the study
// bounds it). Above the truth the rate is met no more often than an
// error rate of 2.5% gives; below it, more often than alone (logged:
// docs/capacity-tests.md).
func TestMeasuredAgainErrors(t *testing.T) {
	t.Parallel()
	const objective = 0.95
	t0, plan, duration, models, full := searchLevelStudy()
	shares, levels := []float64{0.9, 1.01}, 60
	if full {
		shares, levels = []float64{0.85, 0.88, 0.9, 0.93, 0.95, 1.01, 1.03, 1.05}, 200
	}
	for _, model := range models {
		t.Run(fmt.Sprintf("M/D/8 prefill %gs", model.prefill), func(t *testing.T) {
			t.Parallel()
			truth := rateAt(model, objective)
			for _, share := range shares {
				rate := share * truth
				want := model.attainment(rate, 300_000)
				r := rand.New(rand.NewPCG(uint64(1000*share), 7))
				aloneMet, again, met := 0, 0, 0
				for range levels {
					first := model.level(r, rate, duration, t0)
					alone, _ := sequentialDecision(first, t0, plan, objective)
					if alone == DecisionMet {
						aloneMet++
						met++
						continue
					}
					iv := attainmentInterval(first, t0, plan.batch, plan.last())
					if alone != DecisionInconclusive || iv == nil || iv.p < objective {
						continue
					}
					n, ok := requestsToDecide(iv, iv.p, objective, plan.last())
					if !ok || float64(n)*duration/float64(len(first)) > duration {
						continue
					}
					again++
					second := model.level(r, rate, duration, t0)
					_, pooled := pooledDecision(second, t0, plan, objective, []*Interval{iv})
					both := pooledInterval(plan.last(), iv, attainmentInterval(second, t0, plan.batch, plan.last()))
					if pooled == DecisionMet || decide(both, objective) == DecisionMet {
						met++
					}
				}
				t.Logf("%.2f of the truth %.3g req/s (attains %.4f): of %d levels, met %d alone, %d with the top measured again (%d measured again)",
					share, truth, want, levels, aloneMet, met, again)
				if want < objective {
					p := distuv.Binomial{N: float64(levels), P: 0.025}
					require.GreaterOrEqual(t, 1-p.CDF(float64(met)-1), 0.01,
						"attaining %.4f: %d of %d levels met, more than an error rate of 2.5%% gives", want, met, levels)
				}
			}
		})
	}
}
