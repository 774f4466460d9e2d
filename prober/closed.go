package prober

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sloprober/sloprober/workload"
)

// ClosedLoop runs a closed-loop load: N clients, each sending its next
// request when its previous one has ended (and a think time has passed).
// A step test sweeps N to find the knee: where goodput stops growing while
// latency climbs. Unlike an open-loop load it never drops: every send is
// an arrival due when it is sent (lag 0), and the target's slowness shows
// as fewer requests, not as drops.
//
// N clients against a target that fails in a millisecond would send
// N x 1,000 requests a second, so sends are also paced to a maximum rate:
// 64 clients capped at 20 req/s send one request every 50 ms at most, and
// wait for their turn rather than drop.
type ClosedLoop struct {
	send  SendFunc
	obs   []Observer // by Arrival.Scenario
	seed  uint64
	picks []float64 // scenario weights of new conversations
	seq   atomic.Uint64
	// records, if set, are a trace's requests, sent in its order (their
	// lengths and prefix blocks; its times do not apply).
	records []workload.Record
	next    atomic.Uint64

	clients atomic.Int64
	think   atomic.Int64 // ns
	pace    pacer

	reqCtx    context.Context
	cancelReq context.CancelCauseFunc
	inFlight  sync.WaitGroup
	nInFlight atomic.Int64

	mu      sync.Mutex
	ctx     context.Context // of Run; nil before and after it
	running []bool          // by client index
	done    sync.WaitGroup  // of the client goroutines
	later   arrivalHeap     // later conversation turns, guarded by mu
}

// NewClosedLoop returns a closed loop of clients clients, each waiting
// think after a reply, sending at most maxRate requests a second in all.
// weights are the relative rates at which new conversations of each
// scenario start (see conversationStarts); obs holds an observer for each.
func NewClosedLoop(clients int, think time.Duration, maxRate float64, seed uint64, weights []float64, send SendFunc, obs ...Observer) *ClosedLoop {
	ctx, cancel := context.WithCancelCause(context.Background())
	c := &ClosedLoop{send: send, obs: obs, seed: seed, picks: weights, reqCtx: ctx, cancelReq: cancel}
	// Prompts are drawn from the scenario's seed and the arrival's Seq:
	// starting from the clock, a test run again (or a restarted prober)
	// sends new prompts, not ones a prefix cache has seen.
	c.seq.Store(uint64(time.Now().UnixNano()))
	c.Set(clients, think, maxRate)
	return c
}

// Replay makes the loop send a trace's requests, in order and looping,
// instead of the scenarios' lengths. Call it before Run.
func (c *ClosedLoop) Replay(records []workload.Record) { c.records = records }

// Set changes the clients, the think time and the maximum rate in place.
// New clients start at once; clients beyond a lowered number stop after
// their request in flight.
func (c *ClosedLoop) Set(clients int, think time.Duration, maxRate float64) {
	c.think.Store(int64(think))
	c.pace.setRate(maxRate)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clients.Store(int64(clients))
	c.startClients()
}

// startClients starts the clients that should run and do not; c.mu is held.
func (c *ClosedLoop) startClients() {
	if c.ctx == nil {
		return
	}
	n := int(c.clients.Load())
	for len(c.running) < n {
		c.running = append(c.running, false)
	}
	for i := range n {
		if !c.running[i] {
			c.running[i] = true
			c.done.Add(1)
			go c.client(c.ctx, i)
		}
	}
}

// InFlight returns the load's requests in flight.
func (c *ClosedLoop) InFlight() int { return int(c.nInFlight.Load()) }

// Later queues the next turn of a conversation: the next client free after
// its due time sends it, before starting a new conversation.
func (c *ClosedLoop) Later(a Arrival) {
	c.mu.Lock()
	heap.Push(&c.later, a)
	c.mu.Unlock()
}

