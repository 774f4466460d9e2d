package capacity

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// A soak's drift compares the end of the soak (its last quarter of
// windows, pooled) with its first steady window on per-request samples:
// each request's TTFT, TPOT, longest gap between chunks (max_itl) and
// E2E, and whether it was good. Every token gap pooled (about 1,900
// correlated gaps per 15 s window at 20 req/s) made the P99 of gaps the
// machine's noise: a soak against an unchanged server failed with "itl
// P99 grew 126%". Drift is flagged only when the interval of the growth
// lies beyond the allowance: a P99 of 1,000 requests is known to within
// the 983rd and 998th of them, and the growth's interval is the ratio of
// the end's bounds to the first window's (each end at 95%: the interval
// covers at least 90%, and a drift is flagged wrongly at most 2.5% of the
// time).

// driftLatencies are the per-request latencies a soak's drift compares,
// in order.
var driftLatencies = []string{"ttft", "tpot", "max_itl", "e2e"}

// maxDriftSamples bounds the samples a soak keeps of each latency of a
// window (a uniform sample beyond): 8,192 a window holds a P99's
// interval to a few samples, and a week of 10-minute windows at 100
// req/s keeps 252 last windows in 33 MiB.
const maxDriftSamples = 8192

// requestSamples are what a soak keeps of one window's requests for its
// drift.
type requestSamples struct {
	start    time.Time
	latency  map[string][]float64 // seconds, by driftLatencies name
	outcomes []outcome            // the counted requests
}

// samplesOf keeps a window's per-request samples.
func samplesOf(records []Record, start time.Time) *requestSamples {
	s := &requestSamples{start: start, latency: map[string][]float64{}}
	for i := range records {
		r := &records[i]
		add := func(name string, ok bool, d time.Duration) {
			if ok {
				s.latency[name] = append(s.latency[name], d.Seconds())
			}
		}
		add("ttft", r.HasTTFT, r.TTFT)
		add("tpot", r.HasTPOT, r.TPOT)
		add("max_itl", r.HasMaxITL, r.MaxITL)
		add("e2e", r.HasE2E, r.E2E)
		if r.Counted {
			s.outcomes = append(s.outcomes, outcome{sent: r.Sent, good: r.Good})
		}
	}
	for name, v := range s.latency {
		s.latency[name] = thin(v, maxDriftSamples)
	}
	s.outcomes = thin(s.outcomes, maxDriftSamples)
	return s
}

// thin keeps at most n of v, evenly spread (records come in the order
// their requests ended, which is no order of their values).
func thin[T any](v []T, n int) []T {
	if len(v) <= n {
		return v
	}
	out := make([]T, n)
	for i := range out {
		out[i] = v[i*len(v)/n]
	}
	return out
}

// pooled pools the samples of windows.
func pooled(ws []*requestSamples) *requestSamples {
	p := &requestSamples{latency: map[string][]float64{}}
	for i, w := range ws {
		if i == 0 {
			p.start = w.start
		}
		for name, v := range w.latency {
			p.latency[name] = append(p.latency[name], v...)
		}
		p.outcomes = append(p.outcomes, w.outcomes...)
	}
	return p
}

// GrowthInterval is a latency's growth from the first window to the end
// of a soak with its 95% interval: the end's percentile over the first
// window's, less 1.
type GrowthInterval struct {
	Growth float64 `json:"growth"`
	Lower  float64 `json:"lower"`
	Upper  float64 `json:"upper"`
	// Percentile is the percentile compared (p99, p95 or p50 as the
	// samples allow); First and Last the requests compared.
	Percentile string `json:"percentile"`
	First      int    `json:"first"`
	Last       int    `json:"last"`
}

// latencyGrowth compares a latency's samples: the P99 over 1,000 samples
// a side or more, the P95 over 200, else the median.
func latencyGrowth(first, last []float64) *GrowthInterval {
	n := min(len(first), len(last))
	if n == 0 {
		return nil
	}
	q, name := 0.99, "p99"
	switch {
	case n < minSamplesP95:
		q, name = 0.50, "p50"
	case n < minSamplesP99:
		q, name = 0.95, "p95"
	}
	a, b := slices.Clone(first), slices.Clone(last)
	slices.Sort(a)
	slices.Sort(b)
	v0, vN := quantile(a, q), quantile(b, q)
	lo0, hi0, ok0 := quantileInterval(a, q)
	loN, hiN, okN := quantileInterval(b, q)
	if v0 <= 0 || !ok0 || !okN || lo0 <= 0 {
		// Too few requests a side to bound the percentile (a median of
		// 7): nothing is claimed.
		return nil
	}
	return &GrowthInterval{Growth: vN/v0 - 1, Lower: loN/hi0 - 1, Upper: hiN/lo0 - 1, Percentile: name, First: len(a), Last: len(b)}
}

// quantile is the nearest-rank q-quantile of sorted values.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// driftOf compares the first window's samples with the last windows'.
// The growths' intervals go into d; fails lists each latency whose growth
// is beyond allowance at the interval's lower end.
func driftOf(d *Drift, first *requestSamples, last []*requestSamples, batch time.Duration, allowance float64) (fails []string) {
	end := pooled(last)
	d.Intervals = map[string]*GrowthInterval{}
	for _, name := range driftLatencies {
		g := latencyGrowth(first.latency[name], end.latency[name])
		if g == nil {
			continue
		}
		d.Intervals[name] = g
		d.P99Growth[name], d.Percentile[name] = g.Growth, g.Percentile
		if g.Lower > allowance {
			fails = append(fails, fmt.Sprintf("%s %s grew %.0f%% [%.0f, %.0f] over %d and %d requests (drift.p99_growth %g)",
				name, strings.ToUpper(g.Percentile), 100*g.Growth, 100*g.Lower, 100*g.Upper, g.First, g.Last, allowance))
		}
	}
	return fails
}

// attainmentDrop compares the attainment of the first window with the
// last windows': the drop (1 - last / first) and its interval, from the
// two attainment intervals (each by batch means).
func attainmentDrop(first *requestSamples, last []*requestSamples, batch time.Duration) (drop, lower, upper float64, a0, aN *Interval, ok bool) {
	end := pooled(last)
	a0 = attainmentInterval(first.outcomes, first.start, batch, confidence)
	aN = attainmentInterval(end.outcomes, end.start, batch, confidence)
	if a0 == nil || aN == nil {
		return 0, 0, 0, a0, aN, false
	}
	p0, pN := ratio(goodCount(first.outcomes), len(first.outcomes)), ratio(goodCount(end.outcomes), len(end.outcomes))
	if p0 <= 0 || a0.Lower <= 0 {
		return 0, 0, 0, a0, aN, false
	}
	return 1 - pN/p0, 1 - aN.Upper/a0.Lower, 1 - aN.Lower/a0.Upper, a0, aN, true
}

func goodCount(outcomes []outcome) int {
	n := 0
	for _, o := range outcomes {
		if o.good {
			n++
		}
	}
	return n
}
