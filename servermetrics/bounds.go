package servermetrics

import (
	"time"

	"github.com/sloprober/sloprober/internal/exposition"
)

// Bounds on what an engine's /metrics can make sloprober read, parse, keep
// or log. The endpoint is outside input like any reply of the server: an
// endless body, a million tiny series or a hung connection must end in
// bounded time and memory, and a value no engine can mean is dropped, never
// passed on.
const (
	// MaxBodyBytes bounds the body of one scrape: 4 MiB. A vLLM engine's
	// exposition is 50-200 KiB (its dozen histograms of ~20 buckets each,
	// plus the HTTP server's), so 4 MiB holds a data-parallel vLLM of 16
	// engines behind one endpoint; a body of 4 MiB + 1 byte is too_large.
	MaxBodyBytes = 4 << 20
	// MaxSamples bounds the sample lines (lines that are neither blank nor
	// comments) of one scrape: 30,000, counted before anything is parsed.
	// It bounds the parser's memory, which the byte limit alone does not:
	// 4 MiB of "a 1\n" lines are a million series, some 200 MB parsed. An
	// engine serves about 1,000-1,500 samples, so 16 data-parallel engines
	// (~24,000) still fit; the largest exposition that is parsed (30,000
	// samples filling 4 MiB) allocates about 40 MB in all during its
	// scrape (TestScrapeMemoryBounded), and an endless body about 10 MB.
	MaxSamples = 30_000
	// MaxCount bounds a request count (running, waiting), each series and
	// their sum: 1,000,000. vLLM's default max_num_seqs is 256 (1,024 on
	// some GPUs) and SGLang's batches are of the same order; a million
	// queued requests is no engine's state but a broken server, and a
	// count above it is rejected.
	MaxCount = 1_000_000
	// MaxCounter bounds the prefix-cache counters (tokens): 2^53, where
	// float64 stops counting every integer. At 100,000 prompt tokens a
	// second that is 2,800 years of traffic.
	MaxCounter = 1 << 53
	// RatioSlack is how far above 1 a ratio may be and still be taken (as
	// 1): 0.01. SGLang rounds token_usage to two decimals and engines
	// divide floats, so 1.004 is rounding and reads as 1; 1.5, or 85 (a
	// percentage), is no ratio and is rejected rather than rescaled: 0.9
	// might be 90% or 0.9%, and guessing would invent a number.
	RatioSlack = 0.01
	// LogEvery bounds the warnings of one target to one a minute; the
	// next one says how many were suppressed meanwhile. A target whose
	// engine is down, read every second, logs 60 times less.
	LogEvery = time.Minute
	// QueueReadEvery bounds how often Queue.Waiting reads the engine's
	// metrics: at most every 250 ms, a call sooner gets the last answer.
	// A capacity test's drain check polls every 20 ms; reading a 200 KiB
	// vLLM exposition 50 times a second would load the engine being
	// measured, while 4 reads a second see the end of a drain at most
	// 250 ms late.
	QueueReadEvery = 250 * time.Millisecond
	// maxErrorBytes bounds an error message logged: a parse error quotes
	// the server's text (exposition.BoundError).
	maxErrorBytes = exposition.MaxErrorBytes
)
