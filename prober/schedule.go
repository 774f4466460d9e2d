package prober

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals is an arrival process: a sequence of absolute due times, fixed in
// advance and independent of how requests fare. Next returns them in order.
type Arrivals interface {
	Next() time.Time
}

// Seed derives a load's seed from its identity, so its phase and random
// streams are the same after a restart or reload and on every replica.
func Seed(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// constantArrivals are due every interval on a grid anchored at the Unix
// epoch: arrival k is at k*interval + phase. At 0.5 req/s and a phase of
// 1.3s they are due at ...:00.3 plus 1.3s, every 2s, however long the prober
// has run, so nothing drifts.
type constantArrivals struct {
	interval, phase int64 // ns
	k               int64
}

// NewConstantArrivals returns arrivals at rate per second, the first one at
// or after start, with a phase derived from seed.
func NewConstantArrivals(rate float64, seed uint64, start time.Time) Arrivals {
	interval := max(int64(math.Round(float64(time.Second)/rate)), 1)
	phase := int64(seed % uint64(interval))
	k := ceilDiv(start.UnixNano()-phase, interval)
	return &constantArrivals{interval: interval, phase: phase, k: k}
}

func (c *constantArrivals) Next() time.Time {
	t := time.Unix(0, c.k*c.interval+c.phase)
	c.k++
	return t
}

// poissonWindow is the span of time whose Poisson arrivals come from one
// random stream. The stream of window w is seeded from (seed, w), so any
// replica can compute the arrivals of any window; a window's arrivals are
// exponential gaps from its start, which, the process being memoryless, are
// a Poisson process across window boundaries too.
const poissonWindow = int64(time.Minute)

// poissonArrivals are the arrivals of a Poisson process anchored at the epoch.
type poissonArrivals struct {
	rate   float64 // per nanosecond
	seed   uint64
	window int64   // index of the current window
	off    float64 // ns from the window's start to the last arrival drawn
	rng    *rand.Rand
}

// NewPoissonArrivals returns Poisson arrivals at rate per second, the first
// one at or after start.
func NewPoissonArrivals(rate float64, seed uint64, start time.Time) Arrivals {
	p := &poissonArrivals{rate: rate / float64(time.Second), seed: seed}
	from := start.UnixNano()
	p.enter(from / poissonWindow)
	for p.peek() < from {
		p.advance()
	}
	return p
}

func (p *poissonArrivals) enter(w int64) {
	p.window, p.off = w, 0
	p.rng = rand.New(rand.NewPCG(p.seed, uint64(w)))
	p.advance()
}

// advance draws the next arrival, moving on to the next window when it falls
// beyond the current one.
func (p *poissonArrivals) advance() {
	p.off += p.rng.ExpFloat64() / p.rate
	if p.off >= float64(poissonWindow) {
		p.enter(p.window + 1)
	}
}

func (p *poissonArrivals) peek() int64 { return p.window*poissonWindow + int64(p.off) }

func (p *poissonArrivals) Next() time.Time {
	t := time.Unix(0, p.peek())
	p.advance()
	return t
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}
