package canary

import (
	"fmt"
	"math"
)

// quantile is a percentile the report shows, and the samples it needs.
type quantile struct {
	Name string
	Q    float64
	// MinSamples is the rule of capacity reports (capacity/stats.go,
	// minSamplesP95 and minSamplesP99; the README's "Capacity tests"): a
	// P95 over fewer than 200 samples or a P99 over fewer than 1,000 has
	// fewer than 10 samples above it, and is one or two outliers' value.
	// Capacity reports show such a percentile starred; this report leaves
	// it out and says why, so that no one quotes it. The median, as in
	// capacity reports, stands on any sample.
	MinSamples int
}

var quantiles = []quantile{
	{"p50", 0.50, 1},
	{"p95", 0.95, 200},
	{"p99", 0.99, 1000},
}

// Percentile is one percentile of a latency over the window.
type Percentile struct {
	Name string `json:"name"` // p50, p95, p99
	// Seconds is absent when Note says why: too few samples, none, or a
	// percentile above the histogram's highest finite bucket (whose value
	// the buckets cannot tell).
	Seconds *float64 `json:"seconds,omitempty"`
	// Bucket is the classic bucket the value falls in, [lower, upper]
	// seconds: histogram_quantile interpolates linearly within it, so the
	// value is only known to lie there.
	Bucket     []float64 `json:"bucket,omitempty"`
	MinSamples int       `json:"min_samples"`
	Note       string    `json:"note,omitempty"`
}

// percentile decides what the report says of a percentile, from the
// sample count, histogram_quantile's value (ok false when the query
// returned nothing for the load) and the histogram's finite bucket
// bounds, ascending.
func percentile(q quantile, samples, value float64, ok bool, bounds []float64) Percentile {
	p := Percentile{Name: q.Name, MinSamples: q.MinSamples}
	n := math.Round(samples)
	switch {
	case n < 1:
		p.Note = "no samples"
	case n < float64(q.MinSamples):
		p.Note = fmt.Sprintf("not enough samples (%s, needs %s)", formatCount(samples), formatCount(float64(q.MinSamples)))
	case !ok || math.IsNaN(value):
		p.Note = "no samples"
	case math.IsInf(value, 1):
		p.Note = "above the highest finite bucket"
	default:
		v := value
		p.Seconds = &v
		p.Bucket = bucketOf(v, bounds)
	}
	return p
}

// bucketOf returns the bucket [lower, upper] that holds v, as
// histogram_quantile sees it: the first bucket's lower bound is 0, and a
// value on a bound is in the bucket it closes. Without bounds, nil.
func bucketOf(v float64, bounds []float64) []float64 {
	lower := 0.0
	for _, b := range bounds {
		if v <= b {
			return []float64{lower, b}
		}
		lower = b
	}
	return nil
}
