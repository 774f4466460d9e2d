// Package exporter turns the prober's per-request results into the
// Prometheus metrics of the README's metric reference, and serves them with the web
// endpoints of `sloprober run`.
package exporter

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

const namespace = "sloprober"

var loadLabels = []string{"target", "scenario", "test"}

// Base classic bucket layouts, in seconds or tokens. Every SLO threshold
// configured anywhere is added to the layout of its metric, so the share of
// requests under a threshold is exact and series of different scenarios can
// be summed.
var (
	ttftBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60}
	tpotBuckets = []float64{0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1}
	itlBuckets  = []float64{0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2, 5}
	e2eBuckets  = []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300}
	lagBuckets  = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	inBuckets   = []float64{16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}
	outBuckets  = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	// phaseBuckets span a loopback network phase (0.1 ms) to a queue
	// of minutes.
	phaseBuckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// sloMetric maps an SLO to the histogram whose layout gets its threshold.
var sloMetric = map[string]string{"ttft": "ttft", "tpot": "tpot", "e2e": "e2e", "max_itl": "itl", "ttfa": "ttfa"}

// histograms is one set of histogram vectors with their classic layouts.
type histograms struct {
	ttft, ttfa, tpot, itl, e2e, lag, in, out, phase *prometheus.HistogramVec
}

func (h *histograms) all() []*prometheus.HistogramVec {
	return []*prometheus.HistogramVec{h.ttft, h.ttfa, h.tpot, h.itl, h.e2e, h.lag, h.in, h.out, h.phase}
}

// layouts returns the classic layouts of the histograms for a set of SLOs.
func layouts(scenarios []*config.ScenarioConfig) map[string][]float64 {
	l := map[string][]float64{"ttft": ttftBuckets, "ttfa": ttftBuckets, "tpot": tpotBuckets, "itl": itlBuckets, "e2e": e2eBuckets}
	for _, s := range scenarios {
		for _, slo := range s.SLO.List() {
			name := sloMetric[slo.Name]
			if v := slo.Threshold.Seconds(); !slices.Contains(l[name], v) {
				l[name] = append(slices.Clone(l[name]), v)
			}
		}
	}
	for _, b := range l {
		slices.Sort(b)
	}
	return l
}

func newHistograms(l map[string][]float64) *histograms {
	h := func(name, help string, buckets []float64, extra ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:                       namespace,
			Name:                            name,
			Help:                            help,
			Buckets:                         buckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, append(slices.Clone(loadLabels), extra...))
	}
	return &histograms{
		ttft: h("time_to_first_token_seconds", "Time from sending a request to the first chunk carrying generated text (TTFT).", l["ttft"]),
		ttfa: h("time_to_first_answer_token_seconds", "Time from sending a request to the first chunk carrying answer text (content or a tool call) after any reasoning (TTFA); equal to TTFT without reasoning.", l["ttfa"]),
		tpot: h("time_per_output_token_seconds", "Time per output token after the first, (tN - t1) / (N - 1), of ok requests (TPOT).", l["tpot"]),
		itl:  h("inter_token_latency_seconds", "Gaps between consecutive chunks carrying generated text (ITL), one observation per gap.", l["itl"]),
		e2e:  h("request_duration_seconds", "Time from sending a request to its last token, of ok requests (E2E).", l["e2e"]),
		lag:  h("schedule_lag_seconds", "Time from an arrival's scheduled time to sending its request.", lagBuckets),
		in:   h("request_input_tokens", "Input tokens per request.", inBuckets),
		out:  h("request_output_tokens", "Output tokens per request that received tokens.", outBuckets),
		phase: h("phase_duration_seconds", "Time of each phase of a request (network, gateway, queue, prefill, decode, unattributed) from its target's timing sources; "+
			"the phases before the first token add up to TTFT.", phaseBuckets, "phase"),
	}
}

