package prober_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// counts is what a countingFactory saw of one label set.
type counts struct {
	observed, updated, forgot          int
	scheduled, sent, dropped, finished int
	inFlight, maxInFlight              int
	maxLag                             time.Duration
	failed, shutdown, missed, ttfts    int
	notSent                            int
	info                               prober.LoadInfo
}

// countingFactory counts the events of every label set.
type countingFactory struct {
	mu   sync.Mutex
	keys map[config.Key]*counts
}

func newCountingFactory() *countingFactory {
	return &countingFactory{keys: map[config.Key]*counts{}}
}

func (f *countingFactory) at(k config.Key) *counts {
	c, ok := f.keys[k]
	if !ok {
		c = &counts{}
		f.keys[k] = c
	}
	return c
}

// get returns a copy of a label set's counts.
func (f *countingFactory) get(k config.Key) counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.at(k)
}

func (f *countingFactory) Observe(info prober.LoadInfo) prober.Observer {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.at(info.Key)
	*c = counts{observed: c.observed + 1, updated: c.updated, forgot: c.forgot, info: info}
	return &countingObserver{f: f, k: info.Key}
}

func (f *countingFactory) Update(info prober.LoadInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.at(info.Key)
	c.updated++
	c.info = info
}

func (f *countingFactory) Forget(info prober.LoadInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at(info.Key).forgot++
}

type countingObserver struct {
	f *countingFactory
	k config.Key
}

func (o *countingObserver) do(fn func(*counts)) {
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	fn(o.f.at(o.k))
}

func (o *countingObserver) Scheduled() { o.do(func(c *counts) { c.scheduled++ }) }
func (o *countingObserver) Dropped(prober.DropReason) {
	o.do(func(c *counts) { c.dropped++ })
}

func (o *countingObserver) Sent(_ time.Time, lag time.Duration) {
	o.do(func(c *counts) {
		c.sent++
		c.inFlight++
		c.maxInFlight = max(c.maxInFlight, c.inFlight)
		c.maxLag = max(c.maxLag, lag)
	})
}

func (o *countingObserver) Finished(r *prober.Result, m *prober.Measurement) {
	o.do(func(c *counts) {
		c.finished++
		if r.NotSent {
			c.notSent++
		} else {
			c.inFlight--
		}
		switch r.Outcome {
		case prober.OutcomeOK:
		case prober.OutcomeShutdown:
			c.shutdown++
		default:
			c.failed++
		}
		c.missed += len(m.Missed)
		if m.HasTTFT {
			c.ttfts++
		}
	})
}

// managerConfig loads a configuration whose %s is the simulator's URL.
func managerConfig(t *testing.T, url, yml string) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(fmt.Sprintf(yml, url)), false)
	require.NoError(t, err)
	return cfg
}

// testSpec is an open-loop spec of a test run on cfg's first target and
// scenario.
func testSpec(cfg *config.Config, test string, rate float64) config.LoadSpec {
	s := cfg.Scenarios[0]
	return config.LoadSpec{
		Target:    *cfg.Targets[0],
		Scenarios: []config.ScenarioSpec{{ScenarioConfig: *s, Key: config.Key{Target: cfg.Targets[0].Name, Scenario: s.Name, Test: test}, Weight: 1}},
		Arrival:   config.ArrivalConstant,
		Rate:      rate,
	}
}

const ownersConfig = `
global: {max_rate: 50, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}, {name: b, input_tokens: 8, output_tokens: 2}]
canary: [{target: sim, scenario: a, rate: 20, arrival: constant}]
`

