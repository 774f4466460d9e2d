package prober

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/workload"
)

// Arrivals is an arrival process: a sequence of arrivals whose due times are
// fixed in advance, independent of how requests fare. Next returns them in
// order; an arrival with a zero due time means there are no more.
type Arrivals interface {
	Next() Arrival
}

// Arrival is one request due at a time fixed by the arrival process.
type Arrival struct {
	Due time.Time
	// Seq identifies the arrival within its load, the same on every replica
	// and after a restart; the request's random draws are seeded from it.
	Seq uint64
	// Scenario is the index of the arrival's scenario in its load.
	Scenario int
	// Record and Pass: the trace record of a replayed arrival, and how many
	// times the replay has started over.
	Record *workload.Record
	Pass   int
	// Turn is set on a later turn of a conversation.
	Turn *Turn
}

// never stands for "no arrival pending" in timer arithmetic.
const never = 24 * time.Hour

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

func (c *constantArrivals) Next() Arrival {
	t := c.k*c.interval + c.phase
	c.k++
	return Arrival{Due: time.Unix(0, t), Seq: uint64(t)}
}

// renewalWindow is the longest span of time whose Poisson or gamma arrivals
// come from one random stream. The stream of window w is seeded from (seed,
// w), so any replica can compute the arrivals of any window. A window's
// arrivals are gaps drawn from its start: for Poisson, memoryless, this is
// one Poisson process across window boundaries too; for gamma, a renewal
// process that starts afresh every window.
//
// Starting a process mid-window draws the gaps from the window's start, so
// a window holds at most about arrivalsPerWindow arrivals: at rates above
// 1000/60 = 16.7 req/s the window is shorter (100 ms at 10,000 req/s), and
// the cost of starting a load does not grow with its rate.
const (
	renewalWindow     = int64(time.Minute)
	minRenewalWindow  = int64(time.Microsecond)
	arrivalsPerWindow = 1000
)

// windowFor returns the window of a process at rate per second, in ns.
func windowFor(rate float64) int64 {
	w := float64(arrivalsPerWindow) / rate * float64(time.Second)
	if !(w < float64(renewalWindow)) { // also NaN
		return renewalWindow
	}
	return max(int64(w), minRenewalWindow)
}

// renewalArrivals are the arrivals of a renewal process (independent gaps)
// anchored at the epoch.
type renewalArrivals struct {
	gap    func(*rand.Rand) float64 // ns
	seed   uint64
	length int64   // of a window, ns
	window int64   // index of the current window
	off    float64 // ns from the window's start to the last arrival drawn
	rng    *rand.Rand
}

// NewPoissonArrivals returns Poisson arrivals at rate per second, the first
// one at or after start.
func NewPoissonArrivals(rate float64, seed uint64, start time.Time) Arrivals {
	mean := float64(time.Second) / rate
	return newRenewal(func(r *rand.Rand) float64 { return r.ExpFloat64() * mean }, seed, windowFor(rate), start)
}

// NewGammaArrivals returns arrivals at rate per second whose gaps follow a
// gamma distribution of the given shape: shape 1 is Poisson, 0.25 doubles
// the coefficient of variation of the gaps (CV = 1/sqrt(shape)), bunching
// requests into bursts at the same mean rate.
func NewGammaArrivals(rate, shape float64, seed uint64, start time.Time) Arrivals {
	scale := float64(time.Second) / rate / shape
	return newRenewal(func(r *rand.Rand) float64 { return gammaVariate(r, shape) * scale }, seed, windowFor(rate), start)
}

func newRenewal(gap func(*rand.Rand) float64, seed uint64, length int64, start time.Time) *renewalArrivals {
	p := &renewalArrivals{gap: gap, seed: seed, length: length}
	from := start.UnixNano()
	p.enter(from / length)
	for p.peek() < from {
		p.advance()
	}
	return p
}

func (p *renewalArrivals) enter(w int64) {
	p.window, p.off = w, 0
	p.rng = rand.New(rand.NewPCG(p.seed, uint64(w)))
	p.advance()
}

// advance draws the next arrival, moving on to the next window when it falls
// beyond the current one.
func (p *renewalArrivals) advance() {
	p.off += p.gap(p.rng)
	if p.off >= float64(p.length) {
		p.enter(p.window + 1)
	}
}

func (p *renewalArrivals) peek() int64 { return p.window*p.length + int64(p.off) }

func (p *renewalArrivals) Next() Arrival {
	t := p.peek()
	p.advance()
	return Arrival{Due: time.Unix(0, t), Seq: uint64(t)}
}

