package capacity

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// outcomes returns n outcomes evenly spread over d from start, the ones
// whose index bad reports true not good.
func outcomes(start time.Time, d time.Duration, n int, bad func(i int) bool) []outcome {
	out := make([]outcome, n)
	for i := range out {
		out[i] = outcome{sent: start.Add(time.Duration(i) * d / time.Duration(n)), good: !bad(i)}
	}
	return out
}

// TestAttainmentInterval: Wilson's interval where the batches vary as
// chance would; a wider one, over fewer effective requests, where the
// misses come together (a queue); the decision against an objective.
func TestAttainmentInterval(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const window = 10 * time.Second
	batch := window / batchesPerWindow
	for _, tc := range []struct {
		name         string
		n            int
		bad          func(int) bool
		lower, upper float64
		neff         float64
		objective    float64
		decision     string
	}{
		// 87 of 89, misses spread out: Wilson over 89.
		{"spread", 89, func(i int) bool { return i%30 == 29 }, 0.9217, 0.9938, 89, 0.95, DecisionInconclusive},
		// every request good: Wilson's lower end 89/(89+1.96^2).
		{"all good", 89, func(int) bool { return false }, 0.9586, 1, 89, 0.95, DecisionMet},
		{"all good, a high objective", 89, func(int) bool { return false }, 0.9586, 1, 89, 0.99, DecisionInconclusive},
		// 900 requests, 90 misses in two queues, in batches 1, 5 and 6
		// of 90 requests (45, 40, 5): the batches' variance says 23.1
		// independent requests with t at 9 degrees of freedom (2.26),
		// the pairs of batches' (45, 0, 40, 5, 0 misses of 180) 28.7
		// with t at 4 (2.78). The pairs' interval is the wider
		// (2.78^2 / 28.7 = 0.27 against 2.26^2 / 23.1 = 0.22) and
		// stands; independent, the requests would be met.
		{"misses together", 900, func(i int) bool { return (i >= 100 && i < 145) || (i >= 500 && i < 545) }, 0.6535, 0.9772, 28.73, 0.8, DecisionInconclusive},
		// the same 90 misses spread out: chance's variance, N stays.
		{"misses apart", 900, func(i int) bool { return i%10 == 0 }, 0.8787, 0.9179, 900, 0.8, DecisionMet},
		{"misses apart, missed", 900, func(i int) bool { return i%10 == 0 }, 0.8787, 0.9179, 900, 0.95, DecisionMissed},
		{"nothing good", 40, func(int) bool { return true }, 0, 0.0876, 40, 0.5, DecisionMissed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv := attainmentInterval(outcomes(t0, window, tc.n, tc.bad), t0, batch, confidence)
			require.NotNil(t, iv)
			require.Equal(t, tc.n, iv.N)
			require.InDelta(t, tc.lower, iv.Lower, 5e-4, "%+v", iv)
			require.InDelta(t, tc.upper, iv.Upper, 5e-4, "%+v", iv)
			require.InDelta(t, tc.neff, iv.NEff, 0.01, "%+v", iv)
			require.Equal(t, tc.decision, decide(iv, tc.objective))
		})
	}
	require.Nil(t, attainmentInterval(nil, t0, batch, confidence))
	require.Equal(t, DecisionInconclusive, decide(nil, 0.9), "nothing counted decides nothing")
	// Two batches: too few to estimate a variance from; the requests'
	// autocorrelation still sees their 10 misses in a row (a queue):
	// about 10 independent requests, not 100.
	iv := attainmentInterval(outcomes(t0, 2*batch, 100, func(i int) bool { return i < 10 }), t0, batch, confidence)
	require.Equal(t, 2, iv.Batches)
	require.InDelta(t, 10.1, iv.NEff, 0.5, "%+v", iv)
	require.InDelta(t, 9.9, iv.Correlation, 0.5, "%+v", iv)

	// The nearest a request came to its SLO: the largest pressure, an
	// SLO without one (NaN) aside.
	near := outcomes(t0, window, 3, func(int) bool { return false })
	near[0].pressure = pressures{0.3, math.NaN(), 0.5, math.NaN(), math.NaN()}
	near[1].pressure = pressures{0.9, math.NaN(), 0.6, math.NaN(), math.NaN()}
	near[2].pressure = noPressure
	require.InDelta(t, 0.9, attainmentInterval(near, t0, batch, confidence).nearest, 1e-12)
}

// TestIntegratedTime: Geyer's estimate of the integrated autocorrelation
// time against series whose time is known: independent values 1; an
// AR(1) series of coefficient phi (1 + phi) / (1 - phi), 19 at 0.9;
// runs of k equal values about k; a constant or a short series 1.
func TestIntegratedTime(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	series := func(n int, next func(prev float64) float64) []float64 {
		x, v := make([]float64, n), 0.0
		for i := range x {
			v = next(v)
			x[i] = v
		}
		return x
	}
	iid := series(20_000, func(float64) float64 { return r.NormFloat64() })
	require.InDelta(t, 1, integratedTime(iid), 0.15)
	for _, phi := range []float64{0.5, 0.9} {
		ar := series(100_000, func(prev float64) float64 { return phi*prev + r.NormFloat64() })
		want := (1 + phi) / (1 - phi)
		require.InEpsilon(t, want, integratedTime(ar), 0.15, "AR(1) at %g", phi)
	}
	// Runs of 20 equal coin flips: 20 values in a row are worth one.
	runs := make([]float64, 40_000)
	for i := 0; i < len(runs); i += 20 {
		v := float64(r.IntN(2))
		for j := i; j < i+20; j++ {
			runs[j] = v
		}
	}
	require.InEpsilon(t, 20, integratedTime(runs), 0.2)
	require.Equal(t, 1.0, integratedTime(series(1000, func(float64) float64 { return 3 })))
	require.Equal(t, 1.0, integratedTime([]float64{1, 0, 1}))
}

