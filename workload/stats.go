package workload

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"
)

// Quantiles summarises a length distribution.
type Quantiles struct {
	Mean                    float64
	P50, P90, P95, P99, Max int
}

// Stats is what a load built from a trace will look like.
type Stats struct {
	Requests int
	Timed    bool
	// Duration is from the first request to the last.
	Duration time.Duration
	// MeanRate is requests per second over Duration.
	MeanRate float64
	// InterArrivalCV is the coefficient of variation of the gaps between
	// requests: 1 for Poisson arrivals, above 1 for bursty ones.
	InterArrivalCV float64
	Input, Output  Quantiles
	// Correlation is Pearson's correlation of input and output lengths.
	Correlation float64
	// BlockRepeatShare is the share of prompt blocks that repeat an earlier
	// block: the hit ratio of an ideal, unbounded prefix cache.
	HasBlocks        bool
	BlockRepeatShare float64
}

// ComputeStats summarises a trace.
func ComputeStats(t *Trace) Stats {
	recs := t.Records
	s := Stats{Requests: len(recs), Timed: t.Timed}
	in := make([]float64, len(recs))
	out := make([]float64, len(recs))
	for i, r := range recs {
		in[i], out[i] = float64(r.Input), float64(r.Output)
	}
	s.Input, s.Output = quantiles(in), quantiles(out)
	s.Correlation = pearson(in, out)
	if t.Timed && len(recs) > 1 {
		s.Duration = recs[len(recs)-1].At - recs[0].At
		if s.Duration > 0 {
			s.MeanRate = float64(len(recs)-1) / s.Duration.Seconds()
		}
		gaps := make([]float64, len(recs)-1)
		for i := 1; i < len(recs); i++ {
			gaps[i-1] = (recs[i].At - recs[i-1].At).Seconds()
		}
		if m := mean(gaps); m > 0 {
			s.InterArrivalCV = stddev(gaps, m) / m
		}
	}
	seen := map[int]bool{}
	blocks, repeats := 0, 0
	for _, r := range recs {
		for _, id := range r.HashIDs {
			blocks++
			if seen[id] {
				repeats++
			}
			seen[id] = true
		}
	}
	if blocks > 0 {
		s.HasBlocks = true
		s.BlockRepeatShare = float64(repeats) / float64(blocks)
	}
	return s
}

// quantiles uses the nearest-rank method: P99 of 200 values is the 198th.
func quantiles(xs []float64) Quantiles {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	q := func(p float64) int {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return int(s[max(i, 0)])
	}
	return Quantiles{Mean: mean(s), P50: q(0.50), P90: q(0.90), P95: q(0.95), P99: q(0.99), Max: int(s[len(s)-1])}
}

func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func stddev(xs []float64, m float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += (x - m) * (x - m)
	}
	return math.Sqrt(sum / float64(len(xs)))
}

func pearson(x, y []float64) float64 {
	mx, my := mean(x), mean(y)
	var sxy, sxx, syy float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
		syy += (y[i] - my) * (y[i] - my)
	}
	if sxx == 0 || syy == 0 {
		return 0
	}
	return sxy / math.Sqrt(sxx*syy)
}

// WriteText prints the statistics for a person.
func (s Stats) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("requests:          %d", s.Requests)
	if s.Timed {
		p("duration:          %s", s.Duration.Round(time.Millisecond))
		p("mean rate:         %.3f req/s", s.MeanRate)
		p("inter-arrival CV:  %.3f (1 = Poisson, above 1 = burstier)", s.InterArrivalCV)
	} else {
		p("arrival times:     none (lengths only)")
	}
	p("%-18s %8s %8s %8s %8s %8s %8s", "tokens", "mean", "p50", "p90", "p95", "p99", "max")
	for _, row := range []struct {
		name string
		q    Quantiles
	}{{"input", s.Input}, {"output", s.Output}} {
		p("%-18s %8.1f %8d %8d %8d %8d %8d", row.name, row.q.Mean, row.q.P50, row.q.P90, row.q.P95, row.q.P99, row.q.Max)
	}
	p("input/output correlation: %.3f (Pearson)", s.Correlation)
	if s.HasBlocks {
		p("prompt blocks repeating an earlier block: %.1f%% (ideal prefix-cache hit ratio)", 100*s.BlockRepeatShare)
	}
}
