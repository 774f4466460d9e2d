package prober

import (
	"github.com/sloprober/sloprober/config"

	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// countingObserver counts what a scheduler reports.
type countingObserver struct {
	mu                    sync.Mutex
	scheduled, sent, done int
	dropped               map[DropReason]int
	results               []*Result
}

func newCountingObserver() *countingObserver {
	return &countingObserver{dropped: map[DropReason]int{}}
}

func (o *countingObserver) Scheduled()                    { o.mu.Lock(); o.scheduled++; o.mu.Unlock() }
func (o *countingObserver) Dropped(r DropReason)          { o.mu.Lock(); o.dropped[r]++; o.mu.Unlock() }
func (o *countingObserver) Sent(time.Time, time.Duration) { o.mu.Lock(); o.sent++; o.mu.Unlock() }
func (o *countingObserver) Finished(r *Result, _ *Measurement) {
	o.mu.Lock()
	o.done++
	o.results = append(o.results, r)
	o.mu.Unlock()
}

// sendLog records when each arrival was sent, and holds each request for hold.
type sendLog struct {
	mu    sync.Mutex
	due   []time.Time
	sent  []time.Time
	hold  time.Duration
	stall func(n int) time.Duration // blocks the scheduler itself before the n-th send
	obs   *countingObserver
}

func (l *sendLog) send(ctx context.Context, a Arrival, started func(time.Time), done func()) {
	l.mu.Lock()
	n := len(l.due)
	l.due = append(l.due, a.Due)
	l.sent = append(l.sent, time.Now())
	l.mu.Unlock()
	if l.stall != nil {
		time.Sleep(l.stall(n)) // the prober itself stalls (GC, CPU starvation)
	}
	go func() {
		defer done()
		r := &Result{Scheduled: a.Due, Sent: time.Now()}
		started(r.Sent)
		select {
		case <-time.After(l.hold):
		case <-ctx.Done():
			r.Cause = context.Cause(ctx)
		}
		r.Outcome = Classify(r)
		m := Measure(r, nil)
		l.obs.Finished(r, &m)
	}()
}

// runFor runs a scheduler for d, then drains it with grace.
func runFor(s *Scheduler, d, grace time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	time.Sleep(d)
	cancel()
	<-done
	s.Drain(grace)
}

// TestConstantNoDrift: 10,000 intervals at 10 req/s are sent exactly on the
// epoch-anchored grid, with zero lag, none missed.
func TestConstantNoDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const seed = 12345678 // phase 12.345678ms at 100ms intervals
		obs := newCountingObserver()
		log := &sendLog{obs: obs}
		start := time.Now()
		s := NewScheduler(NewConstantArrivals(10, seed, start), 10, nil, time.Second, log.send, obs)
		runFor(s, 1000*time.Second, time.Second)

		require.Equal(t, 10000, obs.scheduled)
		require.Equal(t, 10000, obs.sent)
		require.Equal(t, 10000, obs.done)
		require.Zero(t, obs.dropped[DropLate]+obs.dropped[DropMaxInFlight]+obs.dropped[DropShutdown])
		phase := time.Duration(seed % uint64(100*time.Millisecond))
		for k := range log.due {
			want := time.Unix(0, 0).Add(time.Duration(start.UnixNano()) + phase + time.Duration(k)*100*time.Millisecond)
			require.True(t, want.Equal(log.due[k]), "arrival %d due %v, want %v", k, log.due[k], want)
			require.True(t, log.sent[k].Equal(log.due[k]), "arrival %d sent %v late", k, log.sent[k].Sub(log.due[k]))
		}
	})
}

// TestDropAtMaxInFlight: an arrival that finds no free slot is dropped and
// counted, never delayed.
func TestDropAtMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := newCountingObserver()
		log := &sendLog{obs: obs, hold: 1050 * time.Millisecond}
		start := time.Now()
		arrivals := NewConstantArrivals(10, 1, start)
		s := NewScheduler(arrivals, 3, nil, time.Second, log.send, obs)
		runFor(s, 10*time.Second, 2*time.Second)

		// The same schedule, simulated: a slot frees hold after its send.
		check := NewConstantArrivals(10, 1, start)
		var busy []time.Time
		sent, dropped := 0, 0
		for due := check.Next().Due; due.Before(start.Add(10 * time.Second)); due = check.Next().Due {
			free := busy[:0]
			for _, b := range busy {
				if b.After(due) {
					free = append(free, b)
				}
			}
			busy = free
			if len(busy) < 3 {
				busy = append(busy, due.Add(log.hold))
				sent++
			} else {
				dropped++
			}
		}
		require.Equal(t, 100, obs.scheduled-obs.dropped[DropShutdown])
		require.Equal(t, sent, obs.sent)
		require.Equal(t, dropped, obs.dropped[DropMaxInFlight])
		require.Equal(t, 28, sent, "three sends every 1.1s: a slot frees 1.05s after its send, the next arrival takes it")
		for k := range log.due {
			require.True(t, log.sent[k].Equal(log.due[k]), "a send was delayed")
		}
	})
}

