package simulator

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// errQueueFull is returned by submit when max_queue requests already wait.
var errQueueFull = errors.New("waiting queue is full")

// phases is the true timing of one request: the ground truth reported in the
// "timings" object of its reply.
type phases struct {
	arrived    time.Time // the request arrived (after header_delay): parsing counts as queueing
	admitted   time.Time // it took a batch slot and its prefill started
	firstToken time.Time // prefill ended; the first token exists
	lastToken  time.Time // the last token exists
	cached     int       // prompt tokens served from the prefix cache
	aborted    bool      // the engine stopped before the sequence finished
}

func (p phases) queue() time.Duration   { return p.admitted.Sub(p.arrived) }
func (p phases) prefill() time.Duration { return p.firstToken.Sub(p.admitted) }
func (p phases) decode() time.Duration  { return p.lastToken.Sub(p.firstToken) }

// tokenSource produces the tokens of one request, either from the engine or
// on the fixed timing.
type tokenSource interface {
	// wait blocks until more than seen tokens exist or the sequence ended,
	// and returns the number of tokens that exist and whether it ended.
	wait(ctx context.Context, seen int) (produced int, ended bool, err error)
	// phases may be called once wait has reported the end.
	phases() phases
	// cached is the number of prompt tokens served from the prefix cache;
	// it may be called once wait has reported a token (the Messages API
	// reports it in message_start, with the first token).
	cached() int
}

// sequence is one request inside the engine. The engine goroutine writes
// phases and the token count; the HTTP handler reads the count through the
// atomic and the phases after done is closed.
type sequence struct {
	ctx       context.Context
	prompt    prompt
	maxTokens int

	produced atomic.Int64
	notify   chan struct{} // capacity 1: new tokens exist
	done     chan struct{} // closed when the sequence leaves the engine
	ph       phases

	elem *list.Element // place in the waiting queue, guarded by engine.mu
}

func newSequence(ctx context.Context, arrived time.Time, p prompt, maxTokens int) *sequence {
	return &sequence{
		ph:        phases{arrived: arrived},
		ctx:       ctx,
		prompt:    p,
		maxTokens: maxTokens,
		notify:    make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
}

func (s *sequence) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *sequence) wait(ctx context.Context, seen int) (int, bool, error) {
	for {
		select {
		case <-s.done:
			return int(s.produced.Load()), true, nil
		default:
		}
		if n := int(s.produced.Load()); n > seen {
			return n, false, nil
		}
		select {
		case <-s.notify:
		case <-s.done:
		case <-ctx.Done():
			return int(s.produced.Load()), false, ctx.Err()
		}
	}
}

func (s *sequence) phases() phases { return s.ph }

// cached is written by the engine before it publishes the first token
// through produced, and never again, so reading it after wait reported a
// token does not race.
func (s *sequence) cached() int { return s.ph.cached }

// engine is the continuous-batching model: one loop admits waiting sequences
// into free slots in FIFO order, prefills each admitted sequence alone (decode
// of the running ones pauses meanwhile, as in an engine without chunked
// prefill), and otherwise runs decode steps that give every running sequence
// one token.
//
// With the defaults (8 slots, decode 10ms + 1ms per sequence, prefill 5ms +
// 50us per token) a full batch decodes 8/(18ms) = 444 tokens/s; 256-token
// outputs keep a slot 4.6s, so about 1.7 req/s saturate the engine, beyond
// which the queue, and with it TTFT, grows without bound.
type engine struct {
	slots       int
	maxQueue    int
	prefillBase time.Duration
	perToken    time.Duration
	decodeBase  time.Duration
	perSequence time.Duration
	cache       *prefixCache
	stats       *stats
	faults      *atomic.Pointer[faultSet] // for the degradation

	mu       sync.Mutex
	waiting  *list.List    // of *sequence, guarded by mu
	arrivals chan struct{} // capacity 1: the queue grew

	running []*sequence // engine goroutine only
	timer   *time.Timer
}

