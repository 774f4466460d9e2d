package capacity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/workload"
	"gonum.org/v1/gonum/stat/distuv"
)

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
	s.summarize(l, drain, s.Test.Window.MinRequests, confidence, w)
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
	s.levelKey = tookKey(stage, why) // a bisection level's time is told apart (estimate.go)
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
// is valid again (waitValid); the level records why (Remeasured). A
// sweep level above one the sweep went on past (lowerBounds) is measured
// once: the host that limited the prober there limits it here too; a
// level of the search is not measured again past verify.max_duration
// (roomForLevel).
func (s *Step) measure(ctx context.Context, l *Level, run, stop config.LoadSpec) error {
	for attempt := 0; ; attempt++ {
		err := s.measureOnce(ctx, l, stop)
		if err != nil || !l.ProberBound() || attempt >= s.Test.Retries || s.lowerBounds && l.Stage == "sweep" {
			return err
		}
		if s.capped && l.Stage == "verify" && !isForecast(l) && !s.roomForLevel() {
			// A search within verify.max_duration ends by it: the
			// test's length is known before it starts (longest).
			l.Note = addNote(l.Note, "not measured again: verify.max_duration's end")
			return nil
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

// measureOnce is one measurement of a level: see measure. After its
// warm-up, its steady window is cut into batches, each a window of the
// collector, and the level is looked at as its plan says (sequential.go)
// once the requests of the batches a look holds have ended, while the
// load goes on into the next batches; the first look that settles it
// ends the level, and the batches after it are discarded. The level's
// sample is its batches up to that look: every request sent in them,
// each awaited.
func (s *Step) measureOnce(ctx context.Context, l *Level, stop config.LoadSpec) error {
	s.col.ResetLevel()
	s.leftShort, s.boundLooks = false, 0
	plan := s.lookPlan(l.Stage, isForecast(l))
	if l.Stage == "hot-tenant" {
		// Its window is verify.hot_tenant.for, whole: the other
		// tenants' share of it is what it measures.
		plan = onceLookPlan(plan.batch, batchesPerWindow)
	}
	err := s.watch(ctx, time.Duration(s.Test.Window.Warmup), nil)
	queue, gpus := sampleQueue(ctx, s.Queue), s.gpus.start(ctx)
	ws := []*Window{s.col.Open(time.Time{})}
	look, keep := 0, 0 // the next look (index in plan.looks); the batches kept
	settled := func() bool {
		for look < len(plan.looks) {
			b := plan.looks[look]
			if b > len(ws) || !s.col.Ended(ws[:b]...) {
				return false
			}
			l.Looks = look + 1
			if s.settled(ws[:b], plan, look) {
				keep = b
				return true
			}
			look++
		}
		return false
	}
	if err == nil {
		err = s.batches(ctx, plan, &ws, settled)
	}
	if keep == 0 {
		keep = len(ws) // stopped before a look settled it: what it has
	}
	for _, w := range ws[keep:] {
		s.col.Discard(w, time.Now())
	}
	ws = ws[:keep]
	if w := ws[len(ws)-1]; w.End.IsZero() {
		s.col.Close(w, time.Now())
	}
	l.EngineQueue, l.GPU = queue.stop(), gpus.Stop()
	drain, derr := s.drain(ctx, stop)
	if err == nil {
		err = derr
	}
	confidence := plan.last()
	if l.Looks > 0 {
		confidence = plan.confidence[l.Looks-1]
	}
	s.summarize(l, drain, s.Test.Window.MinRequests, confidence, ws...)
	l.Batches, l.Extensions = len(ws), (len(ws)-1)/batchesPerWindow
	switch {
	case l.Looks == len(plan.looks):
		toDecide(l, confidence)
	case l.Looks > 0 && !s.leftShort && shortOfRequests(l):
		// Stopped undecidable (settled): what would decide it, and
		// that the windows left could not.
		toDecide(l, confidence)
		if l.ToDecide != nil {
			l.ToDecide.Early = true
		}
	}
	if errors.Is(err, errStopRule) {
		// Plainly broken, whatever its window holds (a rule that fires
		// in the warm-up leaves it empty): missed.
		l.Note = err.Error()
		l.Decision, l.Met = DecisionMissed, false
	}
	return err
}

// batches runs a level's batches, from the first window of ws: each is
// rolled into the next when its time is up, on the batch's own timer
// (each due at the first's start plus a whole number of batches, so that
// a late roll does not delay the next), the last closed at the plan's
// most; settled is asked every 20 ms and whenever a batch closes, and
// ends it when it reports true. The last look waits at most the
// target's timeout and 5 s for its requests. The stop rules are checked
// throughout.
func (s *Step) batches(ctx context.Context, plan lookPlan, ws *[]*Window, settled func() bool) error {
	start := (*ws)[0].Start
	due := start.Add(plan.batch)
	roll := time.NewTimer(time.Until(due))
	defer roll.Stop()
	limit := time.NewTimer(time.Until(start.Add(time.Duration(plan.max())*plan.batch + drainLimit(&s.Load.Target))))
	defer limit.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if settled() {
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
		case <-limit.C:
			return nil
		case <-roll.C:
			last := (*ws)[len(*ws)-1]
			if len(*ws) < plan.max() {
				*ws = append(*ws, s.col.Roll(last))
				due = due.Add(plan.batch)
				roll.Reset(time.Until(due))
			} else {
				s.col.Close(last, time.Now())
			}
		case <-tick.C:
		}
	}
}

// settled reports whether a level needs no more batches after the look
// (its index in plan) at its first batches ws, whose requests have
// ended: its last look; a decision the prober's delays cannot change
// (one they could is looked at again, with more requests, until the last
// look judges it); or every request good but too few to decide, and
// either the batches left could not bring enough of them (undecidable)
// or a higher sweep level or configured rate follows (s.above), whose
// requests decide more: a level that meets above implies this one, and
// one that does not leaves this one to confirm.
func (s *Step) settled(ws []*Window, plan lookPlan, look int) bool {
	if look == len(plan.looks)-1 {
		return true
	}
	var l Level
	data := s.col.Data(ws...)
	summarize(&l, &s.Load, data, 0, plan.batch, plan.confidence[look])
	s.judge(&l, data, plan.batch, plan.confidence[look])
	s.poolAbove(&l, plan.confidence[look])
	if l.Decision != DecisionInconclusive {
		if !l.ProberBound() {
			s.boundLooks = 0
			return true
		}
		// Decided, but the prober's delays could change it: more of the
		// same may settle it; two such looks in a row, and the level
		// is measured again instead.
		s.boundLooks++
		return s.boundLooks >= 2
	}
	s.boundLooks = 0
	if !shortOfRequests(&l) {
		return false
	}
	if undecidable(&l, len(ws), plan) {
		return true
	}
	s.leftShort = s.above
	return s.above
}

// judge judges the prober's health over a test level summarized from w
// in batches of batch at level: judgeLevel in tests, else by the effect
// of its delays (judgeEffect).
func (s *Step) judge(l *Level, w windowData, batch time.Duration, level float64) {
	if s.judgeLevel != nil {
		s.judgeLevel(l)
		return
	}
	judgeEffect(l, s.Validity, func() { proberEffect(l, &s.Load, w, batch, level) })
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

// undecidable reports whether a level short of requests after batches
// of its plan would still be at its last look, at the rate its requests
// came (its upper end). Worked numbers: a client of a slow target
// completes 7 requests in the first 3 batches of a 30 s window, all
// good; at most about 13 in 3 batches, 30 batches would hold 133, whose
// interval at the last look (97.5%) is [96.4%, 100%]: enough for 95%,
// the level goes on. 3 requests in 3 batches (up to 7.5, 75 in 30
// batches: [93.7%, 100%]) could not show it: the level stops.
//
// The projection supposes the requests to come as good as those so far;
// a level whose requests came near an SLO (pressureRising) is not
// supposed so: its queue may be building, and a miss decides it too.
func undecidable(l *Level, batches int, plan lookPlan) bool {
	if !shortOfRequests(l) || batches <= 0 {
		return false
	}
	q := distuv.UnitNormal.Quantile(1 - (1-plan.last())/2)
	for _, sc := range l.Scenarios {
		if sc.Decision != DecisionInconclusive {
			continue
		}
		if iv := sc.Interval; iv != nil && iv.nearest >= pressureRising {
			return false // it may yet miss: more batches decide it either way
		}
		// Every request good: Wilson's lower end is n / (n + q^2). The
		// count to come is projected from the upper end of the count
		// so far (Poisson, about two deviations): a short window that
		// drew 4 arrivals where 8.5 were due must not decide that the
		// level can never be shown.
		c := float64(sc.Counted)
		n := (c + 2*math.Sqrt(c) + 1) * float64(plan.max()) / float64(batches)
		if iv := sc.Interval; iv != nil && iv.Correlation > 1 {
			n /= iv.Correlation // requests in a row that are worth one
		}
		if n/(n+q*q) >= sc.Objective {
			return false
		}
	}
	return true
}

// pressureRising is the SLO pressure at which a level short of requests
// goes on however few it drew: a request that took half of an SLO says a
// queue is forming and a miss may come (pressureNear, the pressure at
// which a series' correlation counts). Worked numbers: the README's
// example server (closed loop 10 req/s) at 11 req/s offered: 66 requests
// in 6 s, all good, their TTFT P50 617 ms and P99 1.25 s against an SLO
// of 2 s and rising (the queue building without end), so correlated
// that they were worth a few independent requests: projected
// undecidable, it stopped inconclusive, where seconds more would have
// shown it missed and let the search bisect below it. At 0.75 that
// level still stopped; at 8 req/s the same server's slowest TTFT was
// 0.6 s.
const pressureRising = pressureNear

// batch is the length of a level's batches for its attainment interval:
// a tenth of the steady window.
func (s *Step) batch() time.Duration {
	return time.Duration(s.Test.Window.Steady) / batchesPerWindow
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
	err := s.wait(ctx, drainLimit(&s.Load.Target), func() bool {
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

// isForecast reports whether l is a level of the target's forecast,
// measured apart from the search's verify.max_duration.
func isForecast(l *Level) bool { return strings.HasPrefix(l.Why, "forecast") }

// drainLimit is the longest a level waits for its requests after its
// window, at its last look (batches) and again in its drain: the
// target's timeout and 5 s more. The most left counts it twice a level
// (longest).
func drainLimit(target *config.TargetConfig) time.Duration {
	return time.Duration(target.Timeout) + 5*time.Second
}

// errTimedOut: watch's duration passed before its condition held.
var errTimedOut = errors.New("timed out")

// watch waits d or until done reports true, checking the stop rules every
// 20 ms. With done, d <= 0 is no limit, and reaching d is errTimedOut;
// without, watch returns nil after d.
func (s *Step) watch(ctx context.Context, d time.Duration, done func() bool) error {
	return s.waitFor(ctx, d, done, !s.noStopRules)
}

// wait is watch without the stop rules: a drain waits for the level's
// requests to end, whatever they end in. A rule that fired while they
// drained would leave them in flight into the next level.
func (s *Step) wait(ctx context.Context, d time.Duration, done func() bool) error {
	return s.waitFor(ctx, d, done, false)
}

// waitFor is watch, checking the stop rules if rules.
func (s *Step) waitFor(ctx context.Context, d time.Duration, done func() bool, rules bool) error {
	if done == nil && d <= 0 {
		if rules {
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
		if rules {
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
		// A TTFT, or the wait of a request that failed before its
		// first token: "a request waited 2m0s for its first token".
		return fmt.Errorf("%w: a request waited %s for its first token, above stop.ttft_over %s", errStopRule, maxTTFT.Round(time.Millisecond), over)
	}
	return nil
}

// summarize fills a level from its windows, once their requests have
// ended, its interval at the confidence of the look that settled it (a
// baseline and a burst are looked at once: 95%).
func (s *Step) summarize(l *Level, drain time.Duration, minRequests int, level float64, ws ...*Window) {
	batch := s.batch()
	if l.Stage == "baseline" {
		batch = 0 // one request at a time: nothing to batch
	}
	data := s.col.Data(ws...)
	summarize(l, &s.Load, data, minRequests, batch, level)
	if l.Sent == 0 && l.Stage != "burst" {
		// Nothing of it was measured: it decides nothing (a level is
		// judged on its own requests only).
		l.Note = addNote(l.Note, "sent no request in its window: it decides nothing")
	}
	s.judge(l, data, batch, level)
	s.poolAbove(l, level)
	l.DrainSeconds = drain.Seconds()
	if s.drainNote != "" {
		l.Note = addNote(l.Note, s.drainNote)
		s.drainNote = ""
	}
	s.goodput = l.Goodput
}
