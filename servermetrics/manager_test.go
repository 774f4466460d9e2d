package servermetrics

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
)

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// configWith is a configuration whose targets are name/section pairs; a
// nil section is a target without server_metrics.
func configWith(t *testing.T, pairs ...any) *config.Config {
	t.Helper()
	c := &config.Config{}
	for i := 0; i < len(pairs); i += 2 {
		sm, _ := pairs[i+1].(*config.ServerMetricsConfig)
		c.Targets = append(c.Targets, &config.TargetConfig{Name: pairs[i].(string), ServerMetrics: sm})
	}
	return c
}

// stopManager runs a manager that never ran with a done context, which
// stops its targets and releases their connections.
func stopManager(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, m.Run(ctx))
}

type scrapeEvent struct {
	target string
	snap   Snapshot
	err    error
}

// harness runs a manager whose tickers and scrapes the test sees.
type harness struct {
	m       *Manager
	reg     *prometheus.Registry
	logs    *syncBuffer
	scrapes chan scrapeEvent
	mu      sync.Mutex
	tickers map[string]chan time.Time
	ticker  chan string // target names, as their loops start
	cancel  context.CancelFunc
	done    chan error
}

func newHarness(t *testing.T) *harness {
	h := &harness{
		reg:     newRegistry(),
		logs:    &syncBuffer{},
		scrapes: make(chan scrapeEvent, 64),
		tickers: map[string]chan time.Time{},
		ticker:  make(chan string, 64),
		done:    make(chan error, 1),
	}
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h.m = NewManager(logger, NewMetrics(h.reg))
	h.m.onScrape = func(target string, s Snapshot, err error) { h.scrapes <- scrapeEvent{target, s, err} }
	h.m.newTicker = func(target string, _ time.Duration) (<-chan time.Time, func()) {
		c := make(chan time.Time, 1) // as time.Ticker's
		h.mu.Lock()
		h.tickers[target] = c
		h.mu.Unlock()
		h.ticker <- target
		return c, func() {}
	}
	return h
}

// run runs the manager until the test ends.
func (h *harness) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.m.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
}

func (h *harness) stop(t *testing.T) {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// next waits for the next scrape.
func (h *harness) next(t *testing.T) scrapeEvent {
	t.Helper()
	select {
	case e := <-h.scrapes:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no scrape")
		return scrapeEvent{}
	}
}

// nextOf waits for one scrape of each of targets, in any order.
func (h *harness) nextOf(t *testing.T, targets ...string) map[string]scrapeEvent {
	t.Helper()
	got := map[string]scrapeEvent{}
	for range targets {
		e := h.next(t)
		got[e.target] = e
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := append([]string(nil), targets...)
	sort.Strings(want)
	require.Equal(t, want, keys)
	return got
}

// tick sends a tick to target's loop.
func (h *harness) tick(t *testing.T, target string, at time.Time) {
	t.Helper()
	h.mu.Lock()
	c := h.tickers[target]
	h.mu.Unlock()
	require.NotNil(t, c, "no ticker for %s", target)
	select {
	case c <- at:
	case <-time.After(10 * time.Second):
		t.Fatal("tick not taken")
	}
}

// series returns the sloprober_server_* series of target: name (with
// its other labels) to value.
func series(t *testing.T, reg *prometheus.Registry, target string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name, own := mf.GetName(), false
			var extra []string
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" {
					own = l.GetValue() == target
				} else {
					extra = append(extra, l.GetName()+"="+l.GetValue())
				}
			}
			if !own {
				continue
			}
			if len(extra) > 0 {
				name += "{" + strings.Join(extra, ",") + "}"
			}
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			out[name] = v
		}
	}
	return out
}

// healthy are the series of a target whose scrapes never failed.
func healthy(values map[string]float64) map[string]float64 {
	out := map[string]float64{
		"sloprober_server_metrics_up":                    1,
		"sloprober_server_metrics_scrapes_skipped_total": 0,
		"sloprober_server_metrics_values_rejected_total": 0,
	}
	for _, r := range Reasons {
		out["sloprober_server_metrics_scrape_failures_total{reason="+r+"}"] = 0
	}
	for k, v := range values {
		out[k] = v
	}
	return out
}

// withoutDuration drops the duration gauge (its value varies), after
// checking it is there.
func withoutDuration(t *testing.T, s map[string]float64) map[string]float64 {
	t.Helper()
	d, ok := s["sloprober_server_metrics_scrape_duration_seconds"]
	require.True(t, ok, "scrape duration")
	require.GreaterOrEqual(t, d, 0.0)
	delete(s, "sloprober_server_metrics_scrape_duration_seconds")
	return s
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.FieldsFunc(s.b.String(), func(r rune) bool { return r == '\n' })
}

