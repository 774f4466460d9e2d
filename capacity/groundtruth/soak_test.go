package groundtruth_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"

	"github.com/prometheus/common/promslog"
)

// soakSim is the built-in simulator's engine (8 slots); soakDegrading
// slows its decode by half again a minute from the start.
const (
	soakSim       = "slots: 8\n"
	soakDegrading = "slots: 8\nfaults: {degrade: {decode: 0.5, per: 1m}}\n"
)

// soakConfig is a 70 s soak at 8 req/s of 32-token replies, windows of
// 10 s after a 10 s warm-up: six windows, the last two the end.
func soakConfig(t *testing.T, url string) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(fmt.Sprintf(`
global: {max_rate: 100, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s}]
scenarios: [{name: s, input_tokens: 256, output_tokens: 32, ignore_eos: true, objective: 0.9, slo: {ttft: 500ms, tpot: 100ms}}]
tests:
  - {name: soak, kind: soak, target: sim, scenario: s, rate: 8, duration: 70s, window: {warmup: 10s, steady: 10s}, drift: {p99_growth: 0.2, goodput_drop: 0.05}}
`, url)), false)
	require.NoError(t, err)
	return cfg
}

// runSoak runs the configuration's soak against its target.
func runSoak(t *testing.T, cfg *config.Config) *capacity.Run {
	t.Helper()
	rec := capacity.NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: cfg.Global.MaxRate, MaxInFlight: cfg.Global.MaxInFlight}))
	tc := cfg.Tests[0]
	return capacity.Execute(t.Context(), capacity.Env{Manager: m, Recorder: rec, Logger: promslog.NewNopLogger(), MaxRate: cfg.Global.MaxRate},
		tc, cfg.TestLoad(tc))
}

// TestSoakBenchmark is the soak half of `make bench-capacity`: soaks of an
// unchanged simulator (no drift may be flagged) and of a degrading one
// (drift must be flagged every time), one after the other: side by side,
// the degrading simulator's growing work takes the unchanged one's CPU and
// its latency grows with it (a run of 2 cores flagged the unchanged one).
// It runs only with SLOPROBER_BENCH_SOAK set to the runs of each (10 in
// `make bench-capacity`).
func TestSoakBenchmark(t *testing.T) {
	n := 0
	if _, err := fmt.Sscan(os.Getenv("SLOPROBER_BENCH_SOAK"), &n); err != nil || n <= 0 {
		t.Skip("set SLOPROBER_BENCH_SOAK to the runs of each simulator (make bench-capacity)")
	}
	kinds := []struct{ name, sim, want string }{
		{"unchanged", soakSim, capacity.VerdictPass},
		{"degrading", soakDegrading, capacity.VerdictFail},
	}
	tables := make([]strings.Builder, len(kinds))
	t.Run("simulators", func(t *testing.T) {
		for k, kind := range kinds {
			t.Run(kind.name, func(t *testing.T) {
				right := 0
				for i := range n {
					// A simulator a run: a degradation counts from its start.
					sim := simtest.Start(t, kind.sim)
					run := runSoak(t, soakConfig(t, sim.URL))
					if run.Verdict == kind.want {
						right++
					}
					growth := "-"
					if d := run.Soak.Drift; d != nil {
						growth = d.Growth() + "; " + d.Attainment()
					}
					fmt.Fprintf(&tables[k], "| %s | %d | %s | %s |\n", kind.name, i+1, run.Verdict, growth)
					t.Logf("%s run %d: %s: %s", kind.name, i+1, run.Verdict, run.Reason)
				}
				fmt.Fprintf(&tables[k], "| %s | **%d of %d %s** | | |\n", kind.name, right, n, kind.want)
			})
		}
	})
	var out strings.Builder
	fmt.Fprintln(&out, "| simulator | run | verdict | drift (growth [95% interval]) |")
	fmt.Fprintln(&out, "|---|---|---|---|")
	for i := range tables {
		out.WriteString(tables[i].String())
	}
	t.Logf("\n%s", out.String())
	if path := os.Getenv("SLOPROBER_BENCH_SOAK_OUT"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(out.String()), 0o644))
	}
}
