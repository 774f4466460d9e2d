package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// TestTestRunExitCodes: `sloprober test run` exits 0 on pass, 1 on an
// infeasible (or failed) test, 2 on an unknown test, a kind it cannot run,
// a usage or a configuration error; --json writes the run. A soak runs its
// windows.
func TestTestRunExitCodes(t *testing.T) {
	// 4 slots, a 4 ms prefill and 20-token replies at 8 + 2c ms a step:
	// every TTFT is under 25 ms up to 4 clients, far below the 150 ms SLO (see capacity's ground
	// truth test).
	sim := simtest.Start(t, "slots: 4\nprefill: {base: 4ms, per_token: 0s}\ndecode: {base: 8ms, per_sequence: 2ms}\n")
	dir := t.TempDir()
	file := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s}]
scenarios:
  - {name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, objective: 0.85, slo: {ttft: 150ms}}
  - {name: impossible, input_tokens: 16, output_tokens: 20, ignore_eos: true, slo: {ttft: 1ms}}
tests:
  - name: quick
    kind: step
    target: sim
    scenario: short
    baseline: {requests: 3}
    sweep: {concurrency: [1, 4], refine: 0}
    window: {warmup: 200ms, steady: 2s, min_requests: 5}
    verify: {rates: [0.25], burst: {factor: 1}}
  - {name: hopeless, kind: step, target: sim, scenario: impossible, baseline: {requests: 3}}
  - {name: soak, kind: soak, target: sim, scenario: short, rate: 10, duration: 2s, window: 1s, drift: {p99_growth: 10, goodput_drop: 0.99}}
`, sim.URL)), 0o600))
	out := filepath.Join(dir, "run.json")

	code, stdout, stderr := runCLI(t, "test", "run", "quick", "--config.file", file, "--json", out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "test quick (step) on sim: PASS")
	require.Contains(t, stderr, "level 2 of about")
	var run capacity.Run
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &run))
	require.Equal(t, capacity.VerdictPass, run.Verdict)
	require.Equal(t, 4, run.Capacity.Concurrency)

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"test", "run", "hopeless", "--config.file", file}, 1, ""},
		{[]string{"test", "run", "nope", "--config.file", file}, 2, `no test "nope" in the configuration (tests: quick, hopeless, soak)`},
		{[]string{"test", "run", "soak", "--config.file", file}, 0, "Running soak test soak on target sim: 10 req/s for 2s, windows of 1s"},
		{[]string{"test", "run"}, 2, "required argument 'name' not provided"},
		{[]string{"test", "run", "quick", "--config.file", filepath.Join(dir, "missing.yml")}, 2, "missing.yml"},
	} {
		code, stdout, stderr := runCLI(t, tc.args...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.msg, tc.args)
		if tc.code == 1 {
			require.Contains(t, stdout, "INFEASIBLE")
		}
	}
}
