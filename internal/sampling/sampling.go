// Package sampling reads a source at once and then at a fixed interval
// while a measurement window is open: the engine's queue depth and the
// GPUs' utilisation over a capacity level's window.
package sampling

import (
	"context"
	"fmt"
	"time"
)

// Loop is a sampling started by Start.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Start calls read at once and then every interval until Stop or ctx's
// end, and hands each result to record. A read is never started while the
// previous one runs: a read longer than the interval delays the next (a
// 1 s interval and a 2.5 s read give a read every 2.5 s, not a pile of
// them). A read cut by Stop is not recorded: its error is the stop's, not
// the source's. record is called from the loop's goroutine, one call at a
// time.
func Start[T any](ctx context.Context, interval time.Duration, read func(context.Context) (T, error), record func(T, error)) *Loop {
	if interval <= 0 {
		// time.NewTicker's panic, here in the caller's goroutine.
		panic(fmt.Sprintf("sampling: interval must be positive, got %s", interval))
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			v, err := read(ctx)
			if ctx.Err() != nil {
				return
			}
			record(v, err)
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return l
}

// Stop ends the sampling and waits for a read under way to be cut: no
// record call follows Stop's return. It may be called again.
func (l *Loop) Stop() {
	l.cancel()
	<-l.done
}
