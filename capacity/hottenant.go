package capacity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// HotTenant is a level with a hot tenant (verify.hot_tenant): the hot
// tenant's requests and the other tenants', apart. The other tenants'
// attainment is the risk boundary of a single-tenant hot spot: a tenant
// pinned to one replica, or an engine without fairness between tenants,
// shows there as the others' misses while the load as a whole stays
// within the verified rate's.
type HotTenant struct {
	Tenant string  `json:"tenant"`
	Factor float64 `json:"factor"`
	// Share is the hot tenant's expected share of the level's requests
	// (config.HotTenant.TenantShare); MeasuredShare its share of those
	// counted.
	Share         float64 `json:"share"`
	MeasuredShare float64 `json:"measured_share"`
	// LongPrompts: the hot tenant's prompts had their own length
	// (verify.hot_tenant.input_tokens).
	LongPrompts bool        `json:"long_prompts,omitempty"`
	Hot         TenantGroup `json:"hot"`
	Others      TenantGroup `json:"others"`
}

// TenantGroup is the counted requests of some tenants of a level.
type TenantGroup struct {
	Counted    int         `json:"counted"`
	Good       int         `json:"good"`
	Attainment float64     `json:"attainment"`
	Objective  float64     `json:"objective"`
	Interval   *Interval   `json:"interval,omitempty"`
	Decision   string      `json:"decision"`
	TTFT       Percentiles `json:"ttft"`
}

// hotTenantResult splits a hot-tenant level's records into the hot
// tenant's and the others', judged on the load's objective.
func hotTenantResult(spec *config.LoadSpec, records []Record, start time.Time, batch time.Duration, level float64) *HotTenant {
	h := spec.HotTenant
	ht := &HotTenant{Factor: h.Factor, LongPrompts: h.InputTokens != nil}
	var name string
	share, weights := 0.0, 0.0
	for _, sc := range spec.Scenarios {
		if t := sc.Tenants; t != nil {
			name = t.Name(h.Tenant)
			share += sc.Weight * h.TenantShare(t, h.Tenant)
			weights += sc.Weight
		}
	}
	if weights > 0 {
		ht.Share = share / weights
	}
	ht.Tenant = name
	objective := objectiveOf(spec)
	var hot, others []Record
	for _, r := range records {
		switch {
		case r.Tenant == "":
		case r.Tenant == name:
			hot = append(hot, r)
		default:
			others = append(others, r)
		}
	}
	slos := sloMap(spec)
	ht.Hot = tenantGroup(hot, slos, start, batch, level, objective)
	ht.Others = tenantGroup(others, slos, start, batch, level, objective)
	if n := ht.Hot.Counted + ht.Others.Counted; n > 0 {
		ht.MeasuredShare = float64(ht.Hot.Counted) / float64(n)
	}
	return ht
}

func tenantGroup(records []Record, slos map[string][]config.SLO, start time.Time, batch time.Duration, level, objective float64) TenantGroup {
	g := TenantGroup{Objective: objective}
	g.Counted, g.Good, g.TTFT = goodAndTTFT(records)
	g.Attainment = ratio(g.Good, g.Counted)
	g.Interval = attainmentInterval(countedOutcomes(records, "", slos), start, batch, level)
	g.Decision = decide(g.Interval, objective)
	return g
}

// hotTenant runs verify.hot_tenant after the verification: the verified
// rate, with tenant-1 sending Factor times its share (the load's rate
// raised by as much), for its window; nil when the test has none.
func (s *Step) hotTenant(ctx context.Context, verified *Level) (*Level, error) {
	hc := s.Test.Verify.HotTenant
	if hc == nil {
		return nil, nil
	}
	h := &config.HotTenant{Tenant: 1, Factor: hc.Factor, InputTokens: hc.InputTokens}
	base := verified.IntendedRate
	if base <= 0 {
		base = verified.OfferedRate
	}
	hot := s.Load
	hot.HotTenant = h
	rate := base * hot.HotRateFactor()
	s.report("hot-tenant", 0, rate)
	l := &Level{Stage: "hot-tenant", IntendedRate: rate,
		Why: fmt.Sprintf("the verified level's intended %.3g req/s, tenant-1 at %gx its share", base, hc.Factor)}
	// The test's load has the hot tenant for this level: its spec, and
	// the summary that splits the tenants (summarize reads s.Load).
	s.Load.HotTenant = h
	defer func() { s.Load.HotTenant = nil }()
	spec := s.openSpec(rate)
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{spec}); err != nil {
		if errors.Is(err, prober.ErrOverCaps) {
			l.Note = "not run: capped by " + err.Error()
			return l, nil
		}
		return l, err
	}
	if hc.For > 0 {
		// The hot level's own window: a copy of the test, so that the
		// configuration's stays as it is.
		t := *s.Test
		t.Window.Steady = hc.For
		saved := s.Test
		s.Test = &t
		defer func() { s.Test = saved }()
	}
	stop := spec
	stop.Paused = true
	err := s.measure(ctx, l, spec, stop)
	return l, err
}

// text says what the other tenants kept during a hot tenant: "other
// tenants 98.9% good [96.1, 99.7] of 412 (met) while tenant-1 sent 16.9%
// at 10x its share".
func (h *HotTenant) text() string {
	o := h.Others
	iv := ""
	if o.Interval != nil {
		iv = fmt.Sprintf(" [%.1f, %.1f]", lower(o.Interval), upper(o.Interval))
	}
	return fmt.Sprintf("other tenants %.1f%% good%s of %d (%s) while %s sent %.1f%% of the requests at %gx its share",
		100*o.Attainment, iv, o.Counted, o.Decision, h.Tenant, 100*h.MeasuredShare, h.Factor)
}