func newEngine(c *Config, st *stats, faults *atomic.Pointer[faultSet]) *engine {
	return &engine{
		slots:       c.Slots,
		maxQueue:    c.MaxQueue,
		prefillBase: time.Duration(c.Prefill.Base),
		perToken:    time.Duration(c.Prefill.PerToken),
		decodeBase:  time.Duration(c.Decode.Base),
		perSequence: time.Duration(c.Decode.PerSequence),
		cache:       newPrefixCache(c.PrefixCache),
		stats:       st,
		faults:      faults,
		waiting:     list.New(),
		arrivals:    make(chan struct{}, 1),
	}
}

// submit queues s, or returns errQueueFull.
func (e *engine) submit(s *sequence) error {
	e.mu.Lock()
	if e.maxQueue > 0 && e.waiting.Len() >= e.maxQueue {
		e.mu.Unlock()
		return errQueueFull
	}
	s.elem = e.waiting.PushBack(s)
	e.stats.waiting.Add(1)
	e.mu.Unlock()
	select {
	case e.arrivals <- struct{}{}:
	default:
	}
	return nil
}

// withdraw takes s out of the waiting queue if it is still there, when its
// client went away before it was admitted.
func (e *engine) withdraw(s *sequence) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.elem != nil {
		e.waiting.Remove(s.elem)
		s.elem = nil
		e.stats.waiting.Add(-1)
	}
}

// next pops the first waiting sequence if a slot is free.
func (e *engine) next() *sequence {
	if len(e.running) >= e.slots {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.waiting.Front()
	if f == nil {
		return nil
	}
	e.waiting.Remove(f)
	s := f.Value.(*sequence)
	s.elem = nil
	e.stats.waiting.Add(-1)
	return s
}

// run is the engine loop; it returns when ctx is done, ending every sequence.
func (e *engine) run(ctx context.Context) {
	e.timer = time.NewTimer(time.Hour)
	e.timer.Stop()
	defer e.abortAll()
	for {
		if s := e.next(); s != nil {
			if s.ctx.Err() != nil {
				e.finish(s)
				continue
			}
			if !e.prefill(ctx, s) {
				return
			}
			continue
		}
		if len(e.running) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-e.arrivals:
			}
			continue
		}
		if !e.step(ctx) {
			return
		}
	}
}

// busy occupies the engine for d, measured from start. It reports false if
// ctx ended first.
func (e *engine) busy(ctx context.Context, start time.Time, d time.Duration) bool {
	e.timer.Reset(time.Until(start.Add(d)))
	select {
	case <-ctx.Done():
		e.timer.Stop()
		return false
	case <-e.timer.C:
		return true
	}
}

// prefill processes s's uncached prompt tokens; its first token exists when
// prefill ends. A fully cached prompt still computes its last token, as in vLLM.
func (e *engine) prefill(ctx context.Context, s *sequence) bool {
	start := time.Now()
	s.ph.admitted = start
	cached := min(e.cache.lookup(s.prompt), max(s.prompt.tokens-1, 0))
	uncached := s.prompt.tokens - cached
	e.stats.running.Add(1)
	e.running = append(e.running, s)
	d := e.faults.Load().degrade.prefill(start, e.prefillBase+time.Duration(uncached)*e.perToken)
	if !e.busy(ctx, start, d) {
		return false
	}
	now := time.Now()
	e.cache.insert(s.prompt)
	e.stats.promptTokens.Add(int64(s.prompt.tokens))
	e.stats.cachedTokens.Add(int64(cached))
	e.stats.generationTokens.Add(1)
	s.ph.cached = cached
	s.ph.firstToken, s.ph.lastToken = now, now
	s.produced.Store(1)
	s.wake()
	if s.maxTokens == 1 {
		e.faults.Load().degrade.complete()
		e.running = e.running[:len(e.running)-1]
		e.finish(s)
	}
	return true
}