// TestOwnersApplyApart: a test run's loads run beside the canary; a
// reload of the canary leaves them running, and ending the test leaves
// the canary running.
func TestOwnersApplyApart(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := managerConfig(t, sim.URL, ownersConfig)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.ApplyConfig(cfg))
	canary := config.Key{Target: "sim", Scenario: "a", Test: "canary"}
	step := config.Key{Target: "sim", Scenario: "a", Test: "step"}
	require.NoError(t, m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 20)}))
	require.Eventually(t, func() bool { return f.get(step).finished >= 5 }, 5*time.Second, 5*time.Millisecond)

	// A reload changing the canary (another scenario) keeps the test.
	reloaded := managerConfig(t, sim.URL, `
global: {max_rate: 50, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}, {name: b, input_tokens: 8, output_tokens: 2}]
canary: [{target: sim, scenario: b, rate: 20, arrival: constant}]
`)
	require.NoError(t, m.ApplyConfig(reloaded))
	before := f.get(step).finished
	require.Eventually(t, func() bool { return f.get(step).finished >= before+5 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, f.get(step).observed)
	require.Zero(t, f.get(step).forgot, "the canary's reload left the test's load alone")
	require.Equal(t, 1, f.get(canary).forgot)

	owners := map[string]string{}
	for _, st := range m.Loads() {
		owners[st.Key.String()] = st.Owner
	}
	require.Equal(t, map[string]string{"sim/b/canary": "canary", "sim/a/step": "step"}, owners)

	// The test ends: the canary goes on.
	require.NoError(t, m.Apply("step", nil))
	require.Equal(t, 1, f.get(step).forgot)
	b := config.Key{Target: "sim", Scenario: "b", Test: "canary"}
	before = f.get(b).finished
	require.Eventually(t, func() bool { return f.get(b).finished >= before+5 }, 5*time.Second, 5*time.Millisecond)
	require.Zero(t, f.get(b).forgot)
	for _, k := range []config.Key{b, step} {
		require.Zero(t, f.get(k).failed, k)
		require.Zero(t, f.get(k).dropped, k)
	}
}

// TestApplyChecks: a spec that would break a cap or take another owner's
// labels is refused with an error that says which, and changes nothing.
func TestApplyChecks(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	checksConfig := strings.Replace(ownersConfig, "max_in_flight: 100", "max_in_flight: 300", 1)
	cfg := managerConfig(t, sim.URL, checksConfig)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.ApplyConfig(cfg))
	require.NoError(t, m.Apply("soak", []config.LoadSpec{testSpec(cfg, "soak", 10)}))

	closed := testSpec(cfg, "step", 0)
	closed.Arrival, closed.Clients, closed.MaxRate = config.ArrivalClosed, 60, 10
	manyClients := closed
	manyClients.Clients = 200
	mix := testSpec(cfg, "step", 1)
	mix.Scenarios = append(mix.Scenarios, mix.Scenarios[0])
	mix.Scenarios[1].Key.Scenario, mix.Scenarios[1].Name = "b", "b"

	for _, tc := range []struct {
		name  string
		owner string
		specs []config.LoadSpec
		err   string
	}{
		{"rate over the cap", "step", []config.LoadSpec{testSpec(cfg, "step", 25)},
			"the loads of step (25 req/s) and those running (canary 20 req/s, soak 10 req/s) add up to 55 req/s, above global.max_rate 50"},
		{"closed loop's maximum rate counts", "step", []config.LoadSpec{func() config.LoadSpec { s := closed; s.MaxRate = 21; return s }()},
			"add up to 51 req/s, above global.max_rate 50"},
		{"clients over the in-flight cap", "step", []config.LoadSpec{manyClients},
			"the closed-loop loads of step (200 clients) keep 200 clients, and the open-loop loads' max_in_flight add up to 128: above global.max_in_flight 300"},
		{"another owner's labels", "step", []config.LoadSpec{testSpec(cfg, "canary", 1)},
			`load sim/a/canary: a load of step must have test="step", got "canary"`},
		{"the same labels twice", "step", []config.LoadSpec{testSpec(cfg, "step", 1), mix},
			`load sim/a/step+sim/b/step: target="sim" scenario="a" test="step" are also the labels of load sim/a/step`},
		{"invalid spec", "step", []config.LoadSpec{testSpec(cfg, "step", 0)},
			"load sim/a/step: rate must be between 0.0001 and 10000 req/s, got 0"},
		{"closed loop without a maximum rate", "step", []config.LoadSpec{func() config.LoadSpec { s := closed; s.MaxRate = 0; return s }()},
			"a closed-loop load's max rate must be between"},
		{"the configuration's owner", "canary", nil, `owner "canary" is the configuration's: use ApplyConfig`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := m.Apply(tc.owner, tc.specs)
			require.ErrorContains(t, err, tc.err)
		})
	}
	require.NoError(t, m.Apply("step", []config.LoadSpec{closed}), "60 clients and 10 req/s fit")

	// A configuration that no longer fits beside the running tests is
	// refused too: the canary at 35 req/s, with 20 of the tests.
	require.ErrorContains(t, m.SetLimits(prober.Limits{MaxRate: 35, MaxInFlight: 300}),
		"the running loads (canary 20 req/s, soak 10 req/s, step 10 req/s) add up to 40 req/s, above global.max_rate 35")
	require.ErrorContains(t, m.SetLimits(prober.Limits{MaxRate: 50, MaxInFlight: 150}),
		"the running closed-loop loads and those running (step 60) keep 60 clients, and the open-loop loads' max_in_flight add up to 128: above global.max_in_flight 150")
	tight := managerConfig(t, sim.URL, `
global: {max_rate: 50, max_in_flight: 300}
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}]
canary: [{target: sim, scenario: a, rate: 35, arrival: constant}]
`)
	require.ErrorContains(t, m.ApplyConfig(tight), "the loads of canary (35 req/s) and those running (soak 10 req/s, step 10 req/s) add up to 55 req/s")
	require.Equal(t, 20.0, f.get(config.Key{Target: "sim", Scenario: "a", Test: "canary"}).info.Rate, "the canary is unchanged")
}

