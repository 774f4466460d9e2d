// Package ratelog lets one log line through per interval and counts the
// lines it holds back, so that the next one can say how many there were: a
// target failing every request at 50 req/s logs one line every 10 s, not
// 500, and that line says "499 not logged".
package ratelog

import (
	"sync"
	"time"
)

// Limiter allows one line per interval. Its zero value is not usable: make
// it with New. It is safe for concurrent use.
type Limiter struct {
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// New returns a limiter that allows one line every interval; the first
// line is always allowed.
func New(every time.Duration) *Limiter { return &Limiter{every: every} }

// Allow reports whether a line may be logged at now, and if so how many
// were held back since the last one allowed.
func (l *Limiter) Allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