// Metrics holds every sloprober metric. It implements
// prober.ObserverFactory: each load gets a series observer whose children
// are resolved once, so recording a result takes no label lookups. It also
// implements prober.CalibrationObserver, per target.
type Metrics struct {
	reg prometheus.Registerer

	scheduled, sent, good, inputTokens, outputTokens, goodOutputTokens, outputChunks *prometheus.CounterVec
	reasoningTokens, cachedTokens                                                    *prometheus.CounterVec
	dropped, finished, responses, sloMissed, fallbacks, mismatches                   *prometheus.CounterVec
	inFlight, intendedRate, intendedConcurrency, objective, sloThreshold             *prometheus.GaugeVec
	targetInfo, costPerHour                                                          *prometheus.GaugeVec
	reloadSuccess, reloadTimestamp                                                   prometheus.Gauge
	calFrozen                                                                        *prometheus.GaugeVec
	calRejected, retries                                                             *prometheus.CounterVec

	mu     sync.Mutex
	layout map[string][]float64
	hist   *histograms
	series map[config.Key]*series
	// calTargets are the targets with calibration series; configured is
	// set by the first ApplyConfig, after which only configured targets
	// have them.
	calTargets map[string]bool
	configured bool
	// removedTTL is how long a removed load's series stay (see Forget);
	// removed holds their pending deletions.
	removedTTL time.Duration
	removed    map[config.Key]*time.Timer
}

var (
	_ prober.ObserverFactory     = (*Metrics)(nil)
	_ prober.CalibrationObserver = (*Metrics)(nil)
)

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, append(slices.Clone(loadLabels), extra...))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		reg:              reg,
		scheduled:        counter("requests_scheduled_total", "Arrivals that fell due: sent plus dropped."),
		dropped:          counter("requests_dropped_total", "Arrivals never sent, by reason (max_in_flight, late, shutdown).", "reason"),
		sent:             counter("requests_sent_total", "Requests started."),
		finished:         counter("requests_finished_total", "Requests ended, by outcome.", "outcome"),
		responses:        counter("responses_total", "HTTP status codes received.", "code"),
		good:             counter("requests_good_total", "Requests that were ok, carried generated text and met every SLO of their scenario."),
		sloMissed:        counter("slo_missed_total", "Requests in the attainment denominator that missed an SLO, by SLO.", "slo"),
		inputTokens:      counter("input_tokens_total", "Input tokens sent."),
		outputTokens:     counter("output_tokens_total", "Output tokens received."),
		goodOutputTokens: counter("good_output_tokens_total", "Output tokens of good requests."),
		outputChunks:     counter("output_chunks_total", "Chunks carrying generated text."),
		reasoningTokens:  counter("reasoning_tokens_total", "Output tokens the server counted as reasoning (usage's reasoning_tokens, where sent); within output_tokens_total."),
		cachedTokens:     counter("cached_prompt_tokens_total", "Prompt tokens the server reported found in its prefix cache (usage's cached_tokens, or the Messages API's cache_read_input_tokens, where sent); within input_tokens_total."),
		fallbacks:        counter("token_count_fallbacks_total", "ok replies without usage, whose token count fell back to an estimate, by kind (input, output).", "kind"),
		mismatches:       counter("length_mismatches_total", "Server-counted lengths off the request, by kind (input, output).", "kind"),
		inFlight:         gauge("requests_in_flight", "Requests in flight.", loadLabels...),
		intendedRate:     gauge("intended_request_rate", "Configured arrival rate, req/s; 0 while paused.", loadLabels...),
		objective:        gauge("slo_objective_ratio", "Configured SLO attainment objective.", loadLabels...),
		sloThreshold:     gauge("slo_threshold_seconds", "Configured SLO thresholds.", append(slices.Clone(loadLabels), "slo")...),
		targetInfo:       gauge("target_info", "What each target is.", "target", "model", "api"),
		costPerHour:      gauge("target_cost_per_hour", "Configured serving cost of a target per hour, for cost per good request.", "target"),
		intendedConcurrency: gauge("intended_concurrency",
			"Clients of a closed-loop load: each sends its next request when its previous one ends; 0 for open-loop loads.", loadLabels...),
		reloadSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_last_reload_successful",
			Help: "Whether the last configuration reload attempt was successful."}),
		reloadTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_last_reload_success_timestamp_seconds",
			Help: "Timestamp of the last successful configuration reload."}),
		calFrozen: gauge("calibration_frozen",
			"1 while a target's prompt calibration has stopped adapting because the server's prompt token counts cannot be followed (truncation, constant counts), else 0.", "target"),
		calRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "calibration_rejected_total",
			Help: "Prompt token counts of a target that calibration refused to learn from."}, []string{"target"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "request_retries_total",
			Help: "Requests sent a second time, on a new connection, having provably never reached the server, by reason (server_closed_idle, nothing_written)."},
			[]string{"target", "reason"}),
		layout:     layouts(nil),
		series:     map[config.Key]*series{},
		calTargets: map[string]bool{},
		removed:    map[config.Key]*time.Timer{},
	}
	m.hist = newHistograms(m.layout)
	reg.MustRegister(m.scheduled, m.dropped, m.sent, m.finished, m.responses, m.good, m.sloMissed,
		m.inputTokens, m.outputTokens, m.goodOutputTokens, m.outputChunks, m.reasoningTokens, m.cachedTokens, m.fallbacks, m.mismatches,
		m.inFlight, m.intendedRate, m.intendedConcurrency, m.objective, m.sloThreshold, m.targetInfo, m.costPerHour,
		m.reloadSuccess, m.reloadTimestamp, m.calFrozen, m.calRejected, m.retries)
	for _, h := range m.hist.all() {
		reg.MustRegister(h)
	}
	return m
}

