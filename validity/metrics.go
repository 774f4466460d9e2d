package validity

import "github.com/prometheus/client_golang/prometheus"

// monitorMetrics are the monitor's series.
type monitorMetrics struct {
	valid, cpu, sched, gc     prometheus.Gauge
	reason                    *prometheus.GaugeVec
	targetValid, targetReason *prometheus.GaugeVec
	lag, wait                 *prometheus.GaugeVec
}

func newMonitorMetrics(reg prometheus.Registerer) *monitorMetrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sloprober", Name: name, Help: help})
	}
	vec := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sloprober", Name: name, Help: help}, labels)
	}
	m := &monitorMetrics{
		valid: gauge("measurement_valid",
			"1 while this process's measurements can be trusted; 0 while a reason of sloprober_measurement_invalid_reason holds (the prober, not the target, is the limit)."),
		reason: vec("measurement_invalid_reason",
			"1 while this reason makes the process's measurements invalid (cpu, scheduler_latency, gc_pause; send_lag and pool_wait of any target).", "reason"),
		targetValid: vec("target_measurement_valid",
			"1 while the measurements of a target's requests can be trusted: the process's are, and its own send lag and connection waits are within bounds.", "target"),
		targetReason: vec("target_measurement_invalid_reason",
			"1 while this reason (send_lag, pool_wait) makes a target's measurements invalid.", "target", "reason"),
		cpu: gauge("self_cpu_saturation_ratio",
			"The process's CPU use over the validity window as a share of GOMAXPROCS."),
		sched: gauge("self_scheduler_latency_p99_seconds",
			"P99 of the Go scheduler's latency over the validity window (bucket upper bound)."),
		gc: gauge("self_gc_pause_p99_seconds",
			"P99 of the stop-the-world GC pauses over the validity window (bucket upper bound)."),
		lag: vec("self_send_lag_p99_seconds",
			"P99 of a target's send lag over the validity window (bucket upper bound).", "target"),
		wait: vec("self_pool_wait_p99_seconds",
			"P99 of a target's waits for a reused connection over the validity window (bucket upper bound).", "target"),
	}
	reg.MustRegister(m.valid, m.reason, m.targetValid, m.targetReason, m.cpu, m.sched, m.gc, m.lag, m.wait)
	return m
}
