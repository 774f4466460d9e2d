package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func TestTestsGood(t *testing.T) {
	c, err := LoadFile("testdata/tests/good.yml", false)
	require.NoError(t, err)
	require.Len(t, c.Tests, 5)

	full := c.Test("nightly-capacity")
	require.Equal(t, &TestConfig{
		Name:     "nightly-capacity",
		Kind:     TestStep,
		Target:   "local",
		Mix:      map[string]float64{"chat": 3, "talk": 1},
		Schedule: &ScheduleConfig{Cron: "0 3 * * *", TimeZone: "Europe/Paris"},
		MaxRate:  40,
		Baseline: BaselineConfig{Requests: 50},
		Sweep:    SweepConfig{Concurrency: []int{1, 2, 4, 8, 16, 32, 64, 128, 200}, Refine: 4},
		Window:   WindowConfig{Warmup: model.Duration(time.Minute), Steady: model.Duration(3 * time.Minute), MinRequests: 100},
		Verify: VerifyConfig{
			Rates:       []float64{0.25, 0.5, 1, 1.5},
			Resolution:  0.05,
			Burst:       BurstConfig{Factor: 3, For: model.Duration(20 * time.Second)},
			DrainWithin: model.Duration(time.Minute),
		},
		Stop:    StopConfig{ErrorRatio: 0.2, TTFTOver: model.Duration(30 * time.Second)},
		Retries: DefaultRetries,
		Cache:   CacheProduction,
	}, full)
	require.Equal(t, 8, full.Verify.Levels(), "verify.max_levels' default")
	require.Equal(t, 3, full.Window.MaxSteadyWindows(), "window.max_steady's default: three steady windows")
	require.Equal(t, 9*time.Minute, full.VerifyMaxSteady(), "verify.max_steady's default: window.max_steady")
	require.Equal(t, 18*time.Minute, full.ForecastMaxSteady(), "verify.forecast_max_steady's default: twice window.max_steady")
	longer := *full
	longer.Verify.MaxSteady = model.Duration(30 * time.Minute)
	require.Equal(t, 30*time.Minute, longer.VerifyMaxSteady())
	require.Equal(t, 30*time.Minute, longer.ForecastMaxSteady(), "a forecast level gets at least the search's time")

	// A step test of one key takes every other default of its kind, and
	// none of a soak.
	quick := c.Test("quick")
	require.Equal(t, SweepConfig{Concurrency: []int{1, 2}, Refine: 3}, quick.Sweep, "refine keeps its default")
	require.Equal(t, DefaultWindow, quick.Window)
	require.Equal(t, model.Duration(30*time.Second), quick.Window.Warmup)
	require.Equal(t, DefaultBaseline, quick.Baseline)
	require.Equal(t, DefaultVerify, quick.Verify)
	require.Equal(t, DefaultStop, quick.Stop)
	require.Equal(t, DefaultRetries, quick.Retries)
	require.Nil(t, quick.Schedule, "on demand only")
	require.Zero(t, quick.MaxRate)
	require.Zero(t, quick.Rate)
	require.Zero(t, quick.Duration)
	require.Zero(t, quick.Drift)
	require.Equal(t, []int{1, 2, 4, 8, 16, 32, 64}, DefaultSweep.Concurrency, "the defaults are copied, not shared")

	// A zero that is a valid value stays zero.
	noRefine := c.Test("no-refine")
	require.Equal(t, SweepConfig{Concurrency: []int{4}, Refine: 0}, noRefine.Sweep)
	require.Equal(t, WindowConfig{Steady: model.Duration(time.Minute), MinRequests: 1}, noRefine.Window)
	require.Equal(t, BurstConfig{Factor: 1}, noRefine.Verify.Burst)
	require.Equal(t, []float64{2}, noRefine.Verify.Rates)
	require.Equal(t, model.Duration(30*time.Second), noRefine.Verify.DrainWithin, "default")
	require.Equal(t, &ScheduleConfig{Cron: "@weekly"}, noRefine.Schedule, "time_zone left out: UTC")

	weekend := c.Test("weekend-soak")
	require.Equal(t, &TestConfig{
		Name:     "weekend-soak",
		Kind:     TestSoak,
		Target:   "local",
		Scenario: "chat",
		Schedule: &ScheduleConfig{Cron: "0 22 * * FRI", TimeZone: "UTC"},
		MaxRate:  10,
		Stop:     StopConfig{ErrorRatio: 1, TTFTOver: model.Duration(2 * time.Minute)},
		Window:   WindowConfig{Warmup: model.Duration(5 * time.Minute), Steady: model.Duration(15 * time.Minute)},
		Rate:     10,
		Duration: model.Duration(48 * time.Hour),
		Drift:    DriftConfig{P99Growth: 0.5, GoodputDrop: 0.1},
		Cache:    CacheProduction,
	}, weekend)

	// A soak of its required keys and `window: 5m` takes the soak's
	// defaults, and none of a step test.
	soak := c.Test("soak")
	require.Equal(t, WindowConfig{Steady: model.Duration(5 * time.Minute)}, soak.Window)
	require.Equal(t, DefaultDrift, soak.Drift)
	require.Equal(t, DefaultStop, soak.Stop)
	require.Zero(t, soak.Baseline)
	require.Zero(t, soak.Sweep)
	require.Zero(t, soak.Verify)

	require.Nil(t, c.Test("missing"))
	require.Nil(t, c.Test(CanaryTest), "the canary is no test")
	require.NoError(t, c.Validate(), "a Config made by Parse is valid again")
}

