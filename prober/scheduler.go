package prober

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Observer receives what happens to the arrivals and requests of one label
// set. Its methods are called concurrently.
type Observer interface {
	// Scheduled: an arrival fell due.
	Scheduled()
	// Dropped: a due arrival was not sent.
	Dropped(DropReason)
	// Sent: a request took an in-flight slot and starts now.
	Sent()
	// Finished: a sent request ended; r is complete and no longer changes.
	Finished(r *Result)
}

// Arrival is one request due at a time fixed by the arrival process.
type Arrival struct {
	Due time.Time
}

// Seq identifies the arrival within its load: its due time in nanoseconds,
// the same on every replica and after a restart.
func (a Arrival) Seq() uint64 { return uint64(a.Due.UnixNano()) }

// SendFunc starts the request of an arrival. It must not block: it starts
// the request (in a goroutine of its own) and calls done once the request
// has ended and been reported. ctx ends, with cause ErrShutdown, when the
// load stops and its grace period is over.
type SendFunc func(ctx context.Context, a Arrival, done func())

// Limiter caps the requests in flight over several loads.
type Limiter struct {
	max atomic.Int64
	n   atomic.Int64
}

// NewLimiter returns a limiter of max requests in flight.
func NewLimiter(max int) *Limiter {
	l := &Limiter{}
	l.SetMax(max)
	return l
}

// SetMax changes the cap; requests in flight above a lowered cap go on.
func (l *Limiter) SetMax(max int) { l.max.Store(int64(max)) }

// InFlight returns the requests in flight.
func (l *Limiter) InFlight() int { return int(l.n.Load()) }

func (l *Limiter) acquire() bool {
	if l.n.Add(1) > l.max.Load() {
		l.n.Add(-1)
		return false
	}
	return true
}

func (l *Limiter) release() { l.n.Add(-1) }

// Scheduler runs one open-loop load: every arrival is sent at its due time,
// or dropped and counted; it is never delayed and never waits for a slot.
// Modelled on k6's constant-arrival-rate executor and on Prometheus' rule
// group loop, whose schedule does not drift and counts what it missed.
type Scheduler struct {
	arrivals Arrivals
	local    *Limiter // this load's max_in_flight
	global   *Limiter // over all loads; may be nil
	late     time.Duration
	send     SendFunc
	obs      Observer

	next      time.Time // the first arrival not yet handled
	reqCtx    context.Context
	cancelReq context.CancelCauseFunc
	inFlight  sync.WaitGroup
}

// NewScheduler returns a scheduler. An arrival is dropped as late when the
// scheduler handles it more than late after its due time: the prober fell
// behind, and sending would fire a catch-up burst no production client makes.
func NewScheduler(arrivals Arrivals, maxInFlight int, global *Limiter, late time.Duration, send SendFunc, obs Observer) *Scheduler {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Scheduler{
		arrivals:  arrivals,
		local:     NewLimiter(maxInFlight),
		global:    global,
		late:      late,
		send:      send,
		obs:       obs,
		next:      arrivals.Next(),
		reqCtx:    ctx,
		cancelReq: cancel,
	}
}

// InFlight returns this load's requests in flight.
func (s *Scheduler) InFlight() int { return s.local.InFlight() }

// Run sends arrivals as they fall due until ctx is done. Arrivals not yet
// due then are not counted; requests in flight go on (see Drain).
func (s *Scheduler) Run(ctx context.Context) {
	timer := time.NewTimer(time.Until(s.next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now := time.Now()
		for !s.next.After(now) {
			s.handle(now)
			s.next = s.arrivals.Next()
		}
		timer.Reset(time.Until(s.next))
	}
}

// handle decides one due arrival.
func (s *Scheduler) handle(now time.Time) {
	s.obs.Scheduled()
	switch {
	case now.Sub(s.next) > s.late:
		s.obs.Dropped(DropLate)
	case !s.local.acquire():
		s.obs.Dropped(DropMaxInFlight)
	case s.global != nil && !s.global.acquire():
		s.local.release()
		s.obs.Dropped(DropMaxInFlight)
	default:
		s.inFlight.Add(1)
		s.obs.Sent()
		s.send(s.reqCtx, Arrival{Due: s.next}, s.release)
	}
}

func (s *Scheduler) release() {
	s.local.release()
	if s.global != nil {
		s.global.release()
	}
	s.inFlight.Done()
}

// Drain is called after Run has returned. It gives the requests in flight
// up to grace to end; arrivals falling due meanwhile are counted and
// dropped (reason shutdown). Then it cancels the requests left (outcome
// shutdown) and waits until they have been reported.
func (s *Scheduler) Drain(grace time.Duration) {
	idle := make(chan struct{})
	go func() {
		s.inFlight.Wait()
		close(idle)
	}()
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	due := time.NewTimer(time.Until(s.next))
	defer due.Stop()
	for {
		select {
		case <-idle:
			s.cancelReq(ErrShutdown)
			return
		case <-deadline.C:
			s.cancelReq(ErrShutdown)
			<-idle
			return
		case <-due.C:
			now := time.Now()
			for !s.next.After(now) {
				s.obs.Scheduled()
				s.obs.Dropped(DropShutdown)
				s.next = s.arrivals.Next()
			}
			due.Reset(time.Until(s.next))
		}
	}
}
