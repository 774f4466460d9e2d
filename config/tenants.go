package config

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/net/http/httpguts"

	"github.com/sloprober/sloprober/workload"
)

// Tenant distributions and bounds.
const (
	TenantsUniform = "uniform"
	TenantsZipf    = "zipf"
	// DefaultZipfSkew is a zipf distribution's exponent when skew is left
	// out: tenant-1 of 50 sends 19%, tenant-50 0.3%.
	DefaultZipfSkew = 1.1
	// MaxTenants bounds tenants.count: the prober keeps one cumulative
	// share a tenant (800 KB at the bound).
	MaxTenants = 100_000
	// MaxZipfSkew bounds tenants.skew: at 10, tenant-1 sends 99.9%.
	MaxZipfSkew = 10
)

// TenantsConfig makes every request of a scenario one tenant's, so that a
// test can find a single tenant's hot spot (a per-tenant rate limit, a
// tenant pinned to one replica). The tenants are tenant-1 .. tenant-<count>;
// each arrival draws its tenant (seeded, like every draw of an arrival),
// and the later turns of a conversation keep their conversation's.
type TenantsConfig struct {
	// Count is the number of tenants, 1 to 100000.
	Count int `yaml:"count"`
	// Distribution is how requests are shared among the tenants: uniform
	// (the default), or zipf: tenant i's share is proportional to 1/i^skew,
	// tenant-1 the most frequent.
	Distribution string `yaml:"distribution,omitempty"`
	// Skew is the zipf exponent, greater than 1 and at most 10 (default
	// 1.1); only with distribution: zipf.
	Skew float64 `yaml:"skew,omitempty"`
	// Header, when set, is the request header that carries the tenant;
	// otherwise it is sent in the body: OpenAI's user field (chat,
	// completions, responses), or the Messages API's metadata.user_id.
	Header string `yaml:"header,omitempty"`
}

// UnmarshalYAML implements yaml.Unmarshaler: distribution defaults to
// uniform, a zipf's skew to DefaultZipfSkew.
func (t *TenantsConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*t = TenantsConfig{}
	type plain TenantsConfig
	if err := unmarshal((*plain)(t)); err != nil {
		return err
	}
	if t.Distribution == "" {
		t.Distribution = TenantsUniform
	}
	if t.Distribution == TenantsZipf && t.Skew == 0 {
		t.Skew = DefaultZipfSkew
	}
	return nil
}

// Zipf reports whether the tenants' shares follow a zipf distribution.
func (t *TenantsConfig) Zipf() bool { return t.Distribution == TenantsZipf }

// Exponent is the zipf exponent (DefaultZipfSkew when not set); 0 for a
// uniform distribution.
func (t *TenantsConfig) Exponent() float64 {
	switch {
	case !t.Zipf():
		return 0
	case t.Skew == 0:
		return DefaultZipfSkew
	}
	return t.Skew
}

// Name is the name of tenant i (1-based): tenant-<i>.
func (t *TenantsConfig) Name(i int) string { return "tenant-" + strconv.Itoa(i) }

// Share is the expected share of requests of tenant i (1-based): 1/count
// for a uniform distribution, (1/i^s)/H for zipf, where H is the sum of
// 1/k^s over k = 1..count; 0 for a tenant out of range.
func (t *TenantsConfig) Share(i int) float64 {
	if i < 1 || i > t.Count {
		return 0
	}
	if !t.Zipf() {
		return 1 / float64(t.Count)
	}
	s := t.Exponent()
	return math.Pow(float64(i), -s) / harmonic(t.Count, s)
}

// harmonics caches the generalized harmonic numbers Share divides by:
// Share is called once a tenant, and the sum is over all of them.
var harmonics sync.Map // harmonicKey -> float64

type harmonicKey struct {
	n int
	s float64
}

// harmonic is the sum of 1/k^s for k = 1..n, summed from the smallest term.
func harmonic(n int, s float64) float64 {
	k := harmonicKey{n, s}
	if h, ok := harmonics.Load(k); ok {
		return h.(float64)
	}
	h := 0.0
	for i := n; i >= 1; i-- {
		h += math.Pow(float64(i), -s)
	}
	harmonics.Store(k, h)
	return h
}

// HotTenant makes one tenant of a load's scenarios (those with tenants)
// send Factor times its share, the other tenants keeping their traffic:
// the single-tenant hot spot a test looks for.
//
// The schedule stays open loop and seeded, and the spec stays changeable
// in place: the prober only re-weights the tenant draw, and the caller
// raises the load's Rate by RateFactor (Rate stays the load's whole
// intended rate, as PeakRate, the global caps and the rate metrics take
// it). Tenant i's probability becomes share_i/(1+(F−1)·share_h), the hot
// tenant's F·share_h/(1+(F−1)·share_h), so at the raised rate every other
// tenant sends what it sent before. Worked numbers: 50 uniform tenants,
// factor 10: share_h = 0.02, the hot tenant's share is 0.2/1.18 = 16.9%,
// and a load of 10 req/s runs at 10 × 1.18 = 11.8 req/s (the hot tenant
// 2 req/s, each other one 0.2 as before).
//
// A running load changes its hot tenant in place (its series go on); its
// rate change is the usual in-place one.
type HotTenant struct {
	// Tenant is the hot tenant, 1-based (tenant-<Tenant>).
	Tenant int
	// Factor, at least 1, multiplies the hot tenant's traffic.
	Factor float64
	// InputTokens, when set, is the length of the hot tenant's prompts
	// (long prompts), instead of the scenario's input_tokens; for a
	// conversation, of each turn's new text.
	InputTokens *workload.Distribution
}

