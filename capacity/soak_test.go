package capacity_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator"
	"github.com/sloprober/sloprober/simulator/simtest"
	"github.com/sloprober/sloprober/validity"
)

// runSoak runs the configuration's first test, a soak; during, if not
// nil, runs beside it.
func runSoak(t *testing.T, cfg *config.Config, during func()) *capacity.Run {
	t.Helper()
	return runSoakChecked(t, cfg, during, nil)
}

// runSoakChecked is runSoak with the soak's checkpoints handed to
// checkpoint.
func runSoakChecked(t *testing.T, cfg *config.Config, during func(), checkpoint func(*capacity.Run)) *capacity.Run {
	t.Helper()
	rec, m := newManager(t, cfg)
	tc := cfg.Tests[0]
	s := &capacity.Soak{Manager: m, Recorder: rec, Test: tc, Load: cfg.TestLoad(tc), Logger: promslog.NewNopLogger(), Checkpoint: checkpoint}
	if during != nil {
		go during()
	}
	return s.Run(t.Context())
}

const soakTest = `
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 20, duration: 8s, window: 2s, drift: {p99_growth: 1, goodput_drop: 0.05}}
`

// TestSoakHealthy: a soak of a simulator whose latencies do not move
// passes, with one row per window (4 of 2 s), each with its requests and
// the prober's own memory.
func TestSoakHealthy(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\n")
	run := runSoak(t, stepConfig(t, sim.URL, soakTest), nil)
	require.Equal(t, capacity.VerdictPass, run.Verdict, run.Reason)
	require.Len(t, run.Soak.Windows, 4)
	for i, w := range run.Soak.Windows {
		require.InDelta(t, 40, w.Sent, 25, "window %d: 20 req/s for 2 s (Poisson)", i)
		require.Equal(t, w.Sent, w.Outcomes[prober.OutcomeOK], "window %d", i)
		require.Positive(t, w.ProberRSSBytes)
		require.Positive(t, w.ProberGoroutines)
		require.False(t, w.ErrorBurst)
	}
	require.NotNil(t, run.Soak.Drift)
	require.Less(t, run.Soak.Drift.P99Growth["ttft"], 1.0)
}

// TestSoakNoRecovery: a target that starts failing every request half way
// through a soak and does not recover fails it; the error burst is named.
func TestSoakNoRecovery(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\n")
	cfg := stepConfig(t, sim.URL, `
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 20, duration: 8s, window: 2s, stop: {error_ratio: 1}}
`)
	faults, err := simulator.ParseFaults([]byte(`{error_rate: {"503": 1}}`))
	require.NoError(t, err)
	run := runSoak(t, cfg, func() {
		time.Sleep(4500 * time.Millisecond) // the fault starts in the third window
		sim.SetFaults(faults)
	})
	require.Equal(t, capacity.VerdictFail, run.Verdict, run.Reason)
	require.Contains(t, run.Reason, "the last window is an error burst (more than 10% failed): no recovery")
	require.Contains(t, run.Reason, "the attainment fell 100%")
	require.False(t, run.Soak.Windows[0].ErrorBurst)
	require.True(t, run.Soak.Windows[3].ErrorBurst)
}

// TestSoakAbort: an aborted soak keeps the windows it measured.
func TestSoakAbort(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\n")
	cfg := stepConfig(t, sim.URL, `
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 20, duration: 1h, window: 1s}
`)
	rec := capacity.NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: 100, MaxInFlight: 200}))
	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(2500*time.Millisecond, func() { cancel(fmt.Errorf("SIGTERM")) })
	s := &capacity.Soak{Manager: m, Recorder: rec, Test: cfg.Tests[0], Load: cfg.TestLoad(cfg.Tests[0]), Logger: promslog.NewNopLogger()}
	run := s.Run(ctx)
	require.Equal(t, capacity.VerdictAborted, run.Verdict)
	require.Equal(t, "aborted: SIGTERM", run.Reason)
	require.Len(t, run.Soak.Windows, 3, "two whole windows and the one running")
	require.Positive(t, run.Soak.Windows[0].Sent)
}

// TestSoakCatchesDegradation: a simulator whose decode slows by 200% every
// 4 s (faults.degrade) fails a soak that a steady one passes
// (TestSoakHealthy): between the first 2 s window (factor about 1.5) and
// the last (about 4.5) the 20-token reply's E2E (20 ms + 19 x 5 ms x the
// factor) grows by about 175%. (At 100% every 4 s it grew by about 100%,
// and a loaded machine's late timers, a few ms a sleep on every window,
// brought that under the 80% asserted below.)
func TestSoakCatchesDegradation(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\nfaults: {degrade: {decode: 2, per: 4s}}\n")
	cfg := stepConfig(t, sim.URL, `
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 20, duration: 8s, window: 2s, drift: {p99_growth: 0.5, goodput_drop: 0.5}}
`)
	run := runSoak(t, cfg, nil)
	require.Equal(t, capacity.VerdictFail, run.Verdict, run.Reason)
	require.Contains(t, run.Reason, "e2e P50 grew")
	require.Greater(t, run.Soak.Drift.P99Growth["e2e"], 0.8, "%+v", run.Soak.Drift)
	require.Greater(t, run.Soak.Drift.P99Growth["tpot"], 0.8, "%+v", run.Soak.Drift)
	// The simulator's own timings say where the time went: decode, not
	// its queue (it has none: slots 0).
	for i, w := range run.Soak.Windows {
		require.NotNil(t, w.Server, "window %d", i)
		require.Equal(t, w.Outcomes[prober.OutcomeOK], w.Server.Reported, "window %d", i)
		require.Zero(t, w.Server.Implausible, "window %d", i)
	}
	require.Greater(t, run.Soak.Drift.ServerGrowth["decode_per_token"], 0.5, "%+v", run.Soak.Drift)
	require.NotContains(t, run.Soak.Drift.ServerGrowth, "queue")
	require.Contains(t, run.Reason, "the server's own timings (P50): ")
}

