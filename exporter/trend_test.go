package exporter

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/prober"
)

// TestTrend: a minute a point over the hour before now, the minute under
// way left out; goodput, attainment and an exact nearest-rank TTFT P99;
// cancelled requests outside the denominator; a bucket an hour old reused;
// at most trendSamples TTFTs kept a minute.
func TestTrend(t *testing.T) {
	tr := newTrend()
	base := time.Unix(1_800_000_000, 0).Truncate(time.Minute) // a minute's start
	// Minute 0: 100 requests, 90 good, TTFTs 1..100 ms; a cancelled one.
	for i := 1; i <= 100; i++ {
		tr.add(base.Add(time.Duration(i)*100*time.Millisecond), prober.OutcomeOK, i <= 90, time.Duration(i)*time.Millisecond, true)
	}
	tr.add(base, prober.OutcomeCancelled, false, 0, false)
	// Minute 2: one failed request, no TTFT.
	tr.add(base.Add(2*time.Minute), prober.OutcomeHTTP5xx, false, 0, false)
	// Minute 3, under way at now.
	tr.add(base.Add(3*time.Minute), prober.OutcomeOK, true, time.Millisecond, true)

	ps := points(tr.snapshot(), base.Add(3*time.Minute+10*time.Second))
	require.Len(t, ps, trendMinutes-1)
	last3 := ps[len(ps)-3:]
	require.Equal(t, base.UTC(), last3[0].Start)
	require.InDelta(t, 90.0/60, last3[0].Goodput, 1e-9)
	require.InDelta(t, 0.9, last3[0].Attainment, 1e-9, "the cancelled request is not counted")
	require.Equal(t, 99*time.Millisecond, last3[0].TTFTP99, "nearest rank: the 99th of 100")
	require.True(t, math.IsNaN(last3[1].Attainment), "minute 1: nothing")
	require.Zero(t, last3[2].Attainment)
	require.False(t, last3[2].HasTTFT)
	require.True(t, math.IsNaN(ps[0].Attainment), "an hour ago: nothing")

	// An hour later the ring reuses minute 0's bucket.
	tr.add(base.Add(time.Hour), prober.OutcomeOK, true, 5*time.Millisecond, true)
	ps = points(tr.snapshot(), base.Add(time.Hour+time.Minute))
	p := ps[len(ps)-1]
	require.Equal(t, base.Add(time.Hour).UTC(), p.Start)
	require.InDelta(t, 1.0, p.Attainment, 1e-9)
	require.Equal(t, 5*time.Millisecond, p.TTFTP99)

	// A result of a minute older than the hour the ring holds is dropped,
	// not made the bucket's minute.
	tr.add(base.Add(time.Minute/2), prober.OutcomeOK, false, time.Millisecond, true)
	ps = points(tr.snapshot(), base.Add(time.Hour+time.Minute))
	require.InDelta(t, 1.0, ps[len(ps)-1].Attainment, 1e-9, "the newer minute kept")

	// A busy minute keeps a bounded sample.
	for i := range 5000 {
		tr.add(base.Add(2*time.Hour), prober.OutcomeOK, true, time.Duration(i), true)
	}
	require.Len(t, tr.buckets[(base.Add(2*time.Hour).Unix()/60)%trendMinutes].ttfts, trendSamples)
}

// TestSparkline: an inline SVG with a line a run of values (NaN breaks
// it), its title escaped; no line without values.
func TestSparkline(t *testing.T) {
	s := string(sparkline("goodput <b>", []float64{1, 2, math.NaN(), 3, 3}, "3 good req/s"))
	require.True(t, strings.HasPrefix(s, `<svg class="spark"`), s)
	require.Contains(t, s, "<title>goodput &lt;b&gt;: 3 good req/s</title>")
	require.Equal(t, 2, strings.Count(s, "<polyline"), "a gap splits the line")
	require.NotContains(t, string(sparkline("empty", []float64{math.NaN()}, "-")), "<polyline")
	require.Contains(t, string(sparkline("flat", []float64{2, 2}, "2")), "<polyline", "a flat line is drawn")
}

// TestSparklinesSkipEmptyMinutes: a minute in which nothing was sent (the
// hour before the load began) draws no point, where a minute of failures
// draws goodput 0.
func TestSparklinesSkipEmptyMinutes(t *testing.T) {
	ps := []TrendPoint{{Attainment: math.NaN()}, {Attainment: math.NaN()}, {Goodput: 0, Attainment: 0}, {Goodput: 2, Attainment: 1}}
	s := sparklines(ps)
	require.Equal(t, 1, strings.Count(string(s.Goodput), "<polyline"))
	require.Contains(t, string(s.Goodput), `points="120.0,26.0 180.0,2.0"`, "the last two minutes only")
	require.Equal(t, "2 good req/s", s.LastGoodput)
	require.Equal(t, "100.0%", s.LastAttainment)
}
