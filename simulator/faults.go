package simulator

// The faults a request draws, and how a connection is reset.

import (
	"math"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// codeRate is one injected HTTP error.
type codeRate struct {
	code int
	rate float64
}

// faultSet is Faults with the error codes in a fixed order for drawing, and
// the state of the degradation, which starts when the set is stored.
type faultSet struct {
	Faults
	codes   []codeRate
	degrade *degradation // nil: no degradation
}

// degradation is a degrade fault in effect: its configuration, when it was
// set and how many requests have completed since. Its methods work on a nil
// *degradation, which degrades nothing.
type degradation struct {
	cfg       DegradeConfig
	since     time.Time    // when the fault was set (monotonic clock)
	completed atomic.Int64 // requests that got their last token since
}

// maxPhase bounds a degraded phase, so that the arithmetic cannot overflow
// (about 73 years: never reached in practice).
const maxPhase = time.Duration(math.MaxInt64 / 4)

// at returns the prefill and decode factors and the leak at now.
func (d *degradation) at(now time.Time) (prefill, decode float64, leak time.Duration) {
	if d == nil {
		return 1, 1, 0
	}
	x := max(float64(now.Sub(d.since))/float64(d.cfg.Per), 0)
	prefill, decode = 1+d.cfg.Prefill*x, 1+d.cfg.Decode*x
	if n, per, most := d.completed.Load(), time.Duration(d.cfg.Leak), time.Duration(d.cfg.LeakMax); per > 0 && n > 0 {
		leak = most
		if n <= int64(most/per) { // n*per <= most, without overflow
			leak = time.Duration(n) * per
		}
	}
	return prefill, decode, leak
}

// prefill returns the degraded length of a prefill of nominal length base
// that starts at now.
func (d *degradation) prefill(now time.Time, base time.Duration) time.Duration {
	if d == nil {
		return base
	}
	f, _, _ := d.at(now)
	return scale(base, f)
}

// step returns the degraded length of a decode step of nominal length base
// that starts at now: scaled, plus the leak.
func (d *degradation) step(now time.Time, base time.Duration) time.Duration {
	if d == nil {
		return base
	}
	_, f, leak := d.at(now)
	return min(scale(base, f)+min(leak, maxPhase), maxPhase)
}

// complete counts a request that got its last token.
func (d *degradation) complete() {
	if d != nil {
		d.completed.Add(1)
	}
}

func scale(d time.Duration, f float64) time.Duration {
	if v := float64(d) * f; v < float64(maxPhase) {
		return time.Duration(v)
	}
	return maxPhase
}

// faultPlan is what will go wrong with one request.
type faultPlan struct {
	status                                       int
	reset, stall, malformed, noDone, streamError bool
	stallFor, headerDelay                        time.Duration
}

// plan draws a request's faults: five consecutive draws from the fault
// stream per request, whatever the rates, so that a seed gives the same
// sequence of decisions for the same rates; and one from a stream of its
// own for the in-stream error, which came later, so that a seed still gives
// the other faults the sequence it gave before there were stream errors.
func (s *Simulator) plan() faultPlan {
	f := s.faults.Load()
	var u [5]float64
	s.faultRand.float64s(u[:])
	var e [1]float64
	s.streamErrorRand.float64s(e[:])
	p := faultPlan{
		reset:       u[1] < f.ResetRate,
		stall:       u[2] < f.Stall.Rate,
		malformed:   u[3] < f.MalformedRate,
		noDone:      u[4] < f.MissingDoneRate,
		streamError: e[0] < f.StreamErrorRate,
		stallFor:    time.Duration(f.Stall.Duration),
		headerDelay: time.Duration(f.HeaderDelay),
	}
	cum := 0.0
	for _, c := range f.codes {
		cum += c.rate
		if u[0] < cum {
			p.status = c.code
			break
		}
	}
	return p
}

// resetConnection closes the client connection with a TCP RST, as a crashed
// server or a load balancer dropping the stream would.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // not HTTP/1: abort the stream instead
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
