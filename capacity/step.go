package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
)

// Progress is what a running test tells while it runs.
type Progress struct {
	Stage string
	// Concurrency (closed loop) or Rate (open loop, req/s) of the level.
	Concurrency int
	Rate        float64
	Level       int // 1-based, of Levels (an estimate: refine steps and stops change it)
	Levels      int
	Elapsed     time.Duration
	Remaining   time.Duration // estimated
	// RemainingMax is the most left if every level left takes its
	// longest (timeMost): the time a team can plan around.
	RemainingMax time.Duration
	// Goodput of the last measured level, good req/s.
	Goodput float64
}

// RemainingText is "about 13m37s left (up to 50m)": the time left, and
// the most left (rounded up) where it is more.
func (p Progress) RemainingText() string {
	left := fmt.Sprintf("about %s left", p.Remaining.Round(time.Second))
	if p.RemainingMax > p.Remaining {
		left += fmt.Sprintf(" (up to %s)", roughlyUp(p.RemainingMax))
	}
	return left
}

// LoadName names the level's load: "6.25 req/s intended" open loop, "4 clients"
// closed loop.
//
// An open-loop level under way is named by the rate it is run at, said to
// be intended: every result names a level by the rate its window offered
// (a Poisson window aimed at 6.79 req/s may offer 7.83), known only at
// its end.
func (p Progress) LoadName() string {
	if p.Rate > 0 {
		return fmt.Sprintf("%.3g req/s intended", p.Rate)
	}
	return clients(p.Concurrency)
}

// Step runs a step test: the seed's steps 2 to 5.
type Step struct {
	Manager  *prober.Manager
	Recorder *Recorder
	Test     *config.TestConfig
	// Load is the test's load (config.Config.TestLoad), its arrival set by
	// each stage.
	Load config.LoadSpec
	// MaxRate is the most the test may send, req/s: a closed loop's pace,
	// and the highest verification rate (test.max_rate, or
	// global.max_rate less the canary's).
	MaxRate  float64
	Logger   *slog.Logger
	Progress func(Progress)
	// Queue, if set, tells the requests waiting in the target's own
	// queue: a level then drains until it is empty too, not only until the
	// test's requests have ended (another client's requests may still
	// hold the engine).
	Queue QueueProbe
	// ConfigHash is the configuration's hash (config.Config.Hash), for
	// the run's provenance.
	ConfigHash string
	// Checkpoint, if set, is handed the run's partial results as each
	// level starts (for storage; it must not keep the run).
	Checkpoint func(*Run)
	// Validity, if set, judges the prober's own health over each level
	// (the daemon's --validity.* thresholds; the level's window is the
	// sustain): a level measured while the prober was the limit is marked
	// and left out of the conclusion, and the sweep stops raising load
	// there ("prober-bound at N clients: add shards"), but for one whose
	// clients only idled on a late prober (lowerBound). Nil judges none.
	Validity *validity.Config

	col         *Collector
	gpus        *gpuSource
	noStopRules bool // a soak judges them per window
	// judgeLevel, if set, replaces the judgement of the prober's health
	// over a level (judgeProber by Validity); openVerify and closedSweep,
	// if set, replace the open-loop levels of the search (openLevel) and
	// the closed-loop ones of the sweep (closedLevel): for tests.
	judgeLevel  func(*Level)
	openVerify  func(ctx context.Context, stage string, rate float64, why string) (*Level, error)
	closedSweep func(ctx context.Context, stage string, c int) (*Level, error)
	// above: a higher sweep level follows the one measured (enough);
	// leftShort: enough ended the last level's windows short of requests
	// because of above alone (more windows could have decided it);
	// short: the sweep levels so ended, which confirm may measure again.
	above     bool
	leftShort bool
	short     map[int]bool
	drainNote string // what the last drain left for its level's note
	// saturated: the sweep went past its knee on its own, so that its
	// peak is the open loop's ceiling (ceiling).
	saturated bool
	// boundLooks counts the running level's looks in a row that decided
	// it while the prober's delays could have changed that (settled).
	boundLooks int
	run        *Run
	start      time.Time
	level      int
	levels     int
	goodput    float64
	// took is what each stage's levels took, from one level's start to
	// the next's (drains and re-measurements included), for the time
	// left (estimate.go), the search's bisection levels apart from its
	// configured rates ("bisection", tookKey); levelKey and levelStart
	// the running level's.
	took map[string][]time.Duration
	// measuringAgain: the level starting measures a configured rate
	// again (search.go), one level more than the rates' count says.
	measuringAgain bool
	// lowerBounds: the sweep went on past a level the prober limited
	// whose rate is a lower bound of the target's (lowerBound); the
	// sweep levels after it are measured once.
	lowerBounds bool
	// searchStart is when the open-loop search started; capped says the
	// search's levels are capped at verify.max_duration's end (levelRoom),
	// each measurement of one, its retries too; now the clock the search
	// reads (nil: time.Now).
	searchStart time.Time
	capped      bool
	now         func() time.Time
	levelKey    string
	levelStart  time.Time
	// passStart is when the running pass started; passesLeft the cache
	// passes after it (1 in a cache: both test's cold pass).
	passStart  time.Time
	passesLeft int
}