// TestGlobalLimiter: the global cap is shared by loads.
func TestGlobalLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		global := NewLimiter(4)
		obsA, obsB := newCountingObserver(), newCountingObserver()
		logA := &sendLog{obs: obsA, hold: time.Hour}
		logB := &sendLog{obs: obsB, hold: time.Hour}
		a := NewScheduler(NewConstantArrivals(10, 1, time.Now()), 3, global, time.Second, logA.send, obsA)
		b := NewScheduler(NewConstantArrivals(10, 2, time.Now()), 3, global, time.Second, logB.send, obsB)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { a.Run(ctx) })
		wg.Go(func() { b.Run(ctx) })
		time.Sleep(5 * time.Second)
		cancel()
		wg.Wait()
		require.Equal(t, 4, global.InFlight())
		require.Equal(t, 4, obsA.sent+obsB.sent)
		require.Equal(t, obsA.scheduled+obsB.scheduled-4, obsA.dropped[DropMaxInFlight]+obsB.dropped[DropMaxInFlight])
		wg.Go(func() { a.Drain(0) })
		wg.Go(func() { b.Drain(0) })
		wg.Wait()
		require.Zero(t, global.InFlight())
	})
}

// TestLateDropsAfterStall: when the prober itself stalls, the arrivals due
// more than the late threshold ago are dropped, not fired as a burst.
func TestLateDropsAfterStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := newCountingObserver()
		log := &sendLog{obs: obs, stall: func(n int) time.Duration {
			if n == 5 {
				return 3 * time.Second
			}
			return 0
		}}
		s := NewScheduler(NewConstantArrivals(10, 1, time.Now()), 100, nil, time.Second, log.send, obs)
		runFor(s, 10*time.Second, time.Second)

		// Arrival 5 stalls the scheduler 3s. Arrivals 6..35 are then due:
		// those due more than 1s before the scheduler woke (6..24) are late;
		// 25 (exactly 1s late) to 35 are sent, late by 1s down to 0.
		require.Equal(t, 100, obs.scheduled)
		require.Equal(t, 19, obs.dropped[DropLate])
		require.Equal(t, 81, obs.sent)
		lags := map[time.Duration]int{}
		for k := range log.sent {
			lags[log.sent[k].Sub(log.due[k])]++
		}
		require.Equal(t, 81-10, lags[0])
		for i := 1; i <= 10; i++ {
			require.Equal(t, 1, lags[time.Duration(i)*100*time.Millisecond], "lag %d00ms", i)
		}
	})
}

// TestDrainDropsAndCancels: during the grace period due arrivals are dropped
// (shutdown); requests still running after it are cancelled with ErrShutdown.
func TestDrainDropsAndCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := newCountingObserver()
		log := &sendLog{obs: obs, hold: time.Hour}
		s := NewScheduler(NewConstantArrivals(10, 1, time.Now()), 100, nil, time.Second, log.send, obs)
		runFor(s, time.Second, 2*time.Second)
		require.Equal(t, 10, obs.sent)
		require.Equal(t, 20, obs.dropped[DropShutdown], "2s of arrivals during the grace period")
		require.Equal(t, 30, obs.scheduled)
		require.Equal(t, 10, obs.done)
		for _, r := range obs.results {
			require.Equal(t, OutcomeShutdown, r.Outcome)
		}
	})
}