// TestRateChangesInPlace: a step test's next level changes the load's
// rate without restarting it: its series go on (one Observe, no Forget),
// the observers are told the new rate, and the requests come at it.
func TestRateChangesInPlace(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := managerConfig(t, sim.URL, ownersConfig)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	k := config.Key{Target: "sim", Scenario: "a", Test: "step"}
	require.NoError(t, m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 2)}))
	require.Eventually(t, func() bool { return f.get(k).finished >= 2 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 40)}))
	c := f.get(k)
	require.Equal(t, 40.0, c.info.Rate)
	require.Equal(t, 1, c.updated)
	// 20 requests more at 40 req/s take 0.5 s; at 2 req/s they would take 10 s.
	start := time.Now()
	require.Eventually(t, func() bool { return f.get(k).finished >= c.finished+20 }, 5*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(start), 3*time.Second, "the new rate applies")
	c = f.get(k)
	require.Equal(t, 1, c.observed, "the series were not recreated")
	require.Zero(t, c.forgot)
	require.Zero(t, c.failed)
	require.Zero(t, c.dropped)
}

// TestClosedLoop: N clients keep at most N requests in flight, reach N
// against a slow target, never drop, have lag 0, and N changes in place.
// The simulator answers each request in 20 ms + 9 x 5 ms = 65 ms, so 4
// clients make about 60 requests a second and 8 about 120.
func TestClosedLoop(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\n")
	cfg := managerConfig(t, sim.URL, `
global: {max_rate: 1000, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 10, ignore_eos: true}]
`)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	k := config.Key{Target: "sim", Scenario: "a", Test: "step"}
	spec := testSpec(cfg, "step", 0)
	spec.Arrival, spec.Clients, spec.MaxRate = config.ArrivalClosed, 4, 1000
	require.NoError(t, m.ApplyConfig(cfg))
	require.NoError(t, m.Apply("step", []config.LoadSpec{spec}))
	c := f.get(k)
	require.Equal(t, prober.LoadInfo{Key: k, Clients: 4, Arrival: "closed", Objective: 0.99}, c.info)
	require.Eventually(t, func() bool { return f.get(k).maxInFlight == 4 && f.get(k).finished >= 20 }, 5*time.Second, 5*time.Millisecond)

	spec.Clients = 8
	require.NoError(t, m.Apply("step", []config.LoadSpec{spec}))
	require.Eventually(t, func() bool { return f.get(k).maxInFlight == 8 }, 5*time.Second, 5*time.Millisecond)
	before := f.get(k).finished
	require.Eventually(t, func() bool { return f.get(k).finished >= before+40 }, 5*time.Second, 5*time.Millisecond)

	spec.Clients = 2
	require.NoError(t, m.Apply("step", []config.LoadSpec{spec}))
	require.NoError(t, m.Apply("step", nil))
	c = f.get(k)
	require.Equal(t, 8, c.maxInFlight, "never more than the clients")
	require.Equal(t, 2, c.updated)
	require.Equal(t, 1, c.observed)
	require.Equal(t, c.scheduled, c.sent, "every arrival of a closed loop is sent")
	require.Equal(t, c.sent, c.finished)
	require.Zero(t, c.dropped)
	require.Zero(t, c.maxLag, "a closed-loop request is due when it is sent")
	require.Zero(t, c.failed)
}

