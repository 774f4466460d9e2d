package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/report"
)

func markdownOf(t *testing.T, run *capacity.Run) (string, *report.Report) {
	t.Helper()
	r := report.Build(run)
	var md bytes.Buffer
	require.NoError(t, report.WriteMarkdown(&md, r))
	var h bytes.Buffer
	require.NoError(t, report.WriteHTML(&h, r), "the HTML renders what the Markdown has")
	return md.String(), r
}

// TestGPUNotMeasured: a run without GPU readings says so once and has no
// GPU columns, never zeros.
func TestGPUNotMeasured(t *testing.T) {
	for _, name := range []string{"step-run.json", "soak-run.json"} {
		md, r := markdownOf(t, load(t, name))
		require.False(t, r.TestObject.GPU.Measured)
		require.Empty(t, r.Risk.GPU)
		require.Equal(t, 1, strings.Count(md, "GPU"), name)
		require.Contains(t, md, "| GPUs | not measured (the target has no gpu source) |")
		require.NotContains(t, md, "GPU util")
	}
}

// TestGPUColumnsAndFlags: with GPU readings the levels have GPU columns,
// the risk boundaries the memory headroom at the capacity and the flags.
func TestGPUColumnsAndFlags(t *testing.T) {
	run := load(t, "step-both-run.json")
	md, r := markdownOf(t, run)
	require.True(t, r.TestObject.GPU.Measured)
	require.Contains(t, md, "| GPU util mean / max | GPU mem max (of total) | Note |")
	require.Contains(t, md, "| 93% / 100% | 71.2 / 80 GiB (89%) |")
	require.Contains(t, md, "- **GPU memory headroom**: at the verified 9.2 req/s the fullest GPU used 71.2 of 80 GiB: 11% headroom.")
	require.Contains(t, md, "- **GPU memory headroom**: at the closed-loop capacity of 8 clients the fullest GPU used 71.2 of 80 GiB: 11% headroom.")
	require.Contains(t, md, "- **GPU** at sweep 16 clients: **memory within 5% of full**: the fullest GPU used 76.6 of 80 GiB: 4% headroom (96% used).")
	require.Contains(t, md, "- **GPU** at sweep 16 clients: **busy GPU while the queue grows**: utilisation 97% mean, engine queue mean 14.2 against 1.1 at sweep 8 clients; objectives missed.")
	require.Contains(t, md, "- **GPU** at verify 9.2 req/s: busy GPU, SLOs held: fine (utilisation 93% mean, engine queue mean 0.6, not growing).")
	require.NotContains(t, md, "dropped out")

	// The engine queue not read; a GPU that dropped out; MIG.
	run = load(t, "step-both-run.json")
	run.Verify[1].EngineQueue = nil
	run.Sweep[0].GPU.MissingDevices, run.Sweep[0].GPU.MIG = 1, true
	md, _ = markdownOf(t, run)
	require.Contains(t, md, "- **GPU** at verify 9.2 req/s: busy GPU (queue not read): utilisation 93% mean; SLOs held: fine.")
	require.Contains(t, md, "| GPUs | up to 1 GPU read in each reading; 1 GPU dropped out of the readings; MIG instances")
	require.Contains(t, md, "- **GPU readings**: 1 GPU dropped out of the readings in a level")
}

// TestCacheBoth: a cache: both run states both verified capacities, their
// cached shares and the difference; a cold pass that verified nothing
// says so, never 0.
func TestCacheBoth(t *testing.T) {
	md, r := markdownOf(t, load(t, "step-both-run.json"))
	require.NotNil(t, r.Cache)
	require.InDelta(t, 2.7, *r.Cache.Difference, 1e-9)
	require.Contains(t, md, "## 5. Prefix cache: cold and production")
	require.Contains(t, md, "- **Production** (prompts as configured, the prefix cache at work): **9.2 req/s** verified open loop, attaining 97.3% [95.2, 98.4] (95% interval) over 552 requests, 8.95 good req/s; 38.5% of the prompt tokens cached (the engine's own counters: 39.1% hits).")
	require.Contains(t, md, "- **Cold** (every prompt salted: the cache finds nothing): **6.5 req/s** verified open loop, attaining 97.2% [95.1, 98.5] (95% interval) over 390 requests, 6.32 good req/s; 0.4% of the prompt tokens cached (the engine's own counters: 0.4% hits).")
	require.Contains(t, md, "Production caching adds +2.7 req/s (+42%) over cold.")
	require.Contains(t, md, "prompts that all hit the prefix cache overstate the capacity")
	require.Len(t, r.Cache.ColdLevels, 7)

	run := load(t, "step-both-run.json")
	zero := 0.0
	run.Cold.Verdict, run.Cold.Reason, run.Cold.Capacity.VerifiedRate, run.Cold.CachedShare, run.Cold.EngineHitRatio = "fail", "no open-loop rate met the objectives", &zero, nil, nil
	md, r = markdownOf(t, run)
	require.Nil(t, r.Cache.Cold.VerifiedRate)
	require.Nil(t, r.Cache.Difference)
	require.Contains(t, md, "- **Cold** (every prompt salted: the cache finds nothing): no rate verified (fail: no open-loop rate met the objectives); the server did not report cached tokens.")
	require.Contains(t, md, "No difference is stated: the cold pass verified no rate.")
	require.NotContains(t, md, "**0 req/s**")

	run = load(t, "step-run.json")
	run.Cache = "cold"
	md, r = markdownOf(t, run)
	require.Nil(t, r.Cache)
	require.Contains(t, md, "Cache: cold (every prompt salted)")
}