// RateFactor is what the caller multiplies a load's rate by so the other
// tenants of t keep their traffic: 1 + (Factor−1)·share(hot). 1 for a nil
// hot tenant or no tenants.
func (h *HotTenant) RateFactor(t *TenantsConfig) float64 {
	if h == nil || t == nil {
		return 1
	}
	return 1 + (h.Factor-1)*t.Share(h.Tenant)
}

// TenantShare is the expected share of tenant i of t's requests with the
// hot tenant: share_i/RateFactor, times Factor for the hot one; t.Share(i)
// for a nil hot tenant.
func (h *HotTenant) TenantShare(t *TenantsConfig, i int) float64 {
	s := t.Share(i)
	if h == nil {
		return s
	}
	if i == h.Tenant {
		s *= h.Factor
	}
	return s / h.RateFactor(t)
}

// HotRateFactor is the factor a load's rate is raised by for its hot
// tenant: the scenarios' RateFactors averaged by weight (1 without a hot
// tenant, for a scenario without tenants). With one scenario, or
// scenarios of the same tenants, the other tenants keep their traffic
// exactly; in a mix of scenarios whose factors differ, the extra traffic
// is spread over the scenarios by weight.
func (s *LoadSpec) HotRateFactor() float64 {
	if s.HotTenant == nil {
		return 1
	}
	sum, f := 0.0, 0.0
	for _, sc := range s.Scenarios {
		sum += sc.Weight
		f += sc.Weight * s.HotTenant.RateFactor(sc.Tenants)
	}
	if !(sum > 0) {
		return 1
	}
	return f / sum
}

// ValidateTenancy checks a spec's hot tenant against its scenarios'
// tenants, and that no scenario's tenant header is one the target's
// http_headers set (they would overwrite it). The prober checks it with
// Validate.
func (s *LoadSpec) ValidateTenancy() error {
	name := s.Name()
	for _, sc := range s.Scenarios {
		if t := sc.Tenants; t != nil && t.Header != "" && s.Target.HTTPClientConfig.HTTPHeaders != nil {
			for k := range s.Target.HTTPClientConfig.HTTPHeaders.Headers {
				if http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(t.Header) {
					return fmt.Errorf("load %s: scenario %s sends its tenant in header %s, which target %s's http_headers also set", name, sc.Key.Scenario, t.Header, s.Target.Name)
				}
			}
		}
	}
	h := s.HotTenant
	if h == nil {
		return nil
	}
	if !(h.Factor >= 1 && h.Factor <= MaxHotTenantFactor) {
		return fmt.Errorf("load %s: hot tenant: factor must be between 1 and %d, got %g", name, MaxHotTenantFactor, h.Factor)
	}
	if h.InputTokens != nil {
		if err := h.InputTokens.Validate(); err != nil {
			return fmt.Errorf("load %s: hot tenant: input tokens: %w", name, err)
		}
	}
	found := false
	for _, sc := range s.Scenarios {
		if t := sc.Tenants; t != nil {
			found = true
			if h.Tenant < 1 || h.Tenant > t.Count {
				return fmt.Errorf("load %s: hot tenant: tenant must be between 1 and scenario %s's %d tenants, got %d", name, sc.Key.Scenario, t.Count, h.Tenant)
			}
		}
	}
	if !found {
		return fmt.Errorf("load %s: hot tenant: no scenario of the load has tenants", name)
	}
	return nil
}

// reservedHeaders are the request headers sloprober sets itself (or the
// HTTP client does): a tenant header must not be one of them.
var reservedHeaders = []string{
	"Accept", "Accept-Encoding", "Anthropic-Version", "Authorization", "Connection", "Content-Length",
	"Content-Type", "Host", "Proxy-Authorization", "Traceparent", "Tracestate", "Transfer-Encoding",
	"User-Agent",
	"X-Request-Id", // prober.RequestIDHeader
}

// validateTenants checks a scenario's tenants.
func (v *validation) validateTenants(key string, t *TenantsConfig) {
	if t == nil {
		return
	}
	key += ".tenants"
	if t.Count == 0 && v.absent(key+".count") {
		v.required(key+".count", "the number of tenants, 1 to %d, e.g. 50", MaxTenants)
	} else if t.Count < 1 || t.Count > MaxTenants {
		v.bad(key+".count", "must be between 1 and %d, got %d", MaxTenants, t.Count)
	}
	switch t.Distribution {
	case "", TenantsUniform:
		if t.Skew != 0 {
			v.bad(key+".skew", "applies to distribution: zipf only")
		}
	case TenantsZipf:
		if s := t.Exponent(); !(s > 1 && s <= MaxZipfSkew) {
			v.bad(key+".skew", "must be greater than 1 and at most %d, got %g", MaxZipfSkew, s)
		}
	default:
		v.bad(key+".distribution", "must be uniform or zipf, got %q", t.Distribution)
	}
	if err := checkTenantHeader(t.Header); err != nil {
		v.bad(key+".header", "%v", err)
	}
}

// checkTenantHeader checks a tenant header's name ("" is the body field).
func checkTenantHeader(h string) error {
	switch {
	case h == "":
		return nil
	case !httpguts.ValidHeaderFieldName(h):
		return fmt.Errorf("must be a valid HTTP header name, got %q", h)
	case slices.Contains(reservedHeaders, http.CanonicalHeaderKey(h)):
		return fmt.Errorf("must not be a header sloprober sets itself, got %q", h)
	}
	return nil
}
