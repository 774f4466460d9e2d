package config

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"
	"github.com/robfig/cron/v3"

	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/workload"
)

// Test kinds.
const (
	// TestStep is the capacity procedure of the README's "Capacity
	// tests": a baseline at concurrency 1, a closed-loop sweep with a
	// refined knee, open-loop verification and a burst.
	TestStep = "step"
	// TestSoak is a fixed open-loop rate for hours, judged on drift.
	TestSoak = "soak"
)

// TestConfig is one step or soak test: loads the daemon runs beside the
// canary, on demand or on a schedule, with test="<name>".
type TestConfig struct {
	// Name is the test label value of the test's requests; not "canary".
	Name   string `yaml:"name"`
	Kind   string `yaml:"kind"`
	Target string `yaml:"target"`
	// Scenario or Mix, as in a canary load.
	Scenario string             `yaml:"scenario,omitempty"`
	Mix      map[string]float64 `yaml:"mix,omitempty"`
	// Schedule runs the test by a cron expression; without it the test
	// runs on demand only.
	Schedule *ScheduleConfig `yaml:"schedule,omitempty"`
	// MaxRate caps the test's sending rate, req/s (a closed loop's pace);
	// 0: global.max_rate less the canary's rate.
	MaxRate float64 `yaml:"max_rate,omitempty"`
	// Replay takes the requests' lengths and prefix blocks from a trace,
	// in its order; open-loop stages replay its arrival pattern, sped up
	// or slowed down to their rate (its speed is set by the test).
	Replay *TestReplayConfig `yaml:"replay,omitempty"`

	// Step tests.
	Baseline BaselineConfig `yaml:"baseline,omitempty"`
	Sweep    SweepConfig    `yaml:"sweep,omitempty"`
	Verify   VerifyConfig   `yaml:"verify,omitempty"`
	Stop     StopConfig     `yaml:"stop,omitempty"`
	// Retries is how many times a step test measures a level again when
	// it was measured while the prober was the limit (a busy host, or a
	// saturated prober): after them, the level is left out of the
	// conclusion. Default 2.
	Retries int `yaml:"retries"`

	// Cache is how the test treats the target's prefix cache: CacheProduction
	// (the default: the scenarios' prefix sharing, or a trace's blocks, as
	// production shares them), CacheCold (every prompt salted, so nothing
	// is shared and every prefill is paid in full), or CacheBoth (a step
	// test measures its procedure twice, cold first, and the report shows
	// both capacities). A soak may also CacheAlternate: its windows
	// alternate cold and production, cold first.
	Cache string `yaml:"cache,omitempty"`

	// Window is a step test's level window, or a soak's result window
	// (`window: 10m` is its steady duration).
	Window WindowConfig `yaml:"window,omitempty"`

	// Soak tests.
	Rate     float64        `yaml:"rate,omitempty"`
	Duration model.Duration `yaml:"duration,omitempty"`
	Drift    DriftConfig    `yaml:"drift,omitempty"`
	// Faults is a soak's fault plan.
	Faults []FaultStep `yaml:"faults,omitempty"`
}

// Cache modes of a test (TestConfig.Cache).
const (
	CacheProduction = "production"
	CacheCold       = "cold"
	CacheBoth       = "both"
	CacheAlternate  = "alternate"
)

// CacheModes lists the cache modes of a kind of test.
func CacheModes(kind string) []string {
	if kind == TestSoak {
		return []string{CacheProduction, CacheCold, CacheAlternate}
	}
	return []string{CacheProduction, CacheCold, CacheBoth}
}

