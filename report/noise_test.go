package report

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
)

// TestQuantileRange: a P99's interval from the sample the run kept: of
// 3,000 independent requests between ranks 0.986 and 0.994 (between P95
// and P99 below, 0.28 of P99-P95 above it); of 227, no upper end; of
// 3,000 worth 300 (correlated), wider.
func TestQuantileRange(t *testing.T) {
	p := capacity.Percentiles{N: 3000, P50: 0.1, P95: 0.3, P99: 0.5}
	lo, hi := quantileRange(p, 0.99, nil)
	require.InDelta(t, 0.3+0.2*(1-0.0036/0.04), lo, 0.002)
	require.InDelta(t, 0.5+0.2*math.Log(0.01/0.0064)/math.Log(5), hi, 0.002)
	_, hi = quantileRange(capacity.Percentiles{N: 227, P50: 0.1, P95: 0.3, P99: 0.5}, 0.99, nil)
	require.True(t, math.IsInf(hi, 1))
	clo, chi := quantileRange(p, 0.99, &capacity.Interval{N: 3000, NEff: 300})
	require.Less(t, clo, lo)
	require.True(t, math.IsInf(chi, 1), "300 effective requests: a P99 among the top three")
	// A median of 1,000 token lengths: +-0.031 in rank.
	lo, hi = quantileRange(capacity.Percentiles{N: 1000, P50: 512, P95: 602, P99: 700}, 0.5, nil)
	require.InDelta(t, 512-0.031/0.45*90, lo, 0.1)
	require.InDelta(t, 512+0.031/0.45*90, hi, 0.1)
}

func testLevel(concurrency int, offered, goodput, window, attainment, lower, upper float64) Level {
	return Level{Concurrency: concurrency, OfferedRate: offered, Goodput: goodput, CompletedRate: goodput, WindowSeconds: window,
		Attainment: attainment, Interval: &capacity.Interval{Lower: lower, Upper: upper, N: int(goodput * window), NEff: goodput * window}}
}

// TestNoiseVerdicts: each kind of number's verdict, with the numbers the
// doc comments work through.
func TestNoiseVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		got        func() string
	}{
		{"rates within 3 sd", "not told apart: within +-1 req/s", func() string { return rateNoise(3.2, 60, 3.8, 60, "req/s") }},
		{"rates beyond 3 sd", "beyond noise: the difference 1.3 req/s is above +-1", func() string { return rateNoise(3.2, 60, 4.5, 60, "req/s") }},
		{"latency higher at the higher rate", "not told apart: measured at 2.8 and 3.19 req/s offered, and higher at the higher rate", func() string {
			return atCapacityOf(2.8, 3.19, 0.8, 1.7)
		}},
		{"latency lower at the higher rate", "beyond noise: lower at the higher rate (2.8 and 3.19 req/s offered)", func() string {
			return atCapacityOf(2.8, 3.19, 1.7, 0.8)
		}},
		{"latency at one load", "beyond noise: 95% intervals", func() string { return atCapacityOf(3.19, 3.2, 0.8, 1.7) }},
		{"closed loop: the same level", "not told apart: the same level", func() string {
			return closedLoopNoise(sweep(8, nil), sweep(8, nil))
		}},
		{"closed loop: 16 clients on the objective in both", "not told apart: their attainment agree within noise at every level from 8 clients to 16 clients", func() string {
			return closedLoopNoise(sweep(16, nil), sweep(8, func(l *Level) { l.Attainment, l.Interval.Lower, l.Interval.Upper = 0.931, 0.902, 0.956 }))
		}},
		{"closed loop: 16 clients missed beyond noise", "beyond noise: attainment at 16 clients: 95% intervals [94.2, 97.5] of 474 and [80.0, 90.0]", func() string {
			return closedLoopNoise(sweep(16, nil), sweep(8, func(l *Level) { l.Attainment, l.Interval.Lower, l.Interval.Upper = 0.85, 0.80, 0.90 }))
		}},
		{"knee: goodputs within noise", "not told apart: their goodputs agree within noise", func() string {
			a, b := sweep(16, nil), sweep(16, nil)
			a.Knee, b.Knee = &capacity.Knee{Concurrency: 8, Reached: true}, &capacity.Knee{Concurrency: 16, Reached: true}
			return kneeNoise(a, b)
		}},
		{"knee: goodput beyond noise at 16 clients", "beyond noise: goodputs at 16 clients", func() string {
			a, b := sweep(16, nil), sweep(16, func(l *Level) { l.Goodput *= 1.5 })
			a.Knee, b.Knee = &capacity.Knee{Concurrency: 8, Reached: true}, &capacity.Knee{Concurrency: 16, Reached: true}
			return kneeNoise(a, b)
		}},
		{"knee: no level in common", "cannot tell: the runs measured no level in common", func() string {
			a, b := sweep(16, nil), sweep(16, nil)
			a.Levels, b.Levels = a.Levels[:1], b.Levels[2:]
			a.Knee, b.Knee = &capacity.Knee{Concurrency: 4, Reached: true}, &capacity.Knee{Concurrency: 32, Reached: false}
			return kneeNoise(a, b)
		}},
		{"shares", "not told apart: within +-6.7 pt (binomial over 1000 and 1000 requests", func() string { return shareNoise(0.5, 1000, 0.52, 1000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, strings.HasPrefix(tc.got(), tc.want), "got %q", tc.got())
		})
	}
}

// atCapacityOf compares two verified levels' TTFT P99s (of 5,000 each).
func atCapacityOf(ra, rb, p99a, p99b float64) string {
	rep := func(rate, p99 float64) *Report {
		l := testLevel(0, rate, rate, 600, 1, 0.99, 1)
		l.Stage, l.Met, l.Decision = "verify", true, "met"
		l.TTFT = capacity.Percentiles{N: 5000, P50: p99 / 4, P95: p99 / 2, P99: p99}
		return &Report{Capacity: &CapacitySummary{VerifiedRate: rate}, Levels: []Level{l}}
	}
	return atCapacity(rep(ra, p99a), rep(rb, p99b), +1, func(la, lb *Level) string {
		return quantileNoise(la.TTFT, lb.TTFT, 0.99, la.Interval, lb.Interval, 1e3, "ms")
	}, func(l *Level) float64 { return l.TTFT.P99 })
}

// sweep is a run whose sweep met at 4, 8 and 16 clients (32 missed) and
// whose closed-loop capacity is at clients; edit changes its 16 clients.
func sweep(clientsAt int, edit func(*Level)) *Report {
	r := &Report{Levels: []Level{
		testLevel(4, 0, 4, 60, 1, 0.98, 1),
		testLevel(8, 0, 7.6, 60, 0.99, 0.97, 1),
		testLevel(16, 0, 7.9, 60, 0.96, 0.942, 0.975),
		testLevel(32, 0, 7.0, 60, 0.5, 0.45, 0.55),
	}}
	if edit != nil {
		edit(&r.Levels[2])
	}
	for _, l := range r.Levels {
		if l.Concurrency == clientsAt {
			r.ClosedLoop = &ClosedLoop{Concurrency: clientsAt, Rate: l.CompletedRate, Goodput: l.Goodput}
		}
	}
	return r
}
