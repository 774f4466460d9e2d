package runstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/runstore"
)

// bigLevel is a level with every field set, scenarios scenarios of the
// longest names.
func bigLevel(scenarios int) capacity.Level {
	pct := capacity.Percentiles{N: 123456, P50: 0.123456789, P95: 1.23456789, P99: 12.3456789, LowConfidence: []string{"p95", "p99"}, Sampled: true}
	slo := map[string]float64{}
	for _, n := range config.SLONames {
		slo[n] = 0.987654321
	}
	l := capacity.Level{
		Stage: "refine", Concurrency: 1000, IntendedRate: 1234.56789, Start: time.Now(), WindowSeconds: 120.123456,
		Scheduled: 1234567, Sent: 1234567, Dropped: map[string]int{"max_in_flight": 12345, "max_rate": 12345},
		Outcomes: map[prober.Outcome]int{}, OfferedRate: 1234.56789, CompletedRate: 1234.56789,
		InputTokensRate: 123456.789, OutputTokensRate: 123456.789, Goodput: 1234.56789, Counted: 1234567,
		Attainment: 0.987654321, SLOAttainment: slo, TTFT: pct, TPOT: pct, ITL: pct, E2E: pct,
		DrainSeconds: 12.3456789, Insufficient: true, Note: strings.Repeat("n", 200),
	}
	for _, o := range []prober.Outcome{prober.OutcomeOK, prober.OutcomeCancelled, prober.OutcomeShutdown, prober.OutcomeTimeout,
		prober.OutcomeConnectError, prober.OutcomeHTTP429, prober.OutcomeHTTP4xx, prober.OutcomeHTTP5xx,
		prober.OutcomeProtocolError, prober.OutcomeStreamError} {
		l.Outcomes[o] = 1234567
	}
	for i := range scenarios {
		l.Scenarios = append(l.Scenarios, capacity.ScenarioResult{
			Scenario: fmt.Sprintf("%064d", i), Counted: 1234567, Good: 1234567, Goodput: 1234.56789,
			Attainment: 0.987654321, SLOAttainment: slo, Objective: 0.99, Met: true,
		})
	}
	return l
}

// TestRunSizeBound measures the largest step run the configuration allows
// against MaxRunBytes, for its comment: 140 levels (a baseline, 64 sweep
// levels, 10 refinements, 64 verification rates, a burst).
func TestRunSizeBound(t *testing.T) {
	levels := 1 + config.MaxTestLevels + config.MaxRefine + config.MaxTestLevels + 1
	require.Equal(t, 140, levels)
	size := func(scenarios int) int {
		run := capacity.Run{Summary: capacity.Summary{Test: strings.Repeat("t", 64), Kind: config.TestStep, Target: strings.Repeat("t", 64), Start: time.Now(), End: time.Now(), Verdict: capacity.VerdictPass, Reason: strings.Repeat("r", 300)}, Stages: capacity.Stages{Knee: &capacity.Knee{Reason: strings.Repeat("k", 200)}, Capacity: &capacity.Capacity{}}}
		l := bigLevel(scenarios)
		run.Baseline, run.Burst = &l, &l
		for range config.MaxTestLevels + config.MaxRefine {
			run.Sweep = append(run.Sweep, l)
		}
		for range config.MaxTestLevels {
			run.Verify = append(run.Verify, l)
		}
		data, err := json.MarshalIndent(run, "", "  ")
		require.NoError(t, err)
		return len(data)
	}
	one, sixteen := size(1), size(16)
	t.Logf("a level: %d bytes with 1 scenario, %d more per scenario; 140 levels of 16 scenarios: %d bytes (%.2f MiB)",
		one/levels, (sixteen-one)/levels/15, sixteen, float64(sixteen)/(1<<20))
	require.Less(t, sixteen, runstore.MaxRunBytes/32)
}
