package capacity

import (
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
// stallFloor, how late it woke. A stall of the process that delayed a
// read also delayed the sampler's wake-up due within it, and a read that
// arrived during a stall waited at most that stall's length. A request's
// read delay is then at most stallPeriod + stallFloor + the longest
// lateness of a stall overlapping its flight, plus the level's scheduler
// latency P99 (effect.go: a goroutine woken by a timer runs ahead of
// those a read woke, and may be on time while they wait): 2.5 ms on a
// quiet host, 40 ms on a 2-core host whose CPUs a build holds. The
// sampler costs 500 wake-ups a second, about 0.2% of a CPU, and runs only
// while a step test does.
//
// The stalls are kept as the longest of each 10 ms (stallBucket), in a
// ring of two hours (stallRetention, longer than any level: 5.8 MB): on a
// host where every wake-up is late, 500 stalls a second would otherwise
// pile up.

// stallPeriod is how often the sampler wakes; stallFloor the lateness it
// keeps (a Go timer wakes within tens of microseconds on an idle host).
const (
	stallPeriod = 2 * time.Millisecond
	stallFloor  = 500 * time.Microsecond
)

// stallBucket is the resolution the stalls are kept at, stallRetention how
// long.
const (
	stallBucket    = 10 * time.Millisecond
	stallRetention = 2 * time.Hour
	stallBuckets   = int64(stallRetention / stallBucket)
)

// stall is the longest late wake-up of the sampler due within a bucket
// from due: the process could not run it for late, ending at the latest
// at end (the bucket's end plus late).
type stall struct {
	due, end time.Time
	late     time.Duration
}

// stallSampler records the prober's late wake-ups while it runs.
type stallSampler struct {
	mu     sync.Mutex
	origin time.Time
	// ids and lates are the ring: bucket i holds bucket number ids[i]
	// (since origin) and its longest lateness in microseconds.
	ids     []int64
	lates   []int32
	longest time.Duration // of every stall kept so far
	quit    chan struct{}
	done    chan struct{}
}

// startStalls starts a stall sampler; stop ends it.
func startStalls() *stallSampler {
	s := newStalls(time.Now())
	go s.run()
	return s
}

// newStalls is a sampler whose buckets start at origin, not running.
func newStalls(origin time.Time) *stallSampler {
	s := &stallSampler{origin: origin, ids: make([]int64, stallBuckets), lates: make([]int32, stallBuckets),
		quit: make(chan struct{}), done: make(chan struct{})}
	for i := range s.ids {
		s.ids[i] = -1
	}
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
			s.add(due, late)
		}
		due = now.Add(stallPeriod)
		timer.Reset(stallPeriod)
	}
}

// add records a wake-up due at due, late by late.
func (s *stallSampler) add(due time.Time, late time.Duration) {
	b := int64(due.Sub(s.origin) / stallBucket)
	if b < 0 {
		return
	}
	late = min(late, time.Duration(1<<31-1)*time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := b % stallBuckets
	if s.ids[i] != b {
		s.ids[i], s.lates[i] = b, 0
	}
	s.lates[i] = max(s.lates[i], int32(late/time.Microsecond))
	s.longest = max(s.longest, late)
}

// stop ends the sampling.
func (s *stallSampler) stop() {
	close(s.quit)
	<-s.done
}

// between returns the stalls that may overlap [from, to], in order of
// due: the buckets from the longest stall's length before from.
func (s *stallSampler) between(from, to time.Time) []stall {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last := int64(to.Sub(s.origin) / stallBucket)
	first := max(int64(from.Add(-s.longest-stallBucket).Sub(s.origin)/stallBucket), last-stallBuckets+1, 0)
	var out []stall
	for b := first; b <= last; b++ {
		i := b % stallBuckets
		if s.ids[i] != b || s.lates[i] == 0 {
			continue
		}
		due := s.origin.Add(time.Duration(b) * stallBucket)
		late := time.Duration(s.lates[i]) * time.Microsecond
		out = append(out, stall{due: due, end: due.Add(stallBucket + late), late: late})
	}
	return out
}

// readDelays bounds how late the prober could have read each of spans
// (from, to: a request's flight), given the stalls of their time (in
// order of due): stallPeriod + stallFloor + the longest lateness of a
// stall overlapping the span. A span no stall overlapped gets 2.5 ms.
func readDelays(stalls []stall, spans [][2]time.Time) []time.Duration {
	out := make([]time.Duration, len(spans))
	longestAll := maxLate(stalls) + stallBucket
	for i, sp := range spans {
		from, to := sp[0], sp[1]
		var longest time.Duration
		// Stalls are in order of due and none ends later than
		// stallBucket after its due plus the longest lateness: the
		// first that can overlap is due after from less that.
		j := sort.Search(len(stalls), func(k int) bool { return !stalls[k].due.Before(from.Add(-longestAll)) })
		for ; j < len(stalls) && !stalls[j].due.After(to); j++ {
			if st := stalls[j]; !st.end.Before(from) {
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
