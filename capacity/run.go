package capacity

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/gpu"
	"github.com/sloprober/sloprober/prober"
)

// This file is the stored model of a test run: every type a run's JSON is
// made of, in one place. runstore writes and reads it, report renders it,
// the landing page and the API list its Summary. Field names are a
// contract with the runs already on disk: a new field is added with
// omitempty where old runs lack it; a field that changes meaning or goes
// away raises SchemaVersion, and DecodeRun keeps reading the older ones.

// SchemaVersion is the version of a stored run's JSON. Version 1 is the
// first that says so: a run written before carries no schema_version and
// reads as version 1 (its fields are the same). Version 2 judges levels on
// attainment intervals: a level's offered_rate counts every arrival of
// its window (sent or dropped, where version 1 counted the requests
// sent), it has a decision and an interval, a capacity's verified_rate is
// null when the run concluded nothing, and a soak's drift compares
// per-request samples with intervals. Version 3: a forecast's holds and
// holds_one_lost are null where its level was not verified (undecided,
// measured while the prober was the limit, not run), where version 2
// wrote false, as for a level that missed; a version 2 run read now
// takes them from its levels' decisions. Version 1 runs still read and
// render as they were written.
const SchemaVersion = 3

// ErrNewerSchema is wrapped by the error of decoding a run written by a
// newer sloprober, whose fields this one may misread.
var ErrNewerSchema = errors.New("run written by a newer sloprober")

// Summary is a run's header: what it was, how it ended and, for a step
// test, the capacity it concluded on. Run embeds it; runstore's index, the
// API's run lists and the landing page use it alone.
type Summary struct {
	// ID is the run's id in storage (runstore.ID); empty for a run that
	// was not stored.
	ID      string    `json:"id,omitempty"`
	Test    string    `json:"test"`
	Kind    string    `json:"kind"`
	Target  string    `json:"target"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end,omitzero"`
	Verdict string    `json:"verdict"`
	Reason  string    `json:"reason"`
	// VerifiedRate is a step run's concluded capacity, req/s: the
	// verified open-loop rate after pass or fail (0 when no open-loop
	// rate met the objectives), 0 after infeasible. It is absent (nil)
	// for a soak, and for a step run that concluded nothing: running or
	// aborted. Concluded derives it; it is never taken from a file.
	VerifiedRate *float64 `json:"verified_rate,omitempty"`
}

// Concluded is the verified rate a run of kind with verdict concluded
// on, given its capacity (nil: none found): see Summary.VerifiedRate.
func Concluded(kind, verdict string, c *Capacity) *float64 {
	if kind != config.TestStep {
		return nil
	}
	var rate float64
	switch verdict {
	case VerdictPass, VerdictFail:
		if v, ok := c.Verified(); ok {
			rate = v
		}
	case VerdictInfeasible:
	default:
		return nil
	}
	return &rate
}

// Header returns the run's Summary with its VerifiedRate derived from the
// run's kind, verdict and capacity.
func (r *Run) Header() Summary {
	s := r.Summary
	s.VerifiedRate = Concluded(r.Kind, r.Verdict, r.Capacity)
	return s
}

// Seal stamps a run for storage: the schema version (SchemaVersion for a
// run made now; a run read from storage keeps the version it was written
// in, whose fields it has), and the header's verified rate derived from
// the run.
func (r *Run) Seal() {
	if r.SchemaVersion == 0 {
		r.SchemaVersion = SchemaVersion
	}
	r.Summary = r.Header()
}

// DecodeRun reads a stored run's JSON, of any schema version up to
// SchemaVersion (a missing version is 1), and derives its header's
// verified rate.
func DecodeRun(data []byte) (*Run, error) {
	var r Run
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	if err := checkSchema(&r.SchemaVersion); err != nil {
		return nil, err
	}
	if r.SchemaVersion < 3 && r.Capacity != nil && r.Capacity.Forecast != nil {
		// Version 2 wrote false for a peak not verified too.
		r.Capacity.Forecast.setHolds()
	}
	cleanStrings(reflect.ValueOf(&r))
	r.Summary = r.Header()
	return &r, nil
}

