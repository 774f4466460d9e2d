package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/report"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// sameTestConfig is a step test of a simulator run twice for a
// comparison: 4 slots, 20-token replies at 8 + 2c ms a step (TTFT under
// 25 ms up to 4 clients on a quiet host); the SLO (1 s) and objective
// (50%) are loose so that a busy host decides nothing, and the levels
// short so that a pair runs in about 30 s.
const sameTestConfig = `
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s, simulator: true}]
scenarios:
  - {name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, objective: 0.5, slo: {ttft: 1s}}
tests:
  - name: same
    kind: step
    target: sim
    scenario: short
    baseline: {requests: 3}
    sweep: {concurrency: [1, 2, 4], refine: 0}
    window: {warmup: 200ms, steady: 2s, min_requests: 5, max_steady: 20s}
    verify: {rates: [0.4], max_levels: 2, burst: {factor: 1}}
`

// TestCompareSameTest: two runs of the same test against the same
// unchanged simulator, one after the other, compared as a user compares
// them (report compare --format json): nothing changed, every number
// has a noise verdict, and none is beyond noise.
func TestCompareSameTest(t *testing.T) {
	sim := simtest.Start(t, "slots: 4\nprefill: {base: 4ms, per_token: 0s}\ndecode: {base: 8ms, per_sequence: 2ms}\n")
	dir := t.TempDir()
	cmp := comparePair(t, sim.URL, dir)
	require.Empty(t, cmp.Changed)
	require.Empty(t, cmp.ToldApart, "%s", rowsText(cmp))
	require.GreaterOrEqual(t, cmp.Compared, 10, "%s", rowsText(cmp))
	for _, r := range cmp.Rows {
		if _, err := strconv.ParseFloat(r.A, 64); err == nil {
			require.NotEmpty(t, r.Noise, "%s has no noise verdict", r.Name)
		}
	}
}

// comparePair runs the test twice against url and compares the runs.
func comparePair(t *testing.T, url, dir string) *report.Comparison {
	t.Helper()
	return comparePairConfig(t, url, dir, sameTestConfig)
}

// comparePairConfig runs the test "same" of config (a format of the
// target's URL) twice against url and compares the runs.
func comparePairConfig(t *testing.T, url, dir, config string) *report.Comparison {
	t.Helper()
	file := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(config, url)), 0o600))
	var runs []string
	for _, side := range []string{"a", "b"} {
		out := filepath.Join(dir, side+".json")
		code, stdout, stderr := runCLI(t, append([]string{"test", "run", "same", "--config.file", file,
			"--storage.path", filepath.Join(dir, "data"), "--json", out}, testValidity...)...)
		if config == sameTestConfig {
			require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
		} else {
			// The benchmark compares whatever the runs concluded: an
			// inconclusive run (exit 2) is compared too.
			require.FileExists(t, out, "exit %d\n%s\n%s", code, stdout, stderr)
		}
		runs = append(runs, out)
	}
	code, stdout, stderr := runCLI(t, "report", "compare", runs[0], runs[1], "--format", "json")
	require.Equal(t, 0, code, stderr)
	var cmp report.Comparison
	require.NoError(t, json.Unmarshal([]byte(stdout), &cmp))
	return &cmp
}

func rowsText(c *report.Comparison) string {
	var b strings.Builder
	for _, r := range c.Rows {
		fmt.Fprintf(&b, "%s | %s | %s | %s\n", r.Name, r.A, r.B, r.Noise)
	}
	return b.String()
}

// TestCompareBenchmark (make bench-compare) runs SLOPROBER_BENCH_COMPARE
// pairs of the same test against one unchanged simulator of 16 slots
// (256-token prompts in about 10 ms, 32 tokens at 3 + 0.25c ms a step:
// 16 clients complete 68 req/s on the engine's nominal phases, about 39
// measured with the prober's round trips on a shared host) whose
// objective binds (TTFT 150
// ms for 95%: the search decides levels near the capacity, where two
// runs differ most) and counts the pairs that come out not told apart on
// every row; the target is 9 of 10. A run that concludes
// nothing is compared too. The table goes to
// SLOPROBER_BENCH_COMPARE_OUT.
func TestCompareBenchmark(t *testing.T) {
	pairs, _ := strconv.Atoi(os.Getenv("SLOPROBER_BENCH_COMPARE"))
	if pairs <= 0 {
		t.Skip("a benchmark: make bench-compare")
	}
	sim := simtest.Start(t, "slots: 16\nprefill: {base: 5ms, per_token: 20us}\ndecode: {base: 3ms, per_sequence: 250us}\n")
	var b strings.Builder
	fmt.Fprintf(&b, "| pair | time | verdicts A, B | capacity A, B (req/s) | told apart on | cannot tell |\n|---|---|---|---|---|---|\n")
	same := 0
	for i := range pairs {
		dir := t.TempDir()
		start := time.Now()
		cfg := strings.NewReplacer(
			"objective: 0.5, slo: {ttft: 1s}", "objective: 0.95, slo: {ttft: 150ms}",
			"input_tokens: 16, output_tokens: 20", "input_tokens: 256, output_tokens: 32",
			"concurrency: [1, 2, 4]", "concurrency: [2, 4, 8, 16, 32]",
			"steady: 2s, min_requests: 5, max_steady: 20s", "steady: 5s, min_requests: 20, max_steady: 30s",
			"verify: {rates: [0.4], max_levels: 2, burst: {factor: 1}}", "verify: {rates: [0.6, 0.8], max_levels: 5, burst: {factor: 1}}",
		).Replace(sameTestConfig)
		cmp := comparePairConfig(t, sim.URL, dir, cfg)
		if len(cmp.ToldApart) == 0 {
			same++
		}
		capOf := func(r *report.Report) string {
			if r.Capacity == nil {
				return "-"
			}
			return fmt.Sprintf("%.3g", r.Capacity.VerifiedRate)
		}
		fmt.Fprintf(&b, "| %d | %s | %s, %s | %s, %s | %s | %s |\n", i+1, time.Since(start).Round(time.Second),
			cmp.A.Verdict, cmp.B.Verdict, capOf(cmp.A), capOf(cmp.B), orDash(strings.Join(cmp.ToldApart, "; ")), orDash(strings.Join(cmp.CannotTell, "; ")))
		t.Logf("pair %d: told apart on %v, cannot tell %v\n%s", i+1, cmp.ToldApart, cmp.CannotTell, rowsText(cmp))
		if out := os.Getenv("SLOPROBER_BENCH_COMPARE_OUT"); out != "" {
			text := b.String() + fmt.Sprintf("\n%d of %d pairs not told apart on every row (target: 9 of 10).\n", same, i+1)
			require.NoError(t, os.WriteFile(out, []byte(text), 0o644))
		}
	}
	t.Logf("%d of %d pairs not told apart on every row\n%s", same, pairs, b.String())
	require.GreaterOrEqual(t, 10*same, 9*pairs, "fewer than 9 in 10 pairs of the same test not told apart")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
