package sampling

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSchedule: a read at once, then one an interval; a read longer than
// the interval delays the next instead of starting one beside it; errors
// are recorded as reads.
func TestSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		var errs int
		n := 0
		read := func(ctx context.Context) (int, error) {
			n++
			if n == 3 {
				time.Sleep(2500 * time.Millisecond) // a slow read
			}
			if n == 4 {
				return 0, errors.New("scrape failed")
			}
			return n, nil
		}
		l := Start(t.Context(), time.Second, read, func(v int, err error) {
			if err != nil {
				errs++
				return
			}
			at = append(at, time.Since(start))
		})
		time.Sleep(5500 * time.Millisecond)
		l.Stop()
		l.Stop() // again: nothing more
		// Reads at 0, 1, 2 (ends at 4.5), 4.5 (failed), 5.
		require.Equal(t, []time.Duration{0, time.Second, 4500 * time.Millisecond, 5 * time.Second}, at)
		require.Equal(t, 1, errs)
	})
}

// TestStopCutsARead: a read under way when Stop is called ends with the
// stop's cancel, and is not recorded.
func TestStopCutsARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recorded := 0
		l := Start(t.Context(), time.Second, func(ctx context.Context) (int, error) {
			<-ctx.Done() // a read that only Stop ends
			return 0, ctx.Err()
		}, func(int, error) { recorded++ })
		time.Sleep(10 * time.Second)
		l.Stop()
		require.Zero(t, recorded)
	})
}

// TestContextEnd: the caller's context ending stops the loop too.
func TestContextEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		reads := 0
		l := Start(ctx, time.Second, func(context.Context) (int, error) { reads++; return reads, nil }, func(int, error) {})
		time.Sleep(1500 * time.Millisecond)
		cancel()
		l.Stop()
		require.Equal(t, 2, reads)
	})
}

// TestBadInterval: an interval that is not positive is the caller's bug,
// told in its own goroutine (not the loop's, where it would kill the
// process from nowhere).
func TestBadInterval(t *testing.T) {
	require.PanicsWithValue(t, "sampling: interval must be positive, got 0s", func() {
		Start(t.Context(), 0, func(context.Context) (int, error) { return 0, nil }, func(int, error) {})
	})
}