// TestManagerApply: targets are added, changed and removed with the
// configuration, and a removed target's series go.
func TestManagerApply(t *testing.T) {
	vllmBody, vllmCT := fixture(t, "vllm_v1.prom")
	tgiBody, tgiCT := fixture(t, "tgi.prom")
	vllm := serveBody(t, vllmBody, vllmCT).URL + "/metrics"
	tgi := serveBody(t, tgiBody, tgiCT).URL + "/metrics"
	vllmWant := healthy(map[string]float64{
		"sloprober_server_requests_running":     5,
		"sloprober_server_requests_waiting":     1,
		"sloprober_server_kv_cache_usage_ratio": 0.3,
	})
	tgiWant := healthy(map[string]float64{
		"sloprober_server_requests_running": 32,
		"sloprober_server_requests_waiting": 17,
	})

	h := newHarness(t)
	// Before Run: recorded, not scraped.
	require.NoError(t, h.m.Apply(configWith(t, "a", smConfig(vllm, time.Second), "b", nil, "c", smConfig(tgi, time.Second))))
	require.Empty(t, series(t, h.reg, "a"))
	h.run(t)
	got := h.nextOf(t, "a", "c")
	require.NoError(t, got["a"].err)
	require.InDelta(t, 0.3, series(t, h.reg, "a")["sloprober_server_kv_cache_usage_ratio"], 1e-12)
	require.Equal(t, vllmWant, withoutDuration(t, roundKV(series(t, h.reg, "a"))))
	require.Equal(t, tgiWant, withoutDuration(t, series(t, h.reg, "c")))
	require.Empty(t, series(t, h.reg, "b"))
	snap, ok := h.m.Latest("a")
	require.True(t, ok)
	require.Equal(t, EngineVLLM, snap.Engine)
	_, ok = h.m.Latest("b")
	require.False(t, ok)

	// a changes its URL, b gets a section, c loses its own.
	a := h.m.targets["a"]
	require.NoError(t, h.m.Apply(configWith(t, "a", smConfig(tgi, time.Second), "b", smConfig(vllm, time.Second), "c", nil)))
	h.nextOf(t, "a", "b")
	require.Empty(t, series(t, h.reg, "c"), "a removed target's series are deleted")
	_, ok = h.m.Latest("c")
	require.False(t, ok)
	require.Equal(t, tgiWant, withoutDuration(t, series(t, h.reg, "a")))
	require.Equal(t, vllmWant, withoutDuration(t, roundKV(series(t, h.reg, "b"))))
	require.NotSame(t, a, h.m.targets["a"], "a changed target restarts")

	// The same again: nothing restarts.
	a, b := h.m.targets["a"], h.m.targets["b"]
	require.NoError(t, h.m.Apply(configWith(t, "a", smConfig(tgi, time.Second), "b", smConfig(vllm, time.Second))))
	require.Same(t, a, h.m.targets["a"])
	require.Same(t, b, h.m.targets["b"])

	// A client that cannot be built fails the whole Apply.
	bad := smConfig(vllm, time.Second)
	bad.HTTPClientConfig.TLSConfig.CAFile = "/nonexistent/ca.pem"
	require.Error(t, h.m.Apply(configWith(t, "a", bad, "d", smConfig(vllm, time.Second))))
	require.Same(t, a, h.m.targets["a"])
	require.Nil(t, h.m.targets["d"])

	// Nothing left.
	require.NoError(t, h.m.Apply(configWith(t, "a", nil)))
	require.Empty(t, series(t, h.reg, "a"))
	require.Empty(t, series(t, h.reg, "b"))
	require.Empty(t, h.m.targets)

	h.stop(t)
	require.Error(t, h.m.Run(context.Background()), "Run twice")
	require.NoError(t, h.m.Apply(configWith(t, "a", smConfig(vllm, time.Second))), "after Run: nothing")
	require.Empty(t, h.m.targets)
}

// roundKV rounds the mean KV usage, whose float sum is not exact.
func roundKV(s map[string]float64) map[string]float64 {
	const k = "sloprober_server_kv_cache_usage_ratio"
	if v, ok := s[k]; ok {
		s[k] = float64(int(v*1e9+0.5)) / 1e9
	}
	return s
}

