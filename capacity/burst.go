package capacity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sloprober/sloprober/config"
)

// burst runs verify.burst (the seed's step 5, its bursts): factor times
// a rate for a while, then that rate until the backlog has drained; the
// rate is the forecast peak per replica where the target has a forecast
// it holds, else the verified one. It reports false with the verdict and
// its reason when the run ends there: aborted, or failed because the
// backlog did not drain within verify.drain_within. A burst factor of 1
// or less, or no duration, runs none.
func (s *Step) burst(ctx context.Context, verified *Level) (string, string, bool) {
	b := &s.Test.Verify.Burst
	if !b.Enabled() {
		return "", "", true
	}
	from := verified.OfferedRate
	if fc := s.run.Capacity.Forecast; fc != nil && fc.Holds != nil && *fc.Holds {
		from = fc.Peak.Rate
	}
	l, err := s.burstLevel(ctx, from, verified.E2E.P95)
	s.run.Burst = l
	if err != nil {
		return VerdictAborted, abortReason(ctx, err), false
	}
	if within := time.Duration(s.Test.Verify.DrainWithin); l.DrainSeconds > within.Seconds() {
		// It drained late, or was still draining when the level gave
		// up: "(it took 36.8s)", "(not drained after 150.0s)".
		took := fmt.Sprintf("it took %.1fs", l.DrainSeconds)
		if tl := l.Timeline; tl != nil && tl.Drained <= 0 {
			took = fmt.Sprintf("not drained after %.1fs", l.DrainSeconds)
		}
		return VerdictFail, fmt.Sprintf("the backlog of a %gx burst for %s did not drain within %s (%s)", b.Factor, time.Duration(b.For), within, took), false
	}
	return "", "", true
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
	s.summarize(l, 0, 0, confidence, w)
	l.DrainSeconds = drain
	return l, derr
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