// FaultStep is one step of a soak's fault plan, "failure and recovery"
// as part of the run: At into the soak it either sets a simulator's
// faults (Set) and restores the faults it had For later, or runs a fault
// action against a real deployment (an http request, the deletion of a
// Kubernetes pod, a command) and its undo, if it has one, For later. The
// soak measures each step: before, during, and the time to recover.
type FaultStep struct {
	At  model.Duration `yaml:"at"`
	For model.Duration `yaml:"for"`
	// Set is a faults block of the simulator (its `faults` keys).
	Set map[string]any `yaml:"set,omitempty"`
	// The fault action, when Set is not given: exactly one of http,
	// kubernetes and exec.
	faultaction.Action `yaml:",inline"`
	// ReplicaLost says the step takes a serving replica away, so that what
	// the soak measures during it is the remaining capacity; default true
	// for a kubernetes action, false otherwise.
	ReplicaLost *bool `yaml:"replica_lost,omitempty"`
}

// Kind is the step's kind: "simulator" for Set, else its action's.
func (f *FaultStep) Kind() string {
	if len(f.Set) > 0 {
		return FaultSimulator
	}
	return f.Action.Kind()
}

// Kinds of fault step (FaultStep.Kind).
const (
	// FaultSimulator sets a simulator's faults.
	FaultSimulator  = "simulator"
	FaultHTTP       = faultaction.KindHTTP
	FaultKubernetes = faultaction.KindKubernetes
	FaultExec       = faultaction.KindExec
)

// LosesReplica reports whether the step takes a serving replica away
// (ReplicaLost, by default a kubernetes action).
func (f *FaultStep) LosesReplica() bool {
	if f.ReplicaLost != nil {
		return *f.ReplicaLost
	}
	return f.Kubernetes != nil
}

// TestReplayConfig is a trace a test takes its requests from.
type TestReplayConfig struct {
	TraceFile `yaml:",inline"`
}

// ScheduleConfig is a cron schedule: five fields (minute hour day month
// weekday) or a descriptor such as @daily, in a time zone (default UTC).
type ScheduleConfig struct {
	Cron     string `yaml:"cron"`
	TimeZone string `yaml:"time_zone,omitempty"`
}

// BaselineConfig is the step test's first step: requests one at a time,
// at least Requests of them (one more may start before the count is seen).
type BaselineConfig struct {
	Requests int `yaml:"requests,omitempty"`
}

// SweepConfig is the closed-loop sweep: its concurrency levels, and the
// bisection steps between the last good and the first bad level.
type SweepConfig struct {
	Concurrency []int `yaml:"concurrency,omitempty"`
	Refine      int   `yaml:"refine"`
}

// WindowConfig is one level: a warm-up that is not measured, then the
// steady window whose requests are measured. A level measured on fewer
// than MinRequests requests is marked insufficient. A step test's level
// whose decision the steady window leaves inconclusive is extended by
// more steady windows, up to MaxSteady in all.
type WindowConfig struct {
	Warmup      model.Duration `yaml:"warmup"`
	Steady      model.Duration `yaml:"steady,omitempty"`
	MinRequests int            `yaml:"min_requests,omitempty"`
	// MaxSteady is the longest a step test's level is measured while its
	// decision is inconclusive; 0: three steady windows.
	MaxSteady model.Duration `yaml:"max_steady,omitempty"`
}

// MaxSteadyWindows is how many steady windows a level may take: the first
// and its extensions (window.max_steady over window.steady, at least 1).
func (w WindowConfig) MaxSteadyWindows() int {
	if w.Steady <= 0 {
		return 1
	}
	if w.MaxSteady <= 0 {
		return DefaultSteadyWindows
	}
	return max(1, int(time.Duration(w.MaxSteady)/time.Duration(w.Steady)))
}

// MaxSteadyTotal is the longest a level is measured while its decision
// is inconclusive: window.max_steady, or DefaultSteadyWindows steady
// windows.
func (w WindowConfig) MaxSteadyTotal() time.Duration {
	return time.Duration(w.Steady) * time.Duration(w.MaxSteadyWindows())
}

