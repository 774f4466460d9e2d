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
		// 900 requests, 90 misses in two batches (a queue each): the
		// batches' variance says 23 independent requests, and t with 9
		// degrees of freedom; independent, they would be met.
		{"misses together", 900, func(i int) bool { return (i >= 100 && i < 145) || (i >= 500 && i < 545) }, 0.6806, 0.9744, 23.10, 0.8, DecisionInconclusive},
		// the same 90 misses spread out: chance's variance, N stays.
		{"misses apart", 900, func(i int) bool { return i%10 == 0 }, 0.8787, 0.9179, 900, 0.8, DecisionMet},
		{"misses apart, missed", 900, func(i int) bool { return i%10 == 0 }, 0.8787, 0.9179, 900, 0.95, DecisionMissed},
		{"nothing good", 40, func(int) bool { return true }, 0, 0.0876, 40, 0.5, DecisionMissed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv := attainmentInterval(outcomes(t0, window, tc.n, tc.bad), t0, batch)
			require.NotNil(t, iv)
			require.Equal(t, tc.n, iv.N)
			require.InDelta(t, tc.lower, iv.Lower, 5e-4, "%+v", iv)
			require.InDelta(t, tc.upper, iv.Upper, 5e-4, "%+v", iv)
			require.InDelta(t, tc.neff, iv.NEff, 0.01, "%+v", iv)
			require.Equal(t, tc.decision, decide(iv, tc.objective))
		})
	}
	require.Nil(t, attainmentInterval(nil, t0, batch))
	require.Equal(t, DecisionInconclusive, decide(nil, 0.9), "nothing counted decides nothing")
	// Two batches: too few to estimate a variance from, N stands.
	iv := attainmentInterval(outcomes(t0, 2*batch, 100, func(i int) bool { return i < 10 }), t0, batch)
	require.Equal(t, 2, iv.Batches)
	require.Equal(t, 100.0, iv.NEff)
}

// TestQuantileInterval: the order statistics that bound a quantile, and
// the extremes where too few values are above it.
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
	}{
		{1000, 0.99, 983, 997},   // ranks 990 -/+ 1.96 sqrt(9.9), outwards
		{1000, 0.5, 469, 531},    // 500 -/+ 31
		{100, 0.99, 97, 100},     // the upper bound is the largest
		{10, 0.5, 1, 9},          // 5 -/+ 3.1
		{1, 0.99, 1, 1},          // one value bounds everything
		{50, 0.95, 44, 50},       // 47.5 -/+ 3.0
		{2000, 0.95, 1880, 1920}, // 1900 -/+ 19.1
	} {
		t.Run(fmt.Sprintf("n%d_q%g", tc.n, tc.q), func(t *testing.T) {
			lo, hi := quantileInterval(values(tc.n), tc.q)
			require.Equal(t, []float64{tc.lower, tc.upper}, []float64{lo, hi})
		})
	}
}