// SetRemovedSeriesTTL sets how long the series of a removed load stay
// before they are deleted (0: at once), so that the scrape after a reload
// still sees a removed load's final counts.
func (m *Metrics) SetRemovedSeriesTTL(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removedTTL = d
}

// ReloadResult records the outcome of a configuration (re)load.
func (m *Metrics) ReloadResult(ok bool) {
	if ok {
		m.reloadSuccess.Set(1)
		m.reloadTimestamp.SetToCurrentTime()
	} else {
		m.reloadSuccess.Set(0)
	}
}

// ApplyConfig sets the target gauges, creates the calibration series of
// new targets at zero (those of kept targets keep their values, as the
// prober keeps their calibration) and deletes those of removed targets,
// and, when the configured SLO thresholds change, rebuilds the histograms
// with their new classic layout (their series start again from zero, which
// rate() takes as a reset). Call it before the prober applies the same
// configuration.
func (m *Metrics) ApplyConfig(cfg *config.Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.targetInfo.Reset()
	m.costPerHour.Reset()
	targets := make(map[string]bool, len(cfg.Targets))
	for _, t := range cfg.Targets {
		m.targetInfo.WithLabelValues(t.Name, t.Model, t.API).Set(1)
		if t.CostPerHour != nil {
			m.costPerHour.WithLabelValues(t.Name).Set(*t.CostPerHour)
		}
		targets[t.Name] = true
		m.calFrozen.WithLabelValues(t.Name)
		m.calRejected.WithLabelValues(t.Name)
	}
	for name := range m.calTargets {
		if !targets[name] {
			m.calFrozen.DeleteLabelValues(name)
			m.calRejected.DeleteLabelValues(name)
			m.retries.DeletePartialMatch(prometheus.Labels{"target": name})
		}
	}
	m.calTargets, m.configured = targets, true
	l := layouts(cfg.Scenarios)
	if equalLayouts(l, m.layout) {
		return
	}
	old := m.hist
	m.layout, m.hist = l, newHistograms(l)
	for _, h := range old.all() {
		m.reg.Unregister(h)
	}
	for _, h := range m.hist.all() {
		m.reg.MustRegister(h)
	}
	for _, s := range m.series {
		s.resolveHistograms(m.hist)
	}
}

func equalLayouts(a, b map[string][]float64) bool {
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return len(a) == len(b)
}

