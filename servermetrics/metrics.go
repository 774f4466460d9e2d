package servermetrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "sloprober"

// Metrics are the engine metrics sloprober re-exports, and the health of
// their scrapes, all with the target label.
type Metrics struct {
	running, waiting, kvUsage, hitRatio *prometheus.GaugeVec
	up, duration                        *prometheus.GaugeVec
	failures, skipped, rejected         *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, []string{"target"})
	}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, append([]string{"target"}, extra...))
	}
	m := &Metrics{
		running: gauge("server_requests_running",
			"Requests in the engine's running batch, from its own metrics (vllm:num_requests_running, sglang:num_running_reqs, tgi_batch_current_size, llamacpp:requests_processing), summed over their label sets."),
		waiting: gauge("server_requests_waiting",
			"Requests waiting in the engine's queue, from its own metrics (vllm:num_requests_waiting, sglang:num_queue_reqs, tgi_queue_size, llamacpp:requests_deferred), summed over their label sets."),
		kvUsage: gauge("server_kv_cache_usage_ratio",
			"Share of the engine's KV cache in use, 0 to 1, from its own metrics (vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc, sglang:token_usage, llamacpp:kv_cache_usage_ratio), averaged over their label sets."),
		hitRatio: gauge("server_prefix_cache_hit_ratio",
			"Share of prompt tokens the engine found in its prefix cache, 0 to 1: the increase of its hit and query counters between the last two scrapes, else its own hit-rate gauge."),
		up: gauge("server_metrics_up",
			"1 if the last scrape of the engine's metrics succeeded and parsed, else 0."),
		duration: gauge("server_metrics_scrape_duration_seconds",
			"Duration of the last scrape of the engine's metrics."),
		failures: counter("server_metrics_scrape_failures_total",
			"Failed scrapes of the engine's metrics, by reason (timeout, connect, http, too_large, too_many_series, parse).", "reason"),
		skipped: counter("server_metrics_scrapes_skipped_total",
			"Scrapes of the engine's metrics skipped because the previous one was still running when they fell due."),
		rejected: counter("server_metrics_values_rejected_total",
			"Values of the engine's metrics not re-exported: NaN, infinite, negative, a count above a million, or a ratio above 1."),
	}
	reg.MustRegister(m.running, m.waiting, m.kvUsage, m.hitRatio, m.up, m.duration, m.failures, m.skipped, m.rejected)
	return m
}

// start creates a target's counters at zero, so that its first failure
// shows up in increase().
func (m *Metrics) start(target string) {
	for _, r := range Reasons {
		m.failures.WithLabelValues(target, r)
	}
	m.skipped.WithLabelValues(target)
	m.rejected.WithLabelValues(target)
}

// observe records a successful scrape: a value the engine did not give is
// deleted, not set to 0.
func (m *Metrics) observe(target string, s Snapshot, seconds float64) {
	m.up.WithLabelValues(target).Set(1)
	m.duration.WithLabelValues(target).Set(seconds)
	for _, g := range []struct {
		vec *prometheus.GaugeVec
		v   *float64
	}{{m.running, s.Running}, {m.waiting, s.Waiting}, {m.kvUsage, s.KVCacheUsage}, {m.hitRatio, s.PrefixCacheHitRatio}} {
		if g.v == nil {
			g.vec.DeleteLabelValues(target)
		} else {
			g.vec.WithLabelValues(target).Set(*g.v)
		}
	}
	if len(s.Rejected) > 0 {
		m.rejected.WithLabelValues(target).Add(float64(len(s.Rejected)))
	}
}

// fail records a failed scrape: its values are deleted, as Prometheus marks
// the series of a failed scrape stale, so that no dashboard shows the
// numbers of a server that stopped answering as current.
func (m *Metrics) fail(target, reason string, seconds float64) {
	m.up.WithLabelValues(target).Set(0)
	m.duration.WithLabelValues(target).Set(seconds)
	m.failures.WithLabelValues(target, reason).Inc()
	m.deleteValues(target)
}

func (m *Metrics) deleteValues(target string) {
	for _, g := range []*prometheus.GaugeVec{m.running, m.waiting, m.kvUsage, m.hitRatio} {
		g.DeleteLabelValues(target)
	}
}

// forget deletes every series of a target.
func (m *Metrics) forget(target string) {
	match := prometheus.Labels{"target": target}
	for _, g := range []*prometheus.GaugeVec{m.running, m.waiting, m.kvUsage, m.hitRatio, m.up, m.duration} {
		g.DeletePartialMatch(match)
	}
	for _, c := range []*prometheus.CounterVec{m.failures, m.skipped, m.rejected} {
		c.DeletePartialMatch(match)
	}
}
