package servermetrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/stretchr/testify/require"
)

// TestScrapeFixtures scrapes every recorded exposition over loopback with
// the Content-Type its engine sends.
func TestScrapeFixtures(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Snapshot
	}{
		{"vllm_v1.prom", Snapshot{Engine: EngineVLLM, Running: f(5), Waiting: f(1), KVCacheUsage: f(0.3),
			PrefixCache: &PrefixCacheCounters{Hits: 2000, Queries: 5000, Names: "vllm:prefix_cache_hits_total/vllm:prefix_cache_queries_total"}}},
		{"vllm_v0.prom", Snapshot{Engine: EngineVLLM, Running: f(7), Waiting: f(0), KVCacheUsage: f(0.4402), PrefixCacheHitRatio: f(0.62)}},
		{"vllm_v1.om", Snapshot{Engine: EngineVLLM, Running: f(6), Waiting: f(2), KVCacheUsage: f(0.5),
			PrefixCache: &PrefixCacheCounters{Hits: 320, Queries: 640, Names: "vllm:prefix_cache_hits_total/vllm:prefix_cache_queries_total"}}},
		{"sglang.prom", Snapshot{Engine: EngineSGLang, Running: f(24), Waiting: f(9), KVCacheUsage: f(0.69), PrefixCacheHitRatio: f(0.41),
			PrefixCache: &PrefixCacheCounters{Hits: 2.44e+06, Queries: 4.88226e+06, Names: "sglang:cached_tokens_total/sglang:prompt_tokens_total"}}},
		{"tgi.prom", Snapshot{Engine: EngineTGI, Running: f(32), Waiting: f(17)}},
		{"llamacpp.prom", Snapshot{Engine: EngineLlamaCPP, Running: f(2), Waiting: f(5), KVCacheUsage: f(0.1875)}},
		{"other.prom", Snapshot{}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, ct := fixture(t, tc.file)
			s := newScraper(t, serveBody(t, body, ct).URL+"/metrics", 5*time.Second)
			before := time.Now()
			got, err := s.Scrape(context.Background())
			require.NoError(t, err)
			require.False(t, got.Time.Before(before))
			tc.want.Time = got.Time
			require.Equal(t, tc.want, got)
		})
	}
}

// TestScrapeRequest: the request says who sends it, asks for the text
// format and carries the configured credentials.
func TestScrapeRequest(t *testing.T) {
	got := make(chan *http.Request, 1)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r
		_, _ = w.Write([]byte("tgi_queue_size 1\n"))
	})
	c := smConfig(srv.URL+"/metrics", 5*time.Second)
	c.HTTPClientConfig.BasicAuth = &commoncfg.BasicAuth{Username: "probe", Password: "s3cret"}
	s, err := NewScraper("t", c)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Scrape(context.Background())
	require.NoError(t, err)
	r := <-got
	require.Equal(t, http.MethodGet, r.Method)
	require.Equal(t, "/metrics", r.URL.Path)
	require.Equal(t, "sloprober/dev", r.Header.Get("User-Agent"))
	require.True(t, strings.HasPrefix(r.Header.Get("Accept"), "text/plain;version=0.0.4"), r.Header.Get("Accept"))
	user, pass, ok := r.BasicAuth()
	require.True(t, ok)
	require.Equal(t, "probe", user)
	require.Equal(t, "s3cret", pass)
}