// TestDrainEndsWhenIdle: a drain ends as soon as nothing is in flight.
func TestDrainEndsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := newCountingObserver()
		log := &sendLog{obs: obs, hold: 250 * time.Millisecond}
		s := NewScheduler(NewConstantArrivals(1, 0, time.Now()), 100, nil, time.Second, log.send, obs)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(1100 * time.Millisecond) // 100ms after the second send
			cancel()
		}()
		s.Run(ctx)
		stopped := time.Now()
		s.Drain(time.Minute)
		require.Equal(t, 150*time.Millisecond, time.Since(stopped), "the drain ends with the last request")
		require.Equal(t, 2, obs.done)
		for _, r := range obs.results {
			require.Nil(t, r.Cause, "requests ended on their own")
		}
	})
}

// TestScheduleSameAfterRestart: arrivals depend only on the seed and the
// wall clock, so a restarted (or another) prober sends at the same times.
func TestScheduleSameAfterRestart(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for name, mk := range map[string]func(time.Time) Arrivals{
		"constant": func(s time.Time) Arrivals { return NewConstantArrivals(3, 99, s) },
		"poisson":  func(s time.Time) Arrivals { return NewPoissonArrivals(3, 99, s) },
	} {
		t.Run(name, func(t *testing.T) {
			a := mk(start)
			var times []time.Time
			for range 1000 {
				times = append(times, a.Next().Due)
			}
			// "Restart" in the middle of the run, 100s in.
			restart := start.Add(100 * time.Second)
			b := mk(restart)
			i := 0
			for times[i].Before(restart) {
				i++
			}
			for ; i < len(times); i++ {
				require.True(t, times[i].Equal(b.Next().Due), "arrival %d differs after restart", i)
			}
		})
	}
	require.NotEqual(t, NewPoissonArrivals(3, 1, start).Next().Due, NewPoissonArrivals(3, 2, start).Next().Due)
}

// TestPoissonRate: Poisson arrivals come at the configured rate, with
// exponential gaps (coefficient of variation 1), across window boundaries.
func TestPoissonRate(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a := NewPoissonArrivals(50, 7, start)
	end := start.Add(time.Hour)
	n := 0
	var gaps []float64
	prev := start
	for at := a.Next().Due; at.Before(end); at = a.Next().Due {
		require.False(t, at.Before(prev), "arrivals out of order")
		gaps = append(gaps, at.Sub(prev).Seconds())
		prev = at
		n++
	}
	// 180,000 expected; the count's standard deviation is sqrt(180000) = 424.
	require.InDelta(t, 180000, n, 4*424)
	mean, sq := 0.0, 0.0
	for _, g := range gaps {
		mean += g
	}
	mean /= float64(len(gaps))
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	cv := math.Sqrt(sq/float64(len(gaps))) / mean
	require.InDelta(t, 1, cv, 0.02)
}

// TestNotSentNotCounted: a request that ends before it is sent (the send
// func reports started with the zero time: Result.NotSent) is scheduled and
// finished, never sent, so requests_sent_total is what the server received.
func TestNotSentNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := newCountingObserver()
		var n atomic.Int64
		send := func(ctx context.Context, a Arrival, started func(time.Time), done func()) {
			notSent := n.Add(1)%2 == 0
			go func() {
				defer done()
				r := &Result{Scheduled: a.Due, Sent: time.Now(), NotSent: notSent, Cause: ErrConversationFull}
				if r.NotSent {
					started(time.Time{})
				} else {
					started(r.Sent)
				}
				r.Outcome = Classify(r)
				m := Measure(r, nil)
				obs.Finished(r, &m)
			}()
		}
		s := NewScheduler(NewConstantArrivals(10, 1, time.Now()), 100, nil, time.Second, send, obs)
		runFor(s, time.Second, time.Second)
		require.Equal(t, 10, obs.scheduled)
		require.Equal(t, 10, obs.done)
		require.Equal(t, 5, obs.sent, "the five not sent are not counted as sent")
	})
}

// TestSkippedRequestNotSent: Do ends a request the workload no longer
// makes before sending it: NotSent, cancelled, OnSend never called.
func TestSkippedRequestNotSent(t *testing.T) {
	tc := config.DefaultTargetConfig
	tc.Name, tc.URL, tc.Model = "none", "http://127.0.0.1:1/v1", "m"
	c, err := NewClient(&tc, "sloprober/test", 1)
	require.NoError(t, err)
	defer c.Close()
	called := false
	r := &Result{}
	c.Do(context.Background(), &Request{ID: "x", Skip: ErrConversationFull, OnSend: func(time.Time) { called = true }}, r)
	require.True(t, r.NotSent)
	require.False(t, called)
	require.Equal(t, OutcomeCancelled, r.Outcome)
}
