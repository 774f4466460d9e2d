package capacity

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// How late the prober reads, per request. A request's TTFT is stamped when
// its first chunk is parsed: a prober that runs late (other processes hold
// the CPUs, a GC pause, its own CPU spent) stamps it late, and the TTFT
// looks worse than the server made it. It never looks better: every stamp
// is taken at or after the moment its bytes arrived. A level that met its
// objectives while the prober was late met them in spite of it; a level
// that missed may have missed because of it, and the question is by how
// much each request could have been stamped late.
//
// The stall sampler answers it: a goroutine that sleeps stallPeriod at a
// time and records, each time it wakes later than due by more than
// stallFloor, when it was due and how late it woke. A stall of the process
// (or of its goroutines' turn to run) that delayed a read also delayed the
// sampler's wake-up due within it, and a read that arrived during a stall
// waited at most that stall's length. A request's read delay is then at
// most stallPeriod + stallFloor + the longest lateness of a stall
// overlapping its flight: 2.5 ms on a quiet host, 40 ms on a 2-core host
// whose CPUs a build holds. The sampler costs 500 wake-ups a second, about
// 0.2% of a CPU, and runs only while a step test does.

// stallPeriod is how often the sampler wakes; stallFloor the lateness it
// keeps (a Go timer wakes within tens of microseconds on an idle host).
const (
	stallPeriod = 2 * time.Millisecond
	stallFloor  = 500 * time.Microsecond
)

// maxStalls bounds the stalls kept: 1 M stalls are 24 MiB, over half an
// hour of a host where every wake-up is late.
const maxStalls = 1 << 20

// stall is one late wake-up of the sampler: the process could not run it
// from due until due + late.
type stall struct {
	due  time.Time
	late time.Duration
}

// stallSampler records the prober's late wake-ups while it runs.
type stallSampler struct {
	mu     sync.Mutex
	stalls []stall // in order of due
	quit   chan struct{}
	done   chan struct{}
}

// startStalls starts a stall sampler; stop ends it.
func startStalls() *stallSampler {
	s := &stallSampler{quit: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *stallSampler) run() {
	defer close(s.done)
	timer := time.NewTimer(stallPeriod)
	defer timer.Stop()
	due := time.Now().Add(stallPeriod)
	for {
		select {
		case <-s.quit:
			return
		case <-timer.C:
		}
		now := time.Now()
		if late := now.Sub(due); late > stallFloor {
			s.add(stall{due: due, late: late})
		}
		due = now.Add(stallPeriod)
		timer.Reset(stallPeriod)
	}
}

func (s *stallSampler) add(st stall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.stalls) >= maxStalls {
		// The oldest half goes: a level needs the stalls of its own
		// time.
		s.stalls = slices.Delete(s.stalls, 0, maxStalls/2)
	}
	s.stalls = append(s.stalls, st)
}

// stop ends the sampling.
func (s *stallSampler) stop() {
	close(s.quit)
	<-s.done
}

// between returns a copy of the stalls that overlap [from, to].
func (s *stallSampler) between(from, to time.Time) []stall {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []stall
	for _, st := range s.stalls {
		if st.due.After(to) {
			break
		}
		if !st.due.Add(st.late).Before(from) {
			out = append(out, st)
		}
	}
	return out
}

// readDelays bounds how late the prober could have read each of spans
// (from, to: a request's flight), given the stalls of their time (in
// order of due): stallPeriod + stallFloor + the longest lateness of a
// stall overlapping the span. A span no stall overlapped gets 2.5 ms.
func readDelays(stalls []stall, spans [][2]time.Time) []time.Duration {
	out := make([]time.Duration, len(spans))
	longestAll := maxLate(stalls)
	for i, sp := range spans {
		from, to := sp[0], sp[1]
		var longest time.Duration
		// Stalls are in order of due and none is longer than the
		// longest: the first that can overlap starts after from less
		// the longest lateness.
		j := sort.Search(len(stalls), func(k int) bool { return !stalls[k].due.Before(from.Add(-longestAll)) })
		for ; j < len(stalls) && !stalls[j].due.After(to); j++ {
			if st := stalls[j]; !st.due.Add(st.late).Before(from) {
				longest = max(longest, st.late)
			}
		}
		out[i] = stallPeriod + stallFloor + longest
	}
	return out
}

// maxLate is the longest lateness of stalls.
func maxLate(stalls []stall) time.Duration {
	var m time.Duration
	for _, st := range stalls {
		m = max(m, st.late)
	}
	return m
}