// TestTestsDefaults: a test that sets only what its kind requires.
func TestTestsDefaults(t *testing.T) {
	c, err := Load([]byte(testsBase+`
  - {name: step, kind: step, target: local, scenario: chat}
  - {name: soak, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h}
`), false)
	require.NoError(t, err)
	step := c.Tests[0]
	require.Equal(t, DefaultBaseline, step.Baseline)
	require.Equal(t, DefaultSweep, step.Sweep)
	require.Equal(t, DefaultWindow, step.Window)
	require.Equal(t, DefaultVerify, step.Verify)
	require.Equal(t, DefaultStop, step.Stop)
	soak := c.Tests[1]
	require.Equal(t, DefaultSoakWindow, soak.Window)
	require.Equal(t, DefaultDrift, soak.Drift)
	require.Equal(t, DefaultStop, soak.Stop)
}

// TestTestLoad: a test's load has the test's label on every scenario's
// series, the target's whole configuration, and the mix's weights in the
// order of the scenario names.
func TestTestLoad(t *testing.T) {
	c, err := LoadFile("testdata/tests/good.yml", false)
	require.NoError(t, err)

	spec := c.TestLoad(c.Test("nightly-capacity"))
	require.Equal(t, *c.Target("local"), spec.Target)
	require.Equal(t, model.Duration(time.Minute), spec.Target.Timeout)
	require.Equal(t, []Key{
		{Target: "local", Scenario: "chat", Test: "nightly-capacity"},
		{Target: "local", Scenario: "talk", Test: "nightly-capacity"},
	}, spec.Keys())
	require.Equal(t, 3.0, spec.Scenarios[0].Weight)
	require.Equal(t, 1.0, spec.Scenarios[1].Weight)
	require.Equal(t, *c.Scenario("chat"), spec.Scenarios[0].ScenarioConfig)
	require.Equal(t, 3, spec.Scenarios[1].Conversation.Turns)
	require.Empty(t, spec.Arrival, "the test runner sets the arrivals of each step")

	spec = c.TestLoad(c.Test("quick"))
	require.Equal(t, "completions", spec.Target.API)
	require.Equal(t, []Key{{Target: "legacy", Scenario: "short", Test: "quick"}}, spec.Keys())
	require.Equal(t, 1.0, spec.Scenarios[0].Weight)

	for _, l := range c.Canary {
		for _, k := range l.Keys() {
			require.Equal(t, CanaryTest, k.Test)
		}
	}
}

// testsBase is a configuration whose tests section is appended: targets
// with each API, scenarios with conversations and cancellations.
const testsBase = `
global: {max_rate: 50, max_in_flight: 100}
targets:
  - {name: local, url: http://127.0.0.1:8000/v1, model: m}
  - {name: legacy, url: http://127.0.0.1:8001/v1, model: m, api: completions, timeout: 2s}
scenarios:
  - {name: chat}
  - {name: short}
  - {name: talk, conversation: {turns: 3, think_time: 1s}}
  - {name: quit, cancel: {share: 0.1, after: 2s}}
canary:
  - {target: local, scenario: chat, rate: 1}
tests:`

