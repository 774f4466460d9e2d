package capacity

import (
	"fmt"
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
	// Two batches: too few to estimate a variance from, N stands.
	iv := attainmentInterval(outcomes(t0, 2*batch, 100, func(i int) bool { return i < 10 }), t0, batch, confidence)
	require.Equal(t, 2, iv.Batches)
	require.Equal(t, 100.0, iv.NEff)
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

// TestLookConfidence: a level looked at up to k times gets each look's
// interval at 1 - 0.05/k, so that stopping at the first decisive look
// keeps its decision within 5%: 89 requests all good meet 95% at one
// look ([95.9%, 100%]) and not at three ([94.0%, 100%]).
func TestLookConfidence(t *testing.T) {
	require.InDelta(t, 0.95, lookConfidence(1), 1e-12)
	require.InDelta(t, 1-0.05/3, lookConfidence(3), 1e-12)
	t0 := time.Unix(1_700_000_000, 0)
	all := outcomes(t0, 10*time.Second, 89, func(int) bool { return false })
	one := attainmentInterval(all, t0, time.Second, lookConfidence(1))
	three := attainmentInterval(all, t0, time.Second, lookConfidence(3))
	require.InDelta(t, 0.9586, one.Lower, 5e-4)
	require.InDelta(t, 0.9396, three.Lower, 5e-4)
	require.Equal(t, DecisionMet, decide(one, 0.95))
	require.Equal(t, DecisionInconclusive, decide(three, 0.95))
	require.InDelta(t, 1-0.05/3, three.Confidence, 1e-12)
}
