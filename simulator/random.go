package simulator

import (
	"math"
	"math/rand/v2"
	"sync"
)

// z90 is the 90th percentile of the standard normal distribution.
const z90 = 1.2815515655446004

// randomStream is a seeded random stream shared by concurrent requests.
// Output lengths and faults are drawn from two separate streams, so switching
// faults on does not change the lengths a seed produces.
type randomStream struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRandomStream(seed, stream uint64) *randomStream {
	return &randomStream{r: rand.New(rand.NewPCG(seed, stream))}
}

// float64s fills u with uniform draws from [0, 1) in one critical section, so
// that one request's draws are consecutive in the stream.
func (s *randomStream) float64s(u []float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range u {
		u[i] = s.r.Float64()
	}
}

// sample draws a length from d.
//
// A lognormal with median m and 90th percentile p has mu = ln m and
// sigma = ln(p/m) / z90; median 200 and p90 800 give sigma = 1.08, so one
// draw in ten exceeds 800 tokens and one in a hundred exceeds 2,450.
func (s *randomStream) sample(d Distribution) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v int
	switch d.Distribution {
	case "fixed":
		return d.Value
	case "uniform":
		return d.Min + s.r.IntN(d.Max-d.Min+1)
	case "lognormal":
		sigma := math.Log(d.P90/d.Median) / z90
		v = int(math.Round(d.Median * math.Exp(sigma*s.r.NormFloat64())))
	}
	return min(max(v, d.Min), d.Max)
}
