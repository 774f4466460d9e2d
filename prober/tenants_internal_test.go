package prober

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/workload"
)

// tenantOf is the tenant number of a request ("tenant-<n>").
func tenantOf(t *testing.T, req *Request) int {
	t.Helper()
	name, ok := strings.CutPrefix(req.Tenant, "tenant-")
	require.True(t, ok, req.Tenant)
	n, err := strconv.Atoi(name)
	require.NoError(t, err)
	return n
}

// requireShares checks drawn counts against expected shares within 5
// binomial standard deviations (and at least one count).
func requireShares(t *testing.T, counts []int, n int, share func(i int) float64) {
	t.Helper()
	for i := 1; i < len(counts); i++ {
		p := share(i)
		sd := math.Sqrt(float64(n) * p * (1 - p))
		require.InDelta(t, p*float64(n), counts[i], max(5*sd, 1), "tenant-%d: share %.4f", i, p)
	}
}

// drawTenants counts the tenants n arrivals draw (the draw alone: a
// request is that and its prompt).
func drawTenants(s *scenarioRun, n int) []int {
	counts := make([]int, s.cfg.Tenants.Count+1)
	o := s.opts.Load()
	for seq := range uint64(n) {
		counts[s.tenant(o, seq)]++
	}
	return counts
}

// TestTenantDraw: each arrival draws its tenant by the distribution's
// shares, the same for the same arrival in every run and replica.
func TestTenantDraw(t *testing.T) {
	const n = 20000
	for _, yml := range []string{
		"{name: u, input_tokens: 8, tenants: {count: 50}}",
		"{name: z, input_tokens: 8, tenants: {count: 50, distribution: zipf, skew: 1.2}}",
		"{name: z2, input_tokens: 8, tenants: {count: 7, distribution: zipf}}",
	} {
		s := scenario(t, yml)
		ten := s.cfg.Tenants
		counts := drawTenants(s, n)
		require.Zero(t, counts[0])
		cal := NewCalibrator()
		for seq := range uint64(500) { // requests carry the draw
			req := s.request(Arrival{Seq: seq}, cal)
			require.Equal(t, ten.Name(s.tenant(s.opts.Load(), seq)), req.Tenant)
			require.Empty(t, req.TenantHeader)
		}
		requireShares(t, counts, n, ten.Share)
		if ten.Zipf() {
			require.Greater(t, counts[1], counts[2], "tenant-1 is the most frequent")
		}
		// Determinism: the same arrival, another run of the load.
		again := scenario(t, yml)
		for seq := range uint64(200) {
			require.Equal(t, s.request(Arrival{Seq: seq}, cal).Tenant, again.request(Arrival{Seq: seq}, cal).Tenant)
		}
	}
	none := scenario(t, "{name: plain}")
	require.Empty(t, none.request(Arrival{Seq: 1}, NewCalibrator()).Tenant, "no tenants: none sent")
}

// TestHotTenant: the hot tenant's share is Factor·share/RateFactor (50
// uniform tenants, factor 10: 16.9%), the others' share/RateFactor, so at
// the raised rate they send as before; its prompts are the hot tenant's
// length; the change is in place, and undone.
func TestHotTenant(t *testing.T) {
	s := scenario(t, "{name: u, input_tokens: 8, tenants: {count: 50}}")
	ten := s.cfg.Tenants
	hot := &config.HotTenant{Tenant: 3, Factor: 10, InputTokens: &workload.Distribution{Kind: workload.Fixed, Value: 4000}}
	require.InDelta(t, 0.2/1.18, hot.TenantShare(ten, 3), 1e-12)
	s.setOpts(hot, false)
	const n = 20000
	counts := drawTenants(s, n)
	require.InDelta(t, 0.169, float64(counts[3])/n, 0.01)
	requireShares(t, counts, n, func(i int) float64 { return hot.TenantShare(ten, i) })
	cal := NewCalibrator()
	hotOnes := 0
	for seq := range uint64(300) {
		req := s.request(Arrival{Seq: seq}, cal)
		if tenantOf(t, req) == 3 {
			hotOnes++
			require.Equal(t, 4000, req.InputTokens, "the hot tenant's long prompts")
			require.Len(t, strings.Fields(req.Prompt), 4000)
		} else {
			require.Equal(t, 8, req.InputTokens)
		}
	}
	require.Greater(t, hotOnes, 20)

	s.setOpts(nil, false)
	requireShares(t, drawTenants(s, n), n, ten.Share)

	// A zipf tenant made hot.
	z := scenario(t, "{name: z, tenants: {count: 20, distribution: zipf, skew: 1.5}}")
	zh := &config.HotTenant{Tenant: 20, Factor: 50}
	z.setOpts(zh, false)
	requireShares(t, drawTenants(z, n), n, func(i int) float64 { return zh.TenantShare(z.cfg.Tenants, i) })
}

