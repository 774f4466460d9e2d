package prober_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"
	"github.com/sloprober/sloprober/workload"
)

// TestTenantOnTheWire: a request carries its tenant in OpenAI's user field
// (chat, completions, responses), the Messages API's metadata.user_id, or
// the configured header and then in no body field.
func TestTenantOnTheWire(t *testing.T) {
	type seen struct {
		body   map[string]any
		header http.Header
	}
	var mu sync.Mutex
	var last seen
	sim := simtest.StartWith(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			last = seen{header: r.Header.Clone()}
			_ = json.Unmarshal(b, &last.body)
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
			h.ServeHTTP(w, r)
		})
	})
	for _, tc := range []struct {
		api, header string
	}{{"chat", ""}, {"completions", ""}, {"responses", ""}, {"messages", ""}, {"chat", "X-Tenant-Id"}, {"messages", "x-tenant"}} {
		tgt := target(sim.URL + "/v1")
		tgt.API = tc.api
		c := newClient(t, tgt)
		sc := config.DefaultScenarioConfig
		sc.Name, sc.InputTokens, sc.OutputTokens = "s", workload.FixedLength(8), workload.FixedLength(2)
		sc.Tenants = &config.TenantsConfig{Count: 5, Header: tc.header}
		req := prober.NewRequest(&sc, config.Key{Target: "sim", Scenario: "s", Test: "canary"}, prober.NewCalibrator())
		r := &prober.Result{Scheduled: time.Now()}
		c.Do(context.Background(), req, r)
		require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
		require.Regexp(t, `^tenant-[1-5]$`, r.Tenant)
		mu.Lock()
		got := last
		mu.Unlock()
		switch {
		case tc.header != "":
			require.Equal(t, r.Tenant, got.header.Get(tc.header), "%s: the header", tc.api)
			require.NotContains(t, got.body, "user")
			require.NotContains(t, got.body, "metadata")
		case tc.api == "messages":
			require.Equal(t, map[string]any{"user_id": r.Tenant}, got.body["metadata"])
			require.NotContains(t, got.body, "user")
		default:
			require.Equal(t, r.Tenant, got.body["user"], tc.api)
		}
	}
	// No tenants: neither.
	c := newClient(t, target(sim.URL+"/v1"))
	sc := config.DefaultScenarioConfig
	sc.Name = "s"
	req := prober.NewRequest(&sc, config.Key{Target: "sim", Scenario: "s", Test: "canary"}, prober.NewCalibrator())
	r := &prober.Result{}
	c.Do(context.Background(), req, r)
	require.Empty(t, r.Tenant)
	mu.Lock()
	defer mu.Unlock()
	require.NotContains(t, last.body, "user")
}

// TestColdCacheAgainstSimulator: against an engine with a prefix cache, a
// production load whose prompts all begin with a shared system prompt is
// served from the cache, a cold load never is; both carry their tenants
// into their results.
func TestColdCacheAgainstSimulator(t *testing.T) {
	sim := simtest.Start(t, `
slots: 8
prefill: {base: 1ms, per_token: 1us}
decode: {base: 1ms, per_sequence: 0s}
prefix_cache: {block_tokens: 64}
`)
	tgt := *target(sim.URL + "/v1")
	spec := func(name string, cold bool) config.LoadSpec {
		sc := config.DefaultScenarioConfig
		sc.Name, sc.InputTokens, sc.OutputTokens, sc.IgnoreEOS = name, workload.FixedLength(600), workload.FixedLength(2), true
		sc.Prefix = &config.PrefixConfig{Tokens: 512, Share: 1, Groups: 1}
		sc.Tenants = &config.TenantsConfig{Count: 3}
		return config.LoadSpec{Target: tgt, Arrival: config.ArrivalConstant, Rate: 20, ColdCache: cold,
			Scenarios: []config.ScenarioSpec{{ScenarioConfig: sc, Key: config.Key{Target: "sim", Scenario: name, Test: "cache"}, Weight: 1}}}
	}
	rec := &recorder{}
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.Apply("cache", []config.LoadSpec{spec("warm", false), spec("cold", true)}))
	require.Eventually(t, func() bool { return len(rec.get("warm")) >= 15 && len(rec.get("cold")) >= 15 }, 20*time.Second, 10*time.Millisecond)
	m.Stop(5 * time.Second)

	cached := func(name string) (hits, n int) {
		for _, r := range rec.get(name) {
			require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
			require.Regexp(t, `^tenant-[1-3]$`, r.Tenant)
			require.NotNil(t, r.Usage.CachedTokens)
			if *r.Usage.CachedTokens > 0 {
				hits++
			}
			n++
		}
		return hits, n
	}
	hits, n := cached("warm")
	require.GreaterOrEqual(t, hits, n-2, "production: the shared system prompt is cached")
	hits, _ = cached("cold")
	require.Zero(t, hits, "a cold cache shares no prefix")
}