// QueueProbe tells how many requests wait in a target's own queue, e.g.
// from its engine's metrics (vllm:num_requests_waiting).
type QueueProbe interface {
	Waiting(ctx context.Context) (int, error)
}

// errStopRule is the cause of an abort by a stop rule.
var errStopRule = errors.New("stop rule")

// plan implements procedure: "step test knee on target sim: sweep [1 2 4
// 8], windows 5s + 30s a level (up to 1m30s to decide); about 6m10s (up
// to 21m if every level takes its longest)", and where verify.max_steady
// differs, "(up to 6m0s to decide, 12m0s in the open-loop search)", and
// with verify.max_duration ", the search within 1h0m0s".
func (s *Step) plan() string {
	t := s.Test
	decide := t.Window.MaxSteadyTotal().String() + " to decide"
	if open := t.VerifyMaxSteady(); open != t.Window.MaxSteadyTotal() {
		decide += ", " + open.String() + " in the open-loop search"
	}
	if d := t.Verify.MaxDuration; d > 0 {
		decide += ", the search within " + time.Duration(d).String()
	}
	return fmt.Sprintf("step test %s on target %s: sweep %v, windows %s + %s a level (up to %s); %s", t.Name, s.Load.Target.Name,
		t.Sweep.Concurrency, time.Duration(t.Window.Warmup), time.Duration(t.Window.Steady), decide, EstimateStep(t, &s.Load.Target))
}

// Run runs the test until it ends or ctx is done (an abort: the partial
// results are kept). The test's loads are stopped when it returns.
func (s *Step) Run(ctx context.Context) *Run {
	t := s.Test
	s.start, s.passStart = time.Now(), time.Now()
	s.run = &Run{Summary: Summary{Test: t.Name, Kind: config.TestStep, Target: s.Load.Target.Name, Start: s.start}}
	// An estimate: the search may stop early, and the forecast adds up
	// to three levels.
	s.levels = 1 + len(t.Sweep.Concurrency) + t.Sweep.Refine + t.Verify.Levels() + 1
	begin(ctx, s.run, s.Manager, t, &s.Load, s.ConfigHash)
	s.col = s.Recorder.Start(t.Name)
	defer s.Recorder.Stop(t.Name)
	defer s.col.TrackStalls()()
	defer end(s.run, s.col)
	s.gpus = newGPUSource(s.Load.Target, s.Logger)
	defer s.gpus.close()
	canary := s.Recorder.WatchCanary(s.Load.Target.Name)
	defer func() {
		s.run.Canary = canary.Results()
		s.Recorder.StopWatch(s.Load.Target.Name, canary)
	}()
	defer func() {
		if err := s.Manager.Apply(t.Name, nil); err != nil {
			s.Logger.Debug("Stopping the test's loads", "test", t.Name, "err", err)
		}
		s.run.End = time.Now()
	}()
	s.run.Cache = t.Cache
	switch t.Cache {
	case config.CacheCold:
		s.Load.ColdCache = true
	case config.CacheBoth:
		// Cold first: a production pass first would leave the prefixes
		// it shares in the cache (the cold pass salts them anyway, but
		// its own requests then compete with nothing warm).
		s.levels *= 2
		s.Load.ColdCache = true
		s.passesLeft = 1
		verdict, reason := s.steps(ctx)
		s.passesLeft, s.passStart = 0, time.Now()
		s.run.Cold = s.takePass(config.CacheCold, verdict, reason)
		if verdict == VerdictAborted {
			s.run.Verdict, s.run.Reason = verdict, "cold-cache pass: "+reason
			return s.run
		}
		s.Load.ColdCache = false
	}
	verdict, reason := s.steps(ctx)
	s.run.measureCache()
	if c := s.run.Cold; c != nil {
		reason += "; cold cache: " + c.summary()
	}
	s.run.Verdict, s.run.Reason = verdict, reason
	return s.run
}

