package tracing_test

import (
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"
	"github.com/sloprober/sloprober/tracing"
)

// recorder is an observer factory that keeps the lags and counts the
// requests of every load, and closes reached when n requests finished.
type recorder struct {
	mu                  sync.Mutex
	lags                []time.Duration
	scheduled, finished int
	dropped             map[prober.DropReason]int
	n                   int
	reached             chan struct{}
}

func newRecorder(n int) *recorder {
	return &recorder{n: n, reached: make(chan struct{}), dropped: map[prober.DropReason]int{}}
}

func (r *recorder) Observe(prober.LoadInfo) prober.Observer { return r }
func (r *recorder) Update(prober.LoadInfo)                  {}
func (r *recorder) Forget(prober.LoadInfo)                  {}
func (r *recorder) Scheduled()                              { r.mu.Lock(); r.scheduled++; r.mu.Unlock() }
func (r *recorder) Dropped(d prober.DropReason)             { r.mu.Lock(); r.dropped[d]++; r.mu.Unlock() }
func (r *recorder) Sent(_ time.Time, lag time.Duration) {
	r.mu.Lock()
	r.lags = append(r.lags, lag)
	r.mu.Unlock()
}

func (r *recorder) Finished(*prober.Result, *prober.Measurement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished++; r.finished == r.n {
		close(r.reached)
	}
}

// p99 returns the 99th percentile of the lags.
// p90 is the sends' lag P90: of 250 sends, the 25th latest. A P99 is the
// 3rd latest: one scheduler hiccup of a loaded machine, not the tracer.
func (r *recorder) p90() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := slices.Clone(r.lags)
	slices.Sort(l)
	return l[len(l)*90/100]
}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// silentAddr returns a loopback address that accepts connections and
// never answers: a collector that hangs.
func silentAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

const deadCollectorConfig = `
global: {max_rate: 200, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 4}]
canary: [{target: sim, scenario: a, rate: 100, arrival: constant}]
tracing:
  endpoint: "%s"
  client_type: %s
  insecure: true
  sampling_fraction: 1
  timeout: 500ms
  queue_size: 32
`

// TestCollectorDownOrSilent: a collector that refuses connections or
// accepts them and never answers slows nothing. Every request of a
// 100 req/s load is traced (sampling 1); the probes are sent on time, the
// tracer's queue stays at its bound and drops the rest (counted), the
// failed exports are counted, and the tracer stops within its timeouts.
func TestCollectorDownOrSilent(t *testing.T) {
	// The same load without tracing: the send lag tracing must not change.
	base := func() time.Duration {
		sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
		cfg, err := config.Load(fmt.Appendf(nil, deadCollectorConfig, sim.URL, "", config.TracingClientGRPC), false)
		require.NoError(t, err)
		rec := newRecorder(250)
		m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
		require.NoError(t, m.ApplyConfig(cfg))
		<-rec.reached
		m.Stop(time.Second)
		return rec.p90()
	}()
	for _, tc := range []struct{ name, client string }{
		{"refused grpc", config.TracingClientGRPC}, {"silent grpc", config.TracingClientGRPC}, {"silent http", config.TracingClientHTTP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := silentAddr(t)
			if tc.name == "refused grpc" {
				addr = refusedAddr(t)
			}
			sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
			cfg, err := config.Load(fmt.Appendf(nil, deadCollectorConfig, sim.URL, addr, tc.client), false)
			require.NoError(t, err)

			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)

			reg := prometheus.NewRegistry()
			tr := tracing.New(promslog.NewNopLogger(), tracing.NewMetrics(reg), "test")
			require.NoError(t, tr.ApplyConfig(cfg))
			rec := newRecorder(250)
			m := prober.NewManager(promslog.NewNopLogger(), prober.Fanout(rec, tr), "sloprober/test")
			m.SetTracing(true, 1)
			require.NoError(t, m.ApplyConfig(cfg))
			select {
			case <-rec.reached:
			case <-time.After(20 * time.Second):
				t.Fatal("250 requests did not finish in 20 s at 100 req/s")
			}
			m.Stop(time.Second)
			stopped := time.Now()
			tr.Stop()
			require.Less(t, time.Since(stopped), 3*time.Second, "the tracer's stop is bounded by its export timeout")

			rec.mu.Lock()
			finished, scheduled, sent := rec.finished, rec.scheduled, len(rec.lags)
			late, full := rec.dropped[prober.DropLate], rec.dropped[prober.DropMaxInFlight]
			rec.mu.Unlock()
			require.Zero(t, late+full, "no arrival dropped late or for a full load")
			require.LessOrEqual(t, scheduled-sent, 1, "every arrival was sent but one due as the load stopped")
			require.Less(t, rec.p90(), base+10*time.Millisecond, "send lag P90 unchanged (%s without tracing), within 10 ms", base)

			queued := counter(t, reg, "sloprober_tracing_requests_queued_total")
			dropped := counter(t, reg, "sloprober_tracing_requests_dropped_total")
			require.Equal(t, finished, int(queued+dropped), "every finished request was traced or dropped, counted")
			require.Positive(t, dropped, "a full queue drops")
			require.Zero(t, counter(t, reg, "sloprober_tracing_spans_exported_total"))
			require.Positive(t, counter(t, reg, "sloprober_tracing_export_errors_total"))

			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			require.Less(t, int64(after.HeapInuse)-int64(before.HeapInuse), int64(32<<20), "the heap stays bounded")
		})
	}
}

