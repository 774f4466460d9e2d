package capacity_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/servermetrics"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// cacheSim is a simulator whose prefill dominates a request: 1 ms a token
// not found in its prefix cache (blocks of 16 tokens), 5 ms a decode step.
// A prompt of 512 tokens of which 448 are a shared system prompt takes
// 517 ms to prefill cold and about 69 ms warm, then 20 tokens: 617 ms a
// request cold against 169 ms warm at one client.
const cacheSim = "slots: 4\nprefill: {base: 5ms, per_token: 1ms}\ndecode: {base: 5ms, per_sequence: 0s}\nprefix_cache: {block_tokens: 16}\n"

func cacheConfig(t *testing.T, url, test string) *config.Config {
	t.Helper()
	cfg, err := config.Load(fmt.Appendf(nil, `
global: {max_rate: 100, max_in_flight: 200}
targets: [{name: sim, url: "%[1]s/v1", model: sim-model, timeout: 10s, simulator: true, server_metrics: {url: "%[1]s/metrics"}}]
scenarios:
  - name: chat
    input_tokens: 512
    output_tokens: 20
    ignore_eos: true
    prefix: {tokens: 448, share: 1, groups: 1}
    tenants: {count: 10}
    objective: 0.5
    slo: {ttft: 5s}
tests:
%[2]s`, url, test), false)
	require.NoError(t, err)
	return cfg
}

// TestStepCacheBoth: a step test with cache: both measures its procedure
// twice, cold first: every prompt of the cold pass salted, so the server
// finds none of it cached and pays its whole prefill; the production pass
// shares the scenario's system prompt, which the server finds cached. The
// run states both capacities and the cached share each measured.
func TestStepCacheBoth(t *testing.T) {
	sim := simtest.Start(t, cacheSim)
	cfg := cacheConfig(t, sim.URL, `
  - name: knee
    kind: step
    target: sim
    scenario: chat
    cache: both
    baseline: {requests: 5}
    sweep: {concurrency: [1, 2], refine: 0}
    window: {warmup: 0s, steady: 2s, min_requests: 1}
    verify: {rates: [0.5], max_levels: 1, burst: {factor: 1}}
`)
	// The engine's own counters (vllm:prefix_cache_hits/queries), read
	// as a drain check reads the queue.
	engines := servermetrics.NewManager(promslog.NewNopLogger(), servermetrics.NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, engines.Apply(cfg))
	rec, m := newManager(t, cfg)
	tc := cfg.Tests[0]
	s := &capacity.Step{Manager: m, Recorder: rec, Test: tc, Load: cfg.TestLoad(tc), MaxRate: cfg.Global.MaxRate,
		Logger: promslog.NewNopLogger(), Queue: engines.Queue("sim")}
	run := s.Run(t.Context())
	require.NotEqual(t, capacity.VerdictAborted, run.Verdict, run.Reason)
	require.Equal(t, config.CacheBoth, run.Cache)
	cold := run.Cold
	require.NotNil(t, cold)
	require.Equal(t, config.CacheCold, cold.Cache)
	require.NotEmpty(t, cold.Sweep)
	require.NotEmpty(t, run.Sweep, "the production pass ran its own sweep")
	require.NotNil(t, cold.CachedShare)
	require.NotNil(t, run.CachedShare)
	require.Less(t, *cold.CachedShare, 0.05, "salted prompts share nothing")
	require.Greater(t, *run.CachedShare, 0.6, "448 of 512 tokens shared, in whole blocks of 16")
	// The server's own prefill time tells the passes apart, whatever
	// the host's load does to the round trips.
	coldPrefill, warmPrefill := cold.Baseline.Server.Prefill.P50, run.Baseline.Server.Prefill.P50
	require.Greater(t, coldPrefill, 3*warmPrefill, "cold %.3fs, warm %.3fs", coldPrefill, warmPrefill)
	require.Regexp(t, `cold cache: ([0-9.]+ req/s verified open loop \(attained [0-9.]+% \[[0-9.]+, [0-9.]+\] of [0-9]+; |[a-z]+: )`, run.Reason,
		"the cold capacity with its interval and sample size, or the pass's verdict: never a bare number")
	// The engine's counters tell the same as the replies' usage, within
	// what a read once a second can: a level's counters span its reads,
	// up to a second off its sample, and a level stops as soon as it
	// decides (0.6 s: one read). Under -race on a busy host they were
	// 77.2% against usage's 84.9%.
	require.NotNil(t, cold.EngineHitRatio)
	require.NotNil(t, run.EngineHitRatio)
	require.Less(t, *cold.EngineHitRatio, 0.05)
	require.InDelta(t, *run.CachedShare, *run.EngineHitRatio, 0.1, "usage and the engine's counters")
}