// TestManagerFailure: a failed scrape sets up to 0, counts its reason and
// deletes the values; the next good one brings them back. Warnings are
// rate-limited.
func TestManagerFailure(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		if s := int(status.Load()); s != http.StatusOK {
			http.Error(w, "down", s)
			return
		}
		_, _ = w.Write([]byte("vllm:num_requests_running 3\nvllm:num_requests_waiting 2\nvllm:prefix_cache_hits_total 0\nvllm:prefix_cache_queries_total 0\n"))
	})
	h := newHarness(t)
	require.NoError(t, h.m.Apply(configWith(t, "a", smConfig(srv.URL, time.Second))))
	h.run(t)
	require.NoError(t, h.next(t).err)
	require.Equal(t, "a", <-h.ticker)
	good := healthy(map[string]float64{"sloprober_server_requests_running": 3, "sloprober_server_requests_waiting": 2})
	require.Equal(t, good, withoutDuration(t, series(t, h.reg, "a")))

	status.Store(http.StatusServiceUnavailable)
	h.tick(t, "a", time.Now())
	e := h.next(t)
	require.Equal(t, ReasonHTTP, Reason(e.err))
	down := healthy(map[string]float64{
		"sloprober_server_metrics_up":                                 0,
		"sloprober_server_metrics_scrape_failures_total{reason=http}": 1,
	})
	require.Equal(t, down, withoutDuration(t, series(t, h.reg, "a")))
	_, ok := h.m.Latest("a")
	require.False(t, ok, "no snapshot after a failure")

	h.tick(t, "a", time.Now())
	require.Error(t, h.next(t).err)
	status.Store(http.StatusOK)
	h.tick(t, "a", time.Now())
	require.NoError(t, h.next(t).err)
	good["sloprober_server_metrics_scrape_failures_total{reason=http}"] = 2
	require.Equal(t, good, withoutDuration(t, series(t, h.reg, "a")))
	_, ok = h.m.Latest("a")
	require.True(t, ok)

	lines := h.logs.lines()
	require.Len(t, lines, 1, "one line a minute: %q", lines)
	require.Contains(t, lines[0], "Scraping the engine's metrics failed")
	require.Contains(t, lines[0], "reason=http")
	require.Contains(t, lines[0], "target=a")
}

// TestManagerRejected: a rejected value is absent, the scrape up.
func TestManagerRejected(t *testing.T) {
	srv := serveBody(t, []byte("sglang:num_running_reqs NaN\nsglang:num_queue_reqs 4\nsglang:token_usage 7\n"), "text/plain")
	h := newHarness(t)
	require.NoError(t, h.m.Apply(configWith(t, "a", smConfig(srv.URL, time.Second))))
	h.run(t)
	e := h.next(t)
	require.NoError(t, e.err)
	require.Equal(t, []string{"sglang:num_running_reqs", "sglang:token_usage"}, e.snap.Rejected)
	require.Equal(t, healthy(map[string]float64{
		"sloprober_server_requests_waiting":              4,
		"sloprober_server_metrics_values_rejected_total": 2,
	}), withoutDuration(t, series(t, h.reg, "a")))
	lines := h.logs.lines()
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], "Rejected values")
}

// TestManagerSkips: a tick that fell due during a slow scrape is skipped
// and counted; scrapes never overlap.
func TestManagerSkips(t *testing.T) {
	started, release := make(chan struct{}, 4), make(chan struct{})
	var inFlight, maxInFlight atomic.Int32
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if n > maxInFlight.Load() {
			maxInFlight.Store(n)
		}
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte("tgi_queue_size 1\n"))
	})
	h := newHarness(t)
	require.NoError(t, h.m.Apply(configWith(t, "a", smConfig(srv.URL, time.Minute))))
	h.run(t)
	require.Equal(t, "a", <-h.ticker)
	<-started
	h.tick(t, "a", time.Now()) // due while the first scrape runs
	release <- struct{}{}
	require.NoError(t, h.next(t).err)
	h.tick(t, "a", time.Now().Add(time.Hour)) // taken only after the first tick was
	<-started
	release <- struct{}{}
	require.NoError(t, h.next(t).err)
	s := series(t, h.reg, "a")
	require.InDelta(t, 1, s["sloprober_server_metrics_scrapes_skipped_total"], 0)
	require.Equal(t, int32(1), maxInFlight.Load())
	select {
	case e := <-h.scrapes:
		t.Fatalf("unexpected scrape %+v", e)
	default:
	}
}