// TestTestsErrors: each rule of the tests section, with the error that
// names its key and the bad value. Each case's tests are appended to
// testsBase.
func TestTestsErrors(t *testing.T) {
	const step = "{name: s, kind: step, target: local, scenario: chat"
	const soak = "{name: s, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h"
	for _, tc := range []struct {
		name, tests, want string
	}{
		// Name, kind, target, scenarios.
		{"empty", "\n  - null", "tests[0]: must not be empty"},
		{"bad name", "\n  - {name: my test, kind: step, target: local, scenario: chat}",
			`tests[0].name: must match [a-zA-Z0-9_-]+, got "my test"`},
		{"no name", "\n  - {kind: step, target: local, scenario: chat}",
			`tests[0].name: is required: the test's name, its test label value ([a-zA-Z0-9_-]+, not "canary"), e.g. capacity`},
		{"empty name", "\n  - {name: '', kind: step, target: local, scenario: chat}",
			`tests[0].name: must match [a-zA-Z0-9_-]+, got ""`},
		{"long name", "\n  - {name: " + strings.Repeat("n", 65) + ", kind: step, target: local, scenario: chat}",
			`tests[0].name: must be at most 64 bytes, got 65 bytes ("nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"...)`},
		{"canary", "\n  - {name: canary, kind: step, target: local, scenario: chat}",
			`tests[0].name: must not be "canary": it is the test label of the canary's series, which a test's series would join`},
		{"duplicate", "\n  - {name: a, kind: step, target: local, scenario: chat}\n  - {name: a, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h}",
			`tests[1].name: duplicate test name "a"`},
		{"no kind", "\n  - {name: s, target: local, scenario: chat}", `tests[0].kind: is required: the kind of test, one of: step (a capacity search), soak (a fixed rate for hours)`},
		{"null kind", "\n  - {name: s, kind: null, target: local, scenario: chat}", `tests[0].kind: is required: the kind of test, one of: step (a capacity search), soak (a fixed rate for hours)`},
		{"empty kind", "\n  - {name: s, kind: '', target: local, scenario: chat}", `tests[0].kind: must be step or soak, got ""`},
		// A misspelled kind is told the key it means, and only that.
		{"type for kind", "\n  - {name: s, type: step, target: local, scenario: chat}", `tests[0].type: no such key (did you mean "kind"?)`},
		{"no target", "\n  - {name: s, kind: step, scenario: chat}",
			"tests[0].target: is required: the name of a target under targets:, one of: local, legacy"},
		{"empty target", "\n  - {name: s, kind: step, target: '', scenario: chat}", `tests[0].target: unknown target ""`},
		{"bad kind", "\n  - {name: s, kind: ramp, target: local, scenario: chat}", `tests[0].kind: must be step or soak, got "ramp"`},
		{"unknown target and scenario", "\n  - {name: s, kind: step, target: nowhere, scenario: nothing}",
			`tests[0].target: unknown target "nowhere"
tests[0].scenario: unknown scenario "nothing"`},
		{"no scenario", "\n  - {name: s, kind: step, target: local}",
			"tests[0].scenario: is required: the name of a scenario under scenarios:, one of: chat, short, talk, quit; or mix: several by weight"},
		{"empty scenario", "\n  - {name: s, kind: step, target: local, scenario: ''}", "tests[0]: set scenario or mix"},
		{"empty mix", "\n  - {name: s, kind: step, target: local, mix: {}}", "tests[0]: set scenario or mix"},
		{"scenario and mix", "\n  - " + step + ", mix: {short: 1}}", "tests[0]: set either scenario or mix, not both"},
		{"bad mix", "\n  - {name: s, kind: step, target: local, mix: {chat: 0, short: .nan, quit: .inf, zz: 1}}",
			`tests[0].mix.chat: weight must be positive, got 0
tests[0].mix.quit: weight must be positive, got +Inf
tests[0].mix.short: weight must be positive, got NaN
tests[0].mix: unknown scenario "zz"`},
		{"conversation on completions", "\n  - {name: s, kind: step, target: legacy, mix: {talk: 1, chat: 1}}",
			`tests[0]: scenario "talk" has conversations, which need a chat, responses or messages target; target "legacy" has api completions`},
		{"cancel after timeout", "\n  - {name: s, kind: soak, target: legacy, scenario: quit, rate: 1, duration: 1h}",
			`tests[0]: scenario "quit" cancels after 2s, which must be less than target "legacy"'s timeout 2s`},
		{"replay of a missing file", "\n  - " + step + ", replay: {file: t.jsonl, format: jsonl}}", "tests[0].replay: file: open t.jsonl: no such file or directory"},

		// Schedule.
		{"cron fields", "\n  - " + step + ", schedule: {cron: '0 3 * *'}}",
			`tests[0].schedule.cron: must be 5 fields (minute hour day month weekday) or a descriptor such as @daily, got "0 3 * *" (expected exactly 5 fields, found 4: [0 3 * *])`},
		{"cron seconds", "\n  - " + step + ", schedule: {cron: '0 0 3 * * *'}}",
			`tests[0].schedule.cron: must be 5 fields (minute hour day month weekday) or a descriptor such as @daily, got "0 0 3 * * *" (expected exactly 5 fields, found 6: [0 0 3 * * *])`},
		{"cron range", "\n  - " + step + ", schedule: {cron: '0 24 * * *'}}",
			`tests[0].schedule.cron: must be 5 fields (minute hour day month weekday) or a descriptor such as @daily, got "0 24 * * *" (end of range (24) above maximum (23): 24)`},
		{"cron descriptor", "\n  - " + step + ", schedule: {cron: '@nightly'}}",
			`tests[0].schedule.cron: must be 5 fields (minute hour day month weekday) or a descriptor such as @daily, got "@nightly" (unrecognized descriptor: @nightly)`},
		{"cron missing", "\n  - " + step + ", schedule: {time_zone: UTC}}",
			`tests[0].schedule.cron: is required: when the test runs: 5 fields (minute hour day month weekday) or a descriptor, e.g. "0 3 * * *" or "@daily" (leave out schedule to run the test on demand only)`},
		{"cron empty", "\n  - " + step + ", schedule: {cron: '', time_zone: UTC}}",
			"tests[0].schedule.cron: must not be empty (leave out schedule to run the test on demand only)"},
		{"cron TZ", "\n  - " + step + ", schedule: {cron: 'TZ=Europe/Paris 0 3 * * *'}}",
			`tests[0].schedule.cron: must not set a time zone (set schedule.time_zone), got "TZ=Europe/Paris 0 3 * * *"`},
		// robfig/cron v3.0.1 panics on this one.
		{"cron CRON_TZ without a space", "\n  - " + step + ", schedule: {cron: 'CRON_TZ=UTC'}}",
			`tests[0].schedule.cron: must not set a time zone (set schedule.time_zone), got "CRON_TZ=UTC"`},
		{"cron never", "\n  - " + step + ", schedule: {cron: '0 3 30 2 *'}}",
			`tests[0].schedule.cron: never fires (no such day), got "0 3 30 2 *"`},
		{"time zone", "\n  - " + step + ", schedule: {cron: '@daily', time_zone: Europe/Nowhere}}",
			`tests[0].schedule.time_zone: must be a time zone name such as UTC or Europe/Paris, got "Europe/Nowhere"`},
		{"time zone and cron", "\n  - " + step + ", schedule: {cron: 'daily', time_zone: CET+1}}",
			`tests[0].schedule.time_zone: must be a time zone name such as UTC or Europe/Paris, got "CET+1"
tests[0].schedule.cron: must be 5 fields (minute hour day month weekday) or a descriptor such as @daily, got "daily" (expected exactly 5 fields, found 1: [daily])`},

		// max_rate.
		{"max_rate negative", "\n  - " + step + ", max_rate: -1}",
			"tests[0].max_rate: must be between 0.0001 and 10000 req/s (or 0: global.max_rate less the canary's rate), got -1"},
		{"max_rate NaN", "\n  - " + step + ", max_rate: .nan}",
			"tests[0].max_rate: must be between 0.0001 and 10000 req/s (or 0: global.max_rate less the canary's rate), got NaN"},
		{"max_rate huge", "\n  - " + step + ", max_rate: 1e9}",
			"tests[0].max_rate: must be between 0.0001 and 10000 req/s (or 0: global.max_rate less the canary's rate), got 1e+09"},
		{"max_rate over global", "\n  - " + step + ", max_rate: 51}", "tests[0].max_rate: must be at most global.max_rate 50, got 51"},

		// Step tests.
		{"baseline", "\n  - " + step + ", baseline: {requests: 0}}\n  - {name: t, kind: step, target: local, scenario: chat, baseline: {requests: 10001}}",
			`tests[0].baseline.requests: must be between 1 and 10000, got 0
tests[1].baseline.requests: must be between 1 and 10000, got 10001`},
		{"sweep empty", "\n  - " + step + ", sweep: {concurrency: []}}", "tests[0].sweep.concurrency: must not be empty"},
		{"sweep levels", "\n  - " + step + ", sweep: {concurrency: [0, 2, 2, 8, 4]}}",
			`tests[0].sweep.concurrency[0]: must be at least 1, got 0
tests[0].sweep.concurrency[2]: must be greater than the level before it (2), got 2
tests[0].sweep.concurrency[4]: must be greater than the level before it (8), got 4`},
		{"sweep above max_in_flight", "\n  - " + step + ", sweep: {concurrency: [1, 50, 101]}}",
			"tests[0].sweep.concurrency: the highest level 101 is above global.max_in_flight 100"},
		{"sweep too many levels", "\n  - " + step + ", sweep: {concurrency: [" + levels(65) + "]}}",
			"tests[0].sweep.concurrency: must have at most 64 levels, got 65"},
		{"refine", "\n  - " + step + ", sweep: {concurrency: [1], refine: -1}}\n  - {name: t, kind: step, target: local, scenario: chat, sweep: {refine: 11}}",
			`tests[0].sweep.refine: must be between 0 and 10, got -1
tests[1].sweep.refine: must be between 0 and 10, got 11`},
		{"window", "\n  - " + step + ", window: {steady: 0s, min_requests: 0}}",
			`tests[0].window.steady: must be positive, got 0s
tests[0].window.min_requests: must be at least 1, got 0`},
		{"window duration", "\n  - " + step + ", window: 10m}",
			`tests[0].window.min_requests: must be at least 1, got 0`},
		{"verify rates empty", "\n  - " + step + ", verify: {rates: []}}", "tests[0].verify.rates: must not be empty"},
		{"verify rates", "\n  - " + step + ", verify: {rates: [0, 0.5, 0.5, 2.5, .nan, 1, 0.9]}}",
			`tests[0].verify.rates[0]: must be above 0 and at most 2 (fractions of the capacity found), got 0
tests[0].verify.rates[2]: must be greater than the rate before it (0.5), got 0.5
tests[0].verify.rates[3]: must be above 0 and at most 2 (fractions of the capacity found), got 2.5
tests[0].verify.rates[4]: must be above 0 and at most 2 (fractions of the capacity found), got NaN
tests[0].verify.rates[6]: must be greater than the rate before it (1), got 0.9`},
		{"verify too many rates", "\n  - " + step + ", verify: {rates: [" + strings.Repeat("1, ", 64) + "1]}}",
			"tests[0].verify.rates: must have at most 64 rates, got 65"},
		{"burst", "\n  - " + step + ", verify: {burst: {factor: 0.5}, drain_within: 0s}}\n  - {name: t, kind: step, target: local, scenario: chat, verify: {burst: {factor: 11, for: 1m}}}\n  - {name: u, kind: step, target: local, scenario: chat, verify: {burst: {factor: .inf}}}",
			`tests[0].verify.burst.factor: must be between 1 (no burst) and 10, got 0.5
tests[0].verify.drain_within: must be positive, got 0s
tests[1].verify.burst.factor: must be between 1 (no burst) and 10, got 11
tests[2].verify.burst.factor: must be between 1 (no burst) and 10, got +Inf`},
		{"search", "\n  - " + step + ", verify: {rates: [0.5, 0.8], resolution: 0, max_levels: 1}}\n  - {name: t, kind: step, target: local, scenario: chat, verify: {resolution: 1.5, max_levels: 65}}\n  - {name: u, kind: step, target: local, scenario: chat, verify: {resolution: .nan}}",
			`tests[0].verify.resolution: must be between 0.001 and 1 (a fraction of the closed-loop rate), got 0
tests[0].verify.max_levels: must be between the number of verify.rates (2) and 64, got 1
tests[1].verify.resolution: must be between 0.001 and 1 (a fraction of the closed-loop rate), got 1.5
tests[1].verify.max_levels: must be between the number of verify.rates (3) and 64, got 65
tests[2].verify.resolution: must be between 0.001 and 1 (a fraction of the closed-loop rate), got NaN`},
		{"retries", "\n  - " + step + ", retries: -1}\n  - {name: t, kind: step, target: local, scenario: chat, retries: 11}",
			`tests[0].retries: must be between 0 and 10, got -1
tests[1].retries: must be between 0 and 10, got 11`},
		{"max_steady", "\n  - " + step + ", window: {steady: 1m, max_steady: 30s, min_requests: 1}}\n  - {name: t, kind: step, target: local, scenario: chat, window: {steady: 1m, max_steady: 2h, min_requests: 1}}",
			`tests[0].window.max_steady: must be at least steady (1m) and at most 1h, got 30s
tests[1].window.max_steady: must be at least steady (1m) and at most 1h, got 2h`},
		{"verify max_steady", "\n  - " + step + ", window: {steady: 1m, min_requests: 1}, verify: {max_steady: 30s}}\n  - {name: t, kind: step, target: local, scenario: chat, verify: {max_steady: 2h}}",
			`tests[0].verify.max_steady: must be at least window.steady (1m) and at most 1h, got 30s
tests[1].verify.max_steady: must be at least window.steady (2m) and at most 1h, got 2h`},
		{"verify max_duration", "\n  - " + step + ", window: {steady: 1m, min_requests: 1}, verify: {max_steady: 12m, max_duration: 10m}}\n  - {name: t, kind: step, target: local, scenario: chat, verify: {max_duration: 25h}}",
			`tests[0].verify.max_duration: must be 0 (no limit) or between the search's longest level (verify.max_steady or window.max_steady: 12m) and 1d, got 10m
tests[1].verify.max_duration: must be 0 (no limit) or between the search's longest level (verify.max_steady or window.max_steady: 6m) and 1d, got 1d1h`},
		{"step keys on a soak", "\n  - " + soak + ", retries: 1, window: {steady: 10m, max_steady: 20m}}",
			`tests[0].window.max_steady: applies to kind: step only (a soak's windows are its duration's)
tests[0].retries: applies to kind: step only`},
		{"stop", "\n  - " + step + ", stop: {error_ratio: 0, ttft_over: 0s}}\n  - {name: t, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h, stop: {error_ratio: 1.5}}\n  - {name: u, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h, stop: {error_ratio: .nan}}",
			`tests[0].stop.error_ratio: must be above 0 and at most 1, got 0
tests[0].stop.ttft_over: must be positive, got 0s
tests[1].stop.error_ratio: must be above 0 and at most 1, got 1.5
tests[2].stop.error_ratio: must be above 0 and at most 1, got NaN`},
		{"soak keys on a step test", "\n  - " + step + ", rate: 1, duration: 1h, drift: {p99_growth: 0.1}}",
			`tests[0].rate: applies to kind: soak only
tests[0].duration: applies to kind: soak only
tests[0].drift: applies to kind: soak only`},

		// Soak tests.
		{"soak rate", "\n  - {name: s, kind: soak, target: local, scenario: chat, duration: 1h}\n  - {name: t, kind: soak, target: local, scenario: chat, duration: 1h, rate: 1e5}\n  - {name: u, kind: soak, target: local, scenario: chat, duration: 1h, rate: .nan}\n  - {name: v, kind: soak, target: local, scenario: chat, duration: 1h, rate: 0}",
			`tests[0].rate: is required: the soak's arrival rate in req/s, between 0.0001 and 10000, e.g. 2
tests[1].rate: must be between 0.0001 and 10000 req/s, got 100000
tests[2].rate: must be between 0.0001 and 10000 req/s, got NaN
tests[3].rate: must be between 0.0001 and 10000 req/s, got 0`},
		{"soak rate over max_rate", "\n  - {name: s, kind: soak, target: local, scenario: chat, duration: 1h, rate: 5, max_rate: 4}\n  - {name: t, kind: soak, target: local, scenario: chat, duration: 1h, rate: 60}",
			`tests[0].rate: must be at most max_rate 4, got 5
tests[1].rate: must be at most global.max_rate 50, got 60`},
		{"soak duration", "\n  - {name: s, kind: soak, target: local, scenario: chat, rate: 1}\n  - {name: t, kind: soak, target: local, scenario: chat, rate: 1, duration: 8d}\n  - {name: u, kind: soak, target: local, scenario: chat, rate: 1, duration: 0s}",
			`tests[0].duration: is required: how long the soak runs, at most 7d, e.g. 2h
tests[1].duration: must be positive and at most 7d, got 8d
tests[2].duration: must be positive and at most 7d, got 0s`},
		{"soak window", "\n  - " + soak + ", window: 0s}\n  - {name: t, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h, window: 2h}\n  - {name: u, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h, window: {warmup: 55m, steady: 10m, min_requests: -1}}",
			`tests[0].window.steady: must be positive and at most duration (1h), got 0s
tests[1].window.steady: must be positive and at most duration (1h), got 2h
tests[2].window: warmup 55m and steady 10m add up to more than duration 1h: no window would be measured
tests[2].window.min_requests: must not be negative, got -1`},
		{"drift", "\n  - " + soak + ", drift: {p99_growth: 0, goodput_drop: 0}}\n  - {name: t, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h, drift: {p99_growth: .inf, goodput_drop: 1}}\n  - {name: u, kind: soak, target: local, scenario: chat, rate: 1, duration: 1h, drift: {p99_growth: -1, goodput_drop: .nan}}",
			`tests[0].drift.p99_growth: must be positive and finite, got 0
tests[0].drift.goodput_drop: must be between 0 and 1 (exclusive), got 0
tests[1].drift.p99_growth: must be positive and finite, got +Inf
tests[1].drift.goodput_drop: must be between 0 and 1 (exclusive), got 1
tests[2].drift.p99_growth: must be positive and finite, got -1
tests[2].drift.goodput_drop: must be between 0 and 1 (exclusive), got NaN`},
		{"step keys on a soak", "\n  - " + soak + ", baseline: {requests: 5}, sweep: {refine: 1}, verify: {drain_within: 1m}}",
			`tests[0].baseline: applies to kind: step only
tests[0].sweep: applies to kind: step only
tests[0].verify: applies to kind: step only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(testsBase+tc.tests), false)
			require.EqualError(t, err, withTestLines(tc.want))
		})
	}
}

// withTestLines prefixes each error of want, which names tests[k], with
// the line of that entry of testsBase's tests (one line each).
func withTestLines(want string) string {
	first := strings.Count(testsBase, "\n") + 2
	lines := strings.Split(want, "\n")
	for i, l := range lines {
		var k int
		if _, err := fmt.Sscanf(l, "tests[%d]", &k); err == nil {
			lines[i] = fmt.Sprintf("line %d: %s", first+k, l)
		}
	}
	return strings.Join(lines, "\n")
}

// TestTestsBounds: the values at each bound are valid.
func TestTestsBounds(t *testing.T) {
	_, err := Load([]byte(testsBase+`
  - name: low
    kind: step
    target: local
    scenario: chat
    max_rate: 0.0001
    baseline: {requests: 1}
    sweep: {concurrency: [1], refine: 0}
    window: {warmup: 0s, steady: 1ms, min_requests: 1}
    verify: {rates: [1e-9], burst: {factor: 1, for: 0s}, drain_within: 1ms}
    stop: {error_ratio: 1e-9, ttft_over: 1ms}
  - name: high
    kind: step
    target: local
    scenario: chat
    max_rate: 50
    baseline: {requests: 10000}
    sweep: {concurrency: [`+levels(63)+`, 100], refine: 10}
    verify: {rates: [2], burst: {factor: 10}}
    stop: {error_ratio: 1}
    schedule: {cron: "*/5 0-6 1,15 JAN-DEC MON-FRI", time_zone: America/New_York}
  - {name: leap, kind: step, target: local, scenario: chat, schedule: {cron: "0 0 29 2 *", time_zone: Local}}
  - {name: every, kind: step, target: local, scenario: chat, schedule: {cron: "@every 12h"}}
  - {name: soak-low, kind: soak, target: local, scenario: chat, rate: 0.0001, duration: 1ms, window: {steady: 1ms, warmup: 0s, min_requests: 0}, drift: {p99_growth: 1e-9, goodput_drop: 1e-9}}
  - {name: soak-high, kind: soak, target: local, scenario: chat, rate: 50, max_rate: 50, duration: 7d, window: {warmup: 1d, steady: 6d}, drift: {p99_growth: 1e9, goodput_drop: 0.999}}
`), false)
	require.NoError(t, err)
}

// TestTestsValidate: keys a file cannot set (a negative duration) are
// checked in a Config built in code, and all errors are reported together.
func TestTestsValidate(t *testing.T) {
	c, err := LoadFile("testdata/tests/good.yml", false)
	require.NoError(t, err)
	step, soak := c.Test("quick"), c.Test("soak")
	step.Window.Warmup = model.Duration(-time.Second)
	step.Verify.Burst.For = model.Duration(-time.Second)
	soak.Window.Warmup = model.Duration(-time.Second)
	c.Tests = append(c.Tests, nil)
	require.EqualError(t, c.Validate(), `tests[1].window.warmup: must not be negative, got -1s
tests[1].verify.burst.for: must not be negative, got -1s
tests[4].window.warmup: must not be negative, got -1s
tests[5]: must not be empty`)
}

// TestTestsErrorFile: errors of the tests section come after those of the
// sections before it, all reported together, each naming the file.
func TestTestsErrorFile(t *testing.T) {
	_, err := LoadFile("testdata/tests/bad.yml", false)
	require.EqualError(t, err, `testdata/tests/bad.yml: line 6: canary[0].rate: must be between 0.0001 and 10000 req/s, got 0
line 8: tests[0].name: must not be "canary": it is the test label of the canary's series, which a test's series would join
line 10: tests[0].target: unknown target "remote"
line 12: tests[0].schedule.cron: must be 5 fields (minute hour day month weekday) or a descriptor such as @daily, got "every night" (expected exactly 5 fields, found 2: [every night])
line 13: tests[0].sweep.concurrency: the highest level 2000 is above global.max_in_flight 1000
line 14: tests[0].window.steady: must be positive, got 0s
line 15: tests[0].rate: applies to kind: soak only
line 16: tests[1].kind: must be step or soak, got "spike"
line 17: tests[2].name: duplicate test name "ok"
line 22: tests[2].duration: must be positive and at most 7d, got 30d
line 23: tests[2].verify: applies to kind: step only`)
}

// TestTestsString: /config shows the tests, and what it shows loads again
// into the same configuration.
func TestTestsString(t *testing.T) {
	c, err := Load([]byte(testsBase+`
  - {name: step, kind: step, target: local, scenario: chat, sweep: {concurrency: [1, 2], refine: 2}, schedule: {cron: "@daily"}}
  - {name: soak, kind: soak, target: local, mix: {chat: 1, short: 2}, rate: 1, duration: 1h, window: 5m}
`), false)
	require.NoError(t, err)
	s := c.String()
	require.Contains(t, s, "tests:\n- name: step\n  kind: step\n")
	c2, err := Load([]byte(s), false)
	require.NoError(t, err)
	require.Equal(t, c.Tests, c2.Tests)
}

// TestTestsStringZeros: a zero that overrides a non-zero default (refine:
// 0, warmup: 0s, burst.for: 0s) must survive String(). It does not yet:
// SweepConfig.Refine, WindowConfig.Warmup and BurstConfig.For are tagged
// omitempty, so String() leaves them out and loading it again gives the
// defaults 3, 30s and 10s. FuzzLoadConfig would find it from a seed with
// a step test.
func TestTestsStringZeros(t *testing.T) {
	c, err := LoadFile("testdata/tests/good.yml", false)
	require.NoError(t, err)
	c2, err := Load([]byte(c.String()), false)
	require.NoError(t, err)
	require.Equal(t, c.Test("no-refine"), c2.Test("no-refine"))
}

// levels returns "1, 2, ..., n".
func levels(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = strconv.Itoa(i + 1)
	}
	return strings.Join(s, ", ")
}

// TestFaultPlanErrors: a soak's fault plan is checked in check config:
// against a simulator target only, steps in order within the soak, each a
// valid faults block of the simulator.
func TestFaultPlanErrors(t *testing.T) {
	const base = `
targets:
  - {name: sim, url: "http://127.0.0.1:8000/v1", model: m, simulator: true}
  - {name: prod, url: "http://127.0.0.1:9000/v1", model: m}
scenarios: [{name: s}]
tests:
`
	for _, tc := range []struct {
		test, err string
	}{
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, set: {error_rate: {"503": 1}}}]}`, ""},
		{`  - {name: x, kind: soak, target: prod, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, set: {error_rate: {"503": 1}}}]}`,
			`tests[0].faults[0].set: sets a simulator's faults: target "prod" is not marked simulator: true (use an http, kubernetes or exec action against a real target)`},
		// Fault actions, against any target.
		{`  - {name: x, kind: soak, target: prod, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, kubernetes: {namespace: serving, selector: app=vllm}}]}`, ""},
		{`  - {name: x, kind: soak, target: prod, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, http: {url: "http://127.0.0.1:9001/admin/out", undo: {url: "http://127.0.0.1:9001/admin/in"}}, replica_lost: true}]}`, ""},
		{`  - {name: x, kind: soak, target: prod, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, exec: {command: [kubectl, scale, deploy/vllm, --replicas=2]}}]}`, ""},
		{`  - {name: x, kind: soak, target: prod, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, http: {url: "nope"}}]}`,
			`tests[0].faults[0]: http.url: must be an absolute http(s) URL`},
		{`  - {name: x, kind: soak, target: prod, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, kubernetes: {namespace: serving, selector: "app in (("}}]}`,
			`tests[0].faults[0]: kubernetes.selector:`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, set: {reset_rate: 1}, http: {url: "http://127.0.0.1:9001/x"}}]}`,
			`tests[0].faults[0]: must set either simulator faults (set) or one fault action (http, kubernetes, exec), not both`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m}]}`,
			`tests[0].faults[0]: must set simulator faults (set) or one fault action (http, kubernetes, exec)`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, http: {url: "http://127.0.0.1:9001/x"}, kubernetes: {namespace: a, selector: b=c}}]}`,
			`tests[0].faults[0]: must set exactly one of http, kubernetes, exec; got http and kubernetes`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 30m, for: 5m, set: {error_rate: {"503": 1}}}, {at: 32m, for: 1m, set: {reset_rate: 1}}]}`,
			`tests[0].faults[1].at: must be at or after the end of the step before (35m), got 32m`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 58m, for: 5m, set: {reset_rate: 1}}]}`,
			`tests[0].faults[0]: ends at 1h3m, after the soak's duration 1h`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 1m, for: 0s, set: {reset_rate: 1}}]}`,
			`tests[0].faults[0].for: must be positive, got 0s`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 1m, for: 1m, set: {reset_rate: 2}}]}`,
			`tests[0].faults[0].set: faults.reset_rate`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, faults: [{at: 1m, for: 1m, set: {nope: 1}}]}`,
			`tests[0].faults[0].set:`},
		{`  - {name: x, kind: step, target: sim, scenario: s, faults: [{at: 1m, for: 1m, set: {reset_rate: 1}}]}`,
			`tests[0].faults: applies to kind: soak only`},
	} {
		_, err := Load([]byte(base+tc.test+"\n"), false)
		if tc.err == "" {
			require.NoError(t, err, tc.test)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.test)
	}
}

