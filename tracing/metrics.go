package tracing

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the tracer's own counters: what it queued, what a full queue
// dropped, and what the exporter failed to send.
type Metrics struct {
	queued, dropped, exported, lost, exportErrors prometheus.Counter
}

// NewMetrics registers the tracer's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		queued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sloprober_tracing_requests_queued_total",
			Help: "Finished probes whose spans were queued for export (every bad request, and good ones at tracing.sampling_fraction).",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sloprober_tracing_requests_dropped_total",
			Help: "Finished probes whose spans were dropped because tracing.queue_size requests already waited for export (a collector that is down or slow).",
		}),
		exported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sloprober_tracing_spans_exported_total",
			Help: "Spans the collector accepted.",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sloprober_tracing_spans_failed_total",
			Help: "Spans of failed exports (not retried beyond tracing.timeout).",
		}),
		exportErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sloprober_tracing_export_errors_total",
			Help: "Exports that failed: the collector was down, slow beyond tracing.timeout, or refused them.",
		}),
	}
	reg.MustRegister(m.queued, m.dropped, m.exported, m.lost, m.exportErrors)
	return m
}
