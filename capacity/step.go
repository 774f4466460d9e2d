package capacity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
	"github.com/sloprober/sloprober/workload"
	"gonum.org/v1/gonum/stat/distuv"
)

// kneeGain is the least growth of goodput, relative to the growth of
// clients, from one sweep level to the next that still counts as growing:
// 0.1. The knee is the level after which goodput grows less: doubling 8 to
// 16 clients for 10.4 instead of 10 good req/s is +4% for +100%.
const kneeGain = 0.10

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
	// Goodput of the last measured level, good req/s.
	Goodput float64
}

// LoadName names the level's load: "6.25 req/s" open loop, "4 clients"
// closed loop.
func (p Progress) LoadName() string {
	if p.Rate > 0 {
		return fmt.Sprintf("%.3g req/s", p.Rate)
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
	// there ("prober-bound at N clients: add shards"). Nil judges none.
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
	run       *Run
	start     time.Time
	level     int
	levels    int
	goodput   float64
}

// QueueProbe tells how many requests wait in a target's own queue, e.g.
// from its engine's metrics (vllm:num_requests_waiting).
type QueueProbe interface {
	Waiting(ctx context.Context) (int, error)
}

// errStopRule is the cause of an abort by a stop rule.
var errStopRule = errors.New("stop rule")

// plan implements procedure.
func (s *Step) plan() string {
	t := s.Test
	return fmt.Sprintf("step test %s on target %s: sweep %v, windows %s + %s a level", t.Name, s.Load.Target.Name,
		t.Sweep.Concurrency, time.Duration(t.Window.Warmup), time.Duration(t.Window.Steady))
}

// Run runs the test until it ends or ctx is done (an abort: the partial
// results are kept). The test's loads are stopped when it returns.
func (s *Step) Run(ctx context.Context) *Run {
	t := s.Test
	s.start = time.Now()
	s.run = &Run{Summary: Summary{Test: t.Name, Kind: config.TestStep, Target: s.Load.Target.Name, Start: s.start}}
	// An estimate: the search may stop early, and the forecast adds up
	// to three levels.
	s.levels = 1 + len(t.Sweep.Concurrency) + t.Sweep.Refine + t.Verify.Levels() + 1
	begin(ctx, s.run, s.Manager, t, &s.Load, s.ConfigHash)
	s.col = s.Recorder.Start(t.Name)
	defer s.Recorder.Stop(t.Name)
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
		verdict, reason := s.steps(ctx)
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
		return VerdictInconclusive, fmt.Sprintf("not concluded: the baseline missed the objective while %s", proberBoundReason(base))
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
		return s.noCapacity(end.capped, end.proberBound)
	}
	s.implied(good)
	capLevel := s.at(good)
	s.run.Capacity = &Capacity{Concurrency: good, Rate: capLevel.CompletedRate, Goodput: capLevel.Goodput}
	if end.limited != "" && good == s.run.Sweep[len(s.run.Sweep)-1].Concurrency {
		s.run.Capacity.LimitedBy = end.limited
	}

	// Step 5: the open loop.
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
	if c := s.run.Capacity; c.Bound > 0 {
		reason += fmt.Sprintf(", below %.3g req/s (%s)", c.Bound, c.BoundDecision)
	}
	reason += fmt.Sprintf("; closed loop: %s, %.3g req/s", clients(good), capLevel.CompletedRate)
	if end.capped != "" {
		reason += "; the sweep ended early: " + end.capped
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

// sweepEnd is why a sweep ended before its last level, if it did.
type sweepEnd struct {
	// capped says why, for the verdict's reason; limited names the
	// test's max_rate when the clients reached it; proberBound the
	// level the prober limited.
	capped, limited, proberBound string
}

// sweep runs the closed-loop levels (the seed's step 3), in order of
// concurrency, into the run's Sweep. It ends after two levels in a row
// against the objectives (goodput has stopped growing by then, and more
// load only overloads the target), at a level a stop rule ended (a missed one: the
// capacity below it stands), at a level the global caps refuse, at one
// the prober limited (more load would measure the prober), or at one
// whose clients reached the test's max_rate (goodput flattening there is
// the cap, not the knee). Its error aborts the run.
func (s *Step) sweep(ctx context.Context) (sweepEnd, error) {
	var end sweepEnd
	missedInRow := 0
	defer func() { s.above = false }()
	for i, c := range s.Test.Sweep.Concurrency {
		s.above = i < len(s.Test.Sweep.Concurrency)-1
		if s.short == nil {
			s.short = map[int]bool{}
		}
		l, err := s.closedLevel(ctx, "sweep", c)
		s.short[c] = s.leftShort
		if errors.Is(err, errCapped) {
			end.capped = err.Error()
			return end, nil
		}
		if errors.Is(err, errStopRule) && ctx.Err() == nil {
			s.keep(l)
			end.capped = fmt.Sprintf("a stop rule at %s (%v)", clients(c), err)
			return end, nil
		}
		s.keep(l)
		if err != nil {
			return end, err
		}
		if l.ProberBound() {
			end.proberBound = proberBoundReason(l)
			end.capped = end.proberBound
			return end, nil
		}
		if l.CompletedRate >= 0.95*s.MaxRate {
			// The clients are paced at MaxRate.
			l.Note = strings.TrimSpace(l.Note + " limited by max_rate")
			end.limited = fmt.Sprintf("max_rate %g req/s at %s (the capacity may be higher)", s.MaxRate, clients(c))
			end.capped = "capped by " + end.limited
			s.run.Sweep[len(s.run.Sweep)-1].Note = l.Note
			return end, nil
		}
		// Two levels in a row against the objectives (missed, or
		// undecided below them) end the sweep. A level undecided with
		// its attainment at or above them, for want of requests (a
		// client or two of a slow target: 23 requests all good in 30 s
		// are [80.0%, 100%] at three looks), does not: the levels above
		// it decide.
		if missedInRow = 0; against(l) {
			missedInRow = 1
			if n := len(s.run.Sweep); n >= 2 && against(&s.run.Sweep[n-2]) {
				missedInRow = 2
			}
		}
		if missedInRow == 2 {
			return end, nil
		}
	}
	return end, nil
}

// confirm measures again, with its extensions, the highest sweep level
// below the first one against the objectives when it was left undecided
// for want of requests: the sweep does not extend such a level while a
// higher one follows (enough), and without a level that met above it
// there is no capacity (bounds). The highest is measured again because a
// level that meets implies every one below it. One that comes out
// against the objectives leaves the next lower one to confirm; one still
// short of requests ends it (a lower level draws fewer requests in the
// same windows). Worked numbers, without refinement: 1, 2 and 4 clients
// all good and undecided, 8 missed, 16 missed: 4 clients are measured
// again, 90 requests then 180, met; the capacity is 4 clients, 1 and 2
// implied.
func (s *Step) confirm(ctx context.Context) error {
	for {
		top := s.unconfirmed()
		if top == nil || !s.short[top.Concurrency] {
			return nil // none, or measured with its extensions already
		}
		s.short[top.Concurrency] = false
		l, err := s.closedLevel(ctx, "sweep", top.Concurrency)
		if errors.Is(err, errCapped) {
			return nil
		}
		remeasured(top, l)
		if err != nil && (!errors.Is(err, errStopRule) || ctx.Err() != nil) {
			return err
		}
		if l == nil || l.ProberBound() || shortOfRequests(l) {
			return nil
		}
	}
}

// remeasured puts again, a level measured again to decide it, in the
// place of first, and says so in its note; one that did not run (the
// caps) or measured the prober leaves first as it was, with a note of
// why (confirm, and the open-loop search's twin).
func remeasured(first, again *Level) {
	switch {
	case again == nil:
	case again.Prober == nil:
		first.Note = addNote(first.Note, "measured again, "+strings.TrimPrefix(again.Note, "not run: "))
	case again.ProberBound():
		first.AgainProberBound = proberBoundReason(again)
		first.Note = addNote(first.Note, "measured again, prober-bound: "+first.AgainProberBound)
	default:
		again.Note = addNote(again.Note, "measured again to decide it (first: "+attainmentText(first)+")")
		*first = *again
	}
}

// unconfirmed is the highest sweep level below the first one against the
// objectives that was left short of requests with no level above it that
// met (nil: none). A level undecided with misses but its attainment at or
// above the objectives (97.5% [92.8, 99.1] of 314) is evidence neither
// way: the level short of requests below it is the one to confirm.
func (s *Step) unconfirmed() *Level {
	var top *Level
	for i := range s.run.Sweep {
		l := &s.run.Sweep[i]
		switch {
		case l.ProberBound():
		case against(l):
			return top
		case l.Decided() == DecisionMet:
			top = nil // it implies the levels below it
		case shortOfRequests(l):
			top = l
		}
	}
	return top
}

// refine bisects between the last level that met the objectives (or was
// left short of requests, every one good) and the first that did not
// (the seed's step 4), up to sweep.refine levels, into the run's Sweep; a
// level a stop rule ended is a missed one. It stops early when the two
// are adjacent, the caps refuse a level, or a level was prober-bound (the
// bounds would not move). A refinement level that meets implies the
// level short of requests below it, which confirm then need not measure
// again: 8 clients short (107 requests, all good), 16 missed, 12 met.
// Its error aborts the run.
func (s *Step) refine(ctx context.Context) error {
	for range s.Test.Sweep.Refine {
		good, bad := s.refineBounds()
		if good == 0 || bad == 0 || bad-good <= 1 {
			return nil
		}
		l, err := s.closedLevel(ctx, "refine", (good+bad)/2)
		if errors.Is(err, errCapped) {
			return nil
		}
		s.keep(l)
		if err != nil && (!errors.Is(err, errStopRule) || ctx.Err() != nil) {
			return err
		}
		if l.ProberBound() {
			return nil
		}
	}
	return nil
}

// burst runs verify.burst (the seed's step 5, its bursts): factor times
// a rate for a while, then that rate until the backlog has drained; the
// rate is the forecast peak per replica where the target has a forecast
// it holds, else the verified one. It reports false with the verdict and
// its reason when the run ends there: aborted, or failed because the
// backlog did not drain within verify.drain_within. A burst factor of 1
// or less, or no duration, runs none.
func (s *Step) burst(ctx context.Context, verified *Level) (string, string, bool) {
	b := &s.Test.Verify.Burst
	if b.Factor <= 1 || b.For <= 0 {
		return "", "", true
	}
	from := verified.OfferedRate
	if fc := s.run.Capacity.Forecast; fc != nil && fc.Holds {
		from = fc.Peak.Rate
	}
	l, err := s.burstLevel(ctx, from, verified.E2E.P95)
	s.run.Burst = l
	if err != nil {
		return VerdictAborted, abortReason(ctx, err), false
	}
	if within := time.Duration(s.Test.Verify.DrainWithin); l.DrainSeconds > within.Seconds() {
		return VerdictFail, fmt.Sprintf("the backlog of a %gx burst for %s did not drain within %s (%.1fs)", b.Factor, time.Duration(b.For), within, l.DrainSeconds), false
	}
	return "", "", true
}

// noCapacity is the verdict of a sweep and refinement in which no level
// met the objectives with no level below it against them: fail
// when the lowest level the prober measured validly missed; inconclusive
// when it was undecided, or every level was prober-bound after its
// retries.
func (s *Step) noCapacity(capped, proberBound string) (string, string) {
	if len(s.run.Sweep) == 0 && capped != "" {
		return VerdictAborted, "no sweep level could run: " + capped
	}
	for _, l := range s.run.Sweep {
		if l.ProberBound() {
			continue
		}
		if l.Decided() == DecisionMissed {
			// The lowest level the prober did not limit missed: the
			// target's failure.
			reason := "no sweep level met the objectives: " + missedObjectives(&l)
			if proberBound != "" {
				reason += "; the sweep ended early: " + proberBound
			}
			return VerdictFail, reason
		}
		break // undecided: the capacity may lie there
	}
	if proberBound != "" {
		return VerdictInconclusive, "not concluded: no level measured the target validly: " + proberBound
	}
	return VerdictInconclusive, fmt.Sprintf("not concluded: no sweep level was decided within window.max_steady: %s %s",
		s.lowest().LoadName(), attainmentText(s.lowest()))
}

// keep adds a sweep level, in order of concurrency.
func (s *Step) keep(l *Level) {
	if l == nil {
		return
	}
	s.run.Sweep = append(s.run.Sweep, *l)
	slices.SortStableFunc(s.run.Sweep, func(a, b Level) int { return a.Concurrency - b.Concurrency })
}

// bounds returns the highest concurrency that met the objectives with no
// level below it against them (missed, or undecided below them), and the
// lowest level above it that did not meet (0: none). A level undecided
// with nothing against it (every request good, too few to show it; or
// misses, its attainment still at or above the objectives) does not break
// the run of levels below a higher one that met: attainment does not rise
// with load, the assumption the sweep's bisection and the open-loop
// search make too (searchBounds). Worked numbers: 1 client attained 100%
// [80.0, 100] of 23, 2 clients 100% [96.2, 100] of 147, 4 clients missed:
// good is 2 and bad 4; 1 client's result stands as measured, its level
// implied by 2's (Level.ImpliedBy).
func (s *Step) bounds() (good, bad int) {
	return s.boundsWith(func(l *Level) bool { return l.Decided() == DecisionMet })
}

// refineBounds are bounds with a level short of requests (every one good)
// taken as one that met: the refinement bisects above it, and a
// refinement level that meets implies it (8 clients short, 16 missed:
// 12 clients).
func (s *Step) refineBounds() (good, bad int) {
	return s.boundsWith(func(l *Level) bool { return l.Decided() == DecisionMet || shortOfRequests(l) })
}

// boundsWith is bounds with met telling the levels that count as met.
func (s *Step) boundsWith(met func(*Level) bool) (good, bad int) {
	for i := range s.run.Sweep {
		l := &s.run.Sweep[i]
		switch {
		case l.ProberBound():
			continue // it tells nothing of the target
		case against(l):
			if bad == 0 {
				bad = l.Concurrency
			}
			return good, bad
		case met(l):
			good, bad = l.Concurrency, 0
		case bad == 0:
			bad = l.Concurrency
		}
	}
	return good, bad
}

// implied marks the levels below the capacity left short of requests
// (every one good): the capacity's level implies them (bounds).
func (s *Step) implied(good int) {
	for i := range s.run.Sweep {
		if l := &s.run.Sweep[i]; l.Concurrency < good && !l.ProberBound() && shortOfRequests(l) {
			l.ImpliedBy = good
		}
	}
}

func (s *Step) at(c int) *Level {
	for i := range s.run.Sweep {
		if s.run.Sweep[i].Concurrency == c {
			return &s.run.Sweep[i]
		}
	}
	return nil
}

func (s *Step) lowest() *Level {
	if len(s.run.Sweep) == 0 {
		return s.run.Baseline
	}
	return &s.run.Sweep[0]
}

// errCapped ends a sweep at a level the global caps do not allow.
var errCapped = errors.New("capped")

type cappedError struct{ err error }

func (e cappedError) Error() string { return "capped by " + e.err.Error() }
func (e cappedError) Is(target error) bool {
	return target == errCapped
}

// baseline sends baseline.requests requests one at a time, all measured:
// a single client has nothing to warm up. Measured while the prober was
// the limit, it is measured again, as any level (measure).
func (s *Step) baseline(ctx context.Context) (*Level, error) {
	s.report("baseline", 1, 0)
	var remeasured []string
	for attempt := 0; ; attempt++ {
		l, err := s.baselineOnce(ctx)
		l.Remeasured = remeasured
		if err != nil || !l.ProberBound() || attempt >= s.Test.Retries {
			return l, err
		}
		remeasured = append(remeasured, fmt.Sprintf("%s (%s)", l.Prober.Diagnosis, strings.Join(l.Prober.Invalid, ", ")))
		if err := s.waitValid(ctx); err != nil {
			return l, err
		}
	}
}

// baselineSlack is what a baseline request may take beyond the target's
// timeout: its sending, and the closed loop's next send.
const baselineSlack = 5 * time.Second

// baselineOnce is one measurement of the baseline.
func (s *Step) baselineOnce(ctx context.Context) (*Level, error) {
	l := &Level{Stage: "baseline", Concurrency: 1}
	s.col.ResetLevel()
	n := s.Test.Baseline.Requests
	w := s.col.OpenFirst(time.Now(), n)
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{s.closedSpec(1)}); err != nil {
		s.col.Close(w, time.Now())
		return l, err
	}
	queue, gpus := sampleQueue(ctx, s.Queue), s.gpus.start(ctx)
	// One request at a time, each ended by the target's timeout at the
	// latest and sent no sooner than the test's max_rate allows: 10
	// requests of a 60 s timeout end within 10 x 65 s, the 5 s a
	// request's sending and the loop's next send (at a max_rate of 0.01
	// req/s, within 10 x 105 s). Past that, the load is not sending: an
	// abort that says so, not a test that never ends.
	each := time.Duration(s.Load.Target.Timeout)
	if s.MaxRate > 0 {
		each = max(each, time.Duration(float64(time.Second)/s.MaxRate))
	}
	limit := time.Duration(n) * (each + baselineSlack)
	err := s.watch(ctx, limit, func() bool {
		finished, _, _ := s.col.Level()
		return finished >= n
	})
	if errors.Is(err, errTimedOut) {
		finished, _, _ := s.col.Level()
		err = fmt.Errorf("the baseline's %d requests one at a time did not end within %s (each within the target's timeout of %s, or the test's max_rate): %d ended", n, limit, time.Duration(s.Load.Target.Timeout), finished)
	}
	s.col.Close(w, time.Now())
	l.EngineQueue, l.GPU = queue.stop(), gpus.Stop()
	drain, derr := s.drain(ctx, s.closedSpec(0))
	if err == nil {
		err = derr
	}
	// A baseline of fewer requests than window.min_requests says so,
	// like any level.
	s.summarize(l, drain, s.Test.Window.MinRequests, w)
	return l, err
}

// closedLevel runs one closed-loop level: warm-up, steady window, then
// the clients stop and the level waits for its requests to end.
func (s *Step) closedLevel(ctx context.Context, stage string, c int) (*Level, error) {
	s.report(stage, c, 0)
	if s.closedSweep != nil {
		return s.closedSweep(ctx, stage, c)
	}
	l := &Level{Stage: stage, Concurrency: c}
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{s.closedSpec(c)}); err != nil {
		if errors.Is(err, prober.ErrOverCaps) {
			return nil, cappedError{err}
		}
		return nil, err
	}
	return l, s.measure(ctx, l, s.closedSpec(c), s.closedSpec(0))
}

