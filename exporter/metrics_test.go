package exporter_test

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/prober"
)

// find returns the metric of a family whose labels include want, or nil.
func find(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metrics
				}
			}
			return m
		}
	}
	return nil
}

// value returns a counter or gauge value, or a histogram's sample count; the
// series must exist.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, reg, name, labels)
	require.NotNil(t, m, "no series %s%v", name, labels)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("%s%v has no value", name, labels)
	return 0
}

func load(scenario string, extra ...string) map[string]string {
	l := map[string]string{"target": "sim", "scenario": scenario, "test": "canary"}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

func mustConfig(t *testing.T, yml string) *config.Config {
	t.Helper()
	c, err := config.Load([]byte(yml), false)
	require.NoError(t, err)
	return c
}

// run applies cfg with a manager on a fresh registry.
func run(t *testing.T, cfg *config.Config) (*prometheus.Registry, *exporter.Metrics, *prober.Manager) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := exporter.NewMetrics(reg)
	mgr := prober.NewManager(promslog.NewNopLogger(), m, "sloprober/test")
	require.NoError(t, mgr.Apply(cfg, func() { m.ApplyConfig(cfg) }))
	return reg, m, mgr
}

// waitSent waits until every listed scenario has sent at least n requests.
func waitSent(t *testing.T, reg prometheus.Gatherer, n float64, scenarios ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range scenarios {
			if value(t, reg, "sloprober_requests_sent_total", load(s)) < n {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
}

const twoScenarios = `
targets:
  - {name: sim, url: "%s", model: sim-model, cost_per_hour: 3}
scenarios:
  - name: pass
    input_tokens: 40
    output_tokens: 5
    ignore_eos: true
    slo: {ttft: 500ms, tpot: 50ms, e2e: 5s, max_itl: 1s}
  - name: fail
    input_tokens: 40
    output_tokens: 5
    ignore_eos: true
    slo: {ttft: 10ms, tpot: 50ms}
    objective: 0.95
canary:
  - {target: sim, scenario: pass, rate: 20, arrival: constant}
  - {target: sim, scenario: fail, rate: 20, arrival: poisson}
`

// TestCountersExact: against the simulator's fixed timing (first token
// after 30ms), one scenario meets all its SLOs and the other misses its TTFT
// SLO on every request; every counter is exact.
func TestCountersExact(t *testing.T) {
	url := startSim(t, "slots: 0\nfixed: {ttft: 30ms, itl: 2ms}\n")
	cfg := mustConfig(t, fmt.Sprintf(twoScenarios, url))
	reg, _, mgr := run(t, cfg)

	// Every series exists at zero from the start.
	for _, s := range []string{"pass", "fail"} {
		for _, o := range prober.Outcomes {
			require.NotNil(t, find(t, reg, "sloprober_requests_finished_total", load(s, "outcome", string(o))), "outcome %s", o)
		}
		for _, r := range prober.DropReasons {
			require.NotNil(t, find(t, reg, "sloprober_requests_dropped_total", load(s, "reason", string(r))), "reason %s", r)
		}
		for _, k := range []string{"input", "output"} {
			require.NotNil(t, find(t, reg, "sloprober_token_count_fallbacks_total", load(s, "kind", k)))
			require.NotNil(t, find(t, reg, "sloprober_length_mismatches_total", load(s, "kind", k)))
		}
	}
	require.NotNil(t, find(t, reg, "sloprober_slo_missed_total", load("pass", "slo", "max_itl")))
	require.Nil(t, find(t, reg, "sloprober_slo_missed_total", load("fail", "slo", "max_itl")), "only configured SLOs")

	waitSent(t, reg, 20, "pass", "fail")
	mgr.Stop(10 * time.Second)

	for _, s := range []string{"pass", "fail"} {
		v := func(name string, extra ...string) float64 { return value(t, reg, name, load(s, extra...)) }
		sent := v("sloprober_requests_sent_total")
		dropped := v("sloprober_requests_dropped_total", "reason", "max_in_flight") + v("sloprober_requests_dropped_total", "reason", "late") +
			v("sloprober_requests_dropped_total", "reason", "shutdown")
		require.Equal(t, v("sloprober_requests_scheduled_total"), sent+dropped, "scheduled = sent + dropped")
		require.Equal(t, sent, v("sloprober_requests_finished_total", "outcome", "ok"))
		require.Equal(t, sent, v("sloprober_responses_total", "code", "200"))
		require.Equal(t, sent, v("sloprober_time_to_first_token_seconds"))
		require.Equal(t, sent, v("sloprober_request_duration_seconds"))
		require.Equal(t, sent, v("sloprober_time_per_output_token_seconds"))
		require.Equal(t, 4*sent, v("sloprober_inter_token_latency_seconds"), "four gaps a request")
		require.Equal(t, sent, v("sloprober_schedule_lag_seconds"))
		require.Equal(t, 5*sent, v("sloprober_output_tokens_total"))
		require.Equal(t, 5*sent, v("sloprober_output_chunks_total"))
		require.Equal(t, 40*sent, v("sloprober_input_tokens_total"))
		require.Equal(t, sent, v("sloprober_request_output_tokens"))
		require.Zero(t, v("sloprober_token_count_fallbacks_total", "kind", "output"))
		require.Zero(t, v("sloprober_length_mismatches_total", "kind", "input"))
		require.Zero(t, v("sloprober_requests_in_flight"))
		require.Equal(t, 20.0, v("sloprober_intended_request_rate"))
	}
	pass := func(name string, extra ...string) float64 { return value(t, reg, name, load("pass", extra...)) }
	fail := func(name string, extra ...string) float64 { return value(t, reg, name, load("fail", extra...)) }
	require.Equal(t, pass("sloprober_requests_sent_total"), pass("sloprober_requests_good_total"))
	require.Equal(t, 5*pass("sloprober_requests_sent_total"), pass("sloprober_good_output_tokens_total"))
	for _, slo := range []string{"ttft", "tpot", "e2e", "max_itl"} {
		require.Zero(t, pass("sloprober_slo_missed_total", "slo", slo))
	}
	require.Zero(t, fail("sloprober_requests_good_total"))
	require.Equal(t, fail("sloprober_requests_sent_total"), fail("sloprober_slo_missed_total", "slo", "ttft"))
	require.Zero(t, fail("sloprober_slo_missed_total", "slo", "tpot"))
	require.Equal(t, 0.01, fail("sloprober_slo_threshold_seconds", "slo", "ttft"))
	require.Equal(t, 0.95, fail("sloprober_slo_objective_ratio"))
	require.Equal(t, 0.99, pass("sloprober_slo_objective_ratio"))
	require.Equal(t, 3.0, value(t, reg, "sloprober_target_cost_per_hour", map[string]string{"target": "sim"}))
	require.Equal(t, 1.0, value(t, reg, "sloprober_target_info", map[string]string{"target": "sim", "model": "sim-model", "api": "chat"}))

	// The exposition passes promtool's lint.
	var buf bytes.Buffer
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&buf, mf)
		require.NoError(t, err)
	}
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", out)
}