// Run runs the clients until ctx is done, then returns once none of them
// will send again; requests in flight go on (see Drain).
func (c *ClosedLoop) Run(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	c.startClients()
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.ctx = nil // no client starts from now on
	c.mu.Unlock()
	c.done.Wait()
	c.mu.Lock()
	c.running = nil
	c.mu.Unlock()
}

// client is one client's loop: wait for the pace; stop if the clients
// were lowered below it meanwhile; take a due later turn, or start a
// conversation; send; wait for the reply; think.
func (c *ClosedLoop) client(ctx context.Context, i int) {
	defer c.done.Done()
	for {
		if !c.pace.wait(ctx) {
			return
		}
		c.mu.Lock()
		if i >= int(c.clients.Load()) {
			c.running[i] = false
			c.mu.Unlock()
			return
		}
		var a Arrival
		turn := len(c.later) > 0 && !c.later[0].Due.After(time.Now())
		if turn {
			a = heap.Pop(&c.later).(Arrival)
		}
		c.mu.Unlock()
		if !turn {
			seq := c.seq.Add(1)
			a = Arrival{Seq: seq, Scenario: workload.Pick(c.picks, unitFloat(c.seed, seq, 0))}
			if n := uint64(len(c.records)); n > 0 {
				k := c.next.Add(1) - 1
				a.Record, a.Pass = &c.records[k%n], int(k/n)
			}
		}
		a.Due = time.Now()
		ended := c.sendOne(ctx, a)
		select {
		case <-ended:
		case <-ctx.Done():
			return
		}
		if !Sleep(ctx, time.Duration(c.think.Load())) {
			return
		}
	}
}

// sendOne sends an arrival due now and returns a channel closed once its
// request has ended and been reported.
func (c *ClosedLoop) sendOne(ctx context.Context, a Arrival) <-chan struct{} {
	obs := c.obs[a.Scenario]
	obs.Scheduled()
	c.inFlight.Add(1)
	c.nInFlight.Add(1)
	ended := make(chan struct{})
	var once sync.Once
	started := func(t0 time.Time) {
		once.Do(func() {
			if !t0.IsZero() {
				obs.Sent(t0, 0)
			}
		})
	}
	c.send(c.reqCtx, a, started, func() {
		started(time.Now())
		c.nInFlight.Add(-1)
		c.inFlight.Done()
		close(ended)
	})
	return ended
}

// Drain is called after Run has returned. It gives the requests in flight
// up to grace to end, then cancels those left (outcome shutdown) and waits
// until they have been reported. Later turns not sent are not counted: in
// a closed loop nothing is due until a client sends it.
func (c *ClosedLoop) Drain(grace time.Duration) {
	idle := make(chan struct{})
	go func() {
		c.inFlight.Wait()
		close(idle)
	}()
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	select {
	case <-idle:
	case <-deadline.C:
	}
	c.cancelReq(ErrShutdown)
	<-idle
}

// Sleep waits d, or until ctx is done: it reports whether d passed (a
// d of 0 or less passes at once, unless ctx is done).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pacer spaces sends at least 1/rate apart over all the clients of a
// closed loop. A send takes the first free moment: no slot is booked ahead,
// so idle time is not saved up into a burst, and a new rate applies to
// every waiting client at once (a step test's level starts when it is set,
// not after the clients booked at the old rate have sent).
type pacer struct {
	mu       sync.Mutex
	interval time.Duration
	next     time.Time     // the earliest moment of the next send
	changed  chan struct{} // closed when the rate changes
}

func (p *pacer) setRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	interval := time.Duration(0)
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	if interval == p.interval && p.changed != nil {
		return
	}
	// The send after the last one now waits the new interval.
	p.next = p.next.Add(interval - p.interval)
	p.interval = interval
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
}

// wait returns at the caller's moment to send; false if ctx ended first.
func (p *pacer) wait(ctx context.Context) bool {
	for {
		p.mu.Lock()
		now := time.Now()
		if !now.Before(p.next) {
			p.next = now.Add(p.interval)
			p.mu.Unlock()
			return ctx.Err() == nil
		}
		d, changed := p.next.Sub(now), p.changed
		p.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}