// gammaVariate draws from Gamma(shape, 1) by Marsaglia and Tsang's method,
// boosted for shapes below 1.
func gammaVariate(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gammaVariate(r, shape+1) * math.Pow(r.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// replayArrivals are a trace's arrival times, scaled by a speed, from the
// moment the replay starts. At the end it starts over (if it loops) one mean
// gap after the last request.
type replayArrivals struct {
	start  time.Time
	trace  *workload.Trace
	speed  float64
	loop   bool
	period time.Duration // trace time of one pass, a mean gap included
	i      int
	pass   int
}

// NewReplayArrivals returns the arrivals of a trace replayed from start.
func NewReplayArrivals(t *workload.Trace, speed float64, loop bool, start time.Time) *replayArrivals {
	n := len(t.Records)
	period := t.Records[n-1].At
	if n > 1 {
		period += period / time.Duration(n-1)
	}
	if period <= 0 {
		period = time.Second
	}
	return &replayArrivals{start: start, trace: t, speed: speed, loop: loop, period: period}
}

func (p *replayArrivals) Next() Arrival {
	if p.i == len(p.trace.Records) {
		if !p.loop {
			return Arrival{}
		}
		p.i, p.pass = 0, p.pass+1
	}
	rec := &p.trace.Records[p.i]
	at := time.Duration(p.pass)*p.period + rec.At
	a := Arrival{
		Due:    p.start.Add(time.Duration(float64(at) / p.speed)),
		Seq:    uint64(p.pass)<<32 | uint64(p.i),
		Record: rec,
		Pass:   p.pass,
	}
	p.i++
	return a
}

// mixArrivals draws the scenario of each arrival of a base process by
// weight. The draw is a hash of the load's seed and the arrival's Seq, so it
// is the same on every replica and after a restart, and it is made before
// the in-flight check, so drops carry the right label.
type mixArrivals struct {
	base    Arrivals
	seed    uint64
	weights []float64
}

// NewMixArrivals draws each arrival's scenario index with the given weights.
func NewMixArrivals(base Arrivals, seed uint64, weights []float64) Arrivals {
	if len(weights) <= 1 {
		return base
	}
	return &mixArrivals{base: base, seed: seed, weights: weights}
}

func (m *mixArrivals) Next() Arrival {
	a := m.base.Next()
	a.Scenario = workload.Pick(m.weights, unitFloat(m.seed, a.Seq, 0))
	return a
}

// shardSalt is the decision of unitFloat that picks an arrival's shard.
const shardSalt = 0x5ead

// shardArrivals are the arrivals of a load that fall to one shard: every
// shard computes the same whole schedule (epoch-anchored, seeded from the
// load) and keeps the arrivals whose draw on (seed, Seq) falls in its
// share, so N shards together send each arrival of it exactly once, and
// each sends a random 1/N of it: Poisson at rate/N for a Poisson load. A
// shard of constant arrivals sees uneven gaps; the shards together send
// the constant schedule.
type shardArrivals struct {
	base     Arrivals
	seed     uint64
	index, n int
}

// NewShardArrivals returns the arrivals of base that fall to shard (base
// itself when the load is not split).
func NewShardArrivals(base Arrivals, seed uint64, shard config.Shard) Arrivals {
	if !shard.Sharded() {
		return base
	}
	return &shardArrivals{base: base, seed: seed, index: shard.Index, n: shard.Count}
}

func (s *shardArrivals) Next() Arrival {
	for {
		a := s.base.Next()
		if a.Due.IsZero() || shardOf(s.seed, a.Seq, s.n) == s.index {
			return a // a zero Due is the end of a finite schedule (a replay that does not loop)
		}
	}
}

// shardOf is the shard of n an arrival falls to.
func shardOf(seed, seq uint64, n int) int {
	return min(int(unitFloat(seed, seq, shardSalt)*float64(n)), n-1)
}

// unitFloat is a uniform draw from [0, 1) determined by its arguments: one
// decision (salt) of one arrival (seq) of one load (seed). It hashes them
// with SplitMix64's finalizer, so it allocates nothing.
func unitFloat(seed, seq, salt uint64) float64 {
	z := seed ^ seq*0x9e3779b97f4a7c15 ^ salt*0xc2b2ae3d27d4eb4f
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}

// conversationStarts returns the rates at which a load's scenarios start
// conversations, relative to one another: a conversation of n turns is n
// requests, so a scenario of weight w starts w/n of them. Requests, later
// turns included, then come in the ratio of the weights: a 1:1 mix of a
// one-turn scenario and a four-turn one starts conversations 4:1.
func conversationStarts(spec *config.LoadSpec, turns []int) []float64 {
	starts := make([]float64, len(spec.Scenarios))
	for i, s := range spec.Scenarios {
		starts[i] = s.Weight / float64(turns[i])
	}
	return starts
}

// arrivalsFor chooses the arrival process of an open-loop load from its
// spec, starting at now: the trace of a replay, else constant, Poisson or
// gamma arrivals at the rate that makes the spec's request rate once later
// conversation turns are added, each arrival's scenario drawn by weight.
// seed is the load's (Seed of its name), so its phase and draws are the
// same after a restart or rate change and on every replica.
func arrivalsFor(spec *config.LoadSpec, turns []int, seed uint64, now time.Time) Arrivals {
	return NewShardArrivals(wholeArrivals(spec, turns, seed, now), seed, spec.Shard)
}

// wholeArrivals are the arrivals of the whole load, every shard's.
func wholeArrivals(spec *config.LoadSpec, turns []int, seed uint64, now time.Time) Arrivals {
	if r := spec.Replay; spec.Arrival == config.ArrivalReplay && r != nil {
		return NewReplayArrivals(r.Trace, r.Speed, r.Loops(), now)
	}
	starts := conversationStarts(spec, turns)
	sumW, sumStarts := 0.0, 0.0
	for i, s := range spec.Scenarios {
		sumW += s.Weight
		sumStarts += starts[i]
	}
	rate := spec.Rate * sumStarts / sumW
	var arrivals Arrivals
	switch spec.Arrival {
	case config.ArrivalConstant:
		arrivals = NewConstantArrivals(rate, seed, now)
	case config.ArrivalGamma:
		arrivals = NewGammaArrivals(rate, spec.Burstiness, seed, now)
	default:
		arrivals = NewPoissonArrivals(rate, seed, now)
	}
	return NewMixArrivals(arrivals, seed, starts)
}