// TestScrapeHostile: whatever the server does, the scrape ends in bounded
// time and memory with the right reason.
func TestScrapeHostile(t *testing.T) {
	closed := serve(t, func(http.ResponseWriter, *http.Request) {})
	refusedURL := closed.URL
	closed.Close()

	var many strings.Builder
	for i := range MaxSamples + 1 {
		fmt.Fprintf(&many, "a%d 1\n", i)
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		url     string
		reason  string
		timeout time.Duration // default 5s
	}{
		{name: "endless body", reason: ReasonTooLarge, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			line := []byte(strings.Repeat("# padding padding padding padding padding padding\n", 80))
			for r.Context().Err() == nil {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		}},
		{name: "one byte over the limit", reason: ReasonTooLarge, handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("# " + strings.Repeat("x", MaxBodyBytes-2) + "\n"))
		}},
		{name: "too many series", reason: ReasonTooManySeries, handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(many.String()))
		}},
		{name: "slow headers", reason: ReasonTimeout, timeout: 300 * time.Millisecond, handler: func(_ http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}},
		{name: "slow body", reason: ReasonTimeout, timeout: 300 * time.Millisecond, handler: func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("tgi_queue_size 1\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
		{name: "500", reason: ReasonHTTP, handler: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "engine dead", http.StatusInternalServerError)
		}},
		{name: "404", reason: ReasonHTTP, handler: http.NotFound},
		// Three redirects are followed, the fourth is the answer: its 3xx.
		{name: "redirect loop", reason: ReasonHTTP, handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}},
		{name: "body broken off", reason: ReasonHTTP, handler: func(w http.ResponseWriter, _ *http.Request) {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\ntgi_queue_size 1\n")
			_ = buf.Flush()
			_ = conn.Close()
		}},
		{name: "connection refused", reason: ReasonConnect, url: refusedURL},
		{name: "HTML page", reason: ReasonParse, handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte("<html><body><h1>Welcome</h1></body></html>"))
		}},
		{name: "HTML that says it is text", reason: ReasonParse, handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte("<html><body><h1>Welcome</h1></body></html>"))
		}},
		{name: "metrics that say they are JSON", reason: ReasonParse, handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("vllm:num_requests_running 1\n"))
		}},
		{name: "duplicate label sets", reason: ReasonParse, handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("vllm:num_requests_running{engine=\"0\"} 1\nvllm:num_requests_running{engine=\"0\"} 1\n"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if tc.handler != nil {
				url = serve(t, tc.handler).URL
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			s := newScraper(t, url, timeout)
			start := time.Now()
			_, err := s.Scrape(context.Background())
			require.Error(t, err)
			require.Equal(t, tc.reason, Reason(err), "%v", err)
			require.Less(t, time.Since(start), timeout+time.Second)
			require.LessOrEqual(t, len(err.Error()), 2*maxErrorBytes)
		})
	}
}

// TestScrapeRedirects: redirects are followed as configured
// (follow_redirects, true by default as in Prometheus).
func TestScrapeRedirectsFollowed(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.Redirect(w, r, "/real", http.StatusFound)
			return
		}
		_, _ = w.Write([]byte("tgi_queue_size 4\n"))
	})
	got, err := newScraper(t, srv.URL+"/metrics", time.Second).Scrape(context.Background())
	require.NoError(t, err)
	require.InDelta(t, 4, *got.Waiting, 0)

	c := smConfig(srv.URL+"/metrics", time.Second)
	c.HTTPClientConfig.FollowRedirects = false
	s, err := NewScraper("t", c)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Scrape(context.Background())
	require.Equal(t, ReasonHTTP, Reason(err), "%v", err)
}

// TestScrapeCancelled: a scrape cancelled by its caller is no failure.
func TestScrapeCancelled(t *testing.T) {
	started := make(chan struct{})
	srv := serve(t, func(_ http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	})
	s := newScraper(t, srv.URL, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := s.Scrape(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, Reason(err))
}

// TestScrapeHitRatio: the hit ratio is the counters' increase between two
// scrapes.
func TestScrapeHitRatio(t *testing.T) {
	var mu sync.Mutex
	body := ""
	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write([]byte(body))
	})
	s := newScraper(t, srv.URL, 5*time.Second)
	vllm := func(hits, queries float64) string {
		return fmt.Sprintf("vllm:num_requests_running 0\nvllm:prefix_cache_hits_total{engine=\"0\"} %g\nvllm:prefix_cache_queries_total{engine=\"0\"} %g\n", hits, queries)
	}
	for _, step := range []struct {
		name     string
		body     string
		want     *float64
		rejected []string
		fail     bool
	}{
		{name: "first scrape: no increase yet", body: vllm(100, 200)},
		{name: "50 of 100 new tokens hit", body: vllm(150, 300), want: f(0.5)},
		{name: "no new query: unknown", body: vllm(150, 300)},
		{name: "a failed scrape keeps the counters", body: "<html>", fail: true},
		{name: "the ratio spans the failed scrape", body: vllm(300, 500), want: f(0.75)},
		{name: "a restart: the increase is the new value", body: vllm(10, 40), want: f(0.25)},
		{name: "more hits than queries", body: vllm(100, 50), rejected: []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"}},
		{name: "counters gone", body: "vllm:num_requests_running 0\n"},
		{name: "counters back: no previous", body: vllm(100, 200)},
		{name: "every query hit", body: vllm(200, 300), want: f(1)},
		{name: "the old names (a downgrade): no ratio across", body: "vllm:gpu_prefix_cache_hits_total 300\nvllm:gpu_prefix_cache_queries_total 400\n"},
		{name: "another engine answers: no ratio across", body: "sglang:cached_tokens_total 250\nsglang:prompt_tokens_total 400\n"},
		{name: "SGLang's counters", body: "sglang:cached_tokens_total 260\nsglang:prompt_tokens_total 440\nsglang:cache_hit_rate 0.9\n", want: f(0.25)},
		{name: "SGLang's gauge when the counters did not move", body: "sglang:cached_tokens_total 260\nsglang:prompt_tokens_total 440\nsglang:cache_hit_rate 0.9\n", want: f(0.9)},
	} {
		mu.Lock()
		body = step.body
		mu.Unlock()
		got, err := s.Scrape(context.Background())
		if step.fail {
			require.Error(t, err, step.name)
			continue
		}
		require.NoError(t, err, step.name)
		if step.want == nil {
			require.Nil(t, got.PrefixCacheHitRatio, step.name)
		} else {
			require.NotNil(t, got.PrefixCacheHitRatio, step.name)
			require.InDelta(t, *step.want, *got.PrefixCacheHitRatio, 1e-9, step.name)
		}
		require.Equal(t, step.rejected, got.Rejected, step.name)
	}
}