// counter returns the value of a counter in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// tracedResult is a finished, head-sampled request of target sim.
func tracedResult(i int) (*prober.Result, *prober.Measurement) {
	var tid trace.TraceID
	tid[0], tid[15] = byte(i>>8), byte(i)|1
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	now := time.Now()
	r := &prober.Result{Target: "sim", Scenario: "a", Test: "canary", Scheduled: now, Sent: now, Ended: 10 * time.Millisecond,
		Chunks: []time.Duration{5 * time.Millisecond, 9 * time.Millisecond}, StatusCode: 200, Done: true, Outcome: prober.OutcomeOK, SpanContext: sc}
	m := prober.Measure(r, nil)
	m.Split = prober.SplitPhases(r, config.TimingSources)
	return r, &m
}

// TestStopBounded: with a full queue and a collector that never answers,
// Stop returns within the export timeout, dropping (and counting) what it
// could not send.
func TestStopBounded(t *testing.T) {
	cfg, err := config.Load(fmt.Appendf(nil, `
targets: [{name: sim, url: "http://127.0.0.1:1/v1", model: m}]
tracing: {endpoint: %q, insecure: true, timeout: 1s, queue_size: 2048}
`, silentAddr(t)), false)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	tr := tracing.New(promslog.NewNopLogger(), tracing.NewMetrics(reg), "test")
	require.NoError(t, tr.ApplyConfig(cfg))
	obs := tr.Observe(prober.LoadInfo{})
	for i := range 2048 {
		obs.Finished(tracedResult(i))
	}
	start := time.Now()
	tr.Stop()
	require.Less(t, time.Since(start), 2*time.Second, "Stop is bounded by the export timeout, not a timeout per batch")
	require.Positive(t, counter(t, reg, "sloprober_tracing_requests_dropped_total"))
}

// TestReloadsLeakNothing: fifty reloads to other collectors within a
// second, then tracing off and Stop: every exporter built is shut down,
// including those the builder never used.
func TestReloadsLeakNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	tr := tracing.New(promslog.NewNopLogger(), tracing.NewMetrics(prometheus.NewRegistry()), "test")
	for i := range 50 {
		cfg, err := config.Load(fmt.Appendf(nil, "targets: []\ntracing: {endpoint: \"127.0.0.1:%d\", insecure: true, timeout: 200ms}\n", 1+i), false)
		require.NoError(t, err)
		require.NoError(t, tr.ApplyConfig(cfg))
	}
	off, err := config.Load([]byte("targets: []\n"), false)
	require.NoError(t, err)
	require.NoError(t, tr.ApplyConfig(off))
	tr.Stop()
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+2 }, 10*time.Second, 20*time.Millisecond,
		"goroutines left: %d before, %d after", before, runtime.NumGoroutine())
	// A reload after Stop builds nothing that stays.
	require.NoError(t, tr.ApplyConfig(off))
}