// calibrationTarget reports whether target may have calibration series,
// and creates them at zero on the first call when no configuration has
// been applied. Once one has, a target it does not name gets none: a
// request of a removed target that ends after the reload must not bring
// its series back for good. Call it with m.mu held.
func (m *Metrics) calibrationTarget(target string) bool {
	if m.calTargets[target] {
		return true
	}
	if m.configured {
		return false
	}
	m.calTargets[target] = true
	m.calRejected.WithLabelValues(target)
	m.calFrozen.WithLabelValues(target)
	return true
}

// CalibrationFrozen implements prober.CalibrationObserver:
// sloprober_calibration_frozen{target} is 1 while frozen, else 0.
func (m *Metrics) CalibrationFrozen(target string, frozen bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.calibrationTarget(target) {
		return
	}
	v := 0.0
	if frozen {
		v = 1
	}
	m.calFrozen.WithLabelValues(target).Set(v)
}

// CalibrationRejected implements prober.CalibrationObserver: it counts
// sloprober_calibration_rejected_total{target}.
func (m *Metrics) CalibrationRejected(target string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calibrationTarget(target) {
		m.calRejected.WithLabelValues(target).Inc()
	}
}

// Observe implements prober.ObserverFactory: it creates every series of a
// load at zero.
func (m *Metrics) Observe(info prober.LoadInfo) prober.Observer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.removed[info.Key]; ok {
		// A restarted load replaces its lingering series at once: it
		// starts at zero.
		t.Stop()
		delete(m.removed, info.Key)
		m.deleteSeries(info.Key)
	}
	lv := []string{info.Target, info.Scenario, info.Test}
	s := &series{
		m:                m,
		labels:           lv,
		scheduled:        m.scheduled.WithLabelValues(lv...),
		sent:             m.sent.WithLabelValues(lv...),
		good:             m.good.WithLabelValues(lv...),
		inputTokens:      m.inputTokens.WithLabelValues(lv...),
		outputTokens:     m.outputTokens.WithLabelValues(lv...),
		goodOutputTokens: m.goodOutputTokens.WithLabelValues(lv...),
		outputChunks:     m.outputChunks.WithLabelValues(lv...),
		reasoningTokens:  m.reasoningTokens.WithLabelValues(lv...),
		cachedTokens:     m.cachedTokens.WithLabelValues(lv...),
		inFlight:         m.inFlight.WithLabelValues(lv...),
		dropped:          map[prober.DropReason]prometheus.Counter{},
		finished:         map[prober.Outcome]prometheus.Counter{},
		missed:           map[string]prometheus.Counter{},
		responses:        map[int]prometheus.Counter{},
	}
	for _, r := range prober.DropReasons {
		s.dropped[r] = m.dropped.WithLabelValues(append(lv, string(r))...)
	}
	for _, o := range prober.Outcomes {
		s.finished[o] = m.finished.WithLabelValues(append(lv, string(o))...)
	}
	for _, r := range prober.RetryReasons {
		// At zero from the start, so that increase() sees the first.
		m.retries.WithLabelValues(info.Target, r)
	}
	for _, slo := range info.SLOs {
		s.missed[slo.Name] = m.sloMissed.WithLabelValues(append(lv, slo.Name)...)
		if !slo.IsQuality() { // a quality check has no threshold
			m.sloThreshold.WithLabelValues(append(lv, slo.Name)...).Set(slo.Threshold.Seconds())
		}
	}
	s.inputFallbacks = m.fallbacks.WithLabelValues(append(lv, "input")...)
	s.outputFallbacks = m.fallbacks.WithLabelValues(append(lv, "output")...)
	s.inputMismatches = m.mismatches.WithLabelValues(append(lv, "input")...)
	s.outputMismatches = m.mismatches.WithLabelValues(append(lv, "output")...)
	m.setIntended(lv, info)
	m.objective.WithLabelValues(lv...).Set(info.Objective)
	s.resolveHistograms(m.hist)
	m.series[info.Key] = s
	return s
}

// Update implements prober.ObserverFactory: it sets the intended request
// rate and concurrency of a running load, and nothing else. A step test
// changes a load's rate or clients in place, without restarting it, so its
// counters and histograms go on: resetting them would show the recording
// and alerting rules a reset that did not happen. A load that is not
// observed (never, or no longer) gets no series.
func (m *Metrics) Update(info prober.LoadInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.series[info.Key]; s != nil {
		m.setIntended(s.labels, info)
	}
}