// openLevel runs one open-loop (Poisson) level at rate; why says what
// the search runs it for.
func (s *Step) openLevel(ctx context.Context, stage string, rate float64, why string) (*Level, error) {
	s.report(stage, 0, rate)
	l := &Level{Stage: stage, IntendedRate: rate, Why: why}
	spec := s.openSpec(rate)
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{spec}); err != nil {
		l.Note = "not run: capped by " + err.Error()
		return l, nil
	}
	stop := spec
	stop.Paused = true
	return l, s.measure(ctx, l, spec, stop)
}

// measure measures a level whose load (run) is applied: its warm-up and
// steady window, extended while its decision is inconclusive, then stop
// (the load with nothing more to send) and the wait for its requests in
// flight to end. A measurement taken while the prober was the limit is
// thrown away and taken again, up to the test's retries, once the prober
// is valid again (waitValid); the level records why (Remeasured).
func (s *Step) measure(ctx context.Context, l *Level, run, stop config.LoadSpec) error {
	for attempt := 0; ; attempt++ {
		err := s.measureOnce(ctx, l, stop)
		if err != nil || !l.ProberBound() || attempt >= s.Test.Retries {
			return err
		}
		// The prober-bound measurement stays the level's until the
		// next one replaces it: a run stopped meanwhile keeps it.
		why := fmt.Sprintf("%s (%s)", l.Prober.Diagnosis, strings.Join(l.Prober.Invalid, ", "))
		s.Logger.Info("Measuring a level again: the prober was the limit", "test", s.Test.Name, "level", l.LoadName(), "why", why)
		if err := s.waitValid(ctx); err != nil {
			return err
		}
		if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{run}); err != nil {
			if errors.Is(err, prober.ErrOverCaps) {
				// The caps changed meanwhile (a reload): the level
				// stays as it was measured.
				l.Note = addNote(l.Note, "not measured again: capped by "+err.Error())
				return nil
			}
			return err
		}
		*l = Level{Stage: l.Stage, Concurrency: l.Concurrency, IntendedRate: l.IntendedRate, Why: l.Why,
			Remeasured: append(l.Remeasured, why)}
	}
}