// TestHotTenant: the hot-tenant level's result replaces "not measured".
func TestHotTenant(t *testing.T) {
	md, r := markdownOf(t, load(t, "step-both-run.json"))
	require.NotNil(t, r.Risk.HotTenant)
	require.Contains(t, md, "- **Single-tenant hot spots**: tenant-1 at 10x its share (16.8% of requests, expected 16.9%, long prompts) during 1m0s at 10.9 req/s: other tenants 98.0% good \\[96.1, 99.0\\] of 544 — met (objective 95%); tenant-1 itself 83.6% good \\[75.2, 89.6\\] of 110;")
	require.NotContains(t, md, "Single-tenant hot spots**: not measured")
	md, _ = markdownOf(t, load(t, "step-run.json"))
	require.Contains(t, md, "- **Single-tenant hot spots**: not measured: the run's requests carry no tenant")
}

// TestSoakFaults: a soak's fault actions, what each did to the target
// and the remaining capacity after a replica was lost, measured beside
// computed.
func TestSoakFaults(t *testing.T) {
	md, r := markdownOf(t, load(t, "soak-faults-run.json"))
	require.Len(t, r.Soak.Impacts, 3)
	require.Contains(t, md, "| Step | Kind | Description | Before | During | Worst span | Allowance | Recovery |")
	require.Contains(t, md, "| 1 | kubernetes | delete pod vllm-1 (namespace inference) (a replica lost) | 99.8% \\[99.1, 99.9\\] of 1797, 5.98 good/s |")
	require.Contains(t, md, "| recovered in 45 s |")
	require.Contains(t, md, "| not disrupted |")
	require.Contains(t, md, "| **not recovered** by the soak's end |")
	require.Contains(t, md, "- **Fault plan** step 2 (http): do POST http://gateway.inference.svc/admin/drain?backend=vllm-2 at 09:20:20 (**dry run**: nothing was done)")
	require.Contains(t, md, "(**failed**: exit status 2: Error: Cannot delete qdisc with handle of zero.)")
	require.Contains(t, md, "After losing one of 3 replicas (fault step 1, at 6 req/s): computed 6.13 req/s (9.2 req/s verified in run `chat-capacity-20261201T090000Z-4c2d` x 2/3); measured: delivered 5.47 good req/s")
	require.NotContains(t, md, "a soak test does not measure capacity")

	run := load(t, "soak-faults-run.json")
	run.Soak.OneLost.Computed, run.Soak.OneLost.VerifiedRate, run.Soak.OneLost.ComputedFrom = nil, nil, ""
	md, _ = markdownOf(t, run)
	require.Contains(t, md, "computed: not available (no step test verified a capacity on this target); measured:")
	run.Soak.OneLost.Replicas = 1
	md, _ = markdownOf(t, run)
	require.Contains(t, md, "computed: not available (one replica")

	// The simulator's events are as they were.
	md, _ = markdownOf(t, load(t, "soak-run.json"))
	require.Contains(t, md, "- **Fault plan**: set `{\"error_rate\":{\"503\":1}}` at 17:23:43.")
	require.Contains(t, md, "Not computed: a soak test does not measure capacity")
}

// TestNewSectionsHTML: the new sections reach the HTML page.
func TestNewSectionsHTML(t *testing.T) {
	for name, want := range map[string][]string{
		"step-both-run.json":   {"<h2>5. Prefix cache: cold and production</h2>", "<th>GPU util mean / max</th>", "<strong>busy GPU while the queue grows</strong>", "tenant-1 at 10x its share"},
		"soak-faults-run.json": {"<strong>Failure and recovery</strong>", "<th>Worst span</th>", "<strong>not recovered</strong> by the soak", "After losing one of 3 replicas"},
	} {
		var h bytes.Buffer
		require.NoError(t, report.WriteHTML(&h, report.Build(load(t, name))))
		for _, s := range want {
			require.Contains(t, h.String(), s, name)
		}
		require.NotContains(t, h.String(), "<script")
	}
}

// TestBoundStated: where the capacity lies above the verified rate is
// stated as what the search found: between it and the rate above only
// when that rate missed; an undecided rate above it with its attainment,
// and the ceiling, the closed loop's peak when nothing above missed.
func TestBoundStated(t *testing.T) {
	run := load(t, "step-both-run.json")
	md, _ := markdownOf(t, run)
	require.Contains(t, md, "The capacity lies between 9.2 req/s and 11 req/s, the lowest rate above it, which missed.")

	run = load(t, "step-both-run.json")
	c := run.Capacity
	c.BoundDecision, c.BoundAttainment = capacity.DecisionInconclusive, 0.974
	c.BoundInterval = &capacity.Interval{Lower: 0.931, Upper: 0.992, N: 230, NEff: 200, Batches: 20}
	c.Ceiling, c.CeilingFrom = 11.6, capacity.CeilingClosedLoop
	md, r := markdownOf(t, run)
	require.Contains(t, md, "Where the capacity lies above it: at most 11.6 req/s (the closed loop's peak); 11 req/s above it inconclusive (attained 97.4% [93.1, 99.2] of 230).")
	require.False(t, strings.Contains(md, "The capacity lies between"), "an undecided rate above is no bound")
	require.Equal(t, 11.6, r.Capacity.Ceiling)
}
