package ratelog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLimiter: the first line passes; within the interval lines are held
// back and counted; the first one after it passes with their count.
func TestLimiter(t *testing.T) {
	const every = time.Minute
	l := New(every)
	t0 := time.Unix(1_000_000, 0)
	for _, step := range []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{30 * time.Second, false, 0},
		{every, true, 2},
		{every + time.Second, false, 0},
		{3 * every, true, 1},
		{5 * every, true, 0},
	} {
		ok, n := l.Allow(t0.Add(step.at))
		require.Equal(t, step.ok, ok, "at %s", step.at)
		require.Equal(t, step.suppressed, n, "at %s", step.at)
	}
}
