package config

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/workload"
)

// TestTenantsErrors: every bad tenants key is named with its value.
func TestTenantsErrors(t *testing.T) {
	const base = `
targets: [{name: sim, url: "http://127.0.0.1:8000/v1", model: m}]
scenarios:
  - name: chat
    tenants: `
	for _, tc := range []struct{ tenants, err string }{
		{`{count: 50}`, ""},
		{`{count: 1}`, ""},
		{`{count: 100000, distribution: zipf, skew: 1.2, header: X-Tenant-Id}`, ""},
		{`{count: 0}`, `line 5: scenarios[0].tenants.count: must be between 1 and 100000, got 0`},
		{`{count: 100001}`, `line 5: scenarios[0].tenants.count: must be between 1 and 100000, got 100001`},
		{`{count: 5, distribution: pareto}`, `line 5: scenarios[0].tenants.distribution: must be uniform or zipf, got "pareto"`},
		{`{count: 5, skew: 1.5}`, `line 5: scenarios[0].tenants.skew: applies to distribution: zipf only`},
		{`{count: 5, distribution: uniform, skew: 2}`, `line 5: scenarios[0].tenants.skew: applies to distribution: zipf only`},
		{`{count: 5, distribution: zipf, skew: 1}`, `line 5: scenarios[0].tenants.skew: must be greater than 1 and at most 10, got 1`},
		{`{count: 5, distribution: zipf, skew: .nan}`, `line 5: scenarios[0].tenants.skew: must be greater than 1 and at most 10, got NaN`},
		{`{count: 5, distribution: zipf, skew: 11}`, `line 5: scenarios[0].tenants.skew: must be greater than 1 and at most 10, got 11`},
		{`{count: 5, header: "X Tenant"}`, `line 5: scenarios[0].tenants.header: must be a valid HTTP header name, got "X Tenant"`},
		{`{count: 5, header: user-agent}`, `line 5: scenarios[0].tenants.header: must not be a header sloprober sets itself, got "user-agent"`},
		{`{count: 5, header: X-Request-Id}`, `line 5: scenarios[0].tenants.header: must not be a header sloprober sets itself, got "X-Request-Id"`},
		{`{count: 5, header: Authorization}`, `line 5: scenarios[0].tenants.header: must not be a header sloprober sets itself, got "Authorization"`},
		{`{count: 5, header: content-type}`, `line 5: scenarios[0].tenants.header: must not be a header sloprober sets itself, got "content-type"`},
		{`{count: 5, tenant: 3}`, `scenarios[0].tenants.tenant: no such key`},
		{`{count: 0, distribution: zipf, skew: 0.5}`, `line 5: scenarios[0].tenants.count: must be between 1 and 100000, got 0
line 5: scenarios[0].tenants.skew: must be greater than 1 and at most 10, got 0.5`},
	} {
		_, err := Load([]byte(base+tc.tenants+"\n"), false)
		if tc.err == "" {
			require.NoError(t, err, tc.tenants)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.tenants)
	}
}

// TestTenantsDefaults: distribution defaults to uniform, a zipf's skew to
// 1.1; names and shares.
func TestTenantsDefaults(t *testing.T) {
	c, err := Load([]byte(`
scenarios:
  - {name: u, tenants: {count: 50}}
  - {name: z, tenants: {count: 50, distribution: zipf}}
  - {name: h, tenants: {count: 4, distribution: zipf, skew: 2, header: X-Tenant-Id}}
`), false)
	require.NoError(t, err)
	u, z, h := c.Scenario("u").Tenants, c.Scenario("z").Tenants, c.Scenario("h").Tenants
	require.Equal(t, &TenantsConfig{Count: 50, Distribution: "uniform"}, u)
	require.Equal(t, &TenantsConfig{Count: 50, Distribution: "zipf", Skew: 1.1}, z)
	require.Equal(t, &TenantsConfig{Count: 4, Distribution: "zipf", Skew: 2, Header: "X-Tenant-Id"}, h)
	require.Nil(t, c.Scenario("u").Prefix)
	require.Equal(t, "tenant-1", u.Name(1))
	require.Equal(t, "tenant-50", u.Name(50))
	require.Equal(t, 0.02, u.Share(7))
	require.Zero(t, u.Share(0))
	require.Zero(t, u.Share(51))
	// Zipf s=2 over 4: H = 1 + 1/4 + 1/9 + 1/16 = 205/144.
	require.InDelta(t, 144.0/205, h.Share(1), 1e-12)
	require.InDelta(t, 144.0/205/16, h.Share(4), 1e-12)
	sum := 0.0
	for i := 1; i <= 50; i++ {
		sum += z.Share(i)
		if i > 1 {
			require.Less(t, z.Share(i), z.Share(i-1), "tenant-1 is the most frequent")
		}
	}
	require.InDelta(t, 1, sum, 1e-12)
	// A config built in code: zero values are the defaults.
	require.InDelta(t, z.Share(3), (&TenantsConfig{Count: 50, Distribution: "zipf"}).Share(3), 1e-15)
	require.Equal(t, 0.25, (&TenantsConfig{Count: 4}).Share(2))
	require.Contains(t, c.String(), "tenants:\n    count: 4\n    distribution: zipf\n    skew: 2\n    header: X-Tenant-Id")
}

