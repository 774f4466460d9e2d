package capacity

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/sloprober/sloprober/internal/sampling"
	"github.com/sloprober/sloprober/servermetrics"
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

// PrefixCacheProbe is a QueueProbe that also tells the engine's
// prefix-cache counters as its last read found them (servermetrics.Queue):
// a level's windows then record the engine's own hit ratio, for a server
// whose replies do not report cached tokens (vLLM without
// --enable-prompt-tokens-details).
type PrefixCacheProbe interface {
	PrefixCacheCounters() (servermetrics.PrefixCacheCounters, bool)
}

// queueSampler reads a QueueProbe every engineSampleInterval until stop.
type queueSampler struct {
	mu   sync.Mutex
	q    EngineQueue
	sum  int
	loop *sampling.Loop
	// first and last are the prefix-cache counters of the first and the
	// last read, when the probe tells them; reset that a read found them
	// lower than the one before, or under other names.
	first, last *servermetrics.PrefixCacheCounters
	reset       bool
}

// sampleQueue starts reading q; a nil q gives a nil sampler, whose stop
// returns nil.
func sampleQueue(ctx context.Context, q QueueProbe) *queueSampler {
	if q == nil {
		return nil
	}
	qs := &queueSampler{}
	ctx = context.WithValue(ctx, samplingKey{}, true)
	qs.loop = sampling.Start(ctx, engineSampleInterval, q.Waiting, func(n int, err error) {
		qs.mu.Lock()
		defer qs.mu.Unlock()
		if err != nil {
			qs.q.Errors++
			if errors.Is(err, servermetrics.ErrNoQueueMetric) {
				qs.q.NotExposed = true
			}
			return
		}
		qs.q.Samples++
		qs.sum += n
		qs.q.Max = max(qs.q.Max, n)
		if cp, ok := q.(PrefixCacheProbe); ok {
			if c, ok := cp.PrefixCacheCounters(); ok {
				if qs.first == nil {
					qs.first = &c
				}
				if l := qs.last; l != nil && (c.Names != l.Names || c.Hits < l.Hits || c.Queries < l.Queries) {
					qs.reset = true
				}
				qs.last = &c
			}
		}
	})
	return qs
}

// stop ends the sampling and returns what it read, nil when nothing was
// (no probe, or every read failed and none succeeded).
func (qs *queueSampler) stop() *EngineQueue {
	if qs == nil {
		return nil
	}
	qs.loop.Stop()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.q.Samples == 0 && qs.q.Errors == 0 {
		return nil
	}
	q := qs.q
	if q.Samples > 0 {
		q.Mean = float64(qs.sum) / float64(q.Samples)
	}
	// The counters' increase over the window, when they only grew under
	// the same names from read to read (a decrease is a restart of the
	// engine: its counters began again, and the window's increase is not
	// known, even when they climbed back past the first read's by its
	// end: 30,000 hits, a restart, then 40,000 is no increase of 10,000).
	if f, l := qs.first, qs.last; f != nil && l != nil && !qs.reset && f.Names == l.Names {
		// The comparisons are false for NaN, and an infinite increase
		// is no count (servermetrics rejects both; a probe may not).
		if dh, dq := l.Hits-f.Hits, l.Queries-f.Queries; dq > 0 && dh >= 0 && dh <= dq*(1+prefixCacheSlack) && !math.IsInf(dq, 0) {
			q.PrefixCacheHits, q.PrefixCacheQueries = dh, dq
		}
	}
	return &q
}

// prefixCacheSlack is how far hits may pass queries before the counters
// are taken for broken: 1% (servermetrics.RatioSlack's).
const prefixCacheSlack = 0.01

// HitRatio is the engine's prefix-cache hit ratio over the window, nil
// when its counters were not read (or did not grow).
func (q *EngineQueue) HitRatio() *float64 {
	if q == nil || q.PrefixCacheQueries <= 0 {
		return nil
	}
	r := min(q.PrefixCacheHits/q.PrefixCacheQueries, 1)
	return &r
}