// takePass moves the stages measured so far out of the run into a pass of
// the cache mode, and resets the state the procedure keeps between its
// stages, for the next pass.
func (s *Step) takePass(cache, verdict, reason string) *CachePass {
	p := &CachePass{Cache: cache, Verdict: verdict, Reason: reason, Stages: s.run.Stages}
	p.measureCache()
	s.run.Stages = Stages{}
	s.above, s.leftShort, s.short, s.drainNote, s.goodput = false, false, nil, "", 0
	s.took, s.levelKey = nil, ""
	s.searchStart = time.Time{} // the next pass's search has its own verify.max_duration
	return p
}

// summary is the pass's outcome in a verdict's reason: "2.88 req/s
// verified open loop (attained 100.0% [97.1, 100.0] of 173; pass, 0.0% of
// prompt tokens cached)", or its verdict and reason when it verified none.
func (p *CachePass) summary() string {
	share := ""
	if p.CachedShare != nil {
		share = fmt.Sprintf(", %.1f%% of prompt tokens cached", 100**p.CachedShare)
	}
	if v := p.VerifiedRate(); v != nil && *v > 0 {
		// Its level's attainment, interval and sample size, as every
		// capacity is stated.
		if l := p.VerifiedLevel(*v); l != nil {
			return fmt.Sprintf("%.3g req/s verified open loop (%s; %s%s)", *v, attainmentText(l), p.Verdict, share)
		}
	}
	return fmt.Sprintf("%s: %s%s", p.Verdict, p.Reason, share)
}

// VerifiedLevel is the verification level at the verified rate: stated
// at its offered rate, or in a schema-1 run (no decisions) at its
// intended one; nil when none is.
func (st *Stages) VerifiedLevel(rate float64) *Level {
	var out *Level
	for i := range st.Verify {
		l := &st.Verify[i]
		if l.Met && (l.Decision == "" && l.IntendedRate == rate || l.Decision != "" && l.OfferedRate == rate) {
			out = l
		}
	}
	return out
}

// Levels returns the stages' levels in the order they ran: baseline,
// sweep (its refinements among it by their start), verification, burst,
// hot tenant.
func (st *Stages) Levels() []*Level {
	var out []*Level
	if st.Baseline != nil {
		out = append(out, st.Baseline)
	}
	for i := range st.Sweep {
		out = append(out, &st.Sweep[i])
	}
	for i := range st.Verify {
		out = append(out, &st.Verify[i])
	}
	for _, l := range []*Level{st.Burst, st.HotTenant} {
		if l != nil {
			out = append(out, l)
		}
	}
	slices.SortStableFunc(out, func(a, b *Level) int { return a.Start.Compare(b.Start) })
	return out
}