// TestConversationKeepsItsTenant: later turns are their conversation's
// tenant's, whatever their own Seq would draw.
func TestConversationKeepsItsTenant(t *testing.T) {
	s := scenario(t, "{name: c, input_tokens: 20, conversation: {turns: 3, think_time: 1s}, tenants: {count: 1000, header: X-Tenant-Id}}")
	cal := NewCalibrator()
	for seq := range uint64(50) {
		first := s.request(Arrival{Seq: seq}, cal)
		require.Equal(t, "X-Tenant-Id", first.TenantHeader)
		conv := first.turn.Conv
		later := uint64(1 << 40)
		for s.request(Arrival{Seq: later}, cal).Tenant == first.Tenant {
			later++
		}
		next := s.request(Arrival{Seq: later, Turn: &Turn{Conv: conv, N: 2}}, cal)
		require.Equal(t, first.Tenant, next.Tenant)
		require.Equal(t, "X-Tenant-Id", next.TenantHeader)
	}
}

// TestColdCachePrompts: a cold cache's prompts are unlike any other
// request's, this load's or an earlier run's, from the first words on,
// prefix groups and trace blocks included, at exactly the lengths of the
// production prompts; without it nothing changes.
func TestColdCachePrompts(t *testing.T) {
	const yml = "{name: sys, input_tokens: 300, prefix: {tokens: 200, share: 1, groups: 2}}"
	warm, cold, cold2 := scenario(t, yml), scenario(t, yml), scenario(t, yml)
	cold.setOpts(nil, true)
	cold2.setOpts(nil, true) // an earlier run of the same test: the same seed
	cal := NewCalibrator()
	firstWords := map[string]bool{}
	warmFirst := map[string]int{}
	for seq := range uint64(1000) {
		w, c, c2 := warm.request(Arrival{Seq: seq}, cal), cold.request(Arrival{Seq: seq}, cal), cold2.request(Arrival{Seq: seq}, cal)
		require.NotEqual(t, c.Prompt, c2.Prompt, "the same arrival in two runs")
		require.NotEqual(t, c.Prompt, w.Prompt)
		require.Len(t, c.Prompt, len(w.Prompt), "the same characters")
		require.Len(t, strings.Fields(c.Prompt), len(strings.Fields(w.Prompt)), "the same words")
		require.Equal(t, w.InputTokens, c.InputTokens)
		require.Equal(t, w.Words, c.Words)
		for _, p := range []string{c.Prompt, c2.Prompt} {
			first := strings.Join(strings.Fields(p)[:prefixWords], " ")
			require.False(t, firstWords[first], "request %d shares its first words with another", seq)
			firstWords[first] = true
		}
		warmFirst[strings.Join(strings.Fields(w.Prompt)[:prefixWords], " ")]++
	}
	require.Len(t, warmFirst, 2, "production prompts share their groups' prefixes")
	// The same arrival of a production load is the same prompt.
	require.Equal(t, warm.request(Arrival{Seq: 7}, cal).Prompt, scenario(t, yml).request(Arrival{Seq: 7}, cal).Prompt)

	// Trace blocks: the same ids are the same text in production, the
	// request's own text of the same length with a cold cache.
	rec := &workload.Record{Input: 1100, Output: 2, HashIDs: []int{0, 1, 2}}
	plain := scenario(t, "{name: r}")
	w1, w2 := plain.request(Arrival{Seq: 1, Record: rec}, cal), plain.request(Arrival{Seq: 2, Record: rec}, cal)
	require.Equal(t, w1.Prompt, w2.Prompt)
	plain.setOpts(nil, true)
	c1, c2 := plain.request(Arrival{Seq: 1, Record: rec}, cal), plain.request(Arrival{Seq: 1, Record: rec}, cal)
	require.NotEqual(t, c1.Prompt, c2.Prompt)
	require.NotEqual(t, c1.Prompt[:4*prefixWords], w1.Prompt[:4*prefixWords])
	require.Len(t, c1.Prompt, len(w1.Prompt))
	require.Len(t, strings.Fields(c1.Prompt), 1100)

	// A later turn's new text is fresh too.
	conv := scenario(t, "{name: c, input_tokens: 20, conversation: {turns: 2, think_time: 1s}}")
	conv.setOpts(nil, true)
	c := &Conversation{ID: 1, Turns: 2, messages: []Message{{Role: "user", Content: "x"}, {Role: "assistant", Content: "y"}}}
	t1 := conv.request(Arrival{Seq: 5, Turn: &Turn{Conv: c, N: 2}}, cal)
	t2 := conv.request(Arrival{Seq: 5, Turn: &Turn{Conv: c, N: 2}}, cal)
	require.NotEqual(t, t1.Prompt, t2.Prompt)
	require.Len(t, t1.Prompt, len(t2.Prompt))
}

// TestHotAndColdChangeInPlace: a spec that differs in its hot tenant or
// cold cache alone is the same load, changed in place.
func TestHotAndColdChangeInPlace(t *testing.T) {
	a := config.LoadSpec{Target: config.TargetConfig{Name: "t"}, Arrival: config.ArrivalPoisson, Rate: 1,
		Scenarios: []config.ScenarioSpec{{ScenarioConfig: config.ScenarioConfig{Name: "s", Tenants: &config.TenantsConfig{Count: 5}}, Weight: 1}}}
	b := a
	b.HotTenant, b.ColdCache, b.Rate = &config.HotTenant{Tenant: 1, Factor: 3}, true, 1.4
	require.True(t, sameLoad(&a, &b))
	c := a
	c.Arrival = config.ArrivalConstant
	require.False(t, sameLoad(&a, &c))
}