// TestStepHotTenant: verify.hot_tenant adds a level at the verified rate
// with tenant-1 at 10 times its share (10 tenants drawn uniformly: 10% of
// the requests becomes 1/1.9 = 52.6%, the rate 1.9 times), and splits its
// requests: the hot tenant's and the others', each with its attainment.
func TestStepHotTenant(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\n")
	cfg := cacheConfig(t, sim.URL, `
  - name: knee
    kind: step
    target: sim
    scenario: chat
    baseline: {requests: 5}
    sweep: {concurrency: [1, 2], refine: 0}
    window: {warmup: 0s, steady: 2s, min_requests: 1}
    verify: {rates: [0.5], max_levels: 1, burst: {factor: 1}, hot_tenant: {factor: 10, for: 3s, input_tokens: 1024}}
`)
	run := runStep(t, t.Context(), cfg)
	require.Equal(t, capacity.VerdictPass, run.Verdict, run.Reason)
	hot := run.HotTenant
	require.NotNil(t, hot)
	require.Equal(t, "hot-tenant", hot.Stage)
	require.InDelta(t, 1.9*run.Verify[0].IntendedRate, hot.IntendedRate, 1e-9)
	h := hot.HotTenant
	require.NotNil(t, h)
	require.Equal(t, "tenant-1", h.Tenant)
	require.InDelta(t, 1/1.9, h.Share, 1e-9)
	require.True(t, h.LongPrompts)
	n := h.Hot.Counted + h.Others.Counted
	require.Positive(t, h.Others.Counted)
	// The measured share is binomial around the expected one: within 5
	// standard deviations.
	sd := (h.Share * (1 - h.Share) / float64(n))
	require.InDelta(t, h.Share, h.MeasuredShare, 5*math.Sqrt(sd)+1e-9, "of %d requests", n)
	require.Equal(t, capacity.DecisionMet, h.Others.Decision, "a simulator without slots serves every tenant alike")
	require.Contains(t, run.Reason, "hot tenant: other tenants ")
}

// TestSoakCacheAlternate: a soak with cache: alternate measures its
// windows cold and production in turn, cold first, and says which each
// was; the server found the shared system prompt cached in the production
// windows only.
//
// Its simulator prefills 0.1 ms a token, not cacheSim's 1 ms: prefill
// pauses the engine's decoding, so cacheSim serves a cold request in 517
// ms of the engine's time, under 2 req/s, and 8 req/s cold built a
// backlog the soak's 10 s timeout cut (a cold window with no reply at
// all on a loaded CI runner). Here a cold request takes 56 ms, 8 req/s
// less than half the engine's time, and a warm one 11 ms.
func TestSoakCacheAlternate(t *testing.T) {
	sim := simtest.Start(t, "slots: 4\nprefill: {base: 5ms, per_token: 100us}\ndecode: {base: 5ms, per_sequence: 0s}\nprefix_cache: {block_tokens: 16}\n")
	cfg := cacheConfig(t, sim.URL, `
  - {name: soak, kind: soak, target: sim, scenario: chat, rate: 8, duration: 8s, window: 2s, cache: alternate, drift: {p99_growth: 10, goodput_drop: 0.5}}
`)
	run := runSoak(t, cfg, nil)
	require.NotEqual(t, capacity.VerdictAborted, run.Verdict, run.Reason)
	require.Equal(t, config.CacheAlternate, run.Cache)
	require.Len(t, run.Soak.Windows, 4)
	for i, w := range run.Soak.Windows {
		want := []string{config.CacheCold, config.CacheProduction}[i%2]
		require.Equal(t, want, w.Cache, "window %d", i)
		require.NotNil(t, w.Server, "window %d", i)
		require.NotNil(t, w.Server.CachedShare, "window %d", i)
		if want == config.CacheCold {
			require.Less(t, *w.Server.CachedShare, 0.05, "window %d: salted prompts", i)
		} else {
			// Every request but the window's first finds the shared
			// 448 tokens (28 blocks of 16) of its 512: with n
			// requests, 0.875 (n-1)/n; at 8 req/s for 2 s, n is below
			// 2 (0.3) one time in 10^5.
			require.Greater(t, *w.Server.CachedShare, 0.3, "window %d: the shared system prompt", i)
		}
	}
}
