package validity

import (
	"math"
	"sync"
	"time"
)

// bounds are the upper bounds of a window's duration buckets: powers of
// two from 64 µs to about 67 s, so a quantile is known within a factor of
// two of its value, which is what a threshold of milliseconds needs (a P99
// of 12 ms reads as "between 8.2 and 16.4 ms", above a 10 ms threshold
// either way only when it is above 16.4 ms or its bucket is checked
// against the count above the threshold: see OverShare).
var bounds = func() []time.Duration {
	var b []time.Duration
	for d := 64 * time.Microsecond; d <= 70*time.Second; d *= 2 {
		b = append(b, d)
	}
	return b
}()

// Window counts durations over the last n seconds, one slot a second: the
// share of them above a threshold and their quantiles, in constant memory
// whatever the rate (at 1,000 sends a second, 60 slots of 21 counters).
// It is safe for concurrent use.
type Window struct {
	mu        sync.Mutex
	threshold time.Duration
	slots     []slot
	now       func() time.Time
}

type slot struct {
	sec     int64 // the Unix second the slot counts; stale when older than the window
	n, over int64 // observations, and those above the threshold
	buckets [32]int64
}

// NewWindow returns a window of the last seconds seconds that also counts
// the observations above threshold exactly; now is the clock (time.Now).
func NewWindow(seconds int, threshold time.Duration, now func() time.Time) *Window {
	return &Window{threshold: threshold, slots: make([]slot, max(seconds, 1)), now: now}
}

// Observe counts one duration, now.
func (w *Window) Observe(d time.Duration) {
	sec := w.now().Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.slots[int(sec%int64(len(w.slots)))]
	if s.sec != sec {
		*s = slot{sec: sec}
	}
	s.n++
	if d > w.threshold {
		s.over++
	}
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	s.buckets[i]++
}

// Stats are a window's counts over its last seconds.
type Stats struct {
	N    int64
	Over int64 // observations above the window's threshold
	// P99 is the upper bound of the bucket holding the 99th percentile
	// (0 without observations; math.MaxInt64 above the last bound).
	P99 time.Duration
}

// OverShare is the share of observations above the threshold: above 1%,
// the P99 is above the threshold, exactly.
func (s Stats) OverShare() float64 {
	if s.N == 0 {
		return 0
	}
	return float64(s.Over) / float64(s.N)
}

// Stats returns the window's counts, now.
func (w *Window) Stats() Stats {
	sec := w.now().Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	var st Stats
	var buckets [32]int64
	for i := range w.slots {
		s := &w.slots[i]
		if s.sec <= sec-int64(len(w.slots)) || s.sec > sec {
			continue
		}
		st.N += s.n
		st.Over += s.over
		for j, c := range s.buckets {
			buckets[j] += c
		}
	}
	if st.N == 0 {
		return st
	}
	rank := int64(math.Ceil(0.99 * float64(st.N)))
	var seen int64
	for j, c := range buckets {
		if seen += c; seen >= rank {
			if j < len(bounds) {
				st.P99 = bounds[j]
			} else {
				st.P99 = math.MaxInt64
			}
			break
		}
	}
	return st
}
