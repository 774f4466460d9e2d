package servermetrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/exposition"
)

// Failure reasons of a scrape (the reason label of
// sloprober_server_metrics_scrape_failures_total).
const (
	// ReasonTimeout: the scrape took longer than its timeout.
	ReasonTimeout = "timeout"
	// ReasonConnect: no usable response: connection refused or reset,
	// DNS, TLS, a redirect loop.
	ReasonConnect = "connect"
	// ReasonHTTP: a status other than 2xx, or a body broken off.
	ReasonHTTP = "http"
	// ReasonTooLarge: a body of more than MaxBodyBytes.
	ReasonTooLarge = "too_large"
	// ReasonTooManySeries: more than MaxSamples samples.
	ReasonTooManySeries = "too_many_series"
	// ReasonParse: a Content-Type other than the text formats, a body
	// that does not parse, or two series with the same labels under a
	// mapped name.
	ReasonParse = "parse"
)

// Reasons lists the failure reasons.
var Reasons = []string{ReasonTimeout, ReasonConnect, ReasonHTTP, ReasonTooLarge, ReasonTooManySeries, ReasonParse}

// ScrapeError is a failed scrape, with its reason (one of Reasons).
type ScrapeError struct {
	Reason string
	Err    error
}

func (e *ScrapeError) Error() string { return e.Reason + ": " + e.Err.Error() }

func (e *ScrapeError) Unwrap() error { return e.Err }

// Reason returns the failure reason of an error of Scrape, or "" for nil
// or a scrape cancelled by its caller's context (which is no failure of
// the engine).
func Reason(err error) string {
	var se *ScrapeError
	if errors.As(err, &se) {
		return se.Reason
	}
	return ""
}

// Snapshot is what one scrape of an engine's metrics says. A pointer is nil
// when the engine does not serve the value, or served one that was
// rejected (see Rejected): sloprober never invents one.
type Snapshot struct {
	// Time is when the scrape ended.
	Time time.Time
	// Engine is vllm, sglang, tgi or llamacpp, told from the metric names;
	// "" when none of them was found.
	Engine string
	// Running and Waiting are the requests in the engine's batch and in
	// its queue, summed over label sets.
	Running, Waiting *float64
	// KVCacheUsage is the share of the KV cache in use, 0 to 1, the mean
	// over label sets.
	KVCacheUsage *float64
	// PrefixCacheHitRatio is the share of prompt tokens found in the
	// prefix cache, 0 to 1: from the increase of the engine's hit and
	// query counters since the previous successful scrape of the same
	// Scraper; else the engine's own hit-rate gauge; nil without either,
	// and when the counters did not increase (no prompt in between).
	PrefixCacheHitRatio *float64
	// PrefixCache are the engine's prefix-cache counters themselves, nil
	// without them: a capacity level takes their increase over its window
	// (Queue.PrefixCacheCounters, CacheCounters).
	PrefixCache *PrefixCacheCounters
	// Rejected names the engine's metrics whose values were rejected:
	// NaN, infinite, negative, a count above MaxCount, a ratio above
	// 1+RatioSlack.
	Rejected []string
}

// PrefixCacheCounters are an engine's prefix-cache counters: prompt
// tokens found cached and prompt tokens looked up, and the names they
// were read under ("vllm:prefix_cache_hits_total/vllm:prefix_cache_queries_total").
type PrefixCacheCounters struct {
	Hits, Queries float64
	Names         string
}

func (c *cacheCounters) public() *PrefixCacheCounters {
	if c == nil {
		return nil
	}
	return &PrefixCacheCounters{Hits: c.hits, Queries: c.queries, Names: c.names.hits + "/" + c.names.queries}
}

// Scraper reads the metrics of one engine. Its methods are safe for
// concurrent use, but the hit ratio of Scrape is that between the two last
// calls: one caller (the Manager's loop) scrapes in order.
type Scraper struct {
	url     string
	client  *http.Client
	timeout time.Duration

	mu sync.Mutex
	// prev are the prefix-cache counters of the last successful scrape.
	prev *cacheCounters
}

