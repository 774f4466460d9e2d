package exporter_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/exporter"
)

// scrapeRegistry is a registry with every kind of metric /metrics serves:
// vectors, a histogram and a summary, labels given out of order, const
// metrics with timestamps, a unit, and an unchecked collector.
func scrapeRegistry(t testing.TB) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	exporter.NewMetrics(reg)
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_requests_total", Help: "Requests."}, []string{"z", "a"})
	c.WithLabelValues("2", "b").Add(3)
	c.WithLabelValues("1", "c").Inc()
	c.WithLabelValues("10", "a").Inc()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_in_flight", Help: "In flight.", ConstLabels: prometheus.Labels{"k": "v"}})
	g.Set(7)
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "test_seconds", Help: "Latency \"quoted\"\nand a newline.", Buckets: []float64{.1, 1}}, []string{"target"})
	h.WithLabelValues("sim").Observe(.5)
	h.WithLabelValues("other").Observe(2)
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "test_size_bytes", Help: "Sizes.", Objectives: map[float64]float64{.5: .05}})
	s.Observe(10)
	reg.MustRegister(c, g, h, s, constCollector{}, uncheckedCollector{})
	return reg
}

type constCollector struct{}

var (
	stampedDesc = prometheus.NewDesc("test_stamped", "With timestamps.", []string{"l"}, nil)
	unitDesc    = prometheus.V2.NewDesc("test_temperature_celsius", "With a unit.", prometheus.UnconstrainedLabels(nil), nil, prometheus.WithUnit("celsius"))
)

func (constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- stampedDesc; ch <- unitDesc }
func (constCollector) Collect(ch chan<- prometheus.Metric) {
	at := time.Unix(1700000000, 0)
	ch <- prometheus.NewMetricWithTimestamp(at.Add(time.Second), prometheus.MustNewConstMetric(stampedDesc, prometheus.UntypedValue, 2, "x"))
	ch <- prometheus.NewMetricWithTimestamp(at, prometheus.MustNewConstMetric(stampedDesc, prometheus.UntypedValue, 1, "x"))
	ch <- prometheus.MustNewConstMetric(stampedDesc, prometheus.UntypedValue, 3, "a")
	ch <- prometheus.MustNewConstMetric(unitDesc, prometheus.GaugeValue, 21.5)
}

// uncheckedCollector describes nothing: the registry does not check it.
type uncheckedCollector struct{}

var uncheckedDesc = prometheus.NewDesc("test_unchecked", "Unchecked.", nil, nil)

func (uncheckedCollector) Describe(chan<- *prometheus.Desc) {}
func (uncheckedCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(uncheckedDesc, prometheus.CounterValue, 5)
}

// scrape answers one GET of path with h, in process, with an Accept header.
func scrape(t *testing.T, h http.Handler, accept string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	h.ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, string(b)
}

const openMetrics = "application/openmetrics-text;version=1.0.0"

// TestMetricsAsRegistryGathers: /metrics gathers a registry without
// Registry.Gather (see TestMetricsWhileStarved), and serves exactly what
// Registry.Gather would, in the text format and in OpenMetrics.
func TestMetricsAsRegistryGathers(t *testing.T) {
	reg := scrapeRegistry(t)
	h := exporter.NewHandler(webOptions(reg, nil, nil))
	want := promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	for _, accept := range []string{"", openMetrics} {
		code, got := scrape(t, h, accept)
		require.Equal(t, http.StatusOK, code)
		wantCode, wantBody := scrape(t, want, accept)
		require.Equal(t, http.StatusOK, wantCode)
		require.Equal(t, wantBody, got, "Accept: %q", accept)
		require.Contains(t, got, "test_stamped")
		require.Contains(t, got, "test_unchecked")
	}
	_, om := scrape(t, h, openMetrics)
	require.Contains(t, om, "# UNIT test_temperature_celsius celsius")
}

// dupCollector collects one series twice, and badCollector panics: both are
// errors of the scrape, as with Registry.Gather, and the process lives on.
type dupCollector struct{}

func (dupCollector) Describe(chan<- *prometheus.Desc) {}
func (dupCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(uncheckedDesc, prometheus.CounterValue, 5)
}

type badCollector struct{}

func (badCollector) Describe(chan<- *prometheus.Desc) {}
func (badCollector) Collect(chan<- prometheus.Metric) { panic("broken collector") }

func TestMetricsErrorsAsRegistryGathers(t *testing.T) {
	for name, c := range map[string]prometheus.Collector{"duplicate": dupCollector{}, "panic": badCollector{}} {
		t.Run(name, func(t *testing.T) {
			reg := scrapeRegistry(t)
			reg.MustRegister(c)
			_, err := reg.Gather()
			require.Error(t, err)
			code, body := scrape(t, exporter.NewHandler(webOptions(reg, nil, nil)), "")
			require.Equal(t, http.StatusInternalServerError, code, body)
		})
	}
}

// TestMetricsWhileStarved: /metrics answers without waiting for the
// scheduler while runnable goroutines hold the only processor, as in the
// validity end-to-end test (GOMAXPROCS=1 and 4 spinning goroutines).
// Registry.Gather yields the processor (runtime.Gosched) while it starts
// its collecting goroutines, and waits behind every spinner's 10 ms slice
// to get it back: 10 ms at least, 20-80 ms here (70-130 ms in a starved
// sloprober).
// The scrape's own work is about a millisecond (a few with -race).
func TestMetricsWhileStarved(t *testing.T) {
	reg := scrapeRegistry(t)
	h := exporter.NewHandler(webOptions(reg, nil, nil))
	viaGather := promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	scrape(t, h, openMetrics) // sizes its buffer

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() { stop.Store(true); wg.Wait() }()
	deadline := time.Now().Add(20 * time.Second) // should the test hang
	for range 4 {
		wg.Go(func() {
			for !stop.Load() && time.Now().Before(deadline) {
			}
		})
	}
	runtime.Gosched() // the spinners run

	took := func(h http.Handler) time.Duration {
		var best time.Duration
		for i := range 5 {
			start := time.Now()
			code, _ := scrape(t, h, openMetrics)
			d := time.Since(start)
			require.Equal(t, http.StatusOK, code)
			if i == 0 || d < best {
				best = d
			}
		}
		return best
	}
	serial, gather := took(h), took(viaGather)
	stop.Store(true)
	wg.Wait()
	t.Logf("fastest of 5 starved scrapes: %v (with Registry.Gather: %v)", serial, gather)
	// Waiting for the scheduler once is waiting for a spinner's slice:
	// 10 ms at least.
	require.Less(t, serial, 8*time.Millisecond, "a starved scrape waits for the scheduler (with Registry.Gather: %v)", gather)
}

// BenchmarkMetrics is the scrape's own cost, with and without
// Registry.Gather.
func BenchmarkMetrics(b *testing.B) {
	reg := scrapeRegistry(b)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"serial", exporter.NewHandler(webOptions(reg, nil, nil))},
		{"registry", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				bc.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
			}
		})
	}
}