// TestClassicLayout: every configured SLO threshold is a bucket boundary of
// its histogram, and the lag histogram resolves milliseconds.
func TestClassicLayout(t *testing.T) {
	url := startSim(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := mustConfig(t, fmt.Sprintf(`
targets: [{name: sim, url: "%s", model: sim-model}]
scenarios:
  - {name: a, output_tokens: 3, ignore_eos: true, slo: {ttft: 123ms, tpot: 17ms, e2e: 2500ms, max_itl: 333ms}}
  - {name: b, output_tokens: 3, ignore_eos: true, slo: {ttft: 77ms}}
canary: [{target: sim, scenario: a, rate: 10}]
`, url))
	reg, _, mgr := run(t, cfg)
	defer mgr.Stop(0)
	bounds := func(name string) []float64 {
		m := find(t, reg, name, map[string]string{"scenario": "a"})
		require.NotNil(t, m, name)
		var out []float64
		for _, b := range m.GetHistogram().GetBucket() {
			out = append(out, b.GetUpperBound())
		}
		return out
	}
	require.Contains(t, bounds("sloprober_time_to_first_token_seconds"), 0.123)
	require.Contains(t, bounds("sloprober_time_to_first_token_seconds"), 0.077, "thresholds of every scenario, for summing")
	require.Contains(t, bounds("sloprober_time_per_output_token_seconds"), 0.017)
	require.Contains(t, bounds("sloprober_request_duration_seconds"), 2.5)
	require.Contains(t, bounds("sloprober_inter_token_latency_seconds"), 0.333)
	for _, b := range []float64{0.001, 0.002, 0.005} {
		require.Contains(t, bounds("sloprober_schedule_lag_seconds"), b)
	}
	h := find(t, reg, "sloprober_time_to_first_token_seconds", map[string]string{"scenario": "a"}).GetHistogram()
	require.NotZero(t, h.GetSchema()+int32(len(h.GetPositiveSpan()))+int32(h.GetZeroThreshold()*1e9), "a native histogram too")
}

// factoryRecorder wraps the metrics and records Observe and Forget calls.
type factoryRecorder struct {
	*exporter.Metrics
	mu     sync.Mutex
	events []string
}

func (f *factoryRecorder) Observe(l prober.LoadInfo) prober.Observer {
	f.mu.Lock()
	f.events = append(f.events, "observe "+l.Key.String())
	f.mu.Unlock()
	return f.Metrics.Observe(l)
}

func (f *factoryRecorder) Forget(l prober.LoadInfo) {
	f.mu.Lock()
	f.events = append(f.events, "forget "+l.Key.String())
	f.mu.Unlock()
	f.Metrics.Forget(l)
}

// TestReloadDiff: unchanged loads keep running, changed ones restart, removed
// ones stop and their series are deleted.
func TestReloadDiff(t *testing.T) {
	url := startSim(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	base := fmt.Sprintf(`
global: {max_rate: 100}
targets: [{name: sim, url: "%s", model: sim-model}]
scenarios:
  - {name: keep, output_tokens: 2, ignore_eos: true, slo: {ttft: 1s}}
  - {name: change, output_tokens: 2, ignore_eos: true}
  - {name: remove, output_tokens: 2, ignore_eos: true}
  - {name: add, output_tokens: 2, ignore_eos: true}
canary:
  - {target: sim, scenario: keep, rate: 20, arrival: constant}
`, url)
	cfg1 := mustConfig(t, base+`
  - {target: sim, scenario: change, rate: 20, arrival: constant}
  - {target: sim, scenario: remove, rate: 20, arrival: constant}
`)
	cfg2 := mustConfig(t, base+`
  - {target: sim, scenario: change, rate: 10, arrival: constant}
  - {target: sim, scenario: add, rate: 20, arrival: constant, enabled: false}
`)
	reg := prometheus.NewRegistry()
	rec := &factoryRecorder{Metrics: exporter.NewMetrics(reg)}
	mgr := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	require.NoError(t, mgr.Apply(cfg1, func() { rec.ApplyConfig(cfg1) }))
	waitSent(t, reg, 10, "keep", "change", "remove")
	keepBefore := value(t, reg, "sloprober_requests_sent_total", load("keep"))

	require.NoError(t, mgr.Apply(cfg2, func() { rec.ApplyConfig(cfg2) }))
	require.GreaterOrEqual(t, value(t, reg, "sloprober_requests_sent_total", load("keep")), keepBefore, "an unchanged load keeps its series")
	require.Less(t, value(t, reg, "sloprober_requests_sent_total", load("change")), 10.0, "a changed load starts again")
	require.Equal(t, 10.0, value(t, reg, "sloprober_intended_request_rate", load("change")))
	require.Nil(t, find(t, reg, "sloprober_requests_sent_total", load("remove")), "a removed load's series are deleted")
	require.Nil(t, find(t, reg, "sloprober_time_to_first_token_seconds", load("remove")))
	require.Zero(t, value(t, reg, "sloprober_intended_request_rate", load("add")), "a paused load has series, at rate 0")
	mgr.Stop(5 * time.Second)

	events := strings.Join(rec.events, "\n")
	require.Equal(t, 1, strings.Count(events, "observe sim/keep/canary"), events)
	require.Equal(t, 0, strings.Count(events, "forget sim/keep/canary"), events)
	require.Equal(t, 2, strings.Count(events, "observe sim/change/canary"), events)
	require.Equal(t, 1, strings.Count(events, "forget sim/change/canary"), events)
	require.Equal(t, 1, strings.Count(events, "forget sim/remove/canary"), events)
	require.Zero(t, value(t, reg, "sloprober_requests_sent_total", load("add")))
}

// TestShutdownOutcome: requests cancelled when the grace period ends are
// counted as shutdown and stay out of the attainment denominator.
func TestShutdownOutcome(t *testing.T) {
	url := startSim(t, "slots: 0\nfixed: {ttft: 10s, itl: 1ms}\n")
	cfg := mustConfig(t, fmt.Sprintf(twoScenarios, url))
	reg, _, mgr := run(t, cfg)
	waitSent(t, reg, 3, "pass")
	mgr.Stop(50 * time.Millisecond)
	require.Error(t, mgr.Apply(cfg, nil), "no loads start once stopping")
	v := func(name string, extra ...string) float64 { return value(t, reg, name, load("pass", extra...)) }
	sent := v("sloprober_requests_sent_total")
	require.Equal(t, sent, v("sloprober_requests_finished_total", "outcome", "shutdown"))
	require.Zero(t, v("sloprober_slo_missed_total", "slo", "ttft"), "shutdown is not in the denominator")
	require.Zero(t, v("sloprober_time_to_first_token_seconds"), "no token arrived")
	require.Equal(t, sent, v("sloprober_schedule_lag_seconds"), "lag is observed for every sent request")
	require.Zero(t, v("sloprober_requests_in_flight"))
}

// TestCancellation: requests the workload cancels end as cancelled, add no
// TTFT or ITL, and stay out of the attainment denominator; one that ends
// before its cancel time keeps its natural outcome.
func TestCancellation(t *testing.T) {
	url := startSim(t, "slots: 0\nfixed: {ttft: 20ms, itl: 20ms}\n")
	cfg := mustConfig(t, fmt.Sprintf(`
targets: [{name: sim, url: "%s", model: sim-model}]
scenarios:
  - {name: tab-closed, output_tokens: 50, ignore_eos: true, slo: {ttft: 1s}, cancel: {share: 1, after: 100ms}}
  - {name: too-late, output_tokens: 2, ignore_eos: true, slo: {ttft: 1s}, cancel: {share: 1, after: 5s}}
canary:
  - {target: sim, scenario: tab-closed, rate: 20, arrival: constant}
  - {target: sim, scenario: too-late, rate: 20, arrival: constant}
`, url))
	reg, _, mgr := run(t, cfg)
	waitSent(t, reg, 10, "tab-closed", "too-late")
	mgr.Stop(10 * time.Second)
	v := func(s, name string, extra ...string) float64 { return value(t, reg, name, load(s, extra...)) }
	sent := v("tab-closed", "sloprober_requests_sent_total")
	require.Equal(t, sent, v("tab-closed", "sloprober_requests_finished_total", "outcome", "cancelled"))
	require.Zero(t, v("tab-closed", "sloprober_time_to_first_token_seconds"), "cancelled requests add no TTFT")
	require.Zero(t, v("tab-closed", "sloprober_inter_token_latency_seconds"), "nor ITL")
	require.Zero(t, v("tab-closed", "sloprober_slo_missed_total", "slo", "ttft"), "not in the denominator")
	require.Zero(t, v("tab-closed", "sloprober_requests_good_total"))
	require.Greater(t, v("tab-closed", "sloprober_output_tokens_total"), 0.0, "tokens before the cancel are counted")

	sent = v("too-late", "sloprober_requests_sent_total")
	require.Equal(t, sent, v("too-late", "sloprober_requests_finished_total", "outcome", "ok"))
	require.Equal(t, sent, v("too-late", "sloprober_requests_good_total"))
}

// TestMixSeries: a mix gives each scenario its own series, splits the
// intended rate by weight and draws scenarios by weight.
func TestMixSeries(t *testing.T) {
	url := startSim(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := mustConfig(t, fmt.Sprintf(`
targets: [{name: sim, url: "%s", model: sim-model}]
scenarios:
  - {name: a, output_tokens: 2, ignore_eos: true, slo: {ttft: 1s}}
  - {name: b, output_tokens: 2, ignore_eos: true, slo: {ttft: 1ms}}
canary:
  - {target: sim, mix: {a: 3, b: 1}, rate: 40, arrival: poisson}
`, url))
	reg, _, mgr := run(t, cfg)
	require.Equal(t, 30.0, value(t, reg, "sloprober_intended_request_rate", load("a")))
	require.Equal(t, 10.0, value(t, reg, "sloprober_intended_request_rate", load("b")))
	require.Equal(t, 0.001, value(t, reg, "sloprober_slo_threshold_seconds", load("b", "slo", "ttft")), "each scenario keeps its SLOs")
	waitSent(t, reg, 60, "a")
	mgr.Stop(5 * time.Second)
	a, b := value(t, reg, "sloprober_requests_scheduled_total", load("a")), value(t, reg, "sloprober_requests_scheduled_total", load("b"))
	n := a + b
	require.InDelta(t, 0.75*n, a, 4*math.Sqrt(n*0.75*0.25)+1, "a: %v, b: %v", a, b)
	require.Equal(t, value(t, reg, "sloprober_requests_sent_total", load("a")), value(t, reg, "sloprober_requests_good_total", load("a")))
}

// TestLagObservedAtSend: the lag of a request is observed when it is sent,
// so sloprober_schedule_lag_seconds_count equals requests_sent_total while
// requests are in flight, even those that never end.
func TestLagObservedAtSend(t *testing.T) {
	// A server that never answers: every request stays in flight until
	// the manager stops. (The server sees a client go away only once it
	// has read the request body.)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for handlers
	cfg := mustConfig(t, fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: m, max_in_flight: 5}]
scenarios: [{name: silent, input_tokens: 16, output_tokens: 2}]
canary: [{target: sim, scenario: silent, rate: 40, arrival: constant}]
`, srv.URL))
	reg, _, mgr := run(t, cfg)
	defer mgr.Stop(0)
	v := func(name string, extra ...string) float64 { return value(t, reg, name, load("silent", extra...)) }
	// The five slots fill and stay taken, so later arrivals are dropped.
	// A request is counted as sent, with its lag, when its HTTP call
	// starts, which may be a moment after it took its slot: wait for the
	// five sends rather than assume them at the first drop.
	require.Eventually(t, func() bool {
		return v("sloprober_requests_dropped_total", "reason", "max_in_flight") > 0 &&
			v("sloprober_requests_sent_total") == 5 && v("sloprober_schedule_lag_seconds") == 5
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 5.0, v("sloprober_requests_in_flight"), "no request has ended")
	require.Equal(t, 5.0, v("sloprober_schedule_lag_seconds"), "a lag for every send, none of which has ended")
	for _, o := range prober.Outcomes {
		require.Zero(t, v("sloprober_requests_finished_total", "outcome", string(o)))
	}
}

// TestCalibrationMetrics: sloprober_calibration_frozen{target} and
// sloprober_calibration_rejected_total{target} exist at zero for every
// configured target, keep their values over a reload that keeps the target,
// and disappear with it.
func TestCalibrationMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := exporter.NewMetrics(reg)
	var obs prober.CalibrationObserver = m
	target := func(name string) map[string]string { return map[string]string{"target": name} }
	frozen := func(name string) float64 { return value(t, reg, "sloprober_calibration_frozen", target(name)) }
	rejected := func(name string) float64 { return value(t, reg, "sloprober_calibration_rejected_total", target(name)) }

	// Before any configuration, a target's series appear on its first call.
	obs.CalibrationRejected("early")
	require.Equal(t, 1.0, rejected("early"))
	require.Zero(t, frozen("early"))

	const targets = `
targets:
%s
scenarios: [{name: chat}]
canary: [{target: a, scenario: chat, rate: 1}]
`
	m.ApplyConfig(mustConfig(t, fmt.Sprintf(targets, `  - {name: a, url: "http://127.0.0.1:1/v1", model: m}
  - {name: b, url: "http://127.0.0.1:2/v1", model: m}`)))
	require.Nil(t, find(t, reg, "sloprober_calibration_rejected_total", target("early")), "not configured")
	for _, name := range []string{"a", "b"} {
		require.Zero(t, frozen(name), "created at zero")
		require.Zero(t, rejected(name), "created at zero")
	}

	// Calls come from request goroutines, concurrently.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				obs.CalibrationRejected("a")
			}
		})
	}
	wg.Wait()
	obs.CalibrationFrozen("a", true)
	require.Equal(t, 800.0, rejected("a"))
	require.Equal(t, 1.0, frozen("a"))
	require.Zero(t, frozen("b"))

	// A reload that keeps target a keeps its state, as the prober keeps
	// its calibration; removing b deletes its series, and a request of b
	// ending after the reload does not bring them back.
	m.ApplyConfig(mustConfig(t, fmt.Sprintf(targets, `  - {name: a, url: "http://127.0.0.1:1/v1", model: m}`)))
	require.Equal(t, 1.0, frozen("a"))
	require.Equal(t, 800.0, rejected("a"))
	obs.CalibrationRejected("b")
	obs.CalibrationFrozen("b", true)
	require.Nil(t, find(t, reg, "sloprober_calibration_frozen", target("b")))
	require.Nil(t, find(t, reg, "sloprober_calibration_rejected_total", target("b")))

	obs.CalibrationFrozen("a", false)
	require.Zero(t, frozen("a"), "0 once adapting again")
}

// TestRemovedSeriesLinger: a removed load's series stay for the TTL with
// their final counts, then go; a load started again with the same labels
// replaces them at once, from zero.
func TestRemovedSeriesLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := exporter.NewMetrics(reg)
		m.SetRemovedSeriesTTL(30 * time.Second)
		info := prober.LoadInfo{Key: config.Key{Target: "t", Scenario: "s", Test: "canary"}, Rate: 1}
		labels := map[string]string{"target": "t", "scenario": "s", "test": "canary"}
		obs := m.Observe(info)
		obs.Scheduled()
		obs.Sent(0)

		m.Forget(info)
		time.Sleep(29 * time.Second)
		require.Equal(t, 1.0, value(t, reg, "sloprober_requests_sent_total", labels), "the final count is still there")
		time.Sleep(2 * time.Second)
		require.Nil(t, find(t, reg, "sloprober_requests_sent_total", labels), "deleted after the TTL")

		obs = m.Observe(info)
		obs.Sent(0)
		m.Forget(info)
		require.Equal(t, 1.0, value(t, reg, "sloprober_requests_sent_total", labels))
		m.Observe(info) // started again: replaces the lingering series at once
		require.Equal(t, 0.0, value(t, reg, "sloprober_requests_sent_total", labels))
		time.Sleep(time.Minute)
		require.NotNil(t, find(t, reg, "sloprober_requests_sent_total", labels), "the old deletion does not touch the new series")
	})
}