// step runs one decode step over the running sequences. A degradation in
// effect when the step starts sets its length.
func (e *engine) step(ctx context.Context) bool {
	e.running = e.keep(func(s *sequence) bool { return s.ctx.Err() == nil })
	if len(e.running) == 0 {
		return true
	}
	start := time.Now()
	deg := e.faults.Load().degrade
	if !e.busy(ctx, start, deg.step(start, e.decodeBase+time.Duration(len(e.running))*e.perSequence)) {
		return false
	}
	now := time.Now()
	e.stats.generationTokens.Add(int64(len(e.running)))
	deg = e.faults.Load().degrade // the faults may have been replaced meanwhile
	e.running = e.keep(func(s *sequence) bool {
		s.ph.lastToken = now
		n := s.produced.Add(1)
		s.wake()
		if n < int64(s.maxTokens) {
			return true
		}
		deg.complete()
		return false
	})
	return true
}

// keep filters the running sequences, finishing those that are dropped.
func (e *engine) keep(ok func(*sequence) bool) []*sequence {
	kept := e.running[:0]
	for _, s := range e.running {
		if ok(s) {
			kept = append(kept, s)
		} else {
			e.finish(s)
		}
	}
	clear(e.running[len(kept):])
	return kept
}

func (e *engine) finish(s *sequence) {
	if s.ph.admitted.IsZero() {
		s.ph.aborted = true // its client left while it waited
	} else {
		e.stats.running.Add(-1)
	}
	close(s.done)
}

// abortAll ends every sequence when the engine stops, so no handler waits forever.
func (e *engine) abortAll() {
	for _, s := range e.running {
		s.ph.aborted = true
		e.finish(s)
	}
	e.running = nil
	e.mu.Lock()
	defer e.mu.Unlock()
	for f := e.waiting.Front(); f != nil; f = f.Next() {
		s := f.Value.(*sequence)
		s.elem = nil
		e.stats.waiting.Add(-1)
		s.ph.aborted = true
		close(s.done)
	}
	e.waiting.Init()
}

// fixedSource serves one request on the fixed timing, without an engine:
// token i (1-based) exists at arrival + ttft + (i-1)*itl (arrival: when the
// handler received the request), on an absolute
// schedule that does not drift however late the writer is. A degradation
// stretches ttft as a prefill starting at arrival, and each itl as a decode
// step starting when the token before it was due.
type fixedSource struct {
	itl       time.Duration
	maxTokens int
	faults    *atomic.Pointer[faultSet]
	due       time.Time // when the next token exists
	timer     *time.Timer
	ph        phases
}

func newFixedSource(arrived time.Time, ttft, itl time.Duration, maxTokens int, faults *atomic.Pointer[faultSet]) *fixedSource {
	return &fixedSource{
		itl: itl, maxTokens: maxTokens, faults: faults,
		due: arrived.Add(faults.Load().degrade.prefill(arrived, ttft)),
		ph:  phases{arrived: arrived, admitted: arrived},
	}
}

func (f *fixedSource) wait(ctx context.Context, seen int) (int, bool, error) {
	if seen >= f.maxTokens {
		return seen, true, nil
	}
	if d := time.Until(f.due); d > 0 {
		if f.timer == nil {
			f.timer = time.NewTimer(d)
		} else {
			f.timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			f.timer.Stop()
			return seen, false, ctx.Err()
		case <-f.timer.C:
		}
	}
	now := time.Now()
	if seen == 0 {
		f.ph.firstToken = now
	}
	f.ph.lastToken = now
	deg := f.faults.Load().degrade
	if seen+1 == f.maxTokens {
		deg.complete()
		return seen + 1, true, nil
	}
	f.due = f.due.Add(deg.step(f.due, f.itl))
	return seen + 1, false, nil
}

func (f *fixedSource) phases() phases { return f.ph }

func (f *fixedSource) cached() int { return 0 } // no prefix cache without an engine