// TestHotTenantRate: the worked numbers of HotTenant's documentation.
func TestHotTenantRate(t *testing.T) {
	ten := &TenantsConfig{Count: 50}
	h := &HotTenant{Tenant: 3, Factor: 10}
	require.InDelta(t, 1.18, h.RateFactor(ten), 1e-12)
	require.InDelta(t, 0.2/1.18, h.TenantShare(ten, 3), 1e-12)
	require.InDelta(t, 0.02/1.18, h.TenantShare(ten, 4), 1e-12)
	// At the raised rate, the others keep their 0.2 req/s of 10.
	require.InDelta(t, 0.2, 10*h.RateFactor(ten)*h.TenantShare(ten, 4), 1e-12)
	require.InDelta(t, 2, 10*h.RateFactor(ten)*h.TenantShare(ten, 3), 1e-12)
	sum := 0.0
	for i := 1; i <= 50; i++ {
		sum += h.TenantShare(ten, i)
	}
	require.InDelta(t, 1, sum, 1e-12)
	var none *HotTenant
	require.Equal(t, 1.0, none.RateFactor(ten))
	require.Equal(t, 0.02, none.TenantShare(ten, 3))
	require.Equal(t, 1.0, h.RateFactor(nil), "a scenario without tenants")

	spec := LoadSpec{Scenarios: []ScenarioSpec{
		{ScenarioConfig: ScenarioConfig{Tenants: ten}, Weight: 1},
		{Weight: 1}, // no tenants
	}}
	require.Equal(t, 1.0, spec.HotRateFactor())
	spec.HotTenant = h
	require.InDelta(t, 1.09, spec.HotRateFactor(), 1e-12, "averaged by weight")
}

// TestValidateTenancy: a hot tenant must be one of the scenarios' tenants,
// at a factor of at least 1; a tenant header must not be one the target's
// http_headers set.
func TestValidateTenancy(t *testing.T) {
	c, err := Load([]byte(`
targets: [{name: sim, url: "http://127.0.0.1:8000/v1", model: m, http_headers: {x-tenant-id: {values: [fixed]}}}]
scenarios:
  - {name: a, tenants: {count: 5}}
  - {name: b}
  - {name: h, tenants: {count: 5, header: X-Tenant-Id}}
`), false)
	require.NoError(t, err)
	spec := func(names ...string) LoadSpec {
		w := make([]float64, len(names))
		for i := range w {
			w[i] = 1
		}
		return LoadSpec{Target: *c.Target("sim"), Arrival: ArrivalPoisson, Rate: 1, Scenarios: c.scenarioSpecs("sim", "x", names, w)}
	}
	s := spec("a", "b")
	require.NoError(t, s.ValidateTenancy())
	for _, tc := range []struct {
		hot HotTenant
		err string
	}{
		{HotTenant{Tenant: 5, Factor: 1}, ""},
		{HotTenant{Tenant: 1, Factor: 3, InputTokens: &workload.Distribution{Kind: workload.Fixed, Value: 4000}}, ""},
		{HotTenant{Tenant: 6, Factor: 2}, "load sim/a/x+sim/b/x: hot tenant: tenant must be between 1 and scenario a's 5 tenants, got 6"},
		{HotTenant{Tenant: 0, Factor: 2}, "tenant must be between 1 and scenario a's 5 tenants, got 0"},
		{HotTenant{Tenant: 1, Factor: 0.5}, "hot tenant: factor must be between 1 and 100, got 0.5"},
		{HotTenant{Tenant: 1, Factor: math.NaN()}, "hot tenant: factor must be between 1 and 100, got NaN"},
		{HotTenant{Tenant: 1, Factor: 2, InputTokens: &workload.Distribution{Kind: workload.Fixed, Value: 0}}, "hot tenant: input tokens: must be at least 1, got 0"},
	} {
		s.HotTenant = &tc.hot
		if tc.err == "" {
			require.NoError(t, s.ValidateTenancy())
			continue
		}
		require.ErrorContains(t, s.ValidateTenancy(), tc.err)
	}
	b := spec("b")
	b.HotTenant = &HotTenant{Tenant: 1, Factor: 2}
	require.EqualError(t, b.ValidateTenancy(), "load sim/b/x: hot tenant: no scenario of the load has tenants")
	h := spec("h")
	require.EqualError(t, h.ValidateTenancy(), "load sim/h/x: scenario h sends its tenant in header X-Tenant-Id, which target sim's http_headers also set")
}