// measureCache sets the stages' cached share and engine hit ratio from
// their levels, the hot tenant's excepted.
//
// The cached share is the prompt tokens the server reported cached over
// those it reported, summed over the levels whose server reported any:
// 3,000 of 40,000 tokens are 7.5%. The engine hit ratio is the levels'
// prefix-cache counters' increases summed. Each is nil when no level
// told it.
func (st *Stages) measureCache() {
	var cached, prompt int
	var sum EngineQueue
	for _, l := range st.Levels() {
		if l == st.HotTenant {
			continue // its prompts are the hot tenant's, not the scenario's mix
		}
		if l.Server != nil && l.Server.CachedShare != nil {
			cached += l.Server.CachedTokens
			prompt += l.Server.PromptTokens
		}
		if l.EngineQueue != nil {
			sum.PrefixCacheHits += l.EngineQueue.PrefixCacheHits
			sum.PrefixCacheQueries += l.EngineQueue.PrefixCacheQueries
		}
	}
	st.CachedShare = nil
	if prompt > 0 {
		share := float64(cached) / float64(prompt)
		st.CachedShare = &share
	}
	st.EngineHitRatio = sum.HitRatio()
}

// steps runs the procedure (the seed's steps 2 to 5) and returns the
// verdict with its reason: the baseline, then sweep, refine, verify and
// burst, each a method below. A stage that decides the verdict ends it.
func (s *Step) steps(ctx context.Context) (string, string) {
	// Step 2: the baseline, one request at a time.
	base, err := s.baseline(ctx)
	if base != nil {
		s.run.Baseline = base
	}
	if err != nil {
		return VerdictAborted, abortReason(ctx, err)
	}
	if base.Decided() == DecisionMissed && base.ProberBound() {
		// One request at a time missed while the prober was the limit,
		// after its retries: that says nothing of the target.
		return VerdictInconclusive, fmt.Sprintf("not concluded: %sthe baseline missed the objective while %s", proberCause(base.Prober.Diagnosis), proberBoundReason(base))
	}
	if n := base.Outcomes[prober.OutcomeConnectError]; n > 0 && n == base.Sent {
		// Not one request connected: the target never answered, which
		// says nothing of what it can serve. An error, not a verdict.
		return VerdictAborted, fmt.Sprintf("the target never answered: all %d baseline requests failed to connect (connect_error): is %s up, and reachable from here?", n, s.Load.Target.URL)
	}
	if base.Decided() == DecisionMissed {
		return VerdictInfeasible, fmt.Sprintf("one request at a time already misses the objective: %s", missedObjectives(base))
	}
	// A baseline too short to decide (10 requests all good are
	// [72%, 100%]) does not stop the test: the sweep's levels decide.

	// Steps 3 and 4: the closed loop.
	end, err := s.sweep(ctx)
	if err == nil {
		err = s.refine(ctx)
	}
	if err == nil {
		err = s.confirm(ctx)
	}
	if err != nil {
		return VerdictAborted, abortReason(ctx, err)
	}
	// The knee is the target's: levels where the prober was the limit
	// say nothing of it.
	var measured []Level
	for _, l := range s.run.Sweep {
		if !l.ProberBound() {
			measured = append(measured, l)
		}
	}
	s.run.Knee = knee(measured)
	good, _ := s.bounds()
	if good == 0 {
		return s.noCapacity(end.capped, cmp.Or(end.proberBound, end.passed))
	}
	s.implied(good)
	capLevel := s.at(good)
	s.run.Capacity = &Capacity{Concurrency: good, Rate: capLevel.CompletedRate, Goodput: capLevel.Goodput}
	if end.limited != "" && good == s.run.Sweep[len(s.run.Sweep)-1].Concurrency {
		s.run.Capacity.LimitedBy = end.limited
	}

	// Step 5: the open loop. The closed loop's peak is its ceiling where
	// the sweep went past the knee on its own: not where it stopped at
	// a cap, max_rate or the prober.
	s.saturated = s.run.Knee != nil && s.run.Knee.Reached && end.limited == "" && end.proberBound == "" && end.passed == "" && !strings.HasPrefix(end.capped, "capped by")
	verified, verdict, reason := s.verify(ctx, capLevel)
	if verified == nil {
		return verdict, reason
	}
	fail, forecast := s.run.Capacity.Forecast.Verdict()
	if verdict, reason, ok := s.burst(ctx, verified); !ok {
		return verdict, reason
	}
	hot, err := s.hotTenant(ctx, verified)
	s.run.HotTenant = hot
	if err != nil {
		return VerdictAborted, abortReason(ctx, err)
	}
	reason = fmt.Sprintf("%.3g req/s verified open loop (%s; %.3g good req/s)", verified.OfferedRate, attainmentText(verified), verified.Goodput)
	reason = withBound(reason, s.run.Capacity)
	reason += fmt.Sprintf("; closed loop: %s, %.3g req/s", clients(good), capLevel.CompletedRate)
	switch {
	case end.capped != "":
		reason += "; the sweep ended early: " + end.capped
	case end.passed != "":
		reason += "; the sweep went on past a level whose clients waited on the prober, its completed rate a lower bound: " + end.passed
	}
	if forecast != "" {
		reason += "; " + forecast
	}
	if hot != nil && hot.HotTenant != nil {
		reason += "; hot tenant: " + hot.HotTenant.text()
	}
	if fail {
		return VerdictFail, forecast + "; " + strings.TrimPrefix(reason, forecast+"; ")
	}
	return VerdictPass, reason
}

