package servermetrics

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/sloprober/sloprober/internal/exposition"
)

// Engines, as Snapshot.Engine names them.
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineTGI      = "tgi"
	EngineLlamaCPP = "llamacpp"
)

// engineNames are the metric names sloprober maps for one engine. Each list
// is in order of preference and the first name present is used, never a
// sum of two: vLLM serves an old and a new name side by side while one is
// deprecated, both with the same value.
type engineNames struct {
	engine string
	// prefix tells the engine's metrics apart (when none of the mapped
	// names is present, e.g. a vLLM build without scheduler metrics).
	prefix  string
	running []string
	waiting []string
	// kvUsage are gauges of the share of the KV cache in use, 0 to 1.
	kvUsage []string
	// cache are counters of prompt tokens: found in the prefix cache, and
	// looked up in it.
	cache []counterNames
	// hitRate are the engine's own prefix-cache hit-rate gauges, 0 to 1,
	// used when the counters give no ratio.
	hitRate []string
}

type counterNames struct{ hits, queries string }

// engines are the names of every engine sloprober knows, in the order an
// exposition with names of several is attributed (the first with a mapped
// name present wins; only its names are read).
//
// Sources (HELP texts quoted in testdata/):
//   - vLLM: vllm/v1/metrics/loggers.py; "vllm:kv_cache_usage_perc" is
//     "KV-cache usage. 1 means 100 percent usage.", a fraction despite its
//     name, as was "vllm:gpu_cache_usage_perc" (same HELP, in vLLM 0.4 to
//     0.10; no version served 0-100). The prefix-cache counters count
//     tokens (queried, and found cached); the older V1 names had a gpu_
//     prefix, and V0 served the gauge gpu_prefix_cache_hit_rate instead.
//     Python's client adds _total to counters in the exposition.
//   - SGLang: python/sglang/srt/metrics/collector.py; token_usage is used
//     tokens / max_total_num_tokens, cache_hit_rate the share of prompt
//     tokens of the last prefill batch found cached. cached_tokens_total
//     (by cache_source: device, host, storage) and prompt_tokens_total
//     count tokens of finished requests.
//   - TGI: router/src/infer (the Rust metrics crate): tgi_batch_current_size
//     and tgi_queue_size; it has no KV-cache or prefix-cache metric.
//   - llama.cpp: tools/server/server.cpp (--metrics); kv_cache_usage_ratio
//     (used cells / n_ctx) was removed in 2025 builds, which keep
//     requests_processing and requests_deferred.
var engines = []engineNames{
	{
		engine:  EngineVLLM,
		prefix:  "vllm:",
		running: []string{"vllm:num_requests_running"},
		waiting: []string{"vllm:num_requests_waiting"},
		kvUsage: []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		cache: []counterNames{
			{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
			{"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"},
		},
		hitRate: []string{"vllm:gpu_prefix_cache_hit_rate"},
	},
	{
		engine:  EngineSGLang,
		prefix:  "sglang:",
		running: []string{"sglang:num_running_reqs"},
		waiting: []string{"sglang:num_queue_reqs"},
		kvUsage: []string{"sglang:token_usage"},
		cache:   []counterNames{{"sglang:cached_tokens_total", "sglang:prompt_tokens_total"}},
		hitRate: []string{"sglang:cache_hit_rate"},
	},
	{
		engine:  EngineTGI,
		prefix:  "tgi_",
		running: []string{"tgi_batch_current_size"},
		waiting: []string{"tgi_queue_size"},
	},
	{
		engine:  EngineLlamaCPP,
		prefix:  "llamacpp:",
		running: []string{"llamacpp:requests_processing"},
		waiting: []string{"llamacpp:requests_deferred"},
		kvUsage: []string{"llamacpp:kv_cache_usage_ratio"},
	},
}

// mapped lists every name of e.
func (e *engineNames) mapped() []string {
	names := slices.Concat(e.running, e.waiting, e.kvUsage, e.hitRate)
	for _, c := range e.cache {
		names = append(names, c.hits, c.queries)
	}
	return names
}

// reading is what one exposition says: the mapped values, each nil when
// the engine does not serve it or its value was rejected.
type reading struct {
	engine           string
	running, waiting *float64
	kvUsage, hitRate *float64
	cache            *cacheCounters
	// rejected names the metrics whose values were rejected.
	rejected []string
}

// cacheCounters are an engine's prefix-cache counters, summed over their
// label sets, with their names.
type cacheCounters struct {
	names         counterNames
	hits, queries float64
}

// errParse marks a body that is not an exposition sloprober can read.
var errParse = exposition.ErrParse

// decode parses an exposition and maps it. contentType is the response's
// Content-Type: text/plain (any version) and empty are read as the text
// format, application/openmetrics-text through the same parser (see
// exposition.FromOpenMetrics), anything else is refused. The body must
// already be bounded (MaxBodyBytes); decode bounds its samples
// (MaxSamples). Errors are *ScrapeError with reason parse or
// too_many_series.
func decode(body []byte, contentType string) (reading, error) {
	fams, err := exposition.Decode(body, contentType, MaxSamples)
	var many *exposition.TooManySamplesError
	switch {
	case errors.As(err, &many):
		return reading{}, &ScrapeError{Reason: ReasonTooManySeries, Err: err}
	case err != nil:
		return reading{}, &ScrapeError{Reason: ReasonParse, Err: err}
	}
	r, err := mapFamilies(fams)
	if err != nil {
		return reading{}, &ScrapeError{Reason: ReasonParse, Err: err}
	}
	return r, nil
}

// mapFamilies finds the engine of an exposition and maps its values. Only
// a family with two series of the same label set is an error (which one
// counts?); values that are no count or ratio are rejected one by one.
func mapFamilies(fams map[string]*dto.MetricFamily) (reading, error) {
	e := detect(fams)
	if e == nil {
		return reading{}, nil
	}
	r := reading{engine: e.engine}
	for _, name := range e.mapped() {
		if err := checkDuplicates(fams[name]); err != nil {
			return reading{}, err
		}
	}
	r.running = r.quantity(fams, e.running, countValue)
	r.waiting = r.quantity(fams, e.waiting, countValue)
	r.kvUsage = r.quantity(fams, e.kvUsage, ratioValue)
	if !cacheOff(fams, e.hitRate) {
		r.hitRate = r.quantity(fams, e.hitRate, ratioValue)
	}
	for _, c := range e.cache {
		if fams[c.hits] == nil || fams[c.queries] == nil {
			continue
		}
		h, okH := counterValue(values(fams[c.hits]))
		q, okQ := counterValue(values(fams[c.queries]))
		if !okH || !okQ {
			r.rejected = append(r.rejected, c.hits, c.queries)
			break
		}
		r.cache = &cacheCounters{names: c, hits: h, queries: q}
		break
	}
	return r, nil
}

// detect returns the engine whose mapped names the exposition has (the
// first of engines), else the first whose prefix one of its names has, else
// nil.
func detect(fams map[string]*dto.MetricFamily) *engineNames {
	for i := range engines {
		for _, name := range engines[i].mapped() {
			if fams[name] != nil {
				return &engines[i]
			}
		}
	}
	best := -1
	for name := range fams {
		for i := range engines {
			if strings.HasPrefix(name, engines[i].prefix) && (best < 0 || i < best) {
				best = i
			}
		}
	}
	if best < 0 {
		return nil
	}
	return &engines[best]
}

// quantity returns the value of the first of names present, aggregated
// by agg, or nil when none is present or agg rejects it (then the name is
// added to r.rejected).
func (r *reading) quantity(fams map[string]*dto.MetricFamily, names []string, agg func([]float64) (float64, bool)) *float64 {
	for _, name := range names {
		f := fams[name]
		if f == nil {
			continue
		}
		v, ok := agg(values(f))
		if !ok {
			r.rejected = append(r.rejected, name)
			return nil
		}
		return &v
	}
	return nil
}

// cacheOff reports whether the first of the hit-rate gauges present says
// -1 in every series: vLLM V0's "no prefix cache" (its allocator without
// caching answers -1), which is absent, not a rejected value.
func cacheOff(fams map[string]*dto.MetricFamily, names []string) bool {
	for _, name := range names {
		if f := fams[name]; f != nil {
			for _, v := range values(f) {
				if v != -1 {
					return false
				}
			}
			return true
		}
	}
	return false
}

// values returns the value of every series of f. Only gauges, counters and
// untyped series have one value; a histogram or summary under a mapped
// name gives NaN, which every aggregation rejects.
func values(f *dto.MetricFamily) []float64 {
	vs := make([]float64, 0, len(f.GetMetric()))
	for _, m := range f.GetMetric() {
		v := math.NaN()
		switch {
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			v = m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		}
		vs = append(vs, v)
	}
	return vs
}

// countValue sums request counts over label sets (data-parallel engines,
// or one series per served model name): the requests of the endpoint are
// those of all of them. Every value must be in [0, MaxCount] and so must
// the sum; one bad value rejects the whole sum, as a partial sum would
// under-report.
func countValue(vs []float64) (float64, bool) {
	sum := 0.0
	for _, v := range vs {
		if !(v >= 0 && v <= MaxCount) { // false for NaN
			return 0, false
		}
		sum += v
	}
	return sum, sum <= MaxCount
}

// ratioValue averages ratios over label sets: the engines of a
// data-parallel deployment each have a KV cache of the same size, so the
// mean is the share of all of it in use (vLLM's own log line averages its
// engines' usage the same way); a sum would pass 1. Each value must be in
// [0, 1+RatioSlack], and a value above 1 reads as 1.
func ratioValue(vs []float64) (float64, bool) {
	sum := 0.0
	for _, v := range vs {
		c, ok := clipRatio(v)
		if !ok {
			return 0, false
		}
		sum += c
	}
	return sum / float64(len(vs)), true
}

// clipRatio checks a ratio against [0, 1+RatioSlack] and clips it to 1.
func clipRatio(v float64) (float64, bool) {
	if !(v >= 0 && v <= 1+RatioSlack) {
		return 0, false
	}
	return min(v, 1), true
}

// counterValue sums token counters over label sets, each and the sum in
// [0, MaxCounter].
func counterValue(vs []float64) (float64, bool) {
	sum := 0.0
	for _, v := range vs {
		if !(v >= 0 && v <= MaxCounter) {
			return 0, false
		}
		sum += v
	}
	return sum, sum <= MaxCounter
}

// checkDuplicates returns an error when two series of f have the same
// label set: the format forbids it, and a sum would count one of them
// twice. The parser keeps both.
func checkDuplicates(f *dto.MetricFamily) error {
	if f == nil || len(f.GetMetric()) < 2 {
		return nil
	}
	seen := make(map[string]bool, len(f.GetMetric()))
	var b strings.Builder
	for _, m := range f.GetMetric() {
		pairs := slices.Clone(m.GetLabel())
		slices.SortFunc(pairs, func(a, b *dto.LabelPair) int {
			if c := strings.Compare(a.GetName(), b.GetName()); c != 0 {
				return c
			}
			return strings.Compare(a.GetValue(), b.GetValue())
		})
		b.Reset()
		for _, p := range pairs {
			b.WriteString(p.GetName())
			b.WriteByte(0xff)
			b.WriteString(p.GetValue())
			b.WriteByte(0xff)
		}
		if seen[b.String()] {
			return fmt.Errorf("%w: %s has two series with the same labels", errParse, exposition.BoundError(f.GetName()))
		}
		seen[b.String()] = true
	}
	return nil
}