// ForecastMaxSteady is the longest a forecast level is measured while its
// decision is inconclusive: verify.forecast_max_steady, or twice the
// other levels' (window.max_steady), at most MaxLevelSteady; never less
// than the search's levels (VerifyMaxSteady).
func (t *TestConfig) ForecastMaxSteady() time.Duration {
	if d := time.Duration(t.Verify.ForecastMaxSteady); d > 0 {
		return max(d, t.VerifyMaxSteady())
	}
	return max(min(2*t.Window.MaxSteadyTotal(), MaxLevelSteady), t.VerifyMaxSteady())
}

// VerifyMaxSteady is the longest a level of the open-loop search (a
// configured rate, a bisection) is measured while its decision is
// inconclusive: verify.max_steady, or window.max_steady. The search's
// levels are where the number is decided, and the ones next to the
// objective need the most requests (their misses come in bunches): a
// sign test gives them 12 minutes where the sweep's levels get 6. A
// level far from the objective still stops at its first looks.
func (t *TestConfig) VerifyMaxSteady() time.Duration {
	if d := time.Duration(t.Verify.MaxSteady); d > 0 {
		return d
	}
	return t.Window.MaxSteadyTotal()
}

// DefaultSteadyWindows is a level's steady windows without
// window.max_steady: the first and two extensions.
const DefaultSteadyWindows = 3

// UnmarshalYAML takes a mapping, or a duration (a soak's `window: 10m`,
// its steady duration).
func (w *WindowConfig) UnmarshalYAML(unmarshal func(any) error) error {
	var d model.Duration
	if err := unmarshal(&d); err == nil {
		*w = WindowConfig{Steady: d}
		return nil
	}
	type plain WindowConfig
	return unmarshal((*plain)(w))
}

// VerifyConfig is the open-loop verification at fractions of the capacity
// the sweep found, refined by bisection, then a burst whose backlog must
// drain in time.
type VerifyConfig struct {
	Rates []float64 `yaml:"rates,omitempty"`
	// Resolution is the gap, as a fraction of the closed-loop rate, at
	// which the bisection between the highest rate that met and the
	// lowest that did not stops; MaxLevels bounds the open-loop levels of
	// the search, the configured rates included (the forecast's are not).
	Resolution float64 `yaml:"resolution,omitempty"`
	MaxLevels  int     `yaml:"max_levels,omitempty"`
	// ForecastMaxSteady is the longest a forecast level is measured while
	// its decision is inconclusive (the forecast is what a team signs: it
	// gets the time it needs to decide); 0: twice window.max_steady, at
	// most an hour.
	ForecastMaxSteady model.Duration `yaml:"forecast_max_steady,omitempty"`
	// MaxSteady is the longest a level of the search (a configured rate,
	// a bisection) is measured while its decision is inconclusive; 0:
	// window.max_steady.
	MaxSteady model.Duration `yaml:"max_steady,omitempty"`
	// MaxDuration is the longest the open-loop search runs, its
	// configured rates and bisection together (the forecast's levels,
	// the burst and the hot tenant after it apart): a level starting
	// within it runs at most to its end, and time left once the
	// bisection is within verify.resolution goes to the bracket's top
	// left undecided above its objective, measured again. It makes a
	// test's length known before it starts; 0: no limit.
	MaxDuration model.Duration `yaml:"max_duration,omitempty"`
	Burst       BurstConfig    `yaml:"burst,omitempty"`
	DrainWithin model.Duration `yaml:"drain_within,omitempty"`
	// HotTenant, if set, ends the verification with one more level at the
	// verified rate in which one tenant sends more than its share: the
	// other tenants' attainment during it is the risk boundary of a
	// single-tenant hot spot. The test's scenarios must have tenants.
	HotTenant *HotTenantConfig `yaml:"hot_tenant,omitempty"`
}