// NewScraper builds the scraper of a target's server_metrics (a validated
// configuration): prometheus/common's HTTP client for its auth, TLS and
// proxy settings, sending User-Agent sloprober/<version>.
func NewScraper(target string, cfg *config.ServerMetricsConfig) (*Scraper, error) {
	client, err := commoncfg.NewClientFromConfig(cfg.HTTPClientConfig, "sloprober_server_metrics_"+target,
		commoncfg.WithUserAgent(UserAgent()))
	if err != nil {
		return nil, fmt.Errorf("target %q: server_metrics: %w", target, err)
	}
	client.CheckRedirect = exposition.CheckRedirect(cfg.HTTPClientConfig.FollowRedirects)
	timeout := time.Duration(cfg.Timeout)
	if timeout <= 0 { // not validated
		timeout = time.Duration(config.DefaultServerMetricsConfig.Timeout)
	}
	return &Scraper{url: cfg.URL, client: client, timeout: timeout}, nil
}

// UserAgent is the User-Agent of scrapes: sloprober/<version>, or
// sloprober/dev in a build without a version.
func UserAgent() string { return exposition.UserAgent() }

// Close releases the scraper's idle connections.
func (s *Scraper) Close() { s.client.CloseIdleConnections() }

// Scrape reads the engine's metrics once, within the configured timeout.
// An error is a *ScrapeError (see Reason), or ctx's error when ctx ended
// first. A failed scrape keeps the counters of the last good one, so the
// next good one gives the hit ratio since then.
func (s *Scraper) Scrape(ctx context.Context) (Snapshot, error) {
	r, err := s.read(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{
		Time: time.Now(), Engine: r.engine,
		Running: r.running, Waiting: r.waiting, KVCacheUsage: r.kvUsage,
		PrefixCache: r.cache.public(), Rejected: r.rejected,
	}
	s.mu.Lock()
	ratio, bad := hitRatio(s.prev, r.cache)
	s.prev = r.cache
	s.mu.Unlock()
	if bad {
		snap.Rejected = append(snap.Rejected, r.cache.names.hits, r.cache.names.queries)
	}
	if ratio == nil {
		ratio = r.hitRate
	}
	snap.PrefixCacheHitRatio = ratio
	return snap, nil
}

// hitRatio is the share of queried prompt tokens that hit the cache
// between two readings of the counters: (hits - prevHits) / (queries -
// prevQueries). A decrease of either is a restart of the engine, whose
// counters started again from 0: the increase is then the current value,
// as Prometheus's increase() takes it. No increase of the queries gives no
// ratio, and so do counters of other names than the previous ones (another
// engine, or another version of it, answers now); a ratio above
// 1+RatioSlack (more hits than queries) is rejected (bad is true).
func hitRatio(prev, cur *cacheCounters) (ratio *float64, bad bool) {
	if prev == nil || cur == nil || prev.names != cur.names {
		return nil, false
	}
	dh, dq := cur.hits-prev.hits, cur.queries-prev.queries
	if dh < 0 || dq < 0 {
		dh, dq = cur.hits, cur.queries
	}
	if dq <= 0 {
		return nil, false
	}
	v, ok := clipRatio(dh / dq)
	if !ok {
		return nil, true
	}
	return &v, false
}

// read fetches and decodes one exposition, without touching the scraper's
// state.
func (s *Scraper) read(parent context.Context) (reading, error) {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	fail := func(reason string, err error) (reading, error) {
		switch {
		case parent.Err() != nil:
			return reading{}, parent.Err()
		case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			return reading{}, &ScrapeError{Reason: ReasonTimeout, Err: fmt.Errorf("no complete answer within %s", s.timeout)}
		}
		return reading{}, &ScrapeError{Reason: reason, Err: err}
	}
	body, contentType, err := exposition.Read(ctx, s.client, s.url, MaxBodyBytes)
	var re *exposition.Error
	if errors.As(err, &re) {
		switch re.Stage {
		case exposition.StageRequest:
			return fail(ReasonConnect, re.Err)
		case exposition.StageConnect:
			return fail(ReasonConnect, errors.New(exposition.BoundError(redactedError(re.Err, s.url))))
		case exposition.StageTooLarge: // whenever the deadline passes: the body was too large
			return reading{}, &ScrapeError{Reason: ReasonTooLarge, Err: re.Err}
		}
		return fail(ReasonHTTP, re.Err)
	}
	return decode(body, contentType)
}

// redactedError is a client error with the URL's password redacted
// (net/http strips it already; a proxy URL's may remain).
func redactedError(err error, target string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("%s %q: %v", ue.Op, config.RedactURL(target), ue.Err)
	}
	return err.Error()
}
