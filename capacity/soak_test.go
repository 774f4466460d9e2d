package capacity_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// runSoak runs the configuration's first test, a soak; during, if not
// nil, runs beside it.
func runSoak(t *testing.T, cfg *config.Config, during func()) *capacity.Run {
	t.Helper()
	rec := capacity.NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: cfg.Global.MaxRate, MaxInFlight: cfg.Global.MaxInFlight}))
	tc := cfg.Tests[0]
	s := &capacity.Soak{Manager: m, Recorder: rec, Test: tc, Load: cfg.TestLoad(tc), Logger: promslog.NewNopLogger()}
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
	require.Contains(t, run.Reason, "goodput per request fell 100%")
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

// TestSoakCatchesDegradation: a simulator whose decode slows by 100% every
// 4 s (faults.degrade) fails a soak that a steady one passes
// (TestSoakHealthy): between the first 2 s window (factor about 1.25) and
// the last (about 2.75) the 20-token reply's E2E more than doubles.
func TestSoakCatchesDegradation(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\nfaults: {degrade: {decode: 1, per: 4s}}\n")
	cfg := stepConfig(t, sim.URL, `
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 20, duration: 8s, window: 2s, drift: {p99_growth: 0.5, goodput_drop: 0.5}}
`)
	run := runSoak(t, cfg, nil)
	require.Equal(t, capacity.VerdictFail, run.Verdict, run.Reason)
	require.Contains(t, run.Reason, "e2e P50 grew")
	require.Greater(t, run.Soak.Drift.P99Growth["e2e"], 0.8, "%+v", run.Soak.Drift)
	require.Greater(t, run.Soak.Drift.P99Growth["tpot"], 0.8, "%+v", run.Soak.Drift)
}