// TestTestReplayErrors: a test's trace is read with the configuration and
// checked: one scenario, a file that exists, timestamps to replay.
func TestTestReplayErrors(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(`{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}
{"timestamp": 100, "input_length": 10, "output_length": 2, "hash_ids": [2]}
`), 0o600))
	for _, tc := range []struct{ test, err string }{
		{`{name: x, kind: step, target: sim, scenario: s, replay: {file: t.jsonl, format: mooncake}}`, ""},
		{`{name: x, kind: step, target: sim, mix: {s: 1, u: 1}, replay: {file: t.jsonl, format: mooncake}}`, "tests[0].replay: a replay takes one scenario, not a mix"},
		{`{name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, replay: {file: missing.jsonl, format: mooncake}}`, "tests[0].replay: file: "},
		{`{name: x, kind: step, target: sim, scenario: s, replay: {file: t.jsonl, format: nope}}`, "tests[0].replay: format: must be one of"},
	} {
		file := filepath.Join(dir, "c.yml")
		require.NoError(t, os.WriteFile(file, []byte(`
targets: [{name: sim, url: "http://127.0.0.1:8000/v1", model: m}]
scenarios: [{name: s}, {name: u}]
tests: [`+tc.test+`]
`), 0o600))
		_, err := LoadFile(file, false)
		if tc.err == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorContains(t, err, tc.err)
	}
}