// TestClosedLoopPaced: a closed loop's maximum rate holds however fast the
// target answers: 8 clients capped at 20 req/s send about 20 in a second.
func TestClosedLoopPaced(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := managerConfig(t, sim.URL, `
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}]
`)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	k := config.Key{Target: "sim", Scenario: "a", Test: "step"}
	spec := testSpec(cfg, "step", 0)
	spec.Arrival, spec.Clients, spec.MaxRate = config.ArrivalClosed, 8, 20
	defer m.Stop(time.Second)
	start := time.Now()
	require.NoError(t, m.Apply("step", []config.LoadSpec{spec}))
	require.Eventually(t, func() bool { return f.get(k).sent >= 21 }, 5*time.Second, time.Millisecond)
	// The 21st send is due 1 s after the first: it cannot come earlier,
	// and comes within a second more even on a loaded machine.
	elapsed := time.Since(start)
	require.GreaterOrEqual(t, elapsed, 950*time.Millisecond)
	require.Less(t, elapsed, 2*time.Second)
	require.Zero(t, f.get(k).failed)
}

// TestOwnTargetClient: a test whose target is configured otherwise than the
// canary's (here another timeout) runs on a client of its own, kept across
// its rate changes, and leaves the canary's client and loads alone.
func TestOwnTargetClient(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := managerConfig(t, sim.URL, ownersConfig)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.ApplyConfig(cfg))
	spec := testSpec(cfg, "soak", 5)
	spec.Target.Timeout = model.Duration(30 * time.Second)
	require.NoError(t, m.Apply("soak", []config.LoadSpec{spec}))
	spec.Rate = 10
	require.NoError(t, m.Apply("soak", []config.LoadSpec{spec}))
	k := config.Key{Target: "sim", Scenario: "a", Test: "soak"}
	require.Eventually(t, func() bool { return f.get(k).finished >= 3 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, m.ApplyConfig(cfg), "the same configuration again")
	canary := f.get(config.Key{Target: "sim", Scenario: "a", Test: "canary"})
	require.Equal(t, 1, canary.observed)
	require.Zero(t, canary.forgot)
	soak := f.get(k)
	require.Equal(t, 1, soak.observed, "the rate change kept the test's own client")
	require.Equal(t, 1, soak.updated)
	require.Zero(t, soak.failed)
}

