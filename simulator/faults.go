package simulator

// The faults a request draws, and how a connection is reset.

import (
	"net"
	"net/http"
	"time"
)

// codeRate is one injected HTTP error.
type codeRate struct {
	code int
	rate float64
}

// faultSet is Faults with the error codes in a fixed order for drawing.
type faultSet struct {
	Faults
	codes []codeRate
}

// faultPlan is what will go wrong with one request.
type faultPlan struct {
	status                          int
	reset, stall, malformed, noDone bool
	stallFor, headerDelay           time.Duration
}

// plan draws a request's faults: five consecutive draws from the fault stream
// per request, whatever the rates, so that a seed gives the same sequence of
// decisions for the same rates.
func (s *Simulator) plan() faultPlan {
	f := s.faults.Load()
	var u [5]float64
	s.faultRand.float64s(u[:])
	p := faultPlan{
		reset:       u[1] < f.ResetRate,
		stall:       u[2] < f.Stall.Rate,
		malformed:   u[3] < f.MalformedRate,
		noDone:      u[4] < f.MissingDoneRate,
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