// measureOnce is one measurement of a level: see measure.
func (s *Step) measureOnce(ctx context.Context, l *Level, stop config.LoadSpec) error {
	s.col.ResetLevel()
	s.leftShort = false
	steady := time.Duration(s.Test.Window.Steady)
	err := s.watch(ctx, time.Duration(s.Test.Window.Warmup), nil)
	queue, gpus := sampleQueue(ctx, s.Queue), s.gpus.start(ctx)
	ws := []*Window{s.col.Open(time.Time{})}
	if err == nil {
		err = s.watch(ctx, steady, nil)
	}
	for err == nil && len(ws) < s.Test.Window.MaxSteadyWindows() {
		// The load goes on into the next window while the last one's
		// requests end; if they decide the level, that window is not
		// needed.
		last := ws[len(ws)-1]
		next := s.col.Roll(last)
		ended := s.watch(ctx, time.Duration(s.Load.Target.Timeout)+5*time.Second, func() bool { return s.col.Ended(last) })
		if ended != nil && !errors.Is(ended, errTimedOut) {
			s.col.Discard(next, time.Now())
			err = ended
			break
		}
		if ended == nil && s.enough(ws) {
			s.col.Discard(next, time.Now())
			break
		}
		ws = append(ws, next)
		err = s.watch(ctx, steady-time.Since(next.Start), nil)
	}
	if w := ws[len(ws)-1]; w.End.IsZero() {
		s.col.Close(w, time.Now())
	}
	l.EngineQueue, l.GPU = queue.stop(), gpus.Stop()
	drain, derr := s.drain(ctx, stop)
	if err == nil {
		err = derr
	}
	s.summarize(l, drain, s.Test.Window.MinRequests, ws...)
	l.Extensions = len(ws) - 1
	if errors.Is(err, errStopRule) {
		// Plainly broken, whatever its window holds (a rule that fires
		// in the warm-up leaves it empty): missed.
		l.Note = err.Error()
		l.Decision, l.Met = DecisionMissed, false
	}
	return err
}

