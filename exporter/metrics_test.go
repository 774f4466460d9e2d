package exporter_test

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// run applies cfg with a manager on a fresh registry; the manager's
// observers are the metrics and those of extra, composed as cmd does.
func run(t *testing.T, cfg *config.Config, extra ...prober.ObserverFactory) (*prometheus.Registry, *exporter.Metrics, *prober.Manager) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := exporter.NewMetrics(reg)
	mgr := prober.NewManager(promslog.NewNopLogger(), prober.Fanout(append([]prober.ObserverFactory{m}, extra...)...), "sloprober/test")
	m.ApplyConfig(cfg)
	require.NoError(t, mgr.ApplyConfig(cfg))
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
    slo: {ttft: 5s, tpot: 1s, e2e: 30s, max_itl: 5s}
  - name: fail
    input_tokens: 40
    output_tokens: 5
    ignore_eos: true
    slo: {ttft: 10ms, tpot: 1s}
    objective: 0.95
canary:
  - {target: sim, scenario: pass, rate: 20, arrival: constant}
  - {target: sim, scenario: fail, rate: 20, arrival: poisson}
`

// TestCountersExact: against the simulator's fixed timing (first token
// after 30ms), one scenario meets all its SLOs and the other misses its TTFT
// SLO on every request; every counter is exact. The SLOs met are far from
// the simulator's timing (a TPOT of 1 s against 2 ms gaps), so that a
// starved host, which delays reads by hundreds of ms, does not miss one:
// a make test at nice 19 beside other work missed one at 50 ms.
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
		for _, r := range prober.RetryReasons {
			require.NotNil(t, find(t, reg, "sloprober_request_retries_total", map[string]string{"target": "sim", "reason": r}), "reason %s", r)
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
		obs.Sent(time.Now(), 0)

		m.Forget(info)
		time.Sleep(29 * time.Second)
		require.Equal(t, 1.0, value(t, reg, "sloprober_requests_sent_total", labels), "the final count is still there")
		time.Sleep(2 * time.Second)
		require.Nil(t, find(t, reg, "sloprober_requests_sent_total", labels), "deleted after the TTL")

		obs = m.Observe(info)
		obs.Sent(time.Now(), 0)
		m.Forget(info)
		require.Equal(t, 1.0, value(t, reg, "sloprober_requests_sent_total", labels))
		m.Observe(info) // started again: replaces the lingering series at once
		require.Equal(t, 0.0, value(t, reg, "sloprober_requests_sent_total", labels))
		time.Sleep(time.Minute)
		require.NotNil(t, find(t, reg, "sloprober_requests_sent_total", labels), "the old deletion does not touch the new series")
	})
}

// intendedNames are the gauges of what a load is configured to send.
var intendedNames = []string{"sloprober_intended_concurrency", "sloprober_intended_request_rate"}

// intended is the exposition of testKey's intended gauges.
func intended(rate float64, clients int) string {
	return fmt.Sprintf(`
