package capacity

import (
	"context"
	"sync"
	"time"
)

// engineSampleInterval is how often a level's window reads the engine's
// queue depth: a minute's window gives 60 samples, and the engine's
// /metrics is read at most once a second for it.
const engineSampleInterval = time.Second

// samplingKey marks the context of a window's sampling reads.
type samplingKey struct{}

// Sampling reports whether a QueueProbe read is a window's sampling (for
// the report) rather than a drain check: a probe may answer it from a
// recent snapshot, where a drain check needs the queue as it is now.
func Sampling(ctx context.Context) bool {
	v, _ := ctx.Value(samplingKey{}).(bool)
	return v
}

// queueSampler reads a QueueProbe every engineSampleInterval until stop.
type queueSampler struct {
	mu     sync.Mutex
	q      EngineQueue
	sum    int
	cancel context.CancelFunc
	done   chan struct{}
}

// sampleQueue starts reading q; a nil q gives a nil sampler, whose stop
// returns nil.
func sampleQueue(ctx context.Context, q QueueProbe) *queueSampler {
	if q == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithValue(ctx, samplingKey{}, true))
	qs := &queueSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(qs.done)
		tick := time.NewTicker(engineSampleInterval)
		defer tick.Stop()
		for {
			n, err := q.Waiting(ctx)
			if ctx.Err() != nil {
				return // a read cut by stop is not a sample
			}
			qs.mu.Lock()
			if err != nil {
				qs.q.Errors++
			} else {
				qs.q.Samples++
				qs.sum += n
				qs.q.Max = max(qs.q.Max, n)
			}
			qs.mu.Unlock()
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return qs
}

// stop ends the sampling and returns what it read, nil when nothing was
// (no probe, or every read failed and none succeeded).
func (qs *queueSampler) stop() *EngineQueue {
	if qs == nil {
		return nil
	}
	qs.cancel()
	<-qs.done
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.q.Samples == 0 && qs.q.Errors == 0 {
		return nil
	}
	q := qs.q
	if q.Samples > 0 {
		q.Mean = float64(qs.sum) / float64(q.Samples)
	}
	return &q
}
