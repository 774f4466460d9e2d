// Package report turns a stored step or soak run into the seed article's
// sign-off report (压测报告最后应该写什么): not a TPS screenshot but the
// test object, the load model, the SLO definitions, the capacity
// conclusion, the risk boundaries, the scaling basis and the cost per good
// request, with the provenance that lets a reader tell a distorted run.
// One Report is written as JSON (a versioned schema, schema/report.json),
// Markdown (for a change request) and a self-contained HTML page with
// inline SVG charts; Compare sets two reports side by side.
//
// A report is built from the run alone (capacity.Run, as stored): what the
// configuration said when the run started is in the run's setup, so a
// configuration changed since does not change an old report. Its
// percentiles are exact, from the run's per-request records, each with its
// sample count and window (the contract's "Percentiles in reports").
package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/gpu"
	"github.com/sloprober/sloprober/internal/human"
	"github.com/sloprober/sloprober/prober"
)

// SchemaVersion is the version of the JSON report's schema
// (schema/report.json). It changes when a field changes meaning or goes
// away; new fields do not change it. Version 2: a forecast's holds is
// null where its peak was not verified (version 1 wrote false).
const SchemaVersion = 2

// Report is the sign-off report of one run.
type Report struct {
	SchemaVersion int       `json:"schema_version"`
	ID            string    `json:"id,omitempty"`
	Test          string    `json:"test"`
	Kind          string    `json:"kind"`
	Verdict       string    `json:"verdict"`
	Reason        string    `json:"reason"`
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`

	Provenance Provenance       `json:"provenance"`
	TestObject TestObject       `json:"test_object"`
	LoadModel  LoadModel        `json:"load_model"`
	SLOs       SLODefinitions   `json:"slos"`
	Capacity   *CapacitySummary `json:"capacity,omitempty"`
	// Knee and ClosedLoop are what the sweep measured, stated whether or
	// not the run concluded: an inconclusive run measured them as a
	// concluded one does, and its report and comparison say so.
	Knee       *capacity.Knee `json:"knee,omitempty"`
	ClosedLoop *ClosedLoop    `json:"closed_loop,omitempty"`
	// Cache is a cache: both step test's two passes side by side: the
	// production pass (the run's capacity) and the cold one.
	Cache    *CacheComparison  `json:"cache,omitempty"`
	Levels   []Level           `json:"levels"`
	Risk     Risk              `json:"risk"`
	Scaling  *Scaling          `json:"scaling,omitempty"`
	Cost     *Cost             `json:"cost,omitempty"`
	Soak     *Soak             `json:"soak,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
	Charts   map[string]string `json:"-"` // HTML only: inline SVG by name
}

// Provenance says what produced the run and whether the prober could be
// trusted while it ran.
type Provenance struct {
	Version    string `json:"version"`
	Revision   string `json:"revision,omitempty"`
	ConfigHash string `json:"config_hash,omitempty"`
	// Runner is what ran the test ("cli" or "daemon"), Validity the
	// prober-health rule its levels were judged by (capacity.Provenance).
	Runner   string                  `json:"runner,omitempty"`
	Validity *capacity.ValiditySetup `json:"validity,omitempty"`
	// Prober is the prober's own health over every measured window.
	Prober ProberHealth `json:"prober"`
}

// ProberHealth is the worst of the prober's own health over the run's
// measured windows: a send lag P99 over 10 ms or a CPU share over 90% of
// GOMAXPROCS means the prober, not only the target, shaped the numbers.
type ProberHealth struct {
	LagP99Seconds float64 `json:"lag_p99_seconds"`
	LagMaxSeconds float64 `json:"lag_max_seconds"`
	CPUShare      float64 `json:"cpu_share"`
	Dropped       int     `json:"dropped"`
	// Distorted names what was over its limit; empty when nothing was.
	Distorted []string `json:"distorted,omitempty"`
}