func TestHitRatio(t *testing.T) {
	c := func(h, q float64) *cacheCounters { return &cacheCounters{hits: h, queries: q} }
	for _, tc := range []struct {
		name      string
		prev, cur *cacheCounters
		want      *float64
		bad       bool
	}{
		{"no previous", nil, c(1, 2), nil, false},
		{"no current", c(1, 2), nil, nil, false},
		{"increase", c(10, 100), c(30, 200), f(0.2), false},
		{"no queries", c(10, 100), c(10, 100), nil, false},
		{"hits only reset", c(10, 100), c(5, 200), f(0.025), false},
		{"both reset, nothing since", c(10, 100), c(0, 0), nil, false},
		{"rounding above 1", c(0, 0), c(1000.5, 1000), f(1), false},
		{"more hits than queries", c(0, 0), c(20, 10), nil, true},
	} {
		got, bad := hitRatio(tc.prev, tc.cur)
		require.Equal(t, tc.bad, bad, tc.name)
		if tc.want == nil {
			require.Nil(t, got, tc.name)
		} else {
			require.InDelta(t, *tc.want, *got, 1e-12, tc.name)
		}
	}
}

// TestScrapeSlowLoris: a server that trickles its body a byte at a time
// is cut at the timeout like a silent one.
func TestScrapeSlowLoris(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte("#")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	s := newScraper(t, srv.URL, 200*time.Millisecond)
	_, err := s.Scrape(context.Background())
	require.Equal(t, ReasonTimeout, Reason(err), "%v", err)
}

// TestRedactedError: the URL's password stays out of the error.
func TestRedactedError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	s := newScraper(t, "http://user:hunter2@"+addr+"/metrics", time.Second)
	_, err = s.Scrape(context.Background())
	require.Equal(t, ReasonConnect, Reason(err))
	require.NotContains(t, err.Error(), "hunter2")
	var se *ScrapeError
	require.True(t, errors.As(err, &se))
}

// TestScrapeMemoryBounded: an endless body, and the largest exposition
// that is still parsed (MaxSamples samples filling MaxBodyBytes), cost a
// bounded amount of memory.
func TestScrapeMemoryBounded(t *testing.T) {
	var worst strings.Builder
	label := strings.Repeat("x", MaxBodyBytes/MaxSamples-48)
	for i := range MaxSamples {
		fmt.Fprintf(&worst, "vllm:num_requests_running{engine=\"%d\",l=\"%s\"} 1\n", i, label)
	}
	require.LessOrEqual(t, worst.Len(), MaxBodyBytes)
	worstBody := []byte(worst.String())
	line := []byte(strings.Repeat("# padding padding padding padding padding padding\n", 80))
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		limit   uint64
	}{
		{"endless body", func(w http.ResponseWriter, r *http.Request) {
			for r.Context().Err() == nil {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		}, 32 << 20},
		{"largest parsed exposition", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write(worstBody)
		}, 96 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScraper(t, serve(t, tc.handler).URL, 10*time.Second)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := s.Scrape(context.Background())
			runtime.ReadMemStats(&after)
			t.Logf("allocated %d MiB: %v", (after.TotalAlloc-before.TotalAlloc)>>20, err)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, tc.limit)
		})
	}
}