// DecodeSummary reads the header of a stored run's JSON, its verified
// rate derived as DecodeRun does, without building its levels: runstore
// indexes every stored run this way at start.
func DecodeSummary(data []byte) (Summary, error) {
	var h struct {
		SchemaVersion int `json:"schema_version"`
		Summary
		Capacity *struct {
			VerifiedRate *float64 `json:"verified_rate"`
		} `json:"capacity"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return Summary{}, err
	}
	if err := checkSchema(&h.SchemaVersion); err != nil {
		return Summary{}, err
	}
	var c *Capacity
	if h.Capacity != nil {
		c = &Capacity{VerifiedRate: h.Capacity.VerifiedRate}
	}
	h.Summary.VerifiedRate = Concluded(h.Kind, h.Verdict, c)
	cleanStrings(reflect.ValueOf(&h.Summary))
	return h.Summary, nil
}

// checkSchema reads a missing version as 1 and refuses a newer one.
func checkSchema(v *int) error {
	switch {
	case *v == 0:
		*v = 1
	case *v < 0:
		return fmt.Errorf("schema_version %d: not a version", *v)
	case *v > SchemaVersion:
		return fmt.Errorf("%w: schema_version %d, this sloprober reads up to %d", ErrNewerSchema, *v, SchemaVersion)
	}
	return nil
}

// Verdicts of a test run.
const (
	// VerdictPass: capacity found and verified open loop (a burst's
	// backlog drained in time).
	VerdictPass = "pass"
	// VerdictFail: no open-loop rate met the objectives, or the backlog of
	// the burst did not drain within verify.drain_within; for a soak,
	// drift beyond its rule.
	VerdictFail = "fail"
	// VerdictInfeasible: one request at a time already misses an
	// objective; no load can do better.
	VerdictInfeasible = "infeasible"
	// VerdictAborted: a stop rule, the prober stopping, or an abort.
	VerdictAborted = "aborted"
	// VerdictInconclusive: the run could not conclude, and states no
	// capacity: the levels it needed were measured while the prober or
	// its host was the limit (after their retries), or stayed undecided
	// (their attainment interval straddling the objective) up to
	// window.max_steady.
	VerdictInconclusive = "inconclusive"
)

// Run is the result of one run of a test: what a report is built from,
// and what runstore keeps as one JSON file. Its header is the embedded
// Summary; the rest is the procedure's levels, windows and setup.
type Run struct {
	// SchemaVersion is the version of the run's JSON (SchemaVersion when
	// written; DecodeRun reads a missing one as 1).
	SchemaVersion int `json:"schema_version"`
	Summary

	Stages

	// Cache is the test's cache mode (config.TestConfig.Cache): empty in
	// runs written before it existed, which were production.
	Cache string `json:"cache,omitempty"`
	// Cold is the cold-cache pass of a cache: both step test: the same
	// procedure, measured first, with every prompt salted so that nothing
	// is shared. The stages above are then the production pass, whose
	// verdict is the run's.
	Cold *CachePass `json:"cold,omitempty"`

	// Soak holds a soak test's windows and drift.
	Soak *SoakRun `json:"soak,omitempty"`

	// Canary is the canary on the target during the run (none when it
	// ran alone, as `sloprober test run` does).
	Canary []CanaryScenario `json:"canary,omitempty"`

	// Provenance, Setup and Identity say what ran, what it was asked to
	// do and who the target said it was: a report is built from a stored
	// run alone.
	Provenance *Provenance `json:"provenance,omitempty"`
	Setup      *Setup      `json:"setup,omitempty"`
	Identity   *Identity   `json:"identity,omitempty"`
	// Lengths are the token lengths of every measured request of the
	// run: input as sent, output as received.
	Lengths *Lengths `json:"lengths,omitempty"`
	// ScenarioLengths are the same per scenario of a mix.
	ScenarioLengths map[string]*Lengths `json:"scenario_lengths,omitempty"`
}

// Stages are a step test's measured stages, and the prefix-cache shares
// measured over them: a run's, or a cache pass's (CachePass). Embedded,
// their JSON fields are those of the run or the pass.
type Stages struct {
	Baseline *Level `json:"baseline,omitempty"`
	// Sweep holds the closed-loop levels, refined ones included, by
	// concurrency.
	Sweep    []Level   `json:"sweep,omitempty"`
	Knee     *Knee     `json:"knee,omitempty"`
	Capacity *Capacity `json:"capacity,omitempty"`
	Verify   []Level   `json:"verify,omitempty"`
	Burst    *Level    `json:"burst,omitempty"`
	// HotTenant is verify.hot_tenant's level: the verified rate with one
	// tenant sending more than its share (hottenant.go).
	HotTenant *Level `json:"hot_tenant,omitempty"`

	// CachedShare is the share of the prompt tokens of the stages that
	// the server said it found in its prefix cache (usage's cached_tokens
	// over prompt_tokens), nil when it said nothing.
	CachedShare *float64 `json:"cached_share,omitempty"`
	// EngineHitRatio is the engine's own prefix-cache hit ratio over the
	// stages (their EngineQueue counters: vLLM's
	// prefix_cache_hits/queries), nil where its metrics serve none.
	EngineHitRatio *float64 `json:"engine_hit_ratio,omitempty"`
}

// CachePass is one pass of a step test's procedure under a cache mode:
// its stages and its own verdict.
type CachePass struct {
	Cache   string `json:"cache"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	Stages
}

// VerifiedRate is the pass's verified open-loop rate, nil when it
// verified none.
func (p *CachePass) VerifiedRate() *float64 {
	if p == nil || p.Capacity == nil {
		return nil
	}
	return p.Capacity.VerifiedRate
}

// Knee is where goodput stops growing.
type Knee struct {
	Concurrency int     `json:"concurrency"`
	Goodput     float64 `json:"goodput"`
	// Reached is false when goodput still grew at the highest level swept.
	Reached bool   `json:"reached"`
	Reason  string `json:"reason"`
}

// NoKnee is how every output (the terminal's summary, the report, a
// comparison) states a sweep whose goodput still grew at its last level:
// it found no knee, which is not that it found one at that level.
const NoKnee = "none within the levels run"

// Text states the knee as every output does, after "knee: ": "8 clients:
// goodput +2% for +100% clients", or "none within the levels run: goodput
// still grew at 4 clients, the highest level".
func (k *Knee) Text() string {
	if !k.Reached {
		return NoKnee + ": " + k.Reason
	}
	return clients(k.Concurrency) + ": " + k.Reason
}

// Capacity is the step test's conclusion.
type Capacity struct {
	// Concurrency is the highest closed-loop level at which every
	// scenario met its objective, with no lower level against it (a
	// lower one short of requests is implied by it); Rate is its
	// completed rate and Goodput its good requests, per second.
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	Goodput     float64 `json:"goodput"`
	// VerifiedRate is the capacity conclusion: the highest offered
	// open-loop (Poisson) rate whose level met every objective with every
	// lower rate measured meeting them too, req/s; 0 when the run
	// concluded that none did (fail), null when it concluded nothing
	// (aborted, inconclusive). VerifiedGoodput is that level's goodput,
	// and Verified the level (its attainment interval and sample).
	VerifiedRate    *float64 `json:"verified_rate"`
	VerifiedGoodput float64  `json:"verified_goodput"`
	// Bound is the lowest offered rate above the verified one that the
	// search measured and did not verify (missed, inconclusive or
	// prober-bound: BoundDecision), 0 when every rate tried verified:
	// the capacity lies between VerifiedRate and Bound.
	Bound         float64 `json:"bound,omitempty"`
	BoundDecision string  `json:"bound_decision,omitempty"`
	// BoundAttainment and BoundInterval are the bound's level's
	// attainment, interval and sample: a bound left undecided is no
	// evidence that the capacity lies below it.
	BoundAttainment float64   `json:"bound_attainment,omitempty"`
	BoundInterval   *Interval `json:"bound_interval,omitempty"`
	// Ceiling is the most the capacity can be: the lowest rate above the
	// verified one that missed (CeilingFrom "missed"), or else the
	// closed loop's throughput (CeilingFrom "closed loop": the most a sweep
	// level completed), above which
	// arrivals queue without end. Absent in runs before it.
	Ceiling     float64 `json:"ceiling,omitempty"`
	CeilingFrom string  `json:"ceiling_from,omitempty"`
	// SearchEnd says why the search stopped short of its resolution,
	// where that was not its levels running out: a rate too low to
	// decide in the time a level has.
	SearchEnd string `json:"search_end,omitempty"`
	// Forecast is the verification of the target's forecast, if it has
	// one.
	Forecast *ForecastCheck `json:"forecast,omitempty"`
	// LimitedBy says why the capacity may be higher than found: the
	// sweep's clients reached the test's max_rate at it. The capacity
	// gauges are not set from such a run.
	LimitedBy string `json:"limited_by,omitempty"`
}

// CeilingClosedLoop is a Capacity's CeilingFrom when the ceiling is the
// closed loop's throughput.
const CeilingClosedLoop = "closed loop"

// BoundText says where the capacity lies above the verified rate, for
// the sentence that states it: "below 4.33 req/s (missed)" when the
// lowest rate above it that did not verify missed; otherwise the ceiling
// (the first rate above it that missed, or the closed loop's peak), then
// what that rate was, with its attainment: an undecided rate is no
// evidence that the capacity lies below it: "below 4.33 req/s (missed);
// 4.11 req/s above it inconclusive (attained 97.4% [93.1, 99.2] of
// 230)", "at most 11.2 req/s (the closed loop's peak); 7.03 req/s above
// it inconclusive (...)". Empty when the run has neither.
func (c *Capacity) BoundText() string {
	var parts []string
	switch {
	case c.Bound > 0 && c.BoundDecision == DecisionMissed:
		return fmt.Sprintf("below %.3g req/s (missed)", c.Bound)
	case c.Ceiling <= 0:
	case c.CeilingFrom == CeilingClosedLoop:
		parts = append(parts, fmt.Sprintf("at most %.3g req/s (the closed loop's peak)", c.Ceiling))
	default:
		parts = append(parts, fmt.Sprintf("below %.3g req/s (%s)", c.Ceiling, c.CeilingFrom))
	}
	if c.Bound > 0 {
		bound := fmt.Sprintf("%.3g req/s above it %s", c.Bound, c.BoundDecision)
		if iv := c.BoundInterval; iv != nil {
			bound += fmt.Sprintf(" (attained %.1f%% [%.1f, %.1f] of %d)", 100*c.BoundAttainment, lower(iv), upper(iv), iv.N)
		}
		parts = append(parts, bound)
	}
	return strings.Join(parts, "; ")
}

// Verified returns the verified rate and whether the run concluded on one
// (0 with true: it concluded that no open-loop rate met the objectives).
func (c *Capacity) Verified() (float64, bool) {
	if c == nil || c.VerifiedRate == nil {
		return 0, false
	}
	return *c.VerifiedRate, true
}

// ForecastCheck is a step test's verification of its target's forecast:
// its average and peak rates per replica, and the peak with one replica
// lost, each run open loop (Poisson) as a level of its own.
type ForecastCheck struct {
	// PeakRate and AverageRate are the forecast for the whole target,
	// req/s; Replicas the target's replicas, SpareReplicas the N+k
	// spares it plans.
	PeakRate      float64 `json:"peak_rate"`
	AverageRate   float64 `json:"average_rate,omitempty"`
	Replicas      int     `json:"replicas"`
	SpareReplicas int     `json:"spare_replicas"`
	// Average, Peak and OneLost are the levels' rates per replica and
	// decisions: PeakRate / Replicas, and PeakRate / (Replicas - 1).
	Average *ForecastLevel `json:"average,omitempty"`
	Peak    *ForecastLevel `json:"peak,omitempty"`
	OneLost *ForecastLevel `json:"one_lost,omitempty"`
	// Holds: the peak per replica met the objectives (true), missed them
	// (false), or was not verified (nil: undecided, measured while the
	// prober was the limit, not run). HoldsOneLost: the same of the peak
	// on one replica fewer (absent with one replica, or not verified).
	Holds        *bool `json:"holds"`
	HoldsOneLost *bool `json:"holds_one_lost,omitempty"`
}

// ForecastLevel is one forecast rate per replica and what its level
// decided.
type ForecastLevel struct {
	Rate float64 `json:"rate"`
	// Offered is the rate its window offered; Decision its decision
	// ("not run" when max_rate caps it).
	Offered  float64 `json:"offered"`
	Decision string  `json:"decision"`
}

// Level is what one step of a test measured over its steady window.
type Level struct {
	// Stage is baseline, sweep, refine, verify or burst.
	Stage string `json:"stage"`
	// Concurrency is the closed-loop clients; IntendedRate the open-loop
	// rate, req/s.
	Concurrency  int       `json:"concurrency,omitempty"`
	IntendedRate float64   `json:"intended_rate,omitempty"`
	Start        time.Time `json:"start"`
	// WindowSeconds is the length of the steady window the rates are
	// over: the requests sent in it are the level's sample, each awaited.
	WindowSeconds float64 `json:"window_seconds"`

	Scheduled int                    `json:"scheduled"`
	Sent      int                    `json:"sent"`
	Dropped   map[string]int         `json:"dropped,omitempty"`
	Outcomes  map[prober.Outcome]int `json:"outcomes"`

	// Rates over the window, per second: arrivals (offered: every
	// arrival scheduled in the window, sent or dropped, the rate an
	// open-loop level is judged and stated at; in schema 1, the requests
	// sent), ok requests (completed), input and output tokens (apart:
	// never only their sum), and good requests (goodput).
	OfferedRate      float64 `json:"offered_rate"`
	CompletedRate    float64 `json:"completed_rate"`
	InputTokensRate  float64 `json:"input_tokens_rate"`
	OutputTokensRate float64 `json:"output_tokens_rate"`
	Goodput          float64 `json:"goodput"`

	// LengthMismatches counts the requests whose server-counted length
	// was off what was asked (the contract's length_mismatches_total):
	// "input" when usage.prompt_tokens is off the prompt sent beyond the
	// tolerance, "output" when an ok reply is off the requested maximum.
	// The token rates above are the server's counts (usage); where they
	// disagree with what was sent, these say how often.
	LengthMismatches map[string]int `json:"length_mismatches,omitempty"`

	Counted       int                `json:"counted"`
	Attainment    float64            `json:"attainment"`
	SLOAttainment map[string]float64 `json:"slo_attainment"`
	Scenarios     []ScenarioResult   `json:"scenarios"`

	TTFT Percentiles `json:"ttft"`
	TPOT Percentiles `json:"tpot"`
	ITL  Percentiles `json:"itl"`
	E2E  Percentiles `json:"e2e"`

	// Lengths and Longest are the level's token lengths and its top
	// decile by input length; Prober the prober's own health over it.
	Lengths *Lengths      `json:"lengths,omitempty"`
	Longest *Longest      `json:"longest,omitempty"`
	Prober  *ProberHealth `json:"prober,omitempty"`
	// Timeline is the burst's requests in flight over time.
	Timeline *Timeline `json:"timeline,omitempty"`

	// Server is the server's own account of the window's requests, where
	// it gave one; nil when none did.
	Server *ServerSignals `json:"server,omitempty"`
	// EngineQueue is the engine's own queue depth over the window, from
	// its metrics (the target's server_metrics); nil without them.
	EngineQueue *EngineQueue `json:"engine_queue,omitempty"`
	// GPU is the target's GPUs over the level's windows (target.gpu); nil
	// without a source: not measured.
	GPU *gpu.Window `json:"gpu,omitempty"`
	// HotTenant is the hot tenant's and the other tenants' requests apart,
	// on a level with a hot tenant.
	HotTenant *HotTenant `json:"hot_tenant,omitempty"`

	// DrainSeconds is how long the requests in flight took to end after
	// the window (the cooldown), or after a burst.
	DrainSeconds float64 `json:"drain_seconds"`
	// Insufficient: fewer requests than window.min_requests; its
	// percentiles are shown, flagged.
	Insufficient bool `json:"insufficient,omitempty"`
	// Decision is the level's verdict on the confidence intervals of its
	// scenarios' attainments (DecisionMet, DecisionMissed,
	// DecisionInconclusive; see Interval): met when every scenario that
	// drew requests met its objective, missed when one missed it,
	// inconclusive otherwise. Absent in schema 1, where Met alone says.
	Decision string `json:"decision,omitempty"`
	// Interval is the attainment's over every scenario.
	Interval *Interval `json:"interval,omitempty"`
	// Met: the decision is met (schema 1: every scenario's attainment at
	// or above its objective).
	Met bool `json:"met"`
	// Extensions counts the windows of window.steady that extended the
	// first while its decision was inconclusive: the level's window is
	// all of them.
	Extensions int `json:"extensions,omitempty"`
	// Batches is the batches of a tenth of window.steady the level's
	// sample holds, and Looks how many times it was looked at before it
	// decided or reached its most (sequential.go): a level is decided as
	// soon as its sample decides it.
	Batches int `json:"batches,omitempty"`
	Looks   int `json:"looks,omitempty"`
	// ToDecide is what would decide a level left undecided: about how
	// many more requests, were its attainment what it was.
	ToDecide *ToDecide `json:"to_decide,omitempty"`
	// Pooled is the evidence of an open-loop level of the search met
	// only with the levels above it pooled (pool.go): its own interval
	// straddled the objective.
	Pooled *Pooled `json:"pooled,omitempty"`
	// ImpliedBy is the concurrency of the sweep level that met the
	// objectives above this one when this one stayed inconclusive with
	// nothing against it (every request good, too few to show it): its
	// decision stays inconclusive, and the capacity's level implies it,
	// attainment not rising with load. 0: not implied.
	ImpliedBy int `json:"implied_by,omitempty"`
	// Remeasured says, for each measurement of the level that was thrown
	// away because the prober was the limit, why and what the diagnosis
	// was; the level is the next measurement.
	Remeasured []string `json:"remeasured,omitempty"`
	// First is the first measurement's attainment ("attained 100.0%
	// [53.4, 100.0] of 32") when the level is its second, measured again
	// to decide it (left short of requests while a higher level
	// followed, with nothing above it verified).
	First string `json:"first,omitempty"`
	// AgainProberBound says why, when the level was measured again to
	// decide it (left short of requests while a higher level followed)
	// and that measurement was thrown away because the prober was the
	// limit: the level is its first measurement, still undecided for want
	// of requests, which a quieter host decides.
	AgainProberBound string `json:"again_prober_bound,omitempty"`
	// Why says what an open-loop level of a step test's verification was
	// for: a configured fraction, a bisection, the forecast.
	Why string `json:"why,omitempty"`
	// Note says why a level is what it is (a stop rule, a cap).
	Note string `json:"note,omitempty"`
}

// Decided returns the level's decision: Decision, or in a schema-1 run
// met or missed as Met says.
func (l *Level) Decided() string {
	switch {
	case l.Decision != "":
		return l.Decision
	case l.Met:
		return DecisionMet
	}
	return DecisionMissed
}

// ProberBound reports whether the level was measured while the prober,
// not the target, was the limit: its percentiles are shown but not used
// for the capacity conclusion.
func (l *Level) ProberBound() bool { return l.Prober != nil && len(l.Prober.Invalid) > 0 }

// RateName names a measured level as every sentence about it does: by
// its clients, or by the rate its window offered ("6.18 req/s": the
// arrivals its window held, the rate its attainment is evidence for),
// the rate it was run at only where it offered none (it sent nothing, or
// a run before offered rates). LoadName is the rate it was run at.
func (l *Level) RateName() string {
	if l.Concurrency == 0 && l.OfferedRate > 0 {
		return fmt.Sprintf("%.3g req/s", l.OfferedRate)
	}
	return l.LoadName()
}

// LoadName names a level by its load: "4 clients", "6.25 req/s".
func (l *Level) LoadName() string {
	if l.Concurrency > 0 {
		return clients(l.Concurrency)
	}
	return fmt.Sprintf("%.3g req/s", l.IntendedRate)
}

// ScenarioResult is one scenario's attainment in a level.
type ScenarioResult struct {
	Scenario string  `json:"scenario"`
	Counted  int     `json:"counted"`
	Good     int     `json:"good"`
	Goodput  float64 `json:"goodput"` // good requests per second
	// Attainment is good / counted (overall, every SLO at once);
	// SLOAttainment is 1 - missed / counted per SLO.
	Attainment    float64            `json:"attainment"`
	SLOAttainment map[string]float64 `json:"slo_attainment"`
	Objective     float64            `json:"objective"`
	// Decision and Interval are as a Level's, against Objective.
	Decision string    `json:"decision,omitempty"`
	Interval *Interval `json:"interval,omitempty"`
	Met      bool      `json:"met"`
}

// Percentiles are exact percentiles of one latency over a window's
// records (nearest rank), in seconds, with their sample count.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	// LowConfidence names the percentiles over too few samples: "p95"
	// below 200, "p99" below 1,000.
	LowConfidence []string `json:"low_confidence,omitempty"`
	// Sampled: the window had more gaps than it keeps (ITL only); the
	// percentiles are of a uniform sample of N of them.
	Sampled bool `json:"sampled,omitempty"`
}