// enough reports whether windows whose requests have ended need no
// extension: they decide their level (or the prober limited it: it is
// measured again instead, and more of the same window would measure the
// prober), or every request was good but too few to decide, and either
// the windows left could not bring enough of them (undecidable) or a
// higher sweep level follows (s.above), whose requests decide more: a
// level that meets above implies this one (bounds), and one that does not
// leaves this one to confirm.
func (s *Step) enough(ws []*Window) bool {
	var l Level
	looks := s.Test.Window.MaxSteadyWindows()
	summarize(&l, &s.Load, s.col.Data(ws...), 0, s.batch(), lookConfidence(looks))
	if s.judgeLevel == nil {
		judgeProber(&l, s.Validity, "")
	}
	if l.Decision != DecisionInconclusive || l.ProberBound() {
		return true
	}
	if !shortOfRequests(&l) {
		return false
	}
	if undecidable(&l, len(ws), looks) {
		return true
	}
	s.leftShort = s.above
	return s.above
}

// shortOfRequests reports whether an inconclusive level is so for want of
// requests alone: every scenario it left undecided counted requests, all
// good.
func shortOfRequests(l *Level) bool {
	if l.Decision != DecisionInconclusive || l.Counted == 0 {
		return false
	}
	for _, sc := range l.Scenarios {
		if sc.Decision == DecisionInconclusive && (sc.Counted == 0 || sc.Good < sc.Counted) {
			return false
		}
	}
	return true
}