// TestCanaryDuringTest: a run reports what the canary on its target
// attained meanwhile, and the share of its 30-day error budget that cost:
// a canary whose TTFT SLO (1 ms) no request meets, at 10 req/s and 0.99,
// burns 1 / (0.01 x 10 x 2,592,000) of its budget per request.
func TestCanaryDuringTest(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\n")
	cfg, err := config.Load([]byte(fmt.Sprintf(`
global: {max_rate: 100, max_in_flight: 200}
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s}]
scenarios:
  - {name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, slo: {ttft: 500ms}}
  - {name: strict, input_tokens: 16, output_tokens: 2, ignore_eos: true, objective: 0.99, slo: {ttft: 1ms}}
canary: [{target: sim, scenario: strict, rate: 10, arrival: constant}]
tests:
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 10, duration: 2s, window: 1s}
`, sim.URL)), false)
	require.NoError(t, err)
	rec := capacity.NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.ApplyConfig(cfg))
	s := &capacity.Soak{Manager: m, Recorder: rec, Test: cfg.Tests[0], Load: cfg.TestLoad(cfg.Tests[0]), Logger: promslog.NewNopLogger()}
	run := s.Run(t.Context())
	require.Len(t, run.Canary, 1)
	c := run.Canary[0]
	require.Equal(t, "strict", c.Scenario)
	require.InDelta(t, 20, c.Counted, 5, "10 req/s for the 2 s of the run")
	require.Zero(t, c.Good)
	require.Zero(t, c.Attainment)
	require.InEpsilon(t, float64(c.Counted)/(0.01*10*30*24*3600), c.BudgetConsumed, 1e-9)
}

// TestSoakRecovers: a soak whose fault plan makes the simulator fail every
// request for 2 s, from the middle of its second window, passes: the
// target recovers, the error bursts are reported, and the default stop
// rule (half the requests failing) does not end the soak for one window's
// burst. The plan restores the simulator's faults after its step.
//
// Latency is not the point here (TestSoakHealthy and
// TestSoakCatchesDegradation judge it): beside a CPU burner the host's
// pauses moved the 5 ms gaps between chunks by 398% [153, 666] at the
// median of 40 and 44 requests, past a drift.p99_growth of 1, while the
// simulator's own timings did not move. The allowance is 1000 (100,000%),
// beyond what a pause can do to a 20 ms TTFT; and the scenario is
// lenientConfig's (a TTFT SLO of 2 s), so that the attainment the drift
// compares moves with the 503s, what the soak must recover from, and not
// with the host's late first tokens (goodput_drop stays the default 5%).
func TestSoakRecovers(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\nfaults: {stall: {rate: 0, duration: 3s}}\n")
	cfg := lenientConfig(t, sim.URL, `
  - name: soak
    kind: soak
    target: sim
    scenario: short
    rate: 20
    duration: 8s
    window: 2s
    drift: {p99_growth: 1000}
    faults: [{at: 2500ms, for: 2s, set: {error_rate: {"503": 1}}}]
`)
	// Its checkpoints hold only summarized windows (with 2 s windows,
	// shorter than the timeout, none until the end) and what the plan did
	// so far.
	var checkpoints []*capacity.Run
	run := runSoakChecked(t, cfg, nil, func(r *capacity.Run) { checkpoints = append(checkpoints, r) })
	require.Len(t, checkpoints, 4, "one a window")
	for _, cp := range checkpoints {
		require.Empty(t, cp.Soak.Windows)
	}
	require.Empty(t, checkpoints[0].Soak.Faults, "the step is due at 2.5 s")
	require.Equal(t, "set", checkpoints[1].Soak.Faults[0].Action)
	require.Equal(t, capacity.VerdictPass, run.Verdict, run.Reason)
	require.Contains(t, run.Reason, "error bursts, recovered")
	require.True(t, run.Soak.Windows[1].ErrorBurst)
	require.False(t, run.Soak.Windows[3].ErrorBurst)
	require.Len(t, run.Soak.Faults, 2)
	require.Equal(t, "set", run.Soak.Faults[0].Action)
	require.Empty(t, run.Soak.Faults[0].Error)
	require.Equal(t, "restored", run.Soak.Faults[1].Action)
	require.Empty(t, run.Soak.Faults[1].Error)
	require.Equal(t, 3*time.Second, time.Duration(sim.Config().Faults.Stall.Duration), "the file's faults are back")
	require.Empty(t, sim.Config().Faults.ErrorRate)
}

