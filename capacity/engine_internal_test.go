package capacity

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/servermetrics"
)

// counterProbe is an engine whose prefix-cache counters read as reads, one
// a Waiting call; the last repeats.
type counterProbe struct {
	mu    sync.Mutex
	reads []servermetrics.PrefixCacheCounters
	n     int
}

func (p *counterProbe) Waiting(context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	return 0, nil
}

func (p *counterProbe) PrefixCacheCounters() (servermetrics.PrefixCacheCounters, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads[min(p.n, len(p.reads))-1], true
}

// TestQueueSamplerPrefixCacheCounters: a window takes the counters'
// increase from its first read to its last, and only when it is a count:
// an engine whose counters go back at any read (a restart, even one they
// climbed back from by the last read), change names, grow hits
// past queries, stand still or read NaN or infinity gives no hit ratio,
// never a wrong one.
func TestQueueSamplerPrefixCacheCounters(t *testing.T) {
	c := func(hits, queries float64) servermetrics.PrefixCacheCounters {
		return servermetrics.PrefixCacheCounters{Hits: hits, Queries: queries, Names: "vllm:prefix_cache_hits/vllm:prefix_cache_queries"}
	}
	renamed := c(30_000, 40_000)
	renamed.Names = "sglang:cached_tokens/sglang:prompt_tokens"
	for _, tc := range []struct {
		name  string
		reads []servermetrics.PrefixCacheCounters
		want  *float64 // hit ratio; nil: none
	}{
		{"grew", []servermetrics.PrefixCacheCounters{c(1000, 2000), c(16_000, 22_000), c(31_000, 42_000)}, new(0.75)},
		{"hits a little past queries", []servermetrics.PrefixCacheCounters{c(0, 0), c(40_200, 40_000)}, new(1.0)},
		{"hits far past queries", []servermetrics.PrefixCacheCounters{c(0, 0), c(50_000, 40_000)}, nil},
		{"restarted", []servermetrics.PrefixCacheCounters{c(30_000, 40_000), c(100, 200)}, nil},
		{"restarted and climbed back", []servermetrics.PrefixCacheCounters{c(30_000, 40_000), c(100, 200), c(40_000, 52_000)}, nil},
		{"renamed and back", []servermetrics.PrefixCacheCounters{c(0, 0), renamed, c(40_000, 52_000)}, nil},
		{"hits went back", []servermetrics.PrefixCacheCounters{c(30_000, 40_000), c(20_000, 50_000)}, nil},
		{"stood still", []servermetrics.PrefixCacheCounters{c(30_000, 40_000), c(30_000, 40_000)}, nil},
		{"renamed", []servermetrics.PrefixCacheCounters{c(0, 0), renamed}, nil},
		{"NaN", []servermetrics.PrefixCacheCounters{c(0, 0), c(math.NaN(), 40_000)}, nil},
		{"NaN queries", []servermetrics.PrefixCacheCounters{c(0, 0), c(30_000, math.NaN())}, nil},
		{"infinite", []servermetrics.PrefixCacheCounters{c(0, 0), c(math.Inf(1), math.Inf(1))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &counterProbe{reads: tc.reads}
				qs := sampleQueue(t.Context(), p)
				// One read at once, then one a second.
				time.Sleep(time.Duration(len(tc.reads)-1)*engineSampleInterval + engineSampleInterval/2)
				q := qs.stop()
				require.NotNil(t, q)
				require.Equal(t, len(tc.reads), q.Samples)
				got := q.HitRatio()
				if tc.want == nil {
					require.Nil(t, got, "%+v", q)
					return
				}
				require.NotNil(t, got, "%+v", q)
				require.InDelta(t, *tc.want, *got, 1e-9)
			})
		})
	}
}

// noQueueProbe is an engine whose metrics have no waiting queue.
type noQueueProbe struct{}

func (noQueueProbe) Waiting(context.Context) (int, error) {
	return 0, fmt.Errorf("target %q (llamacpp): %w", "x", servermetrics.ErrNoQueueMetric)
}

// TestQueueNotExposed: an engine whose metrics have no waiting queue is
// said to have none where the queue's numbers would be, not left as "-".
func TestQueueNotExposed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		qs := sampleQueue(t.Context(), noQueueProbe{})
		time.Sleep(engineSampleInterval + engineSampleInterval/2)
		q := qs.stop()
		require.NotNil(t, q)
		require.True(t, q.NotExposed)
		require.Zero(t, q.Samples)
		l := &Level{Stage: "sweep", Concurrency: 1, Decision: DecisionMet, EngineQueue: q}
		require.Contains(t, l.Notes(true), "engine queue not exposed by the engine's metrics")
	})
}