// undecidable reports whether a level short of requests after windows of
// its looks would still be by its last look, at the rate its requests
// came (its upper end). Worked numbers: a client of a slow target
// completes 23 requests in a 30 s window, all good; at most about 34 a
// window, three windows would hold 101, whose interval at three looks is
// [94.6%, 100%], short of 95%: the level is not extended. 45 requests in
// the first window would be up to 178 by the third: extended.
func undecidable(l *Level, windows, looks int) bool {
	if !shortOfRequests(l) || windows <= 0 {
		return false
	}
	q := distuv.UnitNormal.Quantile(1 - (1-lookConfidence(looks))/2)
	for _, sc := range l.Scenarios {
		if sc.Decision != DecisionInconclusive {
			continue
		}
		// Every request good: Wilson's lower end is n / (n + q^2). The
		// count to come is projected from the upper end of the count
		// so far (Poisson, about two deviations): a short window that
		// drew 4 arrivals where 8.5 were due must not decide that the
		// level can never be shown.
		c := float64(sc.Counted)
		n := (c + 2*math.Sqrt(c) + 1) * float64(looks) / float64(windows)
		if n/(n+q*q) >= sc.Objective {
			return false
		}
	}
	return true
}

// batch is the length of a level's batches for its attainment interval:
// a tenth of the steady window.
func (s *Step) batch() time.Duration {
	return time.Duration(s.Test.Window.Steady) / batchesPerWindow
}