// TestCacheAndHotTenantErrors: a test's cache mode is one of its kind's,
// and a hot tenant needs a factor above 1 and scenarios with tenants.
func TestCacheAndHotTenantErrors(t *testing.T) {
	const base = `
targets: [{name: sim, url: "http://127.0.0.1:8000/v1", model: m, simulator: true}]
scenarios: [{name: s, tenants: {count: 50}}, {name: u}]
tests:
`
	for _, tc := range []struct{ test, err string }{
		{`  - {name: x, kind: step, target: sim, scenario: s, cache: both, verify: {hot_tenant: {factor: 10, for: 1m, input_tokens: 8000}}}`, ""},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, cache: alternate}`, ""},
		{`  - {name: x, kind: step, target: sim, scenario: s, cache: alternate}`,
			`tests[0].cache: must be one of production, cold, both for kind: step, got "alternate"`},
		{`  - {name: x, kind: soak, target: sim, scenario: s, rate: 1, duration: 1h, cache: both}`,
			`tests[0].cache: must be one of production, cold, alternate for kind: soak, got "both"`},
		{`  - {name: x, kind: step, target: sim, scenario: s, verify: {hot_tenant: {factor: 1}}}`,
			`tests[0].verify.hot_tenant.factor: must be above 1 and at most 100 (times the tenant's share), got 1`},
		{`  - {name: x, kind: step, target: sim, scenario: u, verify: {hot_tenant: {factor: 5}}}`,
			`tests[0].verify.hot_tenant: scenario "u" has no tenants: a hot tenant needs scenarios with tenants (scenarios[].tenants)`},
		{`  - {name: x, kind: step, target: sim, scenario: s, verify: {hot_tenant: {factor: 5, for: 2h}}}`,
			`tests[0].verify.hot_tenant.for: must be between 0 (window.steady) and`},
	} {
		_, err := Load([]byte(base+tc.test+"\n"), false)
		if tc.err == "" {
			require.NoError(t, err, tc.test)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.test)
	}
}

