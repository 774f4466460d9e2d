package prober

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// SendFunc starts the request of an arrival. It must not block: it starts
// the request (in a goroutine of its own), calls started at t0, when the
// HTTP call starts (after the request is built: its prompt, up to 8 MiB, is
// no part of the server's time), or with the zero time, before reporting
// it, for a request that ended before it was sent (Result.NotSent: counted
// by its outcome, never as sent), and calls done once the request has ended
// and been reported. ctx ends, with cause ErrShutdown, when the load stops
// and its grace period is over.
type SendFunc func(ctx context.Context, a Arrival, started func(t0 time.Time), done func())

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
//
// Besides its arrival process it takes dependent arrivals (Later): the later
// turns of conversations, due a think time after the previous reply. They
// are counted and dropped like any other arrival.
type Scheduler struct {
	arrivals Arrivals
	local    *Limiter // this load's max_in_flight
	global   *Limiter // over all loads; may be nil
	late     time.Duration
	send     SendFunc
	obs      []Observer // by Arrival.Scenario

	next      Arrival // the first arrival of the process not yet handled
	reqCtx    context.Context
	cancelReq context.CancelCauseFunc
	inFlight  sync.WaitGroup

	mu    sync.Mutex
	later arrivalHeap   // dependent arrivals, guarded by mu
	wake  chan struct{} // capacity 1: later got an arrival
}

// NewScheduler returns a scheduler. obs holds an observer for each scenario
// index an arrival can carry. An arrival is dropped as late when the
// scheduler handles it more than late after its due time: the prober fell
// behind, and sending would fire a catch-up burst no production client makes.
func NewScheduler(arrivals Arrivals, maxInFlight int, global *Limiter, late time.Duration, send SendFunc, obs ...Observer) *Scheduler {
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
		wake:      make(chan struct{}, 1),
	}
}

// InFlight returns this load's requests in flight.
func (s *Scheduler) InFlight() int { return s.local.InFlight() }

// SetArrivals replaces the arrival process, as a step test changes a
// load's rate: the arrivals not yet due are those of the new process
// (which should start now); dependent arrivals and requests in flight go
// on, and so do the counts of the load's observers.
func (s *Scheduler) SetArrivals(arrivals Arrivals) {
	s.mu.Lock()
	s.arrivals = arrivals
	s.next = arrivals.Next()
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Later adds a dependent arrival, such as the next turn of a conversation.
func (s *Scheduler) Later(a Arrival) {
	s.mu.Lock()
	heap.Push(&s.later, a)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pop returns the earliest arrival due at now, from the process or the
// dependent ones.
func (s *Scheduler) pop(now time.Time) (Arrival, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	main := !s.next.Due.IsZero() && !s.next.Due.After(now)
	dep := len(s.later) > 0 && !s.later[0].Due.After(now)
	switch {
	case dep && (!main || s.later[0].Due.Before(s.next.Due)):
		return heap.Pop(&s.later).(Arrival), true
	case main:
		a := s.next
		s.next = s.arrivals.Next()
		return a, true
	}
	return Arrival{}, false
}

// until returns the time to the next due arrival.
func (s *Scheduler) until() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := never
	if !s.next.Due.IsZero() {
		d = time.Until(s.next.Due)
	}
	if len(s.later) > 0 {
		d = min(d, time.Until(s.later[0].Due))
	}
	return d
}

// Run sends arrivals as they fall due until ctx is done. Arrivals not yet
// due then are not counted; requests in flight go on (see Drain).
func (s *Scheduler) Run(ctx context.Context) {
	timer := time.NewTimer(s.until())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wake:
		}
		now := time.Now()
		for a, ok := s.pop(now); ok; a, ok = s.pop(now) {
			s.handle(now, a)
		}
		timer.Reset(s.until())
	}
}

// handle decides one due arrival.
func (s *Scheduler) handle(now time.Time, a Arrival) {
	obs := s.obs[a.Scenario]
	obs.Scheduled()
	switch {
	case now.Sub(a.Due) > s.late:
		obs.Dropped(DropLate)
	case !s.local.acquire():
		obs.Dropped(DropMaxInFlight)
	case s.global != nil && !s.global.acquire():
		s.local.release()
		obs.Dropped(DropMaxInFlight)
	default:
		s.inFlight.Add(1)
		var once sync.Once
		started := func(t0 time.Time) {
			once.Do(func() {
				if !t0.IsZero() {
					obs.Sent(t0, max(t0.Sub(a.Due), 0))
				}
			})
		}
		s.send(s.reqCtx, a, started, func() {
			started(time.Now()) // a send func that never said it started
			s.release()
		})
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
	due := time.NewTimer(s.until())
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
		case <-s.wake:
		}
		now := time.Now()
		for a, ok := s.pop(now); ok; a, ok = s.pop(now) {
			s.obs[a.Scenario].Scheduled()
			s.obs[a.Scenario].Dropped(DropShutdown)
		}
		due.Reset(s.until())
	}
}

// arrivalHeap orders dependent arrivals by due time.
type arrivalHeap []Arrival

func (h arrivalHeap) Len() int           { return len(h) }
func (h arrivalHeap) Less(i, j int) bool { return h[i].Due.Before(h[j].Due) }
func (h arrivalHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *arrivalHeap) Push(x any)        { *h = append(*h, x.(Arrival)) }
func (h *arrivalHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	*h = old[:len(old)-1]
	return a
}