// burstLevel runs rate, then Factor times it for For, then rate again
// until the requests in flight are back to what rate keeps (Little's law:
// rate x e2eP95, the E2E P95 at the verified rate, at least 1): the drain
// time is from the end of the burst until then.
func (s *Step) burstLevel(ctx context.Context, rate, e2eP95 float64) (*Level, error) {
	b := s.Test.Verify.Burst
	s.report("burst", 0, rate*b.Factor)
	l := &Level{Stage: "burst", IntendedRate: rate * b.Factor}
	if l.IntendedRate > s.MaxRate {
		l.Note = fmt.Sprintf("capped by max_rate %g req/s: the burst is %g req/s", s.MaxRate, s.MaxRate)
		l.IntendedRate = s.MaxRate
	}
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{s.openSpec(rate)}); err != nil {
		return l, err
	}
	tl := s.sampleInFlight()
	defer func() { l.Timeline = tl.stop() }()
	s.col.ResetLevel()
	if err := s.watch(ctx, time.Duration(s.Test.Window.Warmup), nil); err != nil {
		return l, err
	}
	tl.mark(&tl.t.BurstStart)
	w := s.col.Open(time.Now())
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{s.openSpec(l.IntendedRate)}); err != nil {
		return l, err
	}
	err := s.watch(ctx, time.Duration(b.For), nil)
	s.col.Close(w, time.Now())
	if err != nil {
		return l, err
	}
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{s.openSpec(rate)}); err != nil {
		return l, err
	}
	tl.mark(&tl.t.BurstEnd)
	normal := max(1, int(math.Ceil(rate*e2eP95)))
	tl.t.Normal, tl.t.DrainWithin = normal, time.Duration(s.Test.Verify.DrainWithin).Seconds()
	end := time.Now()
	limit := time.Duration(s.Test.Verify.DrainWithin) + time.Duration(s.Load.Target.Timeout)
	drained := s.watch(ctx, limit, func() bool { return s.col.InFlight() <= normal })
	l.DrainSeconds = time.Since(end).Seconds()
	if drained == nil {
		tl.mark(&tl.t.Drained)
	}
	if drained != nil && !errors.Is(drained, errTimedOut) {
		return l, drained
	}
	stop := s.openSpec(rate)
	stop.Paused = true
	_, derr := s.drain(ctx, stop)
	drain := l.DrainSeconds
	s.summarize(l, 0, 0, w)
	l.DrainSeconds = drain
	return l, derr
}