// HotTenantConfig is the hot tenant of a verification: the most frequent
// tenant (tenant-1) sends Factor times its share, with prompts of
// InputTokens when given, for For. With 50 tenants drawn uniformly and a
// factor of 10, tenant-1's share of 2% becomes 0.2/1.18 = 16.9% of the
// requests, and 10 req/s verified become 11.8 req/s.
type HotTenantConfig struct {
	Factor float64 `yaml:"factor"`
	// For is the hot level's steady window; 0: the test's window.steady.
	For model.Duration `yaml:"for,omitempty"`
	// InputTokens is the hot tenant's prompt length (long prompts); nil:
	// the scenario's.
	InputTokens *workload.Distribution `yaml:"input_tokens,omitempty"`
}

// DefaultVerifyLevels is the open-loop levels of a search without
// verify.max_levels, or as many as verify.rates if that is more.
const DefaultVerifyLevels = 8

// Levels is the most open-loop levels the search runs: verify.max_levels,
// or DefaultVerifyLevels (at least the configured rates).
func (v VerifyConfig) Levels() int {
	if v.MaxLevels > 0 {
		return v.MaxLevels
	}
	return max(DefaultVerifyLevels, len(v.Rates))
}

// BurstConfig is Factor times the verified rate, For a while.
type BurstConfig struct {
	Factor float64        `yaml:"factor,omitempty"`
	For    model.Duration `yaml:"for"`
}

// Enabled reports whether the test runs the burst: a factor over 1 for a
// while.
func (b BurstConfig) Enabled() bool { return b.Factor > 1 && b.For > 0 }

// StopConfig aborts a test that is plainly broken: more than ErrorRatio of
// a level's finished requests failed, or a TTFT over TTFTOver (or a failed
// request that waited longer than that for a first token it never got).
type StopConfig struct {
	ErrorRatio float64        `yaml:"error_ratio,omitempty"`
	TTFTOver   model.Duration `yaml:"ttft_over,omitempty"`
}

// DriftConfig is a soak's verdict rule: the last windows against the
// first steady one.
type DriftConfig struct {
	// P99Growth fails a soak whose P99 (of any latency) grew by more
	// than this fraction.
	P99Growth float64 `yaml:"p99_growth,omitempty"`
	// GoodputDrop fails a soak whose goodput fell by more than this
	// fraction.
	GoodputDrop float64 `yaml:"goodput_drop,omitempty"`
}

// Step test defaults: a sweep of powers of two to 64 with 3 bisection
// steps, 30 s of warm-up and 2 min measured a level (at 10 req/s, 1,200
// requests: a P99 of 12 samples above it), 20 baseline requests, the
// fractions 0.5, 0.8 and 1 of capacity, then twice it for 10 s, drained
// within 30 s. Soak: 10 min windows, 20% P99 growth, 5% goodput drop.
var (
	DefaultBaseline = BaselineConfig{Requests: 20}
	DefaultSweep    = SweepConfig{Concurrency: []int{1, 2, 4, 8, 16, 32, 64}, Refine: 3}
	DefaultWindow   = WindowConfig{
		Warmup:      model.Duration(30 * time.Second),
		Steady:      model.Duration(2 * time.Minute),
		MinRequests: 200,
	}
	DefaultVerify = VerifyConfig{
		Rates:       []float64{0.5, 0.8, 1.0},
		Resolution:  0.05,
		Burst:       BurstConfig{Factor: 2, For: model.Duration(10 * time.Second)},
		DrainWithin: model.Duration(30 * time.Second),
	}
	DefaultStop       = StopConfig{ErrorRatio: 0.5, TTFTOver: model.Duration(time.Minute)}
	DefaultRetries    = 2
	DefaultSoakWindow = WindowConfig{Steady: model.Duration(10 * time.Minute)}
	DefaultDrift      = DriftConfig{P99Growth: 0.2, GoodputDrop: 0.05}
)

// Scenarios returns the test's scenarios with their weights, sorted by
// name, as LoadConfig.Scenarios.
func (t *TestConfig) Scenarios() ([]string, []float64) { return weighted(t.Scenario, t.Mix) }

