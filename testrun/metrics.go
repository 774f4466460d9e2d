package testrun

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/runstore"
)

// verdicts are the values of the verdict label.
var verdicts = []string{capacity.VerdictPass, capacity.VerdictFail, capacity.VerdictInfeasible, capacity.VerdictAborted, capacity.VerdictInconclusive}

// Metrics are the test gauges and counters of the README's metric
// reference. Per test they carry `target` and `test`; they exist from the
// moment the test is configured (runs and skips at zero, running 0), but
// the results of runs (capacity, last verdict, last run) only once a run
// has finished, restored from storage at start: a capacity of 0 after a
// restart would fire the capacity-regression alert.
type Metrics struct {
	info, running, next, lastRun, lastVerdict *prometheus.GaugeVec
	capRate, capConcurrency, capGoodput       *prometheus.GaugeVec
	runs, skips, storageFailures              *prometheus.CounterVec

	mu    sync.Mutex
	known map[string]string // test name: target
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sloprober", Subsystem: "test", Name: name, Help: help},
			append([]string{"target", "test"}, labels...))
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sloprober", Subsystem: "test", Name: name, Help: help},
			append([]string{"target", "test"}, labels...))
	}
	m := &Metrics{
		info:           gauge("info", "Configured tests (1), by kind: step or soak.", "kind"),
		running:        gauge("running", "1 while a run of the test is running on its target, else 0."),
		next:           gauge("next_run_timestamp_seconds", "When the next scheduled run of the test is due (scheduled tests only)."),
		lastRun:        gauge("last_run_timestamp_seconds", "When the last finished run of the test ended (absent until a run has finished)."),
		lastVerdict:    gauge("last_verdict", "1 for the verdict of the last finished run (pass, fail, infeasible, aborted, inconclusive), 0 for the others.", "verdict"),
		capRate:        gauge("capacity_requests_per_second", "The last step run's capacity conclusion: the highest open-loop rate that met every objective, req/s."),
		capConcurrency: gauge("capacity_concurrency", "The last step run's closed-loop capacity: the most clients at which every objective was met."),
		capGoodput:     gauge("capacity_goodput_requests_per_second", "Good requests per second at the last step run's verified rate."),
		runs:           counter("runs_total", "Finished runs of the test, by verdict (pass, fail, infeasible, aborted, inconclusive).", "verdict"),
		skips:          counter("runs_skipped_total", "Scheduled runs not started because another test ran on the target."),
		storageFailures: counter("storage_failures_total", "Runs of the test that --storage.path could not take: at their start (the run did not start) or at their end "+
			"(the result is held in memory, its write retried at the next write of a run and at shutdown, lost if sloprober stops first)."),
		known: map[string]string{},
	}
	reg.MustRegister(m.info, m.running, m.next, m.lastRun, m.lastVerdict, m.capRate, m.capConcurrency, m.capGoodput, m.runs, m.skips, m.storageFailures)
	return m
}

func (m *Metrics) all() []interface {
	DeletePartialMatch(prometheus.Labels) int
} {
	return []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.info, m.running, m.next, m.lastRun, m.lastVerdict, m.capRate, m.capConcurrency, m.capGoodput, m.runs, m.skips, m.storageFailures}
}

// configured sets the series of the configured tests, restores their
// results from the store, and deletes those of removed tests.
func (m *Metrics) configured(tests []*config.TestConfig, next map[string]time.Time, store *runstore.Store) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := map[string]string{}
	for _, t := range tests {
		now[t.Name] = t.Target
	}
	for name, target := range m.known {
		if now[name] != target { // removed, or moved to another target
			for _, v := range m.all() {
				v.DeletePartialMatch(prometheus.Labels{"test": name, "target": target})
			}
		}
	}
	m.info.Reset()
	for _, t := range tests {
		m.info.WithLabelValues(t.Target, t.Name, t.Kind).Set(1)
		if _, ok := m.known[t.Name]; !ok || m.known[t.Name] != t.Target {
			m.running.WithLabelValues(t.Target, t.Name).Set(0)
			m.skips.WithLabelValues(t.Target, t.Name)
			m.storageFailures.WithLabelValues(t.Target, t.Name)
			for _, v := range verdicts {
				m.runs.WithLabelValues(t.Target, t.Name, v)
			}
			if r, ok := store.Last(t.Name, true); ok && r.Target == t.Target {
				m.setLast(r)
			}
			if r, ok := store.LastWithCapacity(t.Name); ok && r.Target == t.Target {
				m.setCapacity(r)
			}
		}
		if at, ok := next[t.Name]; ok {
			m.next.WithLabelValues(t.Target, t.Name).Set(float64(at.UnixNano()) / 1e9)
		} else {
			m.next.DeleteLabelValues(t.Target, t.Name)
		}
	}
	m.known = now
}

func (m *Metrics) setRunning(target, test string, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.known[test] != target {
		return // moved or removed by a reload: its series are gone
	}
	v := 0.0
	if on {
		v = 1
	}
	m.running.WithLabelValues(target, test).Set(v)
}

func (m *Metrics) skipped(target, test string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.known[test] == target {
		m.skips.WithLabelValues(target, test).Inc()
	}
}

func (m *Metrics) storageFailed(target, test string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.known[test] == target {
		m.storageFailures.WithLabelValues(target, test).Inc()
	}
}

func (m *Metrics) setNext(target, test string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.known[test] == target {
		m.next.WithLabelValues(target, test).Set(float64(t.UnixNano()) / 1e9)
	}
}

// finished records a finished run.
func (m *Metrics) finished(r *capacity.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.known[r.Test] != r.Target {
		return // moved or removed by a reload while it ran: stored, not exported
	}
	m.runs.WithLabelValues(r.Target, r.Test, r.Verdict).Inc()
	m.setLast(r)
	m.setCapacity(r)
}

// setLast sets the last-run gauges; m.mu is held.
func (m *Metrics) setLast(r *capacity.Run) {
	m.lastRun.WithLabelValues(r.Target, r.Test).Set(float64(r.End.UnixNano()) / 1e9)
	for _, v := range verdicts {
		x := 0.0
		if v == r.Verdict {
			x = 1
		}
		m.lastVerdict.WithLabelValues(r.Target, r.Test, v).Set(x)
	}
}

// setCapacity sets the capacity gauges from a step run that concluded on
// a capacity: pass, fail (a verified rate of 0 when no open-loop rate
// met), infeasible (none: 0, a regression to alert on). An aborted or
// inconclusive run's capacity is unknown, and a 0 would fire the
// capacity-regression alert; a capacity limited by max_rate is a floor,
// not the capacity. m.mu is held.
func (m *Metrics) setCapacity(r *capacity.Run) {
	rate := capacity.Concluded(r.Kind, r.Verdict, r.Capacity)
	c := r.Capacity
	if rate == nil || c != nil && c.LimitedBy != "" {
		return
	}
	concurrency, goodput := 0, 0.0
	if c != nil {
		concurrency, goodput = c.Concurrency, c.VerifiedGoodput
	}
	m.capRate.WithLabelValues(r.Target, r.Test).Set(*rate)
	m.capConcurrency.WithLabelValues(r.Target, r.Test).Set(float64(concurrency))
	m.capGoodput.WithLabelValues(r.Target, r.Test).Set(goodput)
}