// ServerSignals is what a server said of its own work on a window's
// requests: the "timings" of llama.cpp (and of the simulator, which adds
// queue_ms) and usage's cached prompt tokens. The seed's first question
// when TTFT grows is whether the server's queue grew: if the prefill and
// decode times stayed while the queue grew, the server is near
// saturation; if decode slowed at the same load, it degraded.
type ServerSignals struct {
	// Reported is the requests whose timings were used; Implausible
	// those whose timings added up to more than the request took at the
	// client (5% and 5 ms of slack), which are not.
	Reported    int `json:"reported"`
	Implausible int `json:"implausible,omitempty"`
	// Queue, Prefill and DecodePerToken are seconds (decode per output
	// token: predicted_ms / predicted_n); Queue's N may be below Reported
	// (queue_ms is the simulator's).
	Queue          Percentiles `json:"queue"`
	Prefill        Percentiles `json:"prefill"`
	DecodePerToken Percentiles `json:"decode_per_token"`
	// CachedShare is the cached prompt tokens over the prompt tokens of
	// the requests that reported both (prefix caching at work); nil when
	// none did.
	CachedShare *float64 `json:"cached_share,omitempty"`
	// CachedTokens and PromptTokens are the sums the share is of.
	CachedTokens int `json:"cached_tokens,omitempty"`
	PromptTokens int `json:"prompt_tokens,omitempty"`
}