// TestSoakWorkloadFeatures: a soak may use every workload feature. A
// scenario of three-turn conversations with shared prefixes, a fifth of
// whose requests the client cancels, soaks a simulator with a prefix
// cache: cancellations leave the denominator (the healthy soak passes;
// on a starved host it may fail instead on a drift the simulator's own
// timings show, see below), and every window carries the simulator's
// cached share of the prompt tokens.
func TestSoakWorkloadFeatures(t *testing.T) {
	sim := simtest.Start(t, "slots: 16\nprefill: {base: 2ms, per_token: 20us}\ndecode: {base: 5ms, per_sequence: 0s}\nprefix_cache: {block_tokens: 64}\n")
	cfg, err := config.Load([]byte(fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s, simulator: true}]
scenarios:
  - name: agent
    input_tokens: 600
    output_tokens: 16
    ignore_eos: true
    prefix: {tokens: 512, share: 1, groups: 2}
    conversation: {turns: 3, think_time: 50ms}
    cancel: {share: 0.2, after: 40ms}
    slo: {ttft: 500ms}
    objective: 0.9
tests:
  - {name: soak, kind: soak, target: sim, scenario: agent, rate: 20, duration: 6s, window: 2s, drift: {p99_growth: 5, goodput_drop: 0.2}}
`, sim.URL)), false)
	require.NoError(t, err)
	run := runSoak(t, cfg, nil)
	// The soak passes, unless the simulator itself slowed: on a busy host
	// the in-process simulator is starved too, and its own timings grew
	// (beside a CPU burner: TTFT P50 +1154% [641, 4902] at the client,
	// the simulator's queue +2579%, prefill +209%, decode +457%). Then
	// the drift is the target's, and flagging it is right; a drift, or
	// any other failure, that the simulator's own clock does not show
	// (more than drift.p99_growth on one of its phases) fails the test.
	if run.Verdict == capacity.VerdictFail && run.Soak.Drift != nil {
		t.Logf("%s", run.Reason)
		d := run.Soak.Drift
		slowed := 0.0
		for _, g := range d.ServerGrowth {
			slowed = max(slowed, g)
		}
		require.Greater(t, slowed, 5.0, "a drift the simulator's own timings do not show: %s", run.Reason)
		require.True(t, strings.HasPrefix(run.Reason, "drift: "), run.Reason)
		require.Contains(t, run.Reason, "; the server's own timings (P50): ")
		require.NotContains(t, run.Reason, "error burst", "cancelled requests are not failures")
		require.NotContains(t, run.Reason, "the prober's memory")
	} else {
		require.Equal(t, capacity.VerdictPass, run.Verdict, run.Reason)
	}
	cancelled := 0
	for i, w := range run.Soak.Windows {
		cancelled += w.Outcomes[prober.OutcomeCancelled]
		require.Positive(t, w.Outcomes[prober.OutcomeOK], "window %d", i)
		require.Equal(t, w.Outcomes[prober.OutcomeOK], w.Counted, "window %d: cancelled requests are not counted", i)
		require.NotNil(t, w.Server, "window %d", i)
		require.NotNil(t, w.Server.CachedShare, "window %d", i)
		require.Greater(t, *w.Server.CachedShare, 0.3, "window %d: most of a prompt is a shared prefix or a conversation's history", i)
	}
	require.Positive(t, cancelled, "a fifth of the requests, cancelled after 40 ms (a request takes about 90 ms)")
}

// TestSoakProberBound: with the prober's health judged (Soak.Validity),
// a window measured while the prober was the limit is marked, as a step
// test's level is. The threshold is set so that any CPU use is over it.
func TestSoakProberBound(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\n")
	cfg := stepConfig(t, sim.URL, `
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 20, duration: 4s, window: 2s}
`)
	rec, m := newManager(t, cfg)
	tc := cfg.Tests[0]
	v := validity.DefaultConfig
	v.CPU = 1e-9
	run := (&capacity.Soak{Manager: m, Recorder: rec, Test: tc, Load: cfg.TestLoad(tc), Logger: promslog.NewNopLogger(), Validity: &v}).Run(t.Context())
	require.NotEmpty(t, run.Soak.Windows)
	for i, w := range run.Soak.Windows {
		require.True(t, w.ProberBound(), "window %d", i)
		// The starvation that raises the CPU share may trip the
		// scheduler latency and GC pause too: cpu comes first.
		require.NotEmpty(t, w.Prober.Invalid, "window %d", i)
		require.Equal(t, validity.ReasonCPU, w.Prober.Invalid[0], "window %d: %v", i, w.Prober.Invalid)
		require.Contains(t, w.Note, "prober-bound (cpu", "window %d", i)
		require.Contains(t, w.Note, "): measured while the prober was the limit", "window %d", i)
	}
}