// TestGPUErrors: a target's gpu section is checked with the target, each
// message under the target's key.
func TestGPUErrors(t *testing.T) {
	const base = `
scenarios: [{name: s}]
targets:
  - name: sim
    url: "http://127.0.0.1:8000/v1"
    model: m
`
	for _, tc := range []struct{ gpu, err string }{
		{`{exporter: {url: "http://127.0.0.1:9400/metrics"}}`, ""},
		{`{prometheus: {url: "http://127.0.0.1:9090", selector: '{Hostname="gpu-node-1"}'}, interval: 10s}`, ""},
		{`{}`, `targets[0].gpu: set exactly one of prometheus and exporter`},
		{`{exporter: {url: "nope"}}`, `targets[0].gpu.exporter.url: `},
		{`{prometheus: {url: "http://127.0.0.1:9090", selector: 'Hostname="x"'}}`, `targets[0].gpu.prometheus.selector: `},
		{`{exporter: {url: "http://127.0.0.1:9400/metrics"}, names: {utilization: "not a name"}}`, `targets[0].gpu.names.utilization: must be a metric name`},
	} {
		_, err := Load([]byte(base+"    gpu: "+tc.gpu+"\n"), false)
		if tc.err == "" {
			require.NoError(t, err, tc.gpu)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.gpu)
	}
}