// TestManagerStopCancelsScrape: stopping a target cancels its in-flight
// scrape, which is not counted as a failure.
func TestManagerStopCancelsScrape(t *testing.T) {
	started := make(chan struct{}, 1)
	srv := serve(t, func(_ http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done()
	})
	h := newHarness(t)
	require.NoError(t, h.m.Apply(configWith(t, "a", smConfig(srv.URL, time.Minute))))
	h.run(t)
	<-started
	require.NoError(t, h.m.Apply(configWith(t)))
	require.Empty(t, series(t, h.reg, "a"))
	h.stop(t)
	require.Empty(t, h.scrapes, "a cancelled scrape is not recorded")
}

// TestQueue: the drain check's probe reads afresh and says why it cannot.
func TestQueue(t *testing.T) {
	var waiting, requests atomic.Int32
	engine := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		fmt.Fprintf(w, "vllm:num_requests_waiting{engine=\"0\"} %d\nvllm:num_requests_waiting{engine=\"1\"} 0.4\n", waiting.Load())
	})
	otherBody, ct := fixture(t, "other.prom")
	other := serveBody(t, otherBody, ct)
	broken := serve(t, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusBadGateway) })

	reg := newRegistry()
	m := NewManager(nil, NewMetrics(reg))
	require.NoError(t, m.Apply(configWith(t,
		"vllm", smConfig(engine.URL, time.Second),
		"other", smConfig(other.URL, time.Second),
		"broken", smConfig(broken.URL, time.Second),
		"plain", nil)))
	defer stopManager(t, m)

	q := m.Queue("vllm")
	now := time.Unix(1_000_000, 0)
	q.now = func() time.Time { return now }
	for _, w := range []int32{7, 0, 12} {
		waiting.Store(w)
		n, err := q.Waiting(context.Background())
		require.NoError(t, err)
		require.Equal(t, int(w), n, "a fresh read, rounded")
		waiting.Store(99)
		now = now.Add(QueueReadEvery - time.Millisecond)
		n, err = q.Waiting(context.Background())
		require.NoError(t, err)
		require.Equal(t, int(w), n, "the last read, within QueueReadEvery")
		now = now.Add(time.Millisecond)
	}
	require.Equal(t, int32(3), requests.Load(), "one read per QueueReadEvery")
	require.Empty(t, series(t, reg, "vllm"), "the probe's reads are not recorded")

	_, err := m.Queue("plain").Waiting(context.Background())
	require.ErrorIs(t, err, ErrNotConfigured)
	_, err = m.Queue("nowhere").Waiting(context.Background())
	require.ErrorIs(t, err, ErrNotConfigured)
	_, err = m.Queue("other").Waiting(context.Background())
	require.ErrorIs(t, err, ErrNoQueueMetric)
	_, err = m.Queue("broken").Waiting(context.Background())
	require.Equal(t, ReasonHTTP, Reason(err))
}

// Queue satisfies capacity.QueueProbe (not imported: capacity is the
// consumer).
var _ interface {
	Waiting(context.Context) (int, error)
} = (*Queue)(nil)

// TestQueuePrefixCacheCounters: a queue read keeps the engine's
// prefix-cache counters, for a capacity level's hit ratio over its window;
// an engine without them has none.
func TestQueuePrefixCacheCounters(t *testing.T) {
	var hits atomic.Int32
	engine := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_waiting 0\nvllm:prefix_cache_hits_total %d\nvllm:prefix_cache_queries_total %d\n", hits.Load(), 2*hits.Load()+100)
	})
	plain := serve(t, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "vllm:num_requests_waiting 3\n") })
	m := NewManager(nil, NewMetrics(newRegistry()))
	require.NoError(t, m.Apply(configWith(t, "vllm", smConfig(engine.URL, time.Second), "plain", smConfig(plain.URL, time.Second))))
	defer stopManager(t, m)

	q := m.Queue("vllm")
	_, ok := q.PrefixCacheCounters()
	require.False(t, ok, "nothing read yet")
	now := time.Unix(1_000_000, 0)
	q.now = func() time.Time { return now }
	for _, h := range []int32{300, 3300} {
		hits.Store(h)
		_, err := q.Waiting(context.Background())
		require.NoError(t, err)
		c, ok := q.PrefixCacheCounters()
		require.True(t, ok)
		require.Equal(t, PrefixCacheCounters{Hits: float64(h), Queries: float64(2*h + 100), Names: "vllm:prefix_cache_hits_total/vllm:prefix_cache_queries_total"}, c)
		now = now.Add(QueueReadEvery)
	}

	p := m.Queue("plain")
	_, err := p.Waiting(context.Background())
	require.NoError(t, err)
	_, ok = p.PrefixCacheCounters()
	require.False(t, ok)
}