// TestLoad returns the load of a validated test, with test="<name>" and
// no arrival process yet: the test runner sets the arrival process and the
// rate or clients of each of its steps.
func (c *Config) TestLoad(t *TestConfig) LoadSpec {
	spec := LoadSpec{Target: *c.Target(t.Target)}
	if t.Replay != nil {
		spec.Replay = &ReplayConfig{TraceFile: t.Replay.TraceFile, Speed: 1}
	}
	names, weights := t.Scenarios()
	spec.Scenarios = c.scenarioSpecs(t.Target, t.Name, names, weights)
	return spec
}

// TestMaxRate is the most test t may send, req/s: its max_rate, else what
// global.max_rate leaves it. With canary, the canary loads run beside the
// test (the daemon) and take their peak rates out of global.max_rate;
// `sloprober test run` runs none. It fails when the canary takes it all.
func (c *Config) TestMaxRate(t *TestConfig, canary bool) (float64, error) {
	if t.MaxRate > 0 {
		return t.MaxRate, nil
	}
	rate := c.Global.MaxRate
	if canary {
		rate = c.RateBesideCanary()
	}
	switch {
	case rate <= 0 && canary:
		return 0, fmt.Errorf("test %q: the canary takes all of global.max_rate %g: set the test's max_rate or raise global.max_rate", t.Name, c.Global.MaxRate)
	case rate <= 0:
		return 0, fmt.Errorf("test %q: global.max_rate %g leaves the test nothing to send: set the test's max_rate or raise global.max_rate", t.Name, c.Global.MaxRate)
	}
	return rate, nil
}

// RateBesideCanary is what global.max_rate leaves the tests beside the
// canary's loads at their peak rates.
func (c *Config) RateBesideCanary() float64 {
	rate := c.Global.MaxRate
	for _, l := range c.CanaryLoads() {
		rate -= l.PeakRate()
	}
	return rate
}

// Test returns the test of that name, or nil.
func (c *Config) Test(name string) *TestConfig {
	for _, t := range c.Tests {
		if t != nil && t.Name == name {
			return t
		}
	}
	return nil
}

// UnmarshalYAML implements yaml.Unmarshaler: the defaults of the test's
// kind, then the file's keys over them (so `refine: 0` is no refinement,
// and a key left out is its default).
func (t *TestConfig) UnmarshalYAML(unmarshal func(any) error) error {
	var kind struct {
		Kind string `yaml:"kind"`
	}
	var raw map[string]any
	if err := unmarshal(&raw); err != nil {
		return err
	}
	if k, ok := raw["kind"].(string); ok {
		kind.Kind = k
	}
	*t = TestConfig{}
	switch kind.Kind {
	case TestStep:
		t.Cache = CacheProduction
		t.Baseline, t.Window, t.Verify, t.Stop = DefaultBaseline, DefaultWindow, DefaultVerify, DefaultStop
		t.Sweep = SweepConfig{Concurrency: append([]int(nil), DefaultSweep.Concurrency...), Refine: DefaultSweep.Refine}
		t.Verify.Rates = append([]float64(nil), DefaultVerify.Rates...)
		t.Retries = DefaultRetries
	case TestSoak:
		t.Cache = CacheProduction
		t.Window, t.Drift, t.Stop = DefaultSoakWindow, DefaultDrift, DefaultStop
	}
	type plain TestConfig
	return unmarshal((*plain)(t))
}

// Parse returns the schedule in its time zone (validated: it parses).
func (s *ScheduleConfig) Parse() (cron.Schedule, error) {
	loc := time.UTC
	if s.TimeZone != "" {
		l, err := time.LoadLocation(s.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("time_zone %q: %w", s.TimeZone, err)
		}
		loc = l
	}
	sched, err := cron.ParseStandard(s.Cron)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w", s.Cron, err)
	}
	if spec, ok := sched.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	return sched, nil
}