// TestReloadDiff: a reload keeps unchanged loads, changes in place a load
// whose rate alone changed or that was paused, restarts changed ones,
// stops removed ones and starts added ones (paused: at rate 0, sending
// nothing).
func TestReloadDiff(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	base := `
global: {max_rate: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios:
  - {name: keep, output_tokens: 2, ignore_eos: true, slo: {ttft: 1s}}
  - {name: change, output_tokens: 2, ignore_eos: true}
  - {name: step, output_tokens: 2, ignore_eos: true}
  - {name: remove, output_tokens: 2, ignore_eos: true}
  - {name: add, output_tokens: 2, ignore_eos: true}
  - {name: pause, output_tokens: 2, ignore_eos: true}
canary:
  - {target: sim, scenario: keep, rate: 20, arrival: constant}
`
	cfg1 := managerConfig(t, sim.URL, base+`
  - {target: sim, scenario: change, rate: 20, arrival: constant}
  - {target: sim, scenario: step, rate: 20, arrival: constant}
  - {target: sim, scenario: remove, rate: 20, arrival: constant}
  - {target: sim, scenario: pause, rate: 20, arrival: constant}
`)
	cfg2 := managerConfig(t, sim.URL, base+`
  - {target: sim, scenario: change, rate: 20, arrival: poisson}
  - {target: sim, scenario: step, rate: 10, arrival: constant}
  - {target: sim, scenario: add, rate: 20, arrival: constant, enabled: false}
  - {target: sim, scenario: pause, rate: 20, arrival: constant, enabled: false}
`)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(0)
	key := func(s string) config.Key { return config.Key{Target: "sim", Scenario: s, Test: "canary"} }
	require.NoError(t, m.ApplyConfig(cfg1))
	require.Eventually(t, func() bool {
		for _, s := range []string{"keep", "change", "step", "remove", "pause"} {
			if f.get(key(s)).sent < 5 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)
	keepBefore, stepBefore := f.get(key("keep")).sent, f.get(key("step")).sent
	require.NoError(t, m.ApplyConfig(cfg2))
	m.Stop(5 * time.Second)

	for _, tc := range []struct {
		scenario                  string
		observed, updated, forgot int
		rate                      float64
	}{
		{"keep", 1, 0, 0, 20},
		{"change", 2, 0, 1, 20},
		{"step", 1, 1, 0, 10},
		{"remove", 1, 0, 1, 20},
		{"add", 1, 0, 0, 0},
		{"pause", 1, 1, 0, 0},
	} {
		c := f.get(key(tc.scenario))
		require.Equal(t, []int{tc.observed, tc.updated, tc.forgot}, []int{c.observed, c.updated, c.forgot}, "%s: observed, updated, forgot", tc.scenario)
		require.Equal(t, tc.rate, c.info.Rate, tc.scenario)
		require.Zero(t, c.failed, tc.scenario)
	}
	require.GreaterOrEqual(t, f.get(key("keep")).sent, keepBefore, "an unchanged load keeps its counts")
	require.GreaterOrEqual(t, f.get(key("step")).sent, stepBefore, "a load stepped in place keeps its counts")
	require.Zero(t, f.get(key("add")).scheduled, "a paused load sends nothing")
}

// TestShutdownOutcome: Stop gives requests in flight the grace period,
// then cancels them: every one is reported, as shutdown, out of the
// attainment denominator (no SLO missed) and without a TTFT; Apply fails
// from then on.
func TestShutdownOutcome(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 10s, itl: 1ms}\n")
	cfg := managerConfig(t, sim.URL, `
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, output_tokens: 5, ignore_eos: true, slo: {ttft: 500ms, e2e: 5s}}]
canary: [{target: sim, scenario: a, rate: 20, arrival: constant}]
`)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	require.NoError(t, m.ApplyConfig(cfg))
	k := config.Key{Target: "sim", Scenario: "a", Test: "canary"}
	require.Eventually(t, func() bool { return f.get(k).sent >= 3 }, 10*time.Second, 5*time.Millisecond)
	m.Stop(50 * time.Millisecond)
	require.ErrorContains(t, m.ApplyConfig(cfg), "the prober is stopping")
	require.ErrorContains(t, m.Apply("step", nil), "the prober is stopping")
	c := f.get(k)
	require.Equal(t, c.sent, c.finished, "every sent request is reported")
	require.Equal(t, c.sent, c.shutdown)
	require.Zero(t, c.inFlight)
	require.Zero(t, c.missed, "shutdown is not in the denominator")
	require.Zero(t, c.ttfts, "no token arrived")
	require.Empty(t, m.Loads())
}

// TestOwnClientKept: a test's own client (its target configured otherwise
// than another test's) stays its own when the other test ends: a rate
// change after that is in place, not a restart on a new client.
func TestOwnClientKept(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := managerConfig(t, sim.URL, `
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}]
`)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	a, b := testSpec(cfg, "a", 2), testSpec(cfg, "b", 2)
	b.Target.Timeout = model.Duration(40 * time.Second)
	require.NoError(t, m.Apply("a", []config.LoadSpec{a}))
	require.NoError(t, m.Apply("b", []config.LoadSpec{b}))
	require.NoError(t, m.Apply("a", nil))
	b.Rate = 4
	require.NoError(t, m.Apply("b", []config.LoadSpec{b}))
	c := f.get(config.Key{Target: "sim", Scenario: "a", Test: "b"})
	require.Equal(t, []int{1, 1, 0}, []int{c.observed, c.updated, c.forgot}, "observed, updated, forgot")
}

// TestClosedLoopPacedAgainstFailingServer: a server that answers every
// request with a 500 at once, not the simulator, cannot make a closed loop
// send faster than its maximum rate: 16 clients capped at 20 req/s send 21
// requests in about a second, not thousands.
func TestClosedLoopPacedAgainstFailingServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, `{"error": {"message": "no"}}`, http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	cfg := managerConfig(t, srv.URL, `
targets: [{name: bad, url: "%s/v1", model: m}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}]
`)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	spec := testSpec(cfg, "step", 0)
	spec.Arrival, spec.Clients, spec.MaxRate = config.ArrivalClosed, 16, 20
	k := config.Key{Target: "bad", Scenario: "a", Test: "step"}
	start := time.Now()
	require.NoError(t, m.Apply("step", []config.LoadSpec{spec}))
	require.Eventually(t, func() bool { return f.get(k).finished >= 21 }, 5*time.Second, time.Millisecond)
	require.GreaterOrEqual(t, time.Since(start), 950*time.Millisecond, "the 21st send is due a second after the first")
	require.NoError(t, m.Apply("step", nil))
	c := f.get(k)
	require.LessOrEqual(t, c.sent, 23, "sent in the time it took")
	require.Equal(t, c.sent, c.failed, "every request failed, and was counted")
}

