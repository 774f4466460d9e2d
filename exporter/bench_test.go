package exporter_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/prober"
)

// BenchmarkFinished records one finished 200-chunk request into every
// metric: TTFT, TPOT, E2E, 199 ITL observations (native and classic
// buckets), counters. Reported per chunk.
func BenchmarkFinished(b *testing.B) {
	const n = 200
	m := exporter.NewMetrics(prometheus.NewRegistry())
	slos := []config.SLO{{Name: "ttft", Threshold: time.Second}, {Name: "tpot", Threshold: 50 * time.Millisecond}}
	obs := m.Observe(prober.LoadInfo{Key: config.Key{Target: "t", Scenario: "s", Test: "canary"}, Rate: 1, SLOs: slos})
	now := time.Now()
	r := &prober.Result{Outcome: prober.OutcomeOK, StatusCode: 200, Scheduled: now, Sent: now.Add(100 * time.Microsecond),
		Chunks: make([]time.Duration, n), Usage: &prober.Usage{PromptTokens: 32, CompletionTokens: n}, InputTokens: 32, OutputTokens: n}
	for i := range r.Chunks {
		r.Chunks[i] = time.Duration(80+20*i)*time.Millisecond + time.Duration(i%7)*time.Microsecond
	}
	b.ReportAllocs()
	for b.Loop() {
		obs.Sent(time.Now(), 0)
		meas := prober.Measure(r, slos) // the prober measures once for every observer
		obs.Finished(r, &meas)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/chunk")
}