// setIntended sets the gauges of what a load is configured to send.
func (m *Metrics) setIntended(lv []string, info prober.LoadInfo) {
	m.intendedRate.WithLabelValues(lv...).Set(info.Rate)
	m.intendedConcurrency.WithLabelValues(lv...).Set(float64(info.Clients))
}

// Forget implements prober.ObserverFactory: it deletes every series of a
// load once the removed-series TTL has passed (SetRemovedSeriesTTL), so the
// scrapes meanwhile see the load's final counts; Observe of the same labels
// replaces them at once.
func (m *Metrics) Forget(info prober.LoadInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.series, info.Key)
	if t, ok := m.removed[info.Key]; ok {
		t.Stop()
	}
	if m.removedTTL <= 0 {
		delete(m.removed, info.Key)
		m.deleteSeries(info.Key)
		return
	}
	var t *time.Timer
	t = time.AfterFunc(m.removedTTL, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.removed[info.Key] == t {
			delete(m.removed, info.Key)
			m.deleteSeries(info.Key)
		}
	})
	m.removed[info.Key] = t
}

// deleteSeries deletes every series of a load; m.mu is held.
func (m *Metrics) deleteSeries(k config.Key) {
	match := prometheus.Labels{"target": k.Target, "scenario": k.Scenario, "test": k.Test}
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{
		m.scheduled, m.dropped, m.sent, m.finished, m.responses, m.good, m.sloMissed, m.inputTokens,
		m.outputTokens, m.goodOutputTokens, m.outputChunks, m.reasoningTokens, m.cachedTokens, m.fallbacks, m.mismatches,
		m.inFlight, m.intendedRate, m.intendedConcurrency, m.objective, m.sloThreshold,
	} {
		v.DeletePartialMatch(match)
	}
	for _, h := range m.hist.all() {
		h.DeletePartialMatch(match)
	}
}

// series records the requests of one load.
type series struct {
	m      *Metrics
	labels []string

	scheduled, sent, good, inputTokens, outputTokens, goodOutputTokens, outputChunks prometheus.Counter
	reasoningTokens, cachedTokens                                                    prometheus.Counter
	inputFallbacks, outputFallbacks, inputMismatches, outputMismatches               prometheus.Counter
	inFlight                                                                         prometheus.Gauge
	dropped                                                                          map[prober.DropReason]prometheus.Counter
	finished                                                                         map[prober.Outcome]prometheus.Counter
	missed                                                                           map[string]prometheus.Counter

	hist atomic.Pointer[seriesHistograms]

	mu        sync.Mutex
	responses map[int]prometheus.Counter
}

type seriesHistograms struct {
	ttft, ttfa, tpot, itl, e2e, lag, in, out prometheus.Observer
	phase                                    map[string]prometheus.Observer
}

func (s *series) resolveHistograms(h *histograms) {
	s.hist.Store(&seriesHistograms{
		ttft:  h.ttft.WithLabelValues(s.labels...),
		ttfa:  h.ttfa.WithLabelValues(s.labels...),
		tpot:  h.tpot.WithLabelValues(s.labels...),
		itl:   h.itl.WithLabelValues(s.labels...),
		e2e:   h.e2e.WithLabelValues(s.labels...),
		lag:   h.lag.WithLabelValues(s.labels...),
		in:    h.in.WithLabelValues(s.labels...),
		out:   h.out.WithLabelValues(s.labels...),
		phase: phaseObservers(h.phase, s.labels),
	})
}

// phaseObservers returns the phase histogram's children of a load's labels.
func phaseObservers(h *prometheus.HistogramVec, labels []string) map[string]prometheus.Observer {
	o := make(map[string]prometheus.Observer, len(config.Phases))
	for _, p := range config.Phases {
		o[p] = h.WithLabelValues(append(slices.Clone(labels), p)...)
	}
	return o
}

// exemplarLabel names an observation's trace: Grafana's default for a
// Prometheus datasource's exemplar link.
const exemplarLabel = "trace_id"