// TestQuantileInterval: the order statistics that bound a quantile
// (l = floor(nq - z sd), u = ceil(nq + z sd) + 1), and no interval where a
// rank falls outside the values.
func TestQuantileInterval(t *testing.T) {
	values := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(i + 1)
		}
		return v
	}
	for _, tc := range []struct {
		n            int
		q            float64
		lower, upper float64
		ok           bool
	}{
		{1000, 0.99, 983, 998, true},   // 990 -/+ 1.96 sqrt(9.9), the upper one more
		{1000, 0.5, 469, 532, true},    // 500 -/+ 31
		{100, 0.99, 0, 0, false},       // no upper bound among 100
		{10, 0.5, 1, 10, true},         // 5 -/+ 3.1
		{7, 0.5, 0, 0, false},          // 3.5 -/+ 2.6: no lower rank
		{1, 0.99, 0, 0, false},         // one value bounds nothing
		{200, 0.95, 183, 198, true},    // 190 -/+ 6.04
		{2000, 0.95, 1880, 1921, true}, // 1900 -/+ 19.1
	} {
		t.Run(fmt.Sprintf("n%d_q%g", tc.n, tc.q), func(t *testing.T) {
			lo, hi, ok := quantileInterval(values(tc.n), tc.q)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, []float64{tc.lower, tc.upper}, []float64{lo, hi})
		})
	}
}

// TestLookPlan: when a level is looked at, and at what confidence: half
// the 5% at its last look, half shared by the others; 156 requests all
// good meet 95% at an early look of the default plan (99.58%), 96 at its
// last (97.5%).
func TestLookPlan(t *testing.T) {
	for _, tc := range []struct {
		max   int
		looks []int
	}{
		{30, []int{3, 5, 8, 12, 18, 27, 30}},
		{20, []int{3, 5, 8, 12, 18, 20}},
		{10, []int{3, 5, 8, 10}},
		{3, []int{3}},
		{1, []int{1}},
	} {
		p := newLookPlan(time.Second, tc.max)
		require.Equal(t, tc.looks, p.looks, "max %d", tc.max)
		require.Equal(t, tc.max, p.max())
		spent := 0.0
		for _, c := range p.confidence {
			spent += 1 - c
		}
		require.InDelta(t, 1-confidence, spent, 1e-12, "the looks share 5%%")
		if len(p.looks) > 1 {
			require.InDelta(t, 0.975, p.last(), 1e-12)
		}
	}
	p := newLookPlan(time.Second, 30)
	require.InDelta(t, 1-0.025/6, p.confidence[0], 1e-12)
	t0 := time.Unix(1_700_000_000, 0)
	allGood := func(n int) []outcome { return outcomes(t0, 30*time.Second, n, func(int) bool { return false }) }
	require.Equal(t, DecisionMet, decide(attainmentInterval(allGood(156), t0, time.Second, p.confidence[0]), 0.95))
	require.Equal(t, DecisionInconclusive, decide(attainmentInterval(allGood(155), t0, time.Second, p.confidence[0]), 0.95))
	require.Equal(t, DecisionMet, decide(attainmentInterval(allGood(96), t0, time.Second, p.last()), 0.95))
	require.Equal(t, DecisionInconclusive, decide(attainmentInterval(allGood(95), t0, time.Second, p.last()), 0.95))
}

// TestRequestsToDecide: what would decide a level left undecided, were
// its attainment and the correlation of its misses what they were.
func TestRequestsToDecide(t *testing.T) {
	// 97.6% of 240, independent: about 120 more at 97.5%.
	n, ok := requestsToDecide(&Interval{N: 240, NEff: 240}, 0.976, 0.95, 0.975)
	require.True(t, ok)
	require.InDelta(t, 120, n, 30)
	// The same with misses in bunches (n_eff half the requests): about
	// twice as many in all.
	n2, ok := requestsToDecide(&Interval{N: 240, NEff: 120}, 0.976, 0.95, 0.975)
	require.True(t, ok)
	require.InDelta(t, 2*(n+240)-240, n2, 40)
	// Below the objective: the requests that show the miss.
	_, ok = requestsToDecide(&Interval{N: 100, NEff: 100}, 0.9, 0.95, 0.975)
	require.True(t, ok)
	// At the objective: nothing decides it.
	_, ok = requestsToDecide(&Interval{N: 100, NEff: 100}, 0.95, 0.95, 0.975)
	require.False(t, ok)
	_, ok = requestsToDecide(nil, 0.9, 0.95, 0.975)
	require.False(t, ok)
}
