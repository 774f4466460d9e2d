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
)

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
)

// kneeGain is the least growth of goodput, relative to the growth of
// clients, from one sweep level to the next that still counts as growing:
// 0.1. The knee is the level after which goodput grows less: doubling 8 to
// 16 clients for 10.4 instead of 10 good req/s is +4% for +100%.
const kneeGain = 0.10

// Run is the result of one run of a test: what a report is built from.
type Run struct {
	Test    string    `json:"test"`
	Kind    string    `json:"kind"`
	Target  string    `json:"target"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Verdict string    `json:"verdict"`
	Reason  string    `json:"reason"`

	Baseline *Level `json:"baseline,omitempty"`
	// Sweep holds the closed-loop levels, refined ones included, by
	// concurrency.
	Sweep    []Level   `json:"sweep,omitempty"`
	Knee     *Knee     `json:"knee,omitempty"`
	Capacity *Capacity `json:"capacity,omitempty"`
	Verify   []Level   `json:"verify,omitempty"`
	Burst    *Level    `json:"burst,omitempty"`

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

// Knee is where goodput stops growing.
type Knee struct {
	Concurrency int     `json:"concurrency"`
	Goodput     float64 `json:"goodput"`
	// Reached is false when goodput still grew at the highest level swept.
	Reached bool   `json:"reached"`
	Reason  string `json:"reason"`
}

// Capacity is the step test's conclusion.
type Capacity struct {
	// Concurrency is the highest closed-loop level at which every
	// scenario met its objective, every lower level too; Rate is its
	// completed rate and Goodput its good requests, per second.
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	Goodput     float64 `json:"goodput"`
	// VerifiedRate is the capacity conclusion: the highest open-loop
	// (Poisson) rate that met every objective, req/s; 0 if none did.
	VerifiedRate    float64 `json:"verified_rate"`
	VerifiedGoodput float64 `json:"verified_goodput"`
	// LimitedBy says why the capacity may be higher than found: the
	// sweep's clients reached the test's max_rate at it. The capacity
	// gauges are not set from such a run.
	LimitedBy string `json:"limited_by,omitempty"`
}

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
	noStopRules bool   // a soak judges them per window
	drainNote   string // what the last drain left for its level's note
	run         *Run
	start       time.Time
	level       int
	levels      int
	goodput     float64
}

// QueueProbe tells how many requests wait in a target's own queue, e.g.
// from its engine's metrics (vllm:num_requests_waiting).
type QueueProbe interface {
	Waiting(ctx context.Context) (int, error)
}

// errStopRule is the cause of an abort by a stop rule.
var errStopRule = errors.New("stop rule")

// Run runs the test until it ends or ctx is done (an abort: the partial
// results are kept). The test's loads are stopped when it returns.
func (s *Step) Run(ctx context.Context) *Run {
	t := s.Test
	s.start = time.Now()
	s.run = &Run{Test: t.Name, Kind: config.TestStep, Target: s.Load.Target.Name, Start: s.start}
	s.levels = 1 + len(t.Sweep.Concurrency) + t.Sweep.Refine + len(t.Verify.Rates) + 1
	begin(ctx, s.run, s.Manager, t, &s.Load, s.ConfigHash)
	s.col = s.Recorder.Start(t.Name)
	defer s.Recorder.Stop(t.Name)
	defer end(s.run, s.col)
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
	verdict, reason := s.steps(ctx)
	s.run.Verdict, s.run.Reason = verdict, reason
	return s.run
}

// steps runs the procedure and returns the verdict with its reason.
func (s *Step) steps(ctx context.Context) (string, string) {
	t := s.Test
	// Step 2: the baseline, one request at a time.
	base, err := s.baseline(ctx)
	if base != nil {
		s.run.Baseline = base
	}
	if err != nil {
		return VerdictAborted, abortReason(ctx, err)
	}
	if !base.Met && base.ProberBound() {
		// One request at a time missed while the prober was the limit:
		// that says nothing of the target.
		return VerdictAborted, fmt.Sprintf("the baseline missed the objective while %s", proberBoundReason(base))
	}
	if !base.Met {
		return VerdictInfeasible, fmt.Sprintf("one request at a time already misses the objective: %s", missedObjectives(base))
	}

	// Steps 3 and 4: the closed-loop sweep, then bisection between the
	// last good and the first bad level. The sweep ends after two levels
	// in a row missed: goodput has stopped growing by then, and more load
	// only overloads the target.
	var capped, limited, proberBound string
	missedInRow := 0
	for _, c := range t.Sweep.Concurrency {
		l, err := s.closedLevel(ctx, "sweep", c)
		if errors.Is(err, errCapped) {
			capped = err.Error()
			break
		}
		if errors.Is(err, errStopRule) && ctx.Err() == nil {
			// A plainly broken level is a missed one: the sweep ends
			// there, the capacity below it stands.
			s.keep(l)
			capped = fmt.Sprintf("a stop rule at %s (%v)", clients(c), err)
			break
		}
		if err != nil {
			s.keep(l)
			return VerdictAborted, abortReason(ctx, err)
		}
		s.keep(l)
		if l.ProberBound() {
			// The prober, not the target, limits this level: more
			// load would measure the prober.
			proberBound = proberBoundReason(l)
			capped = proberBound
			break
		}
		if l.CompletedRate >= 0.95*s.MaxRate {
			// The clients are paced at MaxRate: goodput flattening here
			// is the prober's cap, not the target's knee.
			l.Note = strings.TrimSpace(l.Note + " limited by max_rate")
			limited = fmt.Sprintf("max_rate %g req/s at %s (the capacity may be higher)", s.MaxRate, clients(c))
			capped = "capped by " + limited
			s.run.Sweep[len(s.run.Sweep)-1].Note = l.Note
			break
		}
		if missedInRow = 0; !l.Met {
			missedInRow = 1
			if n := len(s.run.Sweep); n >= 2 && !s.run.Sweep[n-2].Met {
				missedInRow = 2
			}
		}
		if missedInRow == 2 {
			break
		}
	}
	for range t.Sweep.Refine {
		good, bad := s.bounds()
		if good == 0 || bad == 0 || bad-good <= 1 {
			break
		}
		l, err := s.closedLevel(ctx, "refine", (good+bad)/2)
		if errors.Is(err, errCapped) {
			break
		}
		if err != nil && (!errors.Is(err, errStopRule) || ctx.Err() != nil) {
			s.keep(l)
			return VerdictAborted, abortReason(ctx, err)
		}
		s.keep(l) // a level a stop rule ended is a missed one
		if l.ProberBound() {
			break // the bounds would not move
		}
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
		return s.noCapacity(capped, proberBound)
	}
	capLevel := s.at(good)
	s.run.Capacity = &Capacity{Concurrency: good, Rate: capLevel.CompletedRate, Goodput: capLevel.Goodput}
	if limited != "" && good == s.run.Sweep[len(s.run.Sweep)-1].Concurrency {
		s.run.Capacity.LimitedBy = limited
	}

	// Step 5: open-loop verification at fractions of that rate, then a
	// burst from the highest rate that passed.
	var verified *Level
	verifyBound, verifyMissed := "", false // a prober-bound level; a measured one that did not pass
	for _, f := range t.Verify.Rates {
		rate := f * capLevel.CompletedRate
		if rate > s.MaxRate {
			s.run.Verify = append(s.run.Verify, Level{Stage: "verify", IntendedRate: rate,
				Note: fmt.Sprintf("not run: capped by max_rate %g req/s", s.MaxRate)})
			continue
		}
		l, err := s.openLevel(ctx, "verify", rate)
		s.run.Verify = append(s.run.Verify, *l)
		stopped := errors.Is(err, errStopRule) && ctx.Err() == nil
		if err != nil && !stopped {
			return VerdictAborted, abortReason(ctx, err)
		}
		switch {
		case l.Prober == nil:
			// Not run (capped): neither measured nor missed.
		case l.ProberBound():
			if verifyBound == "" {
				verifyBound = proberBoundReason(l)
			}
		case l.Met && l.Dropped == nil && !stopped:
			verified = &s.run.Verify[len(s.run.Verify)-1]
			s.run.Capacity.VerifiedRate, s.run.Capacity.VerifiedGoodput = rate, l.Goodput
		default:
			verifyMissed = true
		}
		if stopped {
			break // missed, and higher rates would be no better
		}
	}
	if verified == nil && verifyBound != "" && !verifyMissed {
		// Every open-loop rate that ran measured the prober: the target
		// neither passed nor failed.
		return VerdictAborted, fmt.Sprintf("no open-loop rate measured the target: %s (the closed loop met the objectives at %s, %.3g req/s)",
			verifyBound, clients(good), capLevel.CompletedRate)
	}
	if verified == nil {
		return VerdictFail, fmt.Sprintf("no open-loop rate met the objectives (the closed loop met them at %s, %.3g req/s)", clients(good), capLevel.CompletedRate)
	}
	b := &t.Verify.Burst
	if b.Factor > 1 && b.For > 0 {
		l, err := s.burst(ctx, verified)
		s.run.Burst = l
		if err != nil {
			return VerdictAborted, abortReason(ctx, err)
		}
		if within := time.Duration(t.Verify.DrainWithin); l.DrainSeconds > within.Seconds() {
			return VerdictFail, fmt.Sprintf("the backlog of a %gx burst for %s did not drain within %s (%.1fs)", b.Factor, time.Duration(b.For), within, l.DrainSeconds)
		}
	}
	reason := fmt.Sprintf("%.3g req/s verified open loop (%.3g good req/s); closed loop: %s, %.3g req/s", s.run.Capacity.VerifiedRate,
		s.run.Capacity.VerifiedGoodput, clients(good), capLevel.CompletedRate)
	if capped != "" {
		reason += "; the sweep ended early: " + capped
	}
	return VerdictPass, reason
}

// noCapacity is the verdict of a sweep and refinement in which no level
// met the objectives with every level below it meeting them too.
func (s *Step) noCapacity(capped, proberBound string) (string, string) {
	if len(s.run.Sweep) == 0 && capped != "" {
		return VerdictAborted, "no sweep level could run: " + capped
	}
	for _, l := range s.run.Sweep {
		if !l.ProberBound() {
			// A level the prober did not limit missed: the target's.
			reason := "no sweep level met the objectives: " + missedObjectives(s.lowest())
			if proberBound != "" {
				reason += "; the sweep ended early: " + proberBound
			}
			return VerdictFail, reason
		}
	}
	if proberBound != "" {
		return VerdictAborted, "no level measured the target: " + proberBound
	}
	return VerdictFail, "no sweep level met the objectives: " + missedObjectives(s.lowest())
}

// proberBoundReason names a level the prober limited and what to do.
func proberBoundReason(l *Level) string {
	return fmt.Sprintf("prober-bound at %s (%s): add shards or CPU", l.LoadName(), strings.Join(l.Prober.Invalid, ", "))
}

// LoadName names a level by its load: "4 clients", "6.25 req/s".
func (l *Level) LoadName() string {
	if l.Concurrency > 0 {
		return clients(l.Concurrency)
	}
	return fmt.Sprintf("%.3g req/s", l.IntendedRate)
}

// keep adds a sweep level, in order of concurrency.
func (s *Step) keep(l *Level) {
	if l == nil {
		return
	}
	s.run.Sweep = append(s.run.Sweep, *l)
	slices.SortStableFunc(s.run.Sweep, func(a, b Level) int { return a.Concurrency - b.Concurrency })
}

// bounds returns the highest concurrency at which every level up to it met
// the objectives, and the lowest that missed (0: none).
func (s *Step) bounds() (good, bad int) {
	for _, l := range s.run.Sweep {
		if l.ProberBound() {
			continue // it tells nothing of the target
		}
		if !l.Met {
			return good, l.Concurrency
		}
		good = l.Concurrency
	}
	return good, 0
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
// a single client has nothing to warm up.
func (s *Step) baseline(ctx context.Context) (*Level, error) {
	s.report("baseline", 1, 0)
	spec := s.closedSpec(1)
	s.col.ResetLevel()
	n := s.Test.Baseline.Requests
	w := s.col.OpenFirst(time.Now(), n)
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{spec}); err != nil {
		return nil, err
	}
	queue := sampleQueue(ctx, s.Queue)
	err := s.watch(ctx, 0, func() bool {
		finished, _, _ := s.col.Level()
		return finished >= n
	})
	s.col.Close(w, time.Now())
	l := &Level{Stage: "baseline", Concurrency: 1, EngineQueue: queue.stop()}
	drain, derr := s.drain(ctx, s.closedSpec(0))
	if err == nil {
		err = derr
	}
	// A baseline of fewer requests than window.min_requests says so,
	// like any level.
	s.summarize(l, w, drain, s.Test.Window.MinRequests)
	return l, err
}

// closedLevel runs one closed-loop level: warm-up, steady window, then
// the clients stop and the level waits for its requests to end.
func (s *Step) closedLevel(ctx context.Context, stage string, c int) (*Level, error) {
	s.report(stage, c, 0)
	l := &Level{Stage: stage, Concurrency: c}
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{s.closedSpec(c)}); err != nil {
		if errors.Is(err, prober.ErrOverCaps) {
			return nil, cappedError{err}
		}
		return nil, err
	}
	return l, s.measure(ctx, l, s.closedSpec(0))
}

// openLevel runs one open-loop (Poisson) level at rate.
func (s *Step) openLevel(ctx context.Context, stage string, rate float64) (*Level, error) {
	s.report(stage, 0, rate)
	l := &Level{Stage: stage, IntendedRate: rate}
	spec := s.openSpec(rate)
	if err := s.Manager.Apply(s.Test.Name, []config.LoadSpec{spec}); err != nil {
		l.Note = "not run: capped by " + err.Error()
		return l, nil
	}
	spec.Paused = true
	return l, s.measure(ctx, l, spec)
}

// measure runs a level's warm-up and steady window, then applies stop
// (the load with nothing more to send) and waits for the requests in
// flight to end.
func (s *Step) measure(ctx context.Context, l *Level, stop config.LoadSpec) error {
	s.col.ResetLevel()
	err := s.watch(ctx, time.Duration(s.Test.Window.Warmup), nil)
	w := s.col.Open(time.Now())
	queue := sampleQueue(ctx, s.Queue)
	if err == nil {
		err = s.watch(ctx, time.Duration(s.Test.Window.Steady), nil)
	}
	s.col.Close(w, time.Now())
	l.EngineQueue = queue.stop()
	drain, derr := s.drain(ctx, stop)
	if err == nil {
		err = derr
	}
	s.summarize(l, w, drain, s.Test.Window.MinRequests)
	if errors.Is(err, errStopRule) {
		l.Note = err.Error()
	}
	return err
}

// burst runs the verified rate, then Factor times it for For, then the
// verified rate again until the requests in flight are back to what the
// verified rate keeps (Little's law: rate x E2E P95, at least 1): the
// drain time is from the end of the burst until then.
func (s *Step) burst(ctx context.Context, verified *Level) (*Level, error) {
	b := s.Test.Verify.Burst
	rate := verified.IntendedRate
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
	normal := max(1, int(math.Ceil(rate*verified.E2E.P95)))
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
	s.summarize(l, w, 0, 0)
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

// summarize fills a level from its window, once its requests have ended.
func (s *Step) summarize(l *Level, w *Window, drain time.Duration, minRequests int) {
	summarize(l, &s.Load, s.col.Data(w), minRequests)
	judgeProber(l, s.Validity, "not used for the conclusion")
	l.DrainSeconds = drain.Seconds()
	if s.drainNote != "" {
		l.Note = addNote(l.Note, s.drainNote)
		s.drainNote = ""
	}
	s.goodput = l.Goodput
}

// judgeProber judges the prober's health over a level by v (nil: none)
// and marks the level when the prober was the limit; use says what
// becomes of such a level.
func judgeProber(l *Level, v *validity.Config, use string) {
	p := l.Prober
	if p == nil || v == nil {
		return
	}
	sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	p.Invalid = v.Judge(p.CPUShare, sec(p.SchedulerP99), sec(p.GCPauseP99), sec(p.LagP99), 0)
	if len(p.Invalid) > 0 {
		l.Note = addNote(l.Note, "prober-bound ("+strings.Join(p.Invalid, ", ")+"): measured while the prober was the limit, "+use)
	}
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
		out += fmt.Sprintf("%s attained %.1f%% (objective %.1f%%)", sc.Scenario, 100*sc.Attainment, 100*sc.Objective)
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