// closedSpec is the test's load as c closed-loop clients.
func (s *Step) closedSpec(c int) config.LoadSpec {
	spec := s.Load
	spec.Arrival, spec.Clients, spec.MaxRate = config.ArrivalClosed, c, s.MaxRate
	return spec
}

// openSpec is the test's load as Poisson arrivals at rate, or its trace
// replayed at the speed that makes rate.
func (s *Step) openSpec(rate float64) config.LoadSpec { return openLoop(s.Load, rate) }

// openLoop is a test's load open loop at rate: Poisson arrivals, or the
// trace's own arrivals at the speed that makes rate.
func openLoop(load config.LoadSpec, rate float64) config.LoadSpec {
	spec := load
	spec.Arrival, spec.Rate = config.ArrivalPoisson, rate
	if r := load.Replay; r != nil && r.Trace != nil {
		replay := *r
		replay.Speed = rate / workload.MeanRate(r.Trace)
		spec.Arrival, spec.Replay = config.ArrivalReplay, &replay
	}
	return spec
}

// drain applies stop and waits until the test's requests in flight have
// ended, at most the target's timeout and 5 s more; it returns how long
// that took.
func (s *Step) drain(ctx context.Context, stop config.LoadSpec) (time.Duration, error) {
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{stop}); err != nil {
		return 0, err
	}
	start := time.Now()
	queued := 0
	err := s.watch(ctx, time.Duration(s.Load.Target.Timeout)+5*time.Second, func() bool {
		if s.col.InFlight() > 0 {
			return false
		}
		if s.Queue == nil {
			return true
		}
		n, err := s.Queue.Waiting(ctx)
		queued = n
		return err != nil || n == 0 // a queue that cannot be read does not hold the test
	})
	took := time.Since(start)
	switch {
	case errors.Is(err, errTimedOut) && s.col.InFlight() == 0:
		// The test's own requests have ended; other clients keep the
		// engine's queue: a note, not an abort.
		s.drainNote = fmt.Sprintf("engine queue still %d after %s (other clients?)", queued, took.Round(time.Second))
		err = nil
	case errors.Is(err, errTimedOut):
		err = fmt.Errorf("%d requests still in flight %s after the level", s.col.InFlight(), took.Round(time.Second))
	}
	return took, err
}

// errTimedOut: watch's duration passed before its condition held.
var errTimedOut = errors.New("timed out")

