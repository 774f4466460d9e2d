package canary

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPercentileSampleRule: capacity reports' rule, a percentile left out
// below its sample count: P95 from 200 samples, P99 from 1,000, the
// median from one; increase() counts are rounded first.
func TestPercentileSampleRule(t *testing.T) {
	bounds := []float64{0.01, 0.025, 0.05, 0.1}
	p50, p95, p99 := quantiles[0], quantiles[1], quantiles[2]
	for _, tc := range []struct {
		name    string
		q       quantile
		samples float64
		value   float64
		ok      bool
		seconds float64 // 0: none
		bucket  []float64
		note    string
	}{
		{"median of one sample", p50, 1, 0.005, true, 0.005, []float64{0, 0.01}, ""},
		{"median of none", p50, 0, math.NaN(), true, 0, nil, "no samples"},
		{"median of 0.4 samples, rounded", p50, 0.4, 0.005, true, 0, nil, "no samples"},
		{"P95 of 199 samples", p95, 199, 0.02, true, 0, nil, "not enough samples (199, needs 200)"},
		{"P95 of 199.6 samples, rounded to 200", p95, 199.6, 0.02, true, 0.02, []float64{0.01, 0.025}, ""},
		{"P95 of 200 samples", p95, 200, 0.02, true, 0.02, []float64{0.01, 0.025}, ""},
		{"P99 of 999 samples", p99, 999, 0.04, true, 0, nil, "not enough samples (999, needs 1,000)"},
		{"P99 of 1,000 samples", p99, 1000, 0.04, true, 0.04, []float64{0.025, 0.05}, ""},
		{"on a bucket bound: the bucket it closes", p99, 5000, 0.05, true, 0.05, []float64{0.025, 0.05}, ""},
		{"above the highest finite bucket", p99, 5000, math.Inf(1), true, 0, nil, "above the highest finite bucket"},
		{"no quantile returned", p50, 10, 0, false, 0, nil, "no samples"},
		{"NaN with samples (a histogram without buckets)", p50, 10, math.NaN(), true, 0, nil, "no samples"},
		{"no bounds known", p50, 10, 0.005, true, 0.005, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bounds
			if tc.name == "no bounds known" {
				b = nil
			}
			p := percentile(tc.q, tc.samples, tc.value, tc.ok, b)
			require.Equal(t, tc.q.Name, p.Name)
			require.Equal(t, tc.q.MinSamples, p.MinSamples)
			require.Equal(t, tc.note, p.Note)
			if tc.seconds == 0 {
				require.Nil(t, p.Seconds)
			} else {
				require.NotNil(t, p.Seconds)
				require.Equal(t, tc.seconds, *p.Seconds)
			}
			require.Equal(t, tc.bucket, p.Bucket)
		})
	}
}

// TestQuantileRule pins the rule to capacity reports' (capacity/stats.go:
// minSamplesP95 200, minSamplesP99 1,000).
func TestQuantileRule(t *testing.T) {
	require.Equal(t, []quantile{{"p50", 0.5, 1}, {"p95", 0.95, 200}, {"p99", 0.99, 1000}}, quantiles)
}
