package prober_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/prober"
)

// loopObserver counts what a closed loop reports, and its requests in
// flight.
type loopObserver struct {
	mu                        sync.Mutex
	scheduled, sent, finished int
	inFlight, maxInFlight     int
	maxLag                    time.Duration
}

func (o *loopObserver) Scheduled()                { o.mu.Lock(); o.scheduled++; o.mu.Unlock() }
func (o *loopObserver) Dropped(prober.DropReason) { panic("a closed loop never drops") }
func (o *loopObserver) Sent(_ time.Time, lag time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sent++
	o.inFlight++
	o.maxInFlight = max(o.maxInFlight, o.inFlight)
	o.maxLag = max(o.maxLag, lag)
}

func (o *loopObserver) Finished(*prober.Result, *prober.Measurement) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished++
	o.inFlight--
}

// take returns the sends since the last take and the most requests in
// flight meanwhile.
func (o *loopObserver) take() (sent, maxInFlight int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	sent, maxInFlight = o.sent, o.maxInFlight
	o.sent, o.maxInFlight = 0, o.inFlight
	return sent, maxInFlight
}

// TestClosedLoopChangesAtOnce: in fake time, with requests of 100 ms, a
// closed loop's clients and maximum rate change in place and take effect
// at once: 16 clients capped at 2 req/s send 2 a second; raised to 1,000
// req/s they send 16 / 0.1 s = 160 a second from the next second on (no
// send booked at the old rate holds them back); lowered to 1 client, one
// request is in flight at most, 10 a second.
func TestClosedLoopChangesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &loopObserver{}
		send := func(ctx context.Context, a prober.Arrival, started func(time.Time), done func()) {
			go func() {
				defer done()
				started(time.Now())
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
				obs.Finished(nil, nil)
			}()
		}
		loop := prober.NewClosedLoop(16, 0, 2, 1, []float64{1}, send, obs)
		ctx, cancel := context.WithCancel(t.Context())
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			loop.Run(ctx)
		}()

		time.Sleep(5*time.Second - time.Nanosecond)
		sent, _ := obs.take()
		require.Equal(t, 10, sent, "2 req/s for 5 s")

		loop.Set(16, 0, 1000)
		time.Sleep(time.Second - time.Nanosecond)
		sent, inFlight := obs.take()
		require.InDelta(t, 160, sent, 2, "16 clients of 100 ms requests")
		require.Equal(t, 16, inFlight)

		loop.Set(1, 0, 1000)
		time.Sleep(100 * time.Millisecond) // the requests in flight end
		obs.take()
		time.Sleep(time.Second - time.Nanosecond)
		sent, inFlight = obs.take()
		require.Equal(t, 1, inFlight)
		require.InDelta(t, 10, sent, 1, "one client of 100 ms requests")

		cancel()
		<-ran
		loop.Drain(time.Second)
		require.Zero(t, loop.InFlight())
		require.Zero(t, obs.maxLag, "a closed-loop request is due when it is sent")
		require.Equal(t, obs.scheduled, obs.finished, "every arrival was sent and reported")
	})
}