// report tells the progress at the start of a level of c clients or rate
// req/s.
func (s *Step) report(stage string, c int, rate float64) {
	now := time.Now()
	if s.levelKey != "" {
		if s.took == nil {
			s.took = map[string][]time.Duration{}
		}
		s.took[s.levelKey] = append(s.took[s.levelKey], now.Sub(s.levelStart))
	}
	s.levelKey, s.levelStart = stage, now
	s.level++
	s.levels = max(s.levels, s.level)
	if s.Checkpoint != nil {
		s.Checkpoint(s.run)
	}
	if s.Progress == nil {
		return
	}
	s.Progress(Progress{Stage: stage, Concurrency: c, Rate: rate, Level: s.level, Levels: s.levels, Elapsed: time.Since(s.start),
		Remaining: s.timeLeft(stage), RemainingMax: s.timeMost(stage), Goodput: s.goodput})
}

// abortReason says why a run was aborted.
func abortReason(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return "aborted: " + context.Cause(ctx).Error()
	}
	return err.Error()
}

// missedObjectives lists the scenarios of a level below their objective.
func missedObjectives(l *Level) string {
	if l == nil {
		return "no level ran"
	}
	if l.Counted == 0 {
		return "no request was counted"
	}
	out := ""
	for _, sc := range l.Scenarios {
		if sc.Met {
			continue
		}
		if out != "" {
			out += "; "
		}
		interval := ""
		if iv := sc.Interval; iv != nil {
			interval = fmt.Sprintf(" [%.1f, %.1f] of %d", lower(iv), upper(iv), iv.N)
		}
		out += fmt.Sprintf("%s attained %.1f%%%s (objective %.1f%%)", sc.Scenario, 100*sc.Attainment, interval, 100*sc.Objective)
		for _, name := range config.SLONames {
			if a, ok := sc.SLOAttainment[name]; ok && a < sc.Objective {
				out += fmt.Sprintf(", %s %.1f%%", name, 100*a)
			}
		}
	}
	if f := failedText(l); f != "" {
		// A request that failed misses every SLO: say it failed, and
		// how, before a reader looks for slow tokens.
		out += "; " + f
	}
	return out
}

// failedText says how many of a level's counted requests failed, and
// how: "4 of 10 failed (http_429 4)"; "" when none did.
func failedText(l *Level) string {
	failed, kinds := 0, []string{}
	for _, o := range slices.Sorted(maps.Keys(l.Outcomes)) {
		if n := l.Outcomes[o]; n > 0 && o != prober.OutcomeOK && o != prober.OutcomeCancelled && o != prober.OutcomeShutdown {
			failed += n
			kinds = append(kinds, fmt.Sprintf("%s %d", o, n))
		}
	}
	if failed == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d failed (%s)", failed, l.Counted, strings.Join(kinds, ", "))
}