# HELP sloprober_intended_concurrency Clients of a closed-loop load: each sends its next request when its previous one ends; 0 for open-loop loads.
# TYPE sloprober_intended_concurrency gauge
sloprober_intended_concurrency{scenario="s",target="t",test="canary"} %d
# HELP sloprober_intended_request_rate Configured arrival rate, req/s; 0 while paused.
# TYPE sloprober_intended_request_rate gauge
sloprober_intended_request_rate{scenario="s",target="t",test="canary"} %g
`, clients, rate)
}

// exposition returns the text exposition of every family of reg but the
// intended gauges.
func exposition(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		if !slices.Contains(intendedNames, mf.GetName()) {
			names = append(names, mf.GetName())
		}
	}
	require.NotEmpty(t, names)
	b, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, names...)
	require.NoError(t, err)
	return string(b)
}

// TestObserveIntended: Observe sets a load's intended request rate, 0 for a
// closed-loop or paused load, and its intended concurrency, its clients, 0
// for an open-loop load.
func TestObserveIntended(t *testing.T) {
	for _, tc := range []struct {
		name    string
		info    prober.LoadInfo
		rate    float64
		clients int
	}{
		{name: "open loop", info: prober.LoadInfo{Rate: 20, Arrival: "poisson"}, rate: 20},
		{name: "paused", info: prober.LoadInfo{Arrival: "constant"}},
		{name: "closed loop", info: prober.LoadInfo{Clients: 8, Arrival: "closed"}, clients: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := exporter.NewMetrics(reg)
			tc.info.Key, tc.info.SLOs = testKey, testSLOs
			m.Observe(tc.info)
			require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(intended(tc.rate, tc.clients)), intendedNames...))
		})
	}
}

// TestUpdate: Update sets the intended request rate and concurrency of a
// running load and nothing else: its counters, histograms and other gauges
// go on, and keep counting.
func TestUpdate(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after prober.LoadInfo
		rate          float64
		clients       int
	}{
		{name: "rate step", before: prober.LoadInfo{Rate: 10, Arrival: "poisson"}, after: prober.LoadInfo{Rate: 25, Arrival: "poisson"}, rate: 25},
		{name: "paused", before: prober.LoadInfo{Rate: 10, Arrival: "constant"}, after: prober.LoadInfo{Arrival: "constant"}},
		{name: "clients step", before: prober.LoadInfo{Clients: 4, Arrival: "closed"}, after: prober.LoadInfo{Clients: 16, Arrival: "closed"}, clients: 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := exporter.NewMetrics(reg)
			tc.before.Key, tc.before.SLOs, tc.before.Objective = testKey, testSLOs, 0.99
			tc.after.Key, tc.after.SLOs, tc.after.Objective = testKey, testSLOs, 0.99
			obs := m.Observe(tc.before)
			finish(obs, "r0", true)
			finish(obs, "r1", false)
			obs.Scheduled()
			obs.Dropped(prober.DropMaxInFlight)
			obs.Scheduled()
			obs.Sent(time.Now(), time.Millisecond) // still in flight
			before := exposition(t, reg)
			require.Contains(t, before, `sloprober_requests_sent_total{scenario="s",target="t",test="canary"} 3`)
			require.Contains(t, before, `sloprober_requests_in_flight{scenario="s",target="t",test="canary"} 1`)

			m.Update(tc.after)
			require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(intended(tc.rate, tc.clients)), intendedNames...))
			require.Equal(t, before, exposition(t, reg), "Update changes nothing but the intended gauges")

			finish(obs, "r2", true)
			require.Equal(t, 4.0, value(t, reg, "sloprober_requests_sent_total", testLabels), "the counters go on")
			require.Equal(t, 2.0, value(t, reg, "sloprober_requests_good_total", testLabels))
			require.Equal(t, 2.0, value(t, reg, "sloprober_request_duration_seconds", testLabels))
		})
	}
}

// TestForgetIntended: Forget deletes a load's intended concurrency with its
// other series, once the removed-series TTL has passed; meanwhile it keeps
// its final value, and an Update of the forgotten load neither changes it
// nor brings it back.
func TestForgetIntended(t *testing.T) {
	for _, ttl := range []time.Duration{0, 30 * time.Second} {
		t.Run(fmt.Sprintf("ttl %v", ttl), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				m := exporter.NewMetrics(reg)
				m.SetRemovedSeriesTTL(ttl)
				info := prober.LoadInfo{Key: testKey, Clients: 8, Arrival: "closed", SLOs: testSLOs}
				m.Observe(info)
				m.Forget(info)
				step := info
				step.Clients = 16
				m.Update(step)
				if ttl > 0 {
					time.Sleep(ttl - time.Second)
					require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(intended(0, 8)), intendedNames...),
						"the final value stays for the TTL")
					time.Sleep(2 * time.Second)
				}
				n, err := testutil.GatherAndCount(reg, intendedNames...)
				require.NoError(t, err)
				require.Zero(t, n, "deleted with the load's other series")
				require.Nil(t, find(t, reg, "sloprober_requests_sent_total", testLabels))
				m.Update(step)
				n, err = testutil.GatherAndCount(reg, intendedNames...)
				require.NoError(t, err)
				require.Zero(t, n, "a forgotten load gets no series back")
			})
		})
	}
}

// TestCachedPromptTokens: the prompt tokens a server reports cached are
// counted per load, within the prompt tokens: a canary's cached share is
// rate(cached) / rate(input). Before, the replies' cached_tokens fed
// probe, spans and tests but no daemon series.
func TestCachedPromptTokens(t *testing.T) {
	// An engine (the fixed mode has no cache): 8 slots, 2 ms steps.
	url := startSim(t, "slots: 8\nprefill: {base: 1ms, per_token: 0s}\ndecode: {base: 2ms, per_sequence: 0s}\nprefix_cache: {block_tokens: 16, max_blocks: 1000}\n")
	cfg := mustConfig(t, fmt.Sprintf(`
targets: [{name: sim, url: "%s", model: sim-model}]
scenarios:
  - {name: shared, input_tokens: 200, output_tokens: 2, ignore_eos: true, prefix: {tokens: 128, share: 1, groups: 1}}
  - {name: fresh, input_tokens: 200, output_tokens: 2, ignore_eos: true}
canary:
  - {target: sim, scenario: shared, rate: 20, arrival: constant}
  - {target: sim, scenario: fresh, rate: 20, arrival: constant}
`, url))
	reg, _, mgr := run(t, cfg)
	require.NotNil(t, find(t, reg, "sloprober_cached_prompt_tokens_total", load("fresh")), "at 0 from the start")
	waitSent(t, reg, 10, "shared", "fresh")
	mgr.Stop(10 * time.Second)
	cached, input := value(t, reg, "sloprober_cached_prompt_tokens_total", load("shared")), value(t, reg, "sloprober_input_tokens_total", load("shared"))
	require.Positive(t, cached, "a shared prefix of 128 tokens is found cached after the first request")
	require.LessOrEqual(t, cached, input)
	require.Zero(t, value(t, reg, "sloprober_cached_prompt_tokens_total", load("fresh")))
}