// TestObject is what was tested: the target as configured and as it
// stated itself.
type TestObject struct {
	Target      string            `json:"target"`
	URL         string            `json:"url"`
	API         string            `json:"api"`
	Model       string            `json:"model"`
	Simulator   bool              `json:"simulator,omitempty"`
	Replicas    int               `json:"replicas"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Identity    capacity.Identity `json:"identity"`
	TimeoutSecs float64           `json:"timeout_seconds"`
	// GPU is whether the target's GPUs were read (target.gpu) and what
	// the readings saw of them.
	GPU GPUObject `json:"gpu"`
}

// GPUObject is what a run read of its target's GPUs, over every level.
type GPUObject struct {
	// Measured: a level has a successful GPU reading. Without one the
	// report says the GPUs were not measured, never zeros.
	Measured bool `json:"measured"`
	// Devices is the most devices in one reading; MissingDevices the
	// most that dropped out of (or appeared in) one level's readings; MIG
	// whether a reading had a MIG instance.
	Devices        int  `json:"devices,omitempty"`
	MissingDevices int  `json:"missing_devices,omitempty"`
	MIG            bool `json:"mig,omitempty"`
	// Errors counts the failed reads over every level, LastError the
	// last one's error.
	Errors    int    `json:"errors,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// LoadModel is the load that was sent: the scenarios with the lengths
// actually sent (not the configured ones) and each stage's loop.
type LoadModel struct {
	Scenarios []Scenario `json:"scenarios"`
	Stages    []Stage    `json:"stages"`
	Replay    string     `json:"replay,omitempty"`
	// InputTokens and OutputTokens are the lengths of every measured
	// request: input as sent, output as received.
	InputTokens  capacity.Percentiles `json:"input_tokens"`
	OutputTokens capacity.Percentiles `json:"output_tokens"`
	// CachedShare is the server's cached share of the prompt tokens,
	// where it reported one.
	CachedShare *float64 `json:"cached_share,omitempty"`
	// Cache is the test's cache mode: production, cold (every prompt
	// salted) or both (a cold pass, then the production one); empty in
	// runs written before it existed, which were production.
	Cache string `json:"cache,omitempty"`
	// Test is the test's configuration with its defaults, as YAML.
	Test string `json:"test"`
}

// Scenario is one scenario of the load model.
type Scenario struct {
	capacity.ScenarioSetup
	// InputTokensSent and OutputTokensReceived are the scenario's own
	// lengths, in a mix (a load of one scenario: the load model's).
	InputTokensSent      *capacity.Percentiles `json:"input_tokens_sent,omitempty"`
	OutputTokensReceived *capacity.Percentiles `json:"output_tokens_received,omitempty"`
}

// Stage is how one kind of stage sent its requests.
type Stage struct {
	Stage   string `json:"stage"`
	Loop    string `json:"loop"`    // closed or open
	Arrival string `json:"arrival"` // closed, poisson or replay
	Levels  int    `json:"levels"`
}

// SLODefinitions are the SLOs and the measurement contract's rules.
type SLODefinitions struct {
	Scenarios []ScenarioSLOs `json:"scenarios"`
	// Definitions are the formulas and counting rules used.
	Definitions []Definition `json:"definitions"`
}

// ScenarioSLOs are one scenario's SLOs and objective.
type ScenarioSLOs struct {
	Scenario  string              `json:"scenario"`
	Objective float64             `json:"objective"`
	SLOs      []capacity.SLOSetup `json:"slos"`
}

// Definition is one term of the measurement contract.
type Definition struct {
	Term       string `json:"term"`
	Definition string `json:"definition"`
}

// definitions are the contract's formulas and counting rules, as every
// report states them.
var definitions = []Definition{
	{"TTFT", "t1 - t0: from sending the request to the first chunk carrying generated text (role-only, empty and usage-only chunks are not tokens)"},
	{"TPOT", "(tN - t1) / (N - 1) for ok requests with N >= 2 output tokens (usage, else chunks): the first token excluded"},
	{"ITL", "every gap between consecutive text chunks, pooled over requests"},
	{"E2E", "tN - t0 for ok requests: to the last chunk carrying text"},
	{"good request", "an ok request that received text and met every SLO of its scenario; attainment = good / counted"},
	{"goodput", "good requests per second over the window"},
	{"timeouts and errors", "counted and never good: they stay in the attainment denominator"},
	{"cancellations", "requests the client cancelled on purpose leave the denominator and add no TTFT or ITL"},
	{"drops", "arrivals not sent (the prober's caps) are counted apart and never reach the denominator; open loop never queues"},
	{"sample", "every request sent in a level's steady window, each awaited; percentiles are exact (nearest rank) with their sample count; P95 under 200 and P99 under 1,000 samples are low confidence"},
}

// CapacitySummary is the step test's conclusion.
type CapacitySummary struct {
	// VerifiedRate is the conclusion: the highest open-loop rate that met
	// every objective, req/s; VerifiedGoodput its goodput and
	// VerifiedAttainment its attainment.
	VerifiedRate       float64 `json:"verified_rate"`
	VerifiedGoodput    float64 `json:"verified_goodput"`
	VerifiedAttainment float64 `json:"verified_attainment"`
	// Concurrency and ClosedRate are the closed-loop capacity.
	Concurrency int     `json:"concurrency"`
	ClosedRate  float64 `json:"closed_rate"`
	// PerReplica divides by the target's replicas (assumes linear
	// scaling).
	Replicas              int            `json:"replicas"`
	RatePerReplica        float64        `json:"rate_per_replica"`
	ConcurrencyPerReplica float64        `json:"concurrency_per_replica"`
	Knee                  *capacity.Knee `json:"knee,omitempty"`
	LimitedBy             string         `json:"limited_by,omitempty"`
	// VerifiedInterval is the verified level's attainment interval and
	// sample (schema-2 runs); Bound the lowest rate above it that the
	// search did not verify and BoundDecision why; Forecast the
	// verification of the target's forecast.
	VerifiedInterval *capacity.Interval `json:"verified_interval,omitempty"`
	Bound            float64            `json:"bound,omitempty"`
	BoundDecision    string             `json:"bound_decision,omitempty"`
	// Ceiling is the most the capacity can be (the first rate above it
	// that missed, or the closed loop's peak: CeilingFrom), and
	// BoundText where it lies above the verified rate, as the run states
	// it (capacity.Capacity.BoundText).
	Ceiling     float64                 `json:"ceiling,omitempty"`
	CeilingFrom string                  `json:"ceiling_from,omitempty"`
	BoundText   string                  `json:"bound_text,omitempty"`
	Forecast    *capacity.ForecastCheck `json:"forecast,omitempty"`
	// Search is the open-loop search in the order run, as the run
	// states it (capacity.Run.SearchText).
	Search string `json:"search,omitempty"`
}

// ClosedLoop is the closed-loop capacity: the most clients at which every
// objective held (capacity.Capacity's Concurrency), with its completed
// rate and goodput.
type ClosedLoop struct {
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	Goodput     float64 `json:"goodput"`
}

// Level is one measured level, window or stage.
type Level struct {
	Stage         string  `json:"stage"`
	Concurrency   int     `json:"concurrency,omitempty"`
	IntendedRate  float64 `json:"intended_rate,omitempty"`
	StartSeconds  float64 `json:"start_seconds"` // since the run's start
	WindowSeconds float64 `json:"window_seconds"`
	Sent          int     `json:"sent"`
	Dropped       int     `json:"dropped"`
	Counted       int     `json:"counted"`
	OfferedRate   float64 `json:"offered_rate"`
	CompletedRate float64 `json:"completed_rate"`
	Goodput       float64 `json:"goodput"`
	InputRate     float64 `json:"input_tokens_rate"`
	OutputRate    float64 `json:"output_tokens_rate"`
	Attainment    float64 `json:"attainment"`
	Met           bool    `json:"met"`
	Insufficient  bool    `json:"insufficient,omitempty"`
	// Decision, Interval, Extensions, ImpliedBy, Remeasured and Why are
	// the level's as the run has them (schema-2 runs): its decision on
	// the interval of its attainment, the windows that extended it, the
	// sweep level that implies it, the measurements
	// thrown away because the prober was the limit, and what an
	// open-loop level of the search was for.
	Decision   string             `json:"decision,omitempty"`
	Interval   *capacity.Interval `json:"interval,omitempty"`
	Extensions int                `json:"extensions,omitempty"`
	ImpliedBy  int                `json:"implied_by,omitempty"`
	Remeasured []string           `json:"remeasured,omitempty"`
	Why        string             `json:"why,omitempty"`
	// Batches, Looks and ToDecide are how the level was decided: the
	// batches its sample holds, the looks taken, and what would decide
	// it when it stayed undecided.
	Batches  int                `json:"batches,omitempty"`
	Looks    int                `json:"looks,omitempty"`
	ToDecide *capacity.ToDecide `json:"to_decide,omitempty"`

	TTFT capacity.Percentiles `json:"ttft"`
	TPOT capacity.Percentiles `json:"tpot"`
	ITL  capacity.Percentiles `json:"itl"`
	E2E  capacity.Percentiles `json:"e2e"`

	Outcomes     map[prober.Outcome]int `json:"outcomes"`
	DrainSeconds float64                `json:"drain_seconds"`
	Note         string                 `json:"note,omitempty"`
	// Notes are the level's facts but its decision, a clause each, as
	// the terminal's table writes them (capacity.Level.Notes);
	// ProberBound, that the prober limited it and it is not used.
	Notes       []string                `json:"notes,omitempty"`
	ProberBound bool                    `json:"-"`
	Server      *capacity.ServerSignals `json:"server,omitempty"`
	// EngineQueue is the engine's own queue depth over the window (its
	// metrics, server_metrics).
	EngineQueue *capacity.EngineQueue  `json:"engine_queue,omitempty"`
	Prober      *capacity.ProberHealth `json:"prober,omitempty"`
	// GPU is the target's GPUs over the level's window (target.gpu); nil
	// when not read.
	GPU *gpu.Window `json:"gpu,omitempty"`
	// HotTenant is the hot tenant's and the other tenants' requests
	// apart, on the hot-tenant level.
	HotTenant *capacity.HotTenant `json:"hot_tenant,omitempty"`
}

// Risk is where the capacity stops holding.
type Risk struct {
	Burst *Burst `json:"burst,omitempty"`
	// Longest is the top decile of requests by input length at each
	// measured level: their own TTFT.
	Longest []Longest `json:"longest"`
	// Faults is what a soak's fault plan did, and ErrorBursts the
	// windows in which more than 10% of requests failed.
	Faults []capacity.FaultEvent `json:"faults,omitempty"`
	// PlanNotRun says how the fault plan did not run as configured.
	PlanNotRun  []string `json:"plan_not_run,omitempty"`
	ErrorBursts []int    `json:"error_bursts,omitempty"`
	Recovered   *bool    `json:"recovered,omitempty"`
	// Canary is the canary on the target during the run.
	Canary []capacity.CanaryScenario `json:"canary,omitempty"`
	// HotSpots is what the run says about single-tenant hot spots, and
	// HotTenant the hot-tenant level's result where one ran.
	HotSpots  string     `json:"hot_spots"`
	HotTenant *HotTenant `json:"hot_tenant,omitempty"`
	// GPU is what the GPU readings say of the risk: the memory headroom
	// at the capacity, memory near full, a busy GPU and the engine's
	// queue. Utilisation is a diagnostic, not a goal: a busy GPU whose
	// level met its objectives is fine.
	GPU []GPUFinding `json:"gpu,omitempty"`
}

// HotTenant is the hot-tenant level (verify.hot_tenant): the verified
// rate with one tenant sending more than its share, the other tenants'
// attainment apart from the hot one's.
type HotTenant struct {
	capacity.HotTenant
	IntendedRate  float64 `json:"intended_rate"`
	OfferedRate   float64 `json:"offered_rate"`
	WindowSeconds float64 `json:"window_seconds"`
}

// GPU finding kinds.
const (
	GPUMemoryHeadroom   = "memory_headroom"     // the fullest GPU at a capacity level
	GPUNearFull         = "memory_near_full"    // memory within 5% of full
	GPUBusyQueueGrowing = "busy_queue_growing"  // busy GPU while the engine queue grows
	GPUBusyQueueNotRead = "busy_queue_not_read" // busy GPU, the engine queue not read
	GPUBusySLOsHeld     = "busy_slos_held"      // busy GPU, objectives met: fine
	GPUBusySLOsMissed   = "busy_slos_missed"    // busy GPU, objectives missed, queue steady
)

// GPUFinding is one thing the GPU readings of a level say.
type GPUFinding struct {
	Kind string `json:"kind"`
	// Level names the level ("verify 9.2 req/s", "cold sweep 16
	// clients", "soak window 3"); Text says the finding.
	Level string `json:"level"`
	Text  string `json:"text"`
}

// Burst is what happened in the step test's burst.
type Burst struct {
	// OfferedRate is the rate the burst offered, which every sentence
	// states (0 in a run that did not keep it); IntendedRate the rate it
	// was run at.
	OfferedRate  float64              `json:"offered_rate,omitempty"`
	IntendedRate float64              `json:"intended_rate"`
	ForSeconds   float64              `json:"for_seconds"`
	Attainment   float64              `json:"attainment"`
	DrainSeconds float64              `json:"drain_seconds"`
	DrainWithin  float64              `json:"drain_within_seconds"`
	Drained      bool                 `json:"drained"`
	PeakInFlight int                  `json:"peak_in_flight"`
	Timeline     *capacity.Timeline   `json:"timeline,omitempty"`
	TTFT         capacity.Percentiles `json:"ttft"`
}

// Longest is the top decile by input length of one level.
type Longest struct {
	Stage        string  `json:"stage"`
	Concurrency  int     `json:"concurrency,omitempty"`
	OfferedRate  float64 `json:"offered_rate,omitempty"` // names an open-loop level
	IntendedRate float64 `json:"intended_rate,omitempty"`
	capacity.Longest
}

// Scaling is the basis for a replica count.
type Scaling struct {
	PeakRate      float64 `json:"peak_rate"`
	SpareReplicas int     `json:"spare_replicas"`
	// RatePerReplica is the verified capacity over the target's
	// replicas (assumes linear scaling).
	RatePerReplica float64 `json:"rate_per_replica"`
	// ReplicasForPeak carry the peak; ReplicasNeeded add the spare ones
	// (N+k).
	ReplicasForPeak int `json:"replicas_for_peak"`
	ReplicasNeeded  int `json:"replicas_needed"`
	// CapacityAfterLoss is the capacity of ReplicasNeeded - 1 replicas,
	// req/s, and HeadroomAfterLoss its share above the peak.
	CapacityAfterLoss float64 `json:"capacity_after_loss"`
	HeadroomAfterLoss float64 `json:"headroom_after_loss"`
	Assumption        string  `json:"assumption"`
}

// Cost is the cost per SLO-good request.
type Cost struct {
	CostPerHour    float64 `json:"cost_per_hour"`
	Goodput        float64 `json:"goodput"`
	PerGoodRequest float64 `json:"per_good_request"`
	Per1000Good    float64 `json:"per_1000_good_requests"`
	Basis          string  `json:"basis"`
	Excludes       string  `json:"excludes"`
}

// Soak is a soak run's windows and drift.
type Soak struct {
	Rate    float64         `json:"rate"`
	Windows []SoakWindow    `json:"windows"`
	Drift   *capacity.Drift `json:"drift,omitempty"`
	// Impacts is what each step of the fault plan that ran did to the
	// target, measured on 5 s buckets of the requests; OneLost the
	// remaining capacity after one replica was lost, computed beside
	// measured.
	Impacts []capacity.FaultImpact `json:"impacts,omitempty"`
	OneLost *capacity.ReplicaLoss  `json:"one_lost,omitempty"`
}

// CacheComparison is a cache: both step test's passes: production (the
// run's capacity and verdict) and cold (every prompt salted, measured
// first). Full cache hits overstate a capacity, none understates it.
type CacheComparison struct {
	Production CachePass `json:"production"`
	Cold       CachePass `json:"cold"`
	// Difference is production's verified rate less cold's, req/s, and
	// DifferenceShare it over cold's; absent unless both verified a
	// rate.
	Difference      *float64 `json:"difference,omitempty"`
	DifferenceShare *float64 `json:"difference_share,omitempty"`
	// ColdLevels are the cold pass's levels in the order they ran.
	ColdLevels []Level `json:"cold_levels"`
}

// CachePass is one pass of a cache: both step test.
type CachePass struct {
	Cache   string `json:"cache"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// VerifiedRate is the pass's verified open-loop rate, absent when it
	// verified none; VerifiedGoodput, VerifiedAttainment and
	// VerifiedInterval are its level's.
	VerifiedRate       *float64           `json:"verified_rate,omitempty"`
	VerifiedGoodput    float64            `json:"verified_goodput"`
	VerifiedAttainment float64            `json:"verified_attainment"`
	VerifiedInterval   *capacity.Interval `json:"verified_interval,omitempty"`
	// CachedShare is the share of the pass's prompt tokens the server
	// said it found in its prefix cache; absent when it said nothing.
	CachedShare *float64 `json:"cached_share,omitempty"`
	// EngineHitRatio is the engine's own prefix-cache hit ratio over the
	// pass (its metrics' counters); absent where they were not read.
	EngineHitRatio *float64 `json:"engine_hit_ratio,omitempty"`
}

// SoakWindow is one window of a soak.
type SoakWindow struct {
	Level
	ProberRSSBytes   int64 `json:"prober_rss_bytes"`
	ProberGoroutines int   `json:"prober_goroutines"`
	ErrorBurst       bool  `json:"error_burst,omitempty"`
	// Cache is the window's cache mode where the soak's is not
	// production.
	Cache string `json:"cache,omitempty"`
}

// costExcludes is what the cost per good request leaves out.
const costExcludes = "the target's cost_per_hour only: CPU, network, storage and operations are not included"

// Build makes the report of a run. Its header is the run's Summary (the
// report's JSON keeps its own schema: schema/report.json); run.ID is the
// run's id in storage, "" for a run that was not stored.
func Build(run *capacity.Run) *Report {
	r := &Report{
		SchemaVersion: SchemaVersion, ID: run.ID, Test: run.Test, Kind: run.Kind, Verdict: run.Verdict, Reason: run.Reason,
		Start: run.Start, End: run.End, Levels: []Level{},
	}
	if p := run.Provenance; p != nil {
		r.Provenance.Version, r.Provenance.Revision, r.Provenance.ConfigHash = p.Version, p.Revision, p.ConfigHash
		r.Provenance.Runner, r.Provenance.Validity = p.Runner, p.Validity
	}
	setup := run.Setup
	if setup == nil {
		setup = &capacity.Setup{}
		r.Warnings = append(r.Warnings, "the run has no setup (stored by a sloprober before reports): the test object, load model and SLOs are unknown")
	}
	tg := setup.Target
	r.TestObject = TestObject{
		Target: run.Target, URL: tg.URL, API: tg.API, Model: tg.Model, Simulator: tg.Simulator,
		Replicas: max(tg.Replicas, 1), Metadata: tg.Metadata, TimeoutSecs: tg.TimeoutSecs,
	}
	if run.Identity != nil {
		r.TestObject.Identity = *run.Identity
	}

	levels := measured(run)
	for _, l := range levels {
		r.Levels = append(r.Levels, level(run, l))
	}
	r.LoadModel = loadModel(run, setup, levels)
	r.LoadModel.Cache = run.Cache
	for _, s := range setup.Scenarios {
		r.SLOs.Scenarios = append(r.SLOs.Scenarios, ScenarioSLOs{Scenario: s.Name, Objective: s.Objective, SLOs: s.SLOs})
	}
	r.SLOs.Definitions = definitions
	r.Provenance.Prober = proberHealth(levels)
	if d := r.Provenance.Prober.Distorted; len(d) > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the prober may have distorted this run: %s", joinAnd(d)))
	}

	concluded := run.Verdict == capacity.VerdictPass || run.Verdict == capacity.VerdictFail || run.Verdict == capacity.VerdictInfeasible
	if !concluded {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the run did not conclude (%s): no capacity, scaling basis or cost is stated; its levels so far are", run.Verdict))
	}
	r.Knee = run.Knee
	if c := run.Capacity; c != nil && c.Concurrency > 0 {
		r.ClosedLoop = &ClosedLoop{Concurrency: c.Concurrency, Rate: c.Rate, Goodput: c.Goodput}
	}
	if c := run.Capacity; c != nil && concluded {
		reps := r.TestObject.Replicas
		rate, _ := c.Verified()
		r.Capacity = &CapacitySummary{
			VerifiedRate: rate, VerifiedGoodput: c.VerifiedGoodput, Concurrency: c.Concurrency, ClosedRate: c.Rate,
			Replicas: reps, RatePerReplica: rate / float64(reps), ConcurrencyPerReplica: float64(c.Concurrency) / float64(reps),
			Knee: run.Knee, LimitedBy: c.LimitedBy, Bound: c.Bound, BoundDecision: c.BoundDecision, Forecast: c.Forecast,
			Ceiling: c.Ceiling, CeilingFrom: c.CeilingFrom, BoundText: c.BoundText(), Search: run.SearchText(),
		}
		if v := run.VerifiedLevel(rate); v != nil {
			r.Capacity.VerifiedAttainment, r.Capacity.VerifiedInterval = v.Attainment, v.Interval
		}
		r.Scaling = scaling(&tg, r.Capacity)
	}
	if concluded {
		r.Cost = cost(&tg, run, r.Capacity)
	}
	if run.Cold != nil {
		r.Cache = cacheComparison(run, r.Capacity)
	}
	r.Risk = risk(run, levels)
	if run.Soak != nil {
		r.Soak = &Soak{Rate: run.Soak.Rate, Drift: run.Soak.Drift, Impacts: run.Soak.Impacts, OneLost: run.Soak.OneLost}
		for i := range run.Soak.Windows {
			w := &run.Soak.Windows[i]
			r.Soak.Windows = append(r.Soak.Windows, SoakWindow{Level: level(run, &w.Level), ProberRSSBytes: w.ProberRSSBytes,
				ProberGoroutines: w.ProberGoroutines, ErrorBurst: w.ErrorBurst, Cache: w.Cache})
		}
	}
	r.TestObject.GPU = gpuObject(r)
	r.Risk.GPU = gpuFindings(r)
	return r
}

// isConcluded reports whether a verdict concluded on a capacity.
func isConcluded(verdict string) bool {
	return verdict == capacity.VerdictPass || verdict == capacity.VerdictFail || verdict == capacity.VerdictInfeasible
}

// cacheComparison sets a cache: both run's production pass (the run's
// capacity c, nil when it concluded none) beside its cold pass.
func cacheComparison(run *capacity.Run, c *CapacitySummary) *CacheComparison {
	cold := run.Cold
	out := &CacheComparison{ColdLevels: []Level{},
		Production: CachePass{Cache: "production", Verdict: run.Verdict, Reason: run.Reason, CachedShare: run.CachedShare, EngineHitRatio: run.EngineHitRatio},
		Cold:       CachePass{Cache: cold.Cache, Verdict: cold.Verdict, Reason: cold.Reason, CachedShare: cold.CachedShare, EngineHitRatio: cold.EngineHitRatio},
	}
	if out.Cold.Cache == "" {
		out.Cold.Cache = "cold"
	}
	if c != nil && c.VerifiedRate > 0 {
		rate := c.VerifiedRate
		p := &out.Production
		p.VerifiedRate, p.VerifiedGoodput, p.VerifiedAttainment, p.VerifiedInterval = &rate, c.VerifiedGoodput, c.VerifiedAttainment, c.VerifiedInterval
	}
	if rate, ok := cold.Capacity.Verified(); ok && rate > 0 && isConcluded(cold.Verdict) {
		p := &out.Cold
		p.VerifiedRate, p.VerifiedGoodput = &rate, cold.Capacity.VerifiedGoodput
		if v := cold.VerifiedLevel(rate); v != nil {
			p.VerifiedAttainment, p.VerifiedInterval = v.Attainment, v.Interval
		}
	}
	for _, l := range cold.Levels() {
		out.ColdLevels = append(out.ColdLevels, level(run, l))
	}
	if p, q := out.Production.VerifiedRate, out.Cold.VerifiedRate; p != nil && q != nil {
		d, share := *p-*q, (*p-*q) / *q
		out.Difference, out.DifferenceShare = &d, &share
	}
	return out
}

// measured returns the run's measured levels in the order they ran (of a
// cache: both run, the production pass's).
func measured(run *capacity.Run) []*capacity.Level {
	out := run.Levels()
	if run.Soak != nil {
		for i := range run.Soak.Windows {
			out = append(out, &run.Soak.Windows[i].Level)
		}
		slices.SortStableFunc(out, func(a, b *capacity.Level) int { return a.Start.Compare(b.Start) })
	}
	return out
}

func level(run *capacity.Run, l *capacity.Level) Level {
	out := Level{
		Stage: l.Stage, Concurrency: l.Concurrency, IntendedRate: l.IntendedRate, WindowSeconds: l.WindowSeconds,
		Sent: l.Sent, Counted: l.Counted, OfferedRate: l.OfferedRate, CompletedRate: l.CompletedRate, Goodput: l.Goodput,
		InputRate: l.InputTokensRate, OutputRate: l.OutputTokensRate, Attainment: l.Attainment, Met: l.Met, Insufficient: l.Insufficient,
		TTFT: l.TTFT, TPOT: l.TPOT, ITL: l.ITL, E2E: l.E2E, Outcomes: l.Outcomes, DrainSeconds: l.DrainSeconds, Note: l.Note,
		Server: l.Server, EngineQueue: l.EngineQueue, Prober: l.Prober, GPU: l.GPU, HotTenant: l.HotTenant,
		Decision: l.Decision, Interval: l.Interval, Extensions: l.Extensions, ImpliedBy: l.ImpliedBy, Remeasured: l.Remeasured, Why: l.Why,
		Batches: l.Batches, Looks: l.Looks, ToDecide: l.ToDecide, Notes: l.Notes(true), ProberBound: l.ProberBound(),
	}
	if !l.Start.IsZero() && !run.Start.IsZero() {
		out.StartSeconds = l.Start.Sub(run.Start).Seconds()
	}
	for _, n := range l.Dropped {
		out.Dropped += n
	}
	if out.Outcomes == nil {
		out.Outcomes = map[prober.Outcome]int{}
	}
	return out
}

// loadModel describes the load from the run's setup and its levels.
func loadModel(run *capacity.Run, setup *capacity.Setup, levels []*capacity.Level) LoadModel {
	m := LoadModel{Test: setup.Test, Stages: []Stage{}}
	for _, s := range setup.Scenarios {
		sc := Scenario{ScenarioSetup: s}
		if ls := run.ScenarioLengths[s.Name]; ls != nil {
			sc.InputTokensSent, sc.OutputTokensReceived = &ls.Input, &ls.Output
		}
		m.Scenarios = append(m.Scenarios, sc)
	}
	if r := setup.Replay; r != nil {
		m.Replay = fmt.Sprintf("%s (%s)", r.File, r.Format)
	}
	open := "poisson"
	if setup.Replay != nil {
		open = "replay"
	}
	cached, prompt := 0, 0
	for _, l := range levels {
		loop, arrival := "open", open
		if l.Concurrency > 0 {
			loop, arrival = "closed", "closed"
		}
		if i := slices.IndexFunc(m.Stages, func(s Stage) bool { return s.Stage == l.Stage }); i >= 0 {
			m.Stages[i].Levels++
		} else {
			m.Stages = append(m.Stages, Stage{Stage: l.Stage, Loop: loop, Arrival: arrival, Levels: 1})
		}
		if s := l.Server; s != nil && s.CachedShare != nil {
			cached += s.CachedTokens
			prompt += s.PromptTokens
		}
	}
	if ls := run.Lengths; ls != nil {
		m.InputTokens, m.OutputTokens = ls.Input, ls.Output
	}
	if prompt > 0 {
		share := float64(cached) / float64(prompt)
		m.CachedShare = &share
	}
	if run.CachedShare != nil {
		// The run's own account of its stages (of a cache: both run, the
		// production pass's).
		m.CachedShare = run.CachedShare
	}
	return m
}

// proberHealth is the worst of the prober's health over the levels.
func proberHealth(levels []*capacity.Level) ProberHealth {
	var h ProberHealth
	for _, l := range levels {
		for _, n := range l.Dropped {
			h.Dropped += n
		}
		if p := l.Prober; p != nil {
			h.LagP99Seconds = max(h.LagP99Seconds, p.LagP99)
			h.LagMaxSeconds = max(h.LagMaxSeconds, p.LagMax)
			h.CPUShare = max(h.CPUShare, p.CPUShare)
		}
	}
	if h.LagP99Seconds > capacity.ProberLagLimit.Seconds() {
		h.Distorted = append(h.Distorted, fmt.Sprintf("a send lag P99 of %s (over %s)", fmtSeconds(h.LagP99Seconds), capacity.ProberLagLimit))
	}
	if h.CPUShare > capacity.ProberCPULimit {
		h.Distorted = append(h.Distorted, fmt.Sprintf("%.0f%% of its CPUs busy (over %.0f%%)", 100*h.CPUShare, 100*capacity.ProberCPULimit))
	}
	var bound []string
	for _, l := range levels {
		if l.ProberBound() {
			bound = append(bound, fmt.Sprintf("%s %s (%s)", l.Stage, l.RateName(), strings.Join(l.Prober.Invalid, ", ")))
		}
	}
	if len(bound) > 0 {
		h.Distorted = append(h.Distorted, "levels measured while the prober was the limit, left out of the conclusion (a closed-loop level's completed rate, a lower bound of the target's, still counts toward the peak the search bisects to): "+strings.Join(bound, "; "))
	}
	return h
}

// scaling computes the replicas a forecast peak needs.
func scaling(tg *capacity.TargetSetup, c *CapacitySummary) *Scaling {
	f := tg.Forecast
	if f == nil || c.RatePerReplica <= 0 {
		return nil
	}
	s := &Scaling{
		PeakRate: f.PeakRate, SpareReplicas: f.SpareReplicas, RatePerReplica: c.RatePerReplica,
		Assumption: "assumes linear scaling: each replica carries the verified capacity over the target's replicas",
	}
	s.ReplicasForPeak = int(math.Ceil(f.PeakRate / c.RatePerReplica))
	s.ReplicasNeeded = s.ReplicasForPeak + f.SpareReplicas
	s.CapacityAfterLoss = float64(s.ReplicasNeeded-1) * c.RatePerReplica
	s.HeadroomAfterLoss = s.CapacityAfterLoss/f.PeakRate - 1
	return s
}

// cost computes the cost per good request: of a step test at its
// verified capacity, of a soak at its goodput over every window.
func cost(tg *capacity.TargetSetup, run *capacity.Run, c *CapacitySummary) *Cost {
	if tg.CostPerHour == nil {
		return nil
	}
	out := &Cost{CostPerHour: *tg.CostPerHour, Excludes: costExcludes}
	switch {
	case c != nil && c.VerifiedGoodput > 0:
		out.Goodput, out.Basis = c.VerifiedGoodput, "the goodput at the verified capacity"
	case run.Soak != nil:
		good, secs := 0.0, 0.0
		for i := range run.Soak.Windows {
			w := &run.Soak.Windows[i]
			good += w.Goodput * w.WindowSeconds
			secs += w.WindowSeconds
		}
		if secs > 0 {
			out.Goodput, out.Basis = good/secs, "the soak's goodput over every window"
		}
	}
	if out.Goodput <= 0 {
		out.Basis = "no goodput: no good request to divide the cost by"
		return out
	}
	out.PerGoodRequest = out.CostPerHour / (out.Goodput * 3600)
	out.Per1000Good = 1000 * out.PerGoodRequest
	return out
}

// risk collects the run's risk boundaries.
func risk(run *capacity.Run, levels []*capacity.Level) Risk {
	r := Risk{Longest: []Longest{}, Canary: run.Canary,
		HotSpots: "not measured: the run's requests carry no tenant, so a single tenant's hot spot (one prefix, one long-context user) is not told apart"}
	if s := run.Setup; s != nil && len(s.Scenarios) > 1 {
		r.HotSpots = "per scenario of the mix only (each scenario's attainment is its own); a single tenant within a scenario is not told apart"
	}
	if l := run.HotTenant; l != nil {
		switch h := l.HotTenant; {
		case h != nil:
			r.HotTenant = &HotTenant{HotTenant: *h, IntendedRate: l.IntendedRate, OfferedRate: l.OfferedRate, WindowSeconds: l.WindowSeconds}
			r.HotSpots = r.HotTenant.text()
		case l.Note != "":
			r.HotSpots = "not measured: the hot-tenant level " + l.Note
		}
	}
	for _, l := range levels {
		if lg := l.Longest; lg != nil && l.Stage != "baseline" {
			r.Longest = append(r.Longest, Longest{Stage: l.Stage, Concurrency: l.Concurrency, OfferedRate: l.OfferedRate, IntendedRate: l.IntendedRate, Longest: *lg})
		}
	}
	if b := run.Burst; b != nil {
		r.Burst = &Burst{OfferedRate: b.OfferedRate, IntendedRate: b.IntendedRate, Attainment: b.Attainment, DrainSeconds: b.DrainSeconds, Timeline: b.Timeline, TTFT: b.TTFT}
		if tl := b.Timeline; tl != nil {
			r.Burst.ForSeconds, r.Burst.DrainWithin = tl.BurstEnd-tl.BurstStart, tl.DrainWithin
			r.Burst.Drained = tl.Drained > 0
			if len(tl.InFlight) > 0 {
				r.Burst.PeakInFlight = slices.Max(tl.InFlight)
			}
		}
	}
	if s := run.Soak; s != nil {
		r.Faults, r.PlanNotRun = s.Faults, s.PlanNotRun
		for i, w := range s.Windows {
			if w.ErrorBurst {
				r.ErrorBursts = append(r.ErrorBursts, i+1)
			}
		}
		if len(r.ErrorBursts) > 0 && len(s.Windows) > 0 {
			recovered := !s.Windows[len(s.Windows)-1].ErrorBurst
			r.Recovered = &recovered
		}
	}
	return r
}

func joinAnd(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	out := s[0]
	for _, v := range s[1 : len(s)-1] {
		out += ", " + v
	}
	return out + " and " + s[len(s)-1]
}

// fmtSeconds writes seconds readably: "12.3 ms", "3.5 s", "2m30s".
func fmtSeconds(s float64) string { return human.Seconds(s) }