// Lengths are the token lengths of a level's requests: the input as sent
// (the workload's count of each prompt, calibrated against the server's
// tokenizer: what was sent, not what the configuration asked for) and the
// output as received (usage, else the chunks).
type Lengths struct {
	Input  Percentiles `json:"input"`
	Output Percentiles `json:"output"`
}

// Longest is the top decile of a level's requests by input length (a
// level of at least 10 requests): long prompts queue behind their own
// prefill, and an average over every request hides what they see.
type Longest struct {
	// SameLength: every request of the level had the same input length:
	// the decile singles out nothing.
	SameLength bool `json:"same_length"`
	// MinInputTokens is the decile's shortest input.
	MinInputTokens int         `json:"min_input_tokens"`
	Requests       int         `json:"requests"`
	Counted        int         `json:"counted"`
	Good           int         `json:"good"`
	Attainment     float64     `json:"attainment"`
	TTFT           Percentiles `json:"ttft"`
}

// ProberHealth is the prober's own state over a window: a prober that is
// late to send or short of CPU adds its own delay to what it measures,
// and a report must show when a run was distorted so.
type ProberHealth struct {
	// LagP99 and LagMax are the send lags (sent minus scheduled, seconds)
	// of the window's sends, Sends of them.
	Sends  int     `json:"sends"`
	LagP99 float64 `json:"lag_p99"`
	LagMax float64 `json:"lag_max"`
	// LagP50 is the sends' median lag: the one judged over fewer than
	// 100 sends, whose P99 is their largest (schema 2).
	LagP50 float64 `json:"lag_p50,omitempty"`
	// CPUSeconds is the process's CPU time over the window, CPUShare it
	// over the window and GOMAXPROCS: 1 is every core busy.
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUShare   float64 `json:"cpu_share"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	// SchedulerP99 and GCPauseP99 are the P99s (seconds, bucket upper
	// bounds) of the Go scheduler's latency and GC pauses over the window.
	SchedulerP99 float64 `json:"scheduler_latency_p99,omitempty"`
	GCPauseP99   float64 `json:"gc_pause_p99,omitempty"`
	// Invalid are the reasons the prober's own measurements were not to
	// be trusted over the window (the validity rule's thresholds, with
	// the window as its sustain): empty when they were, or when the run
	// judged none (Step.Validity nil).
	Invalid []string `json:"invalid,omitempty"`
	// Diagnosis says, of a window the prober limited (or, in a step
	// test, was late over: Over), whether the host was busy
	// (sloprober's goroutines waited although it used little of its
	// CPUs: other processes held them) or the prober saturated (its CPUs
	// busy: add shards or CPU), and what to do.
	Diagnosis string `json:"diagnosis,omitempty"`

	// A step test's level is judged by what the prober's delays could
	// change of its decision (effect.go). Over are the validity
	// thresholds its health was over, whether or not that made it
	// prober-bound (Invalid); Rule the rule that judged it.
	Over []string `json:"over,omitempty"`
	Rule string   `json:"rule,omitempty"`
	// ReadDelayP99 and ReadDelayMax bound how late the prober could have
	// read the level's requests (seconds; its stalls over each request's
	// flight: stall.go).
	ReadDelayP99 float64 `json:"read_delay_p99,omitempty"`
	ReadDelayMax float64 `json:"read_delay_max,omitempty"`
	// DecisionIfBetter and DecisionIfWorse are the level's decision with
	// every request made better (earlier stamps) or worse (TPOT and
	// longest gap) by its read delay.
	DecisionIfBetter string `json:"decision_if_better,omitempty"`
	DecisionIfWorse  string `json:"decision_if_worse,omitempty"`
	// SendDispersion and ScheduleDispersion are the index of dispersion
	// of an open-loop level's sends and of their schedule, in bins of
	// the mean gap: 1 for Poisson arrivals; sends above their schedule's
	// came in bunches. LateDrops counts the arrivals dropped as late,
	// which made the load lighter than offered.
	SendDispersion     float64 `json:"send_dispersion,omitempty"`
	ScheduleDispersion float64 `json:"schedule_dispersion,omitempty"`
	LateDrops          int     `json:"late_drops,omitempty"`
}

// EngineQueue is the engine's own queue depth (requests waiting for a batch
// slot, from its metrics: server_metrics) over a level's steady window or
// a soak window, sampled every second. A queue that grows from level to
// level while the prefill time stays flat is a server near saturation.
type EngineQueue struct {
	Samples int     `json:"samples"`
	Mean    float64 `json:"mean"`
	Max     int     `json:"max"`
	// PrefixCacheHits and PrefixCacheQueries are the increase of the
	// engine's prefix-cache counters over the window (prompt tokens found
	// cached, prompt tokens looked up), where its metrics serve them:
	// the engine's own hit ratio (HitRatio).
	PrefixCacheHits    float64 `json:"prefix_cache_hits,omitempty"`
	PrefixCacheQueries float64 `json:"prefix_cache_queries,omitempty"`
	// Errors counts the reads that failed (counted, not averaged in).
	Errors int `json:"errors,omitempty"`
	// NotExposed: the engine's metrics have no waiting-queue series
	// (llama.cpp's without --metrics' queue, TGI's older builds): said
	// where the numbers would be, not left as "-".
	NotExposed bool `json:"not_exposed,omitempty"`
}

// Timeline is a burst's requests in flight, sampled every
// timelineInterval from the start of its warm-up until it ends: the
// backlog building up and draining, for the report's chart.
type Timeline struct {
	Start           time.Time `json:"start"`
	IntervalSeconds float64   `json:"interval_seconds"`
	InFlight        []int     `json:"in_flight"`
	// BurstStart, BurstEnd and Drained are seconds since Start; Drained
	// is 0 when the backlog did not drain in time.
	BurstStart float64 `json:"burst_start"`
	BurstEnd   float64 `json:"burst_end"`
	Drained    float64 `json:"drained"`
	// Normal is the requests in flight the drain waited for: the verified
	// rate times its E2E P95 (Little's law); DrainWithin the time it was
	// allowed (verify.drain_within), seconds.
	Normal      int     `json:"normal"`
	DrainWithin float64 `json:"drain_within"`
	// Truncated: the burst outlasted maxTimelinePoints samples.
	Truncated bool `json:"truncated,omitempty"`
}

// SoakRun is a soak's windows; it is part of Run.
type SoakRun struct {
	Rate    float64      `json:"rate"`
	Windows []SoakWindow `json:"windows"`
	Drift   *Drift       `json:"drift,omitempty"`
	// Faults is what the soak's fault plan did.
	Faults []FaultEvent `json:"faults,omitempty"`
	// PlanNotRun says, step by step, how the fault plan did not run as
	// configured: a do that failed, a step that began late or was in
	// place for less than its for ("step 1 (http at 12s): in place 3ms
	// instead of 3s (its do took 10.2s)"). A soak whose plan did not run
	// as configured does not pass: what it was to show was not shown.
	PlanNotRun []string `json:"plan_not_run,omitempty"`
	// Impacts is what each step of the fault plan that ran did to the
	// target, measured (impact.go).
	Impacts []FaultImpact `json:"impacts,omitempty"`
	// OneLost is the remaining capacity after one replica is lost: the
	// computed one (the last verified capacity of the target, less a
	// replica's share) beside what a step that took a replica away
	// measured.
	OneLost *ReplicaLoss `json:"one_lost,omitempty"`
}

// SoakWindow is one window of a soak: the level measured over it, and the
// prober's own state at its end.
type SoakWindow struct {
	Level
	// ProberRSSBytes and ProberGoroutines: sloprober's own resident
	// memory and goroutines at the end of the window.
	ProberRSSBytes   int64 `json:"prober_rss_bytes"`
	ProberGoroutines int   `json:"prober_goroutines"`
	// ErrorBurst: more than 10% of the window's requests failed.
	ErrorBurst bool `json:"error_burst,omitempty"`
	// Cache is the window's cache mode where the soak's is not production
	// ("cold", or "production" in a soak that alternates).
	Cache string `json:"cache,omitempty"`
}

// Drift compares the end of a soak with its first steady window.
type Drift struct {
	// P99Growth is the growth of each latency's P99, the last windows'
	// over the first window's: 0.25 is 25% slower. When a side compared
	// has fewer than 1,000 samples it is the P95's growth, fewer than 200
	// the median's: a P99 of 50 samples is their largest, noise that
	// would fail a healthy soak. In schema 2 it is of per-request samples
	// pooled over the last windows (max_itl: each request's longest gap),
	// with Intervals; in schema 1 the mean of the last windows' own
	// percentiles, and itl of every gap pooled.
	P99Growth map[string]float64 `json:"p99_growth"`
	// Percentile names the percentile each latency's growth is of: "p99",
	// "p95" or "p50".
	Percentile map[string]string `json:"percentile,omitempty"`
	// Intervals are the growths with their 95% intervals and samples: a
	// latency drifted when the interval's lower end is beyond
	// drift.p99_growth.
	Intervals map[string]*GrowthInterval `json:"intervals,omitempty"`
	// GoodputDrop is the drop of the attainment (good requests over
	// counted ones; schema 1: good per sent request), which unlike good
	// requests per second does not move with the Poisson arrivals' count:
	// 0.1 is 10% fewer good. GoodputDropLower and GoodputDropUpper are
	// its interval, from the first window's and the last windows'
	// attainment intervals (AttainmentFirst, AttainmentLast).
	GoodputDrop      float64   `json:"goodput_drop"`
	GoodputDropLower float64   `json:"goodput_drop_lower,omitempty"`
	GoodputDropUpper float64   `json:"goodput_drop_upper,omitempty"`
	AttainmentFirst  *Interval `json:"attainment_first,omitempty"`
	AttainmentLast   *Interval `json:"attainment_last,omitempty"`
	// MemoryGrowth is the growth of the prober's RSS.
	MemoryGrowth float64 `json:"memory_growth"`
	// ServerGrowth is the growth of the median of each phase the server
	// timed itself (queue, prefill, decode_per_token), where the first
	// and the last windows both have it: not judged (a server's account
	// of itself), but it says where the time went.
	ServerGrowth map[string]float64 `json:"server_growth,omitempty"`
}

// FaultEvent is one thing a soak's fault plan did: a change of a
// simulator's faults, or a fault action (or its undo) against a real
// deployment.
type FaultEvent struct {
	At time.Time `json:"at"`
	// Step is the step's index in the plan (absent: the first); Kind is
	// "simulator" or the action's kind ("http", "kubernetes", "exec");
	// runs written before fault actions have neither.
	Step int    `json:"step,omitempty"`
	Kind string `json:"kind,omitempty"`
	// Action is "set" (the plan's faults) or "restored" (the faults the
	// simulator had before), or an action's "do" or "undo".
	Action string `json:"action"`
	Faults string `json:"faults,omitempty"`
	// Description, Result, DryRun and Seconds are a fault action's: what
	// it was, what happened, whether it was a dry run, how long it took.
	Description string  `json:"description,omitempty"`
	Result      string  `json:"result,omitempty"`
	DryRun      bool    `json:"dry_run,omitempty"`
	Seconds     float64 `json:"seconds,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// CanaryScenario is the canary of one scenario during a test.
type CanaryScenario struct {
	Scenario   string  `json:"scenario"`
	Counted    int     `json:"counted"`
	Good       int     `json:"good"`
	Attainment float64 `json:"attainment"`
	Objective  float64 `json:"objective"`
	// BudgetConsumed is the share of the canary's 30-day error budget the
	// test cost it: its bad requests over (1 - objective) x its rate x 30
	// days. At 1 req/s and 0.99, 259 bad requests are 1%.
	BudgetConsumed float64 `json:"budget_consumed"`

	rate float64
}

// Provenance says what produced a run: the sloprober version and the
// configuration it ran with.
type Provenance struct {
	Version    string `json:"version"`
	Revision   string `json:"revision,omitempty"`
	ConfigHash string `json:"config_hash,omitempty"` // config.Config.Hash
	// Runner is what ran the test: "cli" (`sloprober test run`) or
	// "daemon" (a schedule or the test API); "" in older runs.
	Runner string `json:"runner,omitempty"`
	// Validity is the rule the prober's own health was judged by over
	// each level (--validity.*); nil when none was judged.
	Validity *ValiditySetup `json:"validity,omitempty"`
}

// ValiditySetup is a run's prober-health rule (validity.Config), in
// seconds and shares.
type ValiditySetup struct {
	WindowSeconds       float64 `json:"window_seconds"`
	SustainSeconds      float64 `json:"sustain_seconds"`
	CPU                 float64 `json:"cpu"`
	SchedulerP99Seconds float64 `json:"scheduler_p99_seconds"`
	GCPauseP99Seconds   float64 `json:"gc_pause_p99_seconds"`
	SendLagP99Seconds   float64 `json:"send_lag_p99_seconds"`
	PoolWaitP99Seconds  float64 `json:"pool_wait_p99_seconds"`
}

// Setup is what a run was asked to do, as it was when it ran: a report is
// built from the stored run alone, and a configuration changed since must
// not change what an old report says.
type Setup struct {
	Target    TargetSetup     `json:"target"`
	Scenarios []ScenarioSetup `json:"scenarios"`
	// Replay is the trace the test's requests came from, if any.
	Replay *TraceSetup `json:"replay,omitempty"`
	// Test is the test's configuration with its defaults, as YAML.
	Test string `json:"test"`
}

// TargetSetup is the target of a run. Its URL carries no credentials and
// no query (where API keys sometimes travel).
type TargetSetup struct {
	Name        string            `json:"name"`
	URL         string            `json:"url"`
	API         string            `json:"api"`
	Model       string            `json:"model"`
	Simulator   bool              `json:"simulator,omitempty"`
	Replicas    int               `json:"replicas"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	CostPerHour *float64          `json:"cost_per_hour,omitempty"`
	Forecast    *ForecastSetup    `json:"forecast,omitempty"`
	TimeoutSecs float64           `json:"timeout_seconds"`
}

// ForecastSetup is the target's forecast peak and spare replicas (N+k).
type ForecastSetup struct {
	PeakRate      float64 `json:"peak_rate"`
	SpareReplicas int     `json:"spare_replicas"`
}

// ScenarioSetup is one scenario of a run's load.
type ScenarioSetup struct {
	Name string `json:"name"`
	// Share is the scenario's share of the requests (its mix weight over
	// the weights' sum); 1 alone.
	Share     float64    `json:"share"`
	Objective float64    `json:"objective"`
	SLOs      []SLOSetup `json:"slos"`
	// Input and Output are the configured lengths, as YAML (a number, or
	// a distribution); LengthsFrom the trace they are drawn from instead.
	Input        string             `json:"input_tokens"`
	Output       string             `json:"output_tokens"`
	LengthsFrom  *TraceSetup        `json:"lengths_from,omitempty"`
	IgnoreEOS    bool               `json:"ignore_eos"`
	Prefix       *PrefixSetup       `json:"prefix,omitempty"`
	Conversation *ConversationSetup `json:"conversation,omitempty"`
	Cancel       *CancelSetup       `json:"cancel,omitempty"`
}

// SLOSetup is one SLO: a request meets it when its value is at most the
// threshold.
type SLOSetup struct {
	Name             string  `json:"name"`
	ThresholdSeconds float64 `json:"threshold_seconds"`
}

// TraceSetup names a trace file (its base name: paths say where a
// machine keeps files, not what they are) and its format.
type TraceSetup struct {
	File   string `json:"file"`
	Format string `json:"format"`
}

// PrefixSetup: a share of the requests begin with one of groups shared
// prompts of tokens tokens.
type PrefixSetup struct {
	Tokens int     `json:"tokens"`
	Share  float64 `json:"share"`
	Groups int     `json:"groups"`
}

// ConversationSetup: every request is a turn of a conversation.
type ConversationSetup struct {
	Turns            int     `json:"turns"`
	ThinkTimeSeconds float64 `json:"think_time_seconds"`
}

// CancelSetup: the client cancels a share of the requests after a time.
type CancelSetup struct {
	Share        float64 `json:"share"`
	AfterSeconds float64 `json:"after_seconds"`
}

// Identity is who the target said it was during a run: its /v1/models
// list, and what its replies said (the Server header, the reply's model
// and system_fingerprint), each value with the number of replies that
// said it. Every string is bounded (prober.MaxIdentityBytes) and one line.
type Identity struct {
	Models      []prober.ServedModel `json:"models,omitempty"`
	ModelsError string               `json:"models_error,omitempty"`
	// SimulatorConfig is what a simulator target states of its
	// configuration (/sim/config, compact JSON): its engine, not its
	// address, is what two runs against it compare.
	SimulatorConfig string `json:"simulator_config,omitempty"`
	Servers         []Said `json:"servers,omitempty"`
	ReplyModels     []Said `json:"reply_models,omitempty"`
	Fingerprints    []Said `json:"fingerprints,omitempty"`
}

// Said is one value a server stated and how many replies stated it; the
// value "" with Other set counts the replies whose value was not kept.
type Said struct {
	Value   string `json:"value"`
	Replies int    `json:"replies"`
	Other   bool   `json:"other,omitempty"`
}