// TestPreparedConfigHoldsTests: a prepared configuration holds the loads
// until it is committed or discarded: a test's Apply waits for it (and is
// then checked against the configuration that was committed), a discarded
// one changes nothing, Stop ends the wait, and a commit after Stop changes
// nothing.
func TestPreparedConfigHoldsTests(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := managerConfig(t, sim.URL, ownersConfig)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.ApplyConfig(cfg))
	canary := config.Key{Target: "sim", Scenario: "a", Test: "canary"}

	// The canary at 45 req/s, prepared: a test of 10 req/s fitted beside
	// the canary in force (20), and no longer does beside the prepared one.
	bigger := managerConfig(t, sim.URL, strings.Replace(ownersConfig, "rate: 20", "rate: 45", 1))
	change, err := m.PrepareConfig(bigger)
	require.NoError(t, err)
	require.Equal(t, 20.0, f.get(canary).info.Rate, "prepared, not in force")
	applied := make(chan error, 1)
	go func() { applied <- m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 10)}) }()
	select {
	case err := <-applied:
		t.Fatalf("a test's Apply went through a prepared configuration: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NotEmpty(t, m.Loads(), "the loads' status answers meanwhile")
	change.Commit()
	require.ErrorContains(t, <-applied, "add up to 55 req/s, above global.max_rate 50", "checked against the committed canary")
	require.Equal(t, 45.0, f.get(canary).info.Rate)
	change.Commit() // a second call is a no-op
	change.Discard()

	// Discarded: nothing changes, and tests apply again.
	change, err = m.PrepareConfig(cfg)
	require.NoError(t, err)
	change.Discard()
	require.Equal(t, 45.0, f.get(canary).info.Rate)
	require.ErrorContains(t, m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 10)}), "above global.max_rate 50")
	require.NoError(t, m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 5)}))

	// Stop releases a test's Apply that waits for a prepared
	// configuration, and a commit after Stop is dropped.
	change, err = m.PrepareConfig(cfg)
	require.NoError(t, err)
	go func() { applied <- m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 1)}) }()
	m.Stop(time.Second)
	require.ErrorContains(t, <-applied, "the prober is stopping")
	change.Commit()
	require.Empty(t, m.Loads())
	_, err = m.PrepareConfig(cfg)
	require.ErrorContains(t, err, "the prober is stopping")
}