// observe records v, with the trace id as its exemplar when the request's
// spans are exported.
func observe(o prometheus.Observer, v float64, exemplar prometheus.Labels) {
	if exemplar != nil {
		o.(prometheus.ExemplarObserver).ObserveWithExemplar(v, exemplar)
		return
	}
	o.Observe(v)
}

func (s *series) Scheduled()                  { s.scheduled.Inc() }
func (s *series) Dropped(r prober.DropReason) { s.dropped[r].Inc() }
func (s *series) Sent(_ time.Time, lag time.Duration) {
	s.sent.Inc()
	s.inFlight.Inc()
	s.hist.Load().lag.Observe(lag.Seconds())
}

// Finished records a finished request by the definitions of the README's
// metric reference.
func (s *series) Finished(r *prober.Result, m *prober.Measurement) {
	h := s.hist.Load()
	if !r.NotSent {
		s.inFlight.Dec()
	}
	s.finished[r.Outcome].Inc()
	if r.Retry != "" {
		s.m.retries.WithLabelValues(s.labels[0], r.Retry).Inc()
	}
	if r.StatusCode != 0 {
		s.response(r.StatusCode).Inc()
	}
	var ex prometheus.Labels
	if prober.Traced(r, m) {
		ex = prometheus.Labels{exemplarLabel: r.SpanContext.TraceID().String()}
	}
	if m.HasTTFT {
		observe(h.ttft, m.TTFT.Seconds(), ex)
	}
	if m.HasTTFA {
		observe(h.ttfa, m.TTFA.Seconds(), ex)
	}
	if m.HasITL {
		// The exemplar goes with the longest gap only: a trace is worth
		// finding from the stall it explains, and one exemplar per
		// request leaves the buckets' exemplars to other requests.
		longest, marked := prober.MaxGap(r.Chunks), ex == nil
		for gap := range prober.Gaps(r.Chunks) {
			if !marked && gap == longest {
				observe(h.itl, gap.Seconds(), ex)
				marked = true
				continue
			}
			h.itl.Observe(gap.Seconds())
		}
	}
	if m.HasE2E {
		observe(h.e2e, m.E2E.Seconds(), ex)
	}
	if m.HasTPOT {
		observe(h.tpot, m.TPOT.Seconds(), ex)
	}
	// Phases are observed with TTFT, so that the phases before the first
	// token add up to TTFT over any set of requests: a failed request's
	// wait (network, then unattributed up to a 30 s timeout) is in its
	// span, not in the histogram.
	if m.HasTTFT {
		for _, p := range m.Split.Phases {
			h.phase[p.Phase].Observe(p.Duration().Seconds())
		}
	}
	h.in.Observe(float64(m.InputTokens))
	s.inputTokens.Add(float64(m.InputTokens))
	if n, _, ok := r.CachedPromptTokens(); ok && n > 0 {
		// Within the prompt counted in input_tokens_total.
		s.cachedTokens.Add(float64(min(n, m.InputTokens)))
	}
	if m.HasOutput {
		h.out.Observe(float64(m.OutputTokens))
		s.outputTokens.Add(float64(m.OutputTokens))
		s.reasoningTokens.Add(float64(m.ReasoningTokens))
	}
	s.outputChunks.Add(float64(len(r.Chunks)))
	if m.InputFallback {
		s.inputFallbacks.Inc()
	}
	if m.OutputFallback {
		s.outputFallbacks.Inc()
	}
	if m.InputMismatch {
		s.inputMismatches.Inc()
	}
	if m.OutputMismatch {
		s.outputMismatches.Inc()
	}
	if m.Good {
		s.good.Inc()
		s.goodOutputTokens.Add(float64(m.OutputTokens))
	}
	for _, slo := range m.Missed {
		s.missed[slo].Inc()
	}
}

func (s *series) response(code int) prometheus.Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.responses[code]
	if !ok {
		c = s.m.responses.WithLabelValues(append(slices.Clone(s.labels), strconv.Itoa(code))...)
		s.responses[code] = c
	}
	return c
}