// watch waits d or until done reports true, checking the stop rules every
// 20 ms. With done, d <= 0 is no limit, and reaching d is errTimedOut;
// without, watch returns nil after d.
func (s *Step) watch(ctx context.Context, d time.Duration, done func() bool) error {
	if done == nil && d <= 0 {
		if !s.noStopRules {
			if err := s.stopRule(); err != nil {
				return err
			}
		}
		return context.Cause(ctx)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var deadline <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		deadline = t.C
	}
	for {
		if done != nil && done() {
			return nil
		}
		if !s.noStopRules {
			if err := s.stopRule(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline:
			if done != nil {
				return errTimedOut
			}
			return nil
		case <-tick.C:
		}
	}
}

// stopRule returns why the running level is plainly broken, if it is:
// more than stop.error_ratio of its finished requests failed (once 10
// have finished), or a TTFT above stop.ttft_over.
func (s *Step) stopRule() error {
	finished, failed, maxTTFT := s.col.Level()
	st := s.Test.Stop
	if finished >= 10 && float64(failed) > st.ErrorRatio*float64(finished) {
		return fmt.Errorf("%w: %d of %d requests failed, above stop.error_ratio %g", errStopRule, failed, finished, st.ErrorRatio)
	}
	if over := time.Duration(st.TTFTOver); over > 0 && maxTTFT > over {
		return fmt.Errorf("%w: a TTFT of %s, above stop.ttft_over %s", errStopRule, maxTTFT.Round(time.Millisecond), over)
	}
	return nil
}

// summarize fills a level from its windows, once their requests have
// ended.
func (s *Step) summarize(l *Level, drain time.Duration, minRequests int, ws ...*Window) {
	// A level extended while undecided was looked at up to
	// MaxSteadyWindows times; a baseline and a burst once.
	batch, level := s.batch(), lookConfidence(s.Test.Window.MaxSteadyWindows())
	switch l.Stage {
	case "baseline":
		batch, level = 0, confidence // one request at a time: nothing to batch
	case "burst":
		level = confidence
	}
	summarize(l, &s.Load, s.col.Data(ws...), minRequests, batch, level)
	if s.judgeLevel != nil {
		s.judgeLevel(l)
	} else {
		judgeProber(l, s.Validity, "not used for the conclusion")
	}
	l.DrainSeconds = drain.Seconds()
	if s.drainNote != "" {
		l.Note = addNote(l.Note, s.drainNote)
		s.drainNote = ""
	}
	s.goodput = l.Goodput
}

// report tells the progress at the start of a level of c clients or rate
// req/s.
func (s *Step) report(stage string, c int, rate float64) {
	s.level++
	s.levels = max(s.levels, s.level)
	if s.Checkpoint != nil {
		s.Checkpoint(s.run)
	}
	if s.Progress == nil {
		return
	}
	elapsed := time.Since(s.start)
	per := time.Duration(s.Test.Window.Warmup) + time.Duration(s.Test.Window.Steady)
	s.Progress(Progress{Stage: stage, Concurrency: c, Rate: rate, Level: s.level, Levels: s.levels, Elapsed: elapsed,
		Remaining: time.Duration(s.levels-s.level+1) * per, Goodput: s.goodput})
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
	return out
}

// knee finds where goodput stops growing over the sweep's levels.
func knee(levels []Level) *Knee {
	if len(levels) == 0 {
		return nil
	}
	for i := 0; i+1 < len(levels); i++ {
		a, b := &levels[i], &levels[i+1]
		if a.Goodput <= 0 || b.Concurrency <= a.Concurrency {
			continue
		}
		// Growth of goodput per growth of clients: a target that scales
		// gives 1, a full one 0; levels 32 and 34 are compared as
		// fairly as 8 and 16.
		gain := (b.Goodput - a.Goodput) / a.Goodput
		more := float64(b.Concurrency-a.Concurrency) / float64(a.Concurrency)
		if gain/more < kneeGain {
			return &Knee{Concurrency: a.Concurrency, Goodput: a.Goodput, Reached: true,
				Reason: fmt.Sprintf("goodput %.3g -> %.3g good req/s from %d to %d clients (%+.0f%% for %+.0f%% clients), TTFT P99 %.3gs -> %.3gs",
					a.Goodput, b.Goodput, a.Concurrency, b.Concurrency, 100*gain, 100*more, a.TTFT.P99, b.TTFT.P99)}
		}
	}
	last := &levels[len(levels)-1]
	return &Knee{Concurrency: last.Concurrency, Goodput: last.Goodput,
		Reason: fmt.Sprintf("goodput still grew at %s, the highest level", clients(last.Concurrency))}
}

// timelineInterval and maxTimelinePoints: ten samples a second, for at
// most 10 minutes.
const (
	timelineInterval  = 100 * time.Millisecond
	maxTimelinePoints = 6000
)

// timelineSampler samples the test's requests in flight into a Timeline.
type timelineSampler struct {
	mu   sync.Mutex
	t    Timeline
	quit chan struct{}
	done chan struct{}
}

// sampleInFlight starts sampling the test's requests in flight.
func (s *Step) sampleInFlight() *timelineSampler {
	ts := &timelineSampler{t: Timeline{Start: time.Now(), IntervalSeconds: timelineInterval.Seconds()}, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(ts.done)
		tick := time.NewTicker(timelineInterval)
		defer tick.Stop()
		for {
			ts.mu.Lock()
			if len(ts.t.InFlight) >= maxTimelinePoints {
				ts.t.Truncated = true
				ts.mu.Unlock()
				return
			}
			ts.t.InFlight = append(ts.t.InFlight, s.col.InFlight())
			ts.mu.Unlock()
			select {
			case <-tick.C:
			case <-ts.quit:
				return
			}
		}
	}()
	return ts
}

// mark sets one of the timeline's instants to now.
func (ts *timelineSampler) mark(at *float64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	*at = time.Since(ts.t.Start).Seconds()
}

// stop ends the sampling and returns the timeline.
func (ts *timelineSampler) stop() *Timeline {
	close(ts.quit)
	<-ts.done
	return &ts.t
}

// clients writes a number of closed-loop clients: "1 client", "8 clients".
func clients(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}
