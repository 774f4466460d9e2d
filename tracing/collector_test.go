package tracing_test

import (
	"fmt"
	"maps"
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
	traced              int // finished and prober.Traced
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

func (r *recorder) Finished(res *prober.Result, m *prober.Measurement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prober.Traced(res, m) {
		r.traced++
	}
	if r.finished++; r.finished == r.n {
		close(r.reached)
	}
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

// load is one canary load of deadCollectorConfig, with its own simulator
// and manager, recorded by rec.
type load struct {
	rec *recorder
	m   *prober.Manager
}

// startLoad starts a load of n requests. Traced by tr if not nil, to the
// collector at addr; without tracing otherwise.
func startLoad(t *testing.T, n int, tr *tracing.Tracer, addr, client string) load {
	t.Helper()
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	if tr == nil {
		addr = ""
	}
	cfg, err := config.Load(fmt.Appendf(nil, deadCollectorConfig, sim.URL, addr, client), false)
	require.NoError(t, err)
	l := load{rec: newRecorder(n)}
	if tr == nil {
		l.m = prober.NewManager(promslog.NewNopLogger(), l.rec, "sloprober/test")
	} else {
		require.NoError(t, tr.ApplyConfig(cfg))
		l.m = prober.NewManager(promslog.NewNopLogger(), prober.Fanout(l.rec, tr), "sloprober/test")
		l.m.SetTracing(true, 1)
	}
	require.NoError(t, l.m.ApplyConfig(cfg))
	return l
}

// sends are the counts of a load that stopped.
type sends struct {
	finished, traced int
	unsent           int // scheduled and not sent: late, full or due while stopping
	dropped          map[prober.DropReason]int
	p50, p90         time.Duration
}

func (s sends) String() string {
	return fmt.Sprintf("%d finished, %d unsent (late %d, full %d, shutdown %d), send lag P50 %s P90 %s",
		s.finished, s.unsent, s.dropped[prober.DropLate], s.dropped[prober.DropMaxInFlight], s.dropped[prober.DropShutdown], s.p50.Round(time.Millisecond), s.p90.Round(time.Millisecond))
}

func (r *recorder) sends() sends {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := slices.Clone(r.lags)
	slices.Sort(l)
	return sends{finished: r.finished, traced: r.traced, unsent: r.scheduled - len(r.lags), dropped: maps.Clone(r.dropped), p50: l[len(l)/2], p90: l[len(l)*90/100]}
}

// TestCollectorDownOrSilent: a collector that refuses connections or
// accepts them and never answers slows nothing. Every request of a
// 100 req/s load is traced (sampling 1); the probes are sent on time, the
// tracer's queue stays at its bound and drops the rest (counted), the
// failed exports are counted, and the tracer stops within its timeouts.
//
// "On time" is judged against the same load without tracing, run beside
// it (same time, same host, same process): on a starved host the prober
// drops arrivals as late (behind its schedule by more than a second) and
// its send lag grows whatever tracing does, so absolute counts would
// measure the host. A tracer that held the requests (a synchronous
// export) fills max_in_flight, one that held the scheduler delays every
// send: both show as unsent arrivals or send lag the untraced load does
// not have.
func TestCollectorDownOrSilent(t *testing.T) {
	const n = 170
	for _, tc := range []struct{ name, client string }{
		{"refused grpc", config.TracingClientGRPC}, {"silent grpc", config.TracingClientGRPC}, {"silent http", config.TracingClientHTTP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := silentAddr(t)
			if tc.name == "refused grpc" {
				addr = refusedAddr(t)
			}

			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)

			reg := prometheus.NewRegistry()
			tr := tracing.New(promslog.NewNopLogger(), tracing.NewMetrics(reg), "test")
			control := startLoad(t, n, nil, "", tc.client)
			traced := startLoad(t, n, tr, addr, tc.client)
			// Both loads stop together once both sent n requests: their
			// counts are of the same window.
			deadline := time.After(20 * time.Second)
			for _, l := range []load{control, traced} {
				select {
				case <-l.rec.reached:
				case <-deadline:
				}
			}
			var wg sync.WaitGroup
			for _, l := range []load{control, traced} {
				wg.Go(func() { l.m.Stop(time.Second) })
			}
			wg.Wait()
			stopped := time.Now()
			tr.Stop()
			require.Less(t, time.Since(stopped), 3*time.Second, "the tracer's stop is bounded by its export timeout")

			c, s := control.rec.sends(), traced.rec.sends()
			t.Logf("traced: %s; untraced beside it: %s", s, c)
			// n requests finish in 20 s at 100 req/s, unless the host is
			// so starved that the untraced load does not finish them either.
			require.GreaterOrEqual(t, s.finished, min(n, c.finished*3/4), "traced requests finished in 20 s at 100 req/s (untraced: %d)", c.finished)
			// A starved host drops arrivals of both loads (late, or for a
			// full max_in_flight as the in-process simulator's requests
			// take seconds), and the traced one's requests cost more CPU
			// (spans, traceparent): beside a CPU burner, of 36 pairs the
			// traced load's unsent were 0.8 to 2 times the untraced one's
			// (116 to 59 the worst). A tracer blocking the send path is
			// far beyond that: a synchronous export 5 times as many and
			// its n requests unfinished in 20 s, a scheduler held 15 ms an
			// arrival 4.6 times as many.
			require.LessOrEqual(t, s.unsent, 2*c.unsent+20,
				"every arrival sent that the untraced load sent, within twice and 20 (traced: %s; untraced: %s)", s, c)
			// The send lag's noise on a starved host is the host's (P90
			// of one load up to 1.7 times the other's, either way): it is
			// judged when the untraced load shows the prober kept up.
			if c.unsent <= 1 && c.p90 < 50*time.Millisecond {
				require.Less(t, s.p90, c.p90+10*time.Millisecond+c.p90/2,
					"send lag P90 that of the untraced load, within 10 ms and a half (traced: %s; untraced: %s)", s, c)
			}

			queued := counter(t, reg, "sloprober_tracing_requests_queued_total")
			dropped := counter(t, reg, "sloprober_tracing_requests_dropped_total")
			// Every traced request was queued or dropped, counted; a Stop
			// out of time also drops (and counts) some that were queued.
			require.LessOrEqual(t, int(queued), s.traced, "queued: traced requests only")
			require.LessOrEqual(t, s.traced, int(queued+dropped), "every traced request was queued or dropped, counted")
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
