package servermetrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireReading compares readings, floats within 1e-9.
func requireReading(t *testing.T, want, got reading) {
	t.Helper()
	require.Equal(t, want.engine, got.engine, "engine")
	for _, v := range []struct {
		name      string
		want, got *float64
	}{
		{"running", want.running, got.running}, {"waiting", want.waiting, got.waiting},
		{"kvUsage", want.kvUsage, got.kvUsage}, {"hitRate", want.hitRate, got.hitRate},
	} {
		if v.want == nil {
			require.Nil(t, v.got, "%s: want absent", v.name)
			continue
		}
		require.NotNil(t, v.got, "%s: want %g", v.name, *v.want)
		require.InDelta(t, *v.want, *v.got, 1e-9, v.name)
	}
	if want.cache == nil {
		require.Nil(t, got.cache, "cache counters")
	} else {
		require.NotNil(t, got.cache, "cache counters")
		require.InDelta(t, want.cache.hits, got.cache.hits, 1e-6, "hits")
		require.InDelta(t, want.cache.queries, got.cache.queries, 1e-6, "queries")
	}
	require.ElementsMatch(t, want.rejected, got.rejected, "rejected")
}

// TestDecodeFixtures maps the recorded expositions of every engine.
func TestDecodeFixtures(t *testing.T) {
	for _, tc := range []struct {
		file string
		want reading
	}{
		// Two data-parallel engines: counts summed, usage averaged,
		// counters summed.
		{"vllm_v1.prom", reading{engine: EngineVLLM, running: f(5), waiting: f(1), kvUsage: f(0.3),
			cache: &cacheCounters{hits: 2000, queries: 5000}}},
		{"vllm_v1_gpu_prefix.prom", reading{engine: EngineVLLM, running: f(12), waiting: f(4), kvUsage: f(0.8125),
			cache: &cacheCounters{hits: 24000, queries: 96000}}},
		// V0: the hit-rate gauge, no counters; cpu_prefix_cache_hit_rate
		// (-1) is not mapped.
		{"vllm_v0.prom", reading{engine: EngineVLLM, running: f(7), waiting: f(0), kvUsage: f(0.4402), hitRate: f(0.62)}},
		// Old and new names side by side: the new ones only.
		{"vllm_transition.prom", reading{engine: EngineVLLM, running: f(1), waiting: f(0), kvUsage: f(0.0625),
			cache: &cacheCounters{hits: 150, queries: 300}}},
		// OpenMetrics: _total samples of counter families, an info
		// family, # UNIT, an exemplar and # EOF.
		{"vllm_v1.om", reading{engine: EngineVLLM, running: f(6), waiting: f(2), kvUsage: f(0.5),
			cache: &cacheCounters{hits: 320, queries: 640}}},
		{"sglang.prom", reading{engine: EngineSGLang, running: f(24), waiting: f(9), kvUsage: f(0.69), hitRate: f(0.41),
			cache: &cacheCounters{hits: 2.44e6, queries: 4.88226e6}}},
		// Two DP ranks; 1.004 is rounding and reads as 1: (0.5+1)/2.
		{"sglang_dp.prom", reading{engine: EngineSGLang, running: f(24), waiting: f(3), kvUsage: f(0.75), hitRate: f(0.3)}},
		{"tgi.prom", reading{engine: EngineTGI, running: f(32), waiting: f(17)}},
		{"llamacpp.prom", reading{engine: EngineLlamaCPP, running: f(2), waiting: f(5), kvUsage: f(0.1875)}},
		{"llamacpp_2025.prom", reading{engine: EngineLlamaCPP, running: f(0), waiting: f(0)}},
		{"other.prom", reading{}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, ct := fixture(t, tc.file)
			got, err := decode(body, ct)
			require.NoError(t, err)
			requireReading(t, tc.want, got)
		})
	}
}

// TestDecodeValues: values no engine can mean are rejected one quantity at
// a time, never passed on, and the rest of the exposition still counts.
func TestDecodeValues(t *testing.T) {
	const waiting = "vllm:num_requests_waiting{engine=\"0\"} 3\n"
	for _, tc := range []struct {
		name string
		body string
		want reading
	}{
		{"NaN count", "vllm:num_requests_running{engine=\"0\"} NaN\n" + waiting,
			reading{engine: EngineVLLM, waiting: f(3), rejected: []string{"vllm:num_requests_running"}}},
		{"+Inf count", "vllm:num_requests_running +Inf\n" + waiting,
			reading{engine: EngineVLLM, waiting: f(3), rejected: []string{"vllm:num_requests_running"}}},
		{"negative count", "vllm:num_requests_running -1\n" + waiting,
			reading{engine: EngineVLLM, waiting: f(3), rejected: []string{"vllm:num_requests_running"}}},
		{"count above MaxCount", "vllm:num_requests_running 1e7\n" + waiting,
			reading{engine: EngineVLLM, waiting: f(3), rejected: []string{"vllm:num_requests_running"}}},
		{"sum above MaxCount", "tgi_queue_size{a=\"1\"} 600000\ntgi_queue_size{a=\"2\"} 600000\n",
			reading{engine: EngineTGI, rejected: []string{"tgi_queue_size"}}},
		{"one bad label set rejects the sum", "vllm:num_requests_running{engine=\"0\"} 4\nvllm:num_requests_running{engine=\"1\"} NaN\n" + waiting,
			reading{engine: EngineVLLM, waiting: f(3), rejected: []string{"vllm:num_requests_running"}}},
		{"fractional counts are summed", "llamacpp:requests_processing 1.5\nllamacpp:requests_deferred 0\n",
			reading{engine: EngineLlamaCPP, running: f(1.5), waiting: f(0)}},
		{"ratio rounding reads as 1", "vllm:kv_cache_usage_perc 1.004\n",
			reading{engine: EngineVLLM, kvUsage: f(1)}},
		{"ratio 1 is 1", "vllm:kv_cache_usage_perc 1\n",
			reading{engine: EngineVLLM, kvUsage: f(1)}},
		{"ratio above 1 + slack", "vllm:kv_cache_usage_perc 1.5\n" + waiting,
			reading{engine: EngineVLLM, waiting: f(3), rejected: []string{"vllm:kv_cache_usage_perc"}}},
		{"a percentage is not rescaled", "vllm:gpu_cache_usage_perc 85\n",
			reading{engine: EngineVLLM, rejected: []string{"vllm:gpu_cache_usage_perc"}}},
		{"negative ratio", "sglang:token_usage -0.1\n",
			reading{engine: EngineSGLang, rejected: []string{"sglang:token_usage"}}},
		{"NaN ratio", "llamacpp:kv_cache_usage_ratio NaN\n",
			reading{engine: EngineLlamaCPP, rejected: []string{"llamacpp:kv_cache_usage_ratio"}}},
		{"the new name's bad value is not replaced by the old name's",
			"vllm:kv_cache_usage_perc NaN\nvllm:gpu_cache_usage_perc 0.5\n",
			reading{engine: EngineVLLM, rejected: []string{"vllm:kv_cache_usage_perc"}}},
		{"V0 without prefix caching says -1: absent, not rejected", "vllm:gpu_prefix_cache_hit_rate{model_name=\"m\"} -1\n",
			reading{engine: EngineVLLM}},
		{"a hit-rate gauge below 0 otherwise is rejected", "sglang:cache_hit_rate -0.5\n",
			reading{engine: EngineSGLang, rejected: []string{"sglang:cache_hit_rate"}}},
		{"NaN counter", "vllm:prefix_cache_hits_total NaN\nvllm:prefix_cache_queries_total 10\n",
			reading{engine: EngineVLLM, rejected: []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"}}},
		{"negative counter", "sglang:cached_tokens_total 5\nsglang:prompt_tokens_total -10\n",
			reading{engine: EngineSGLang, rejected: []string{"sglang:cached_tokens_total", "sglang:prompt_tokens_total"}}},
		{"one counter of a pair is no pair", "vllm:prefix_cache_hits_total 5\n",
			reading{engine: EngineVLLM}},
		{"counters beyond 2^53", "vllm:prefix_cache_hits_total 1e16\nvllm:prefix_cache_queries_total 1e17\n",
			reading{engine: EngineVLLM, rejected: []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"}}},
		{"a histogram under a mapped name", "# TYPE tgi_queue_size histogram\ntgi_queue_size_bucket{le=\"+Inf\"} 1\ntgi_queue_size_sum 1\ntgi_queue_size_count 1\ntgi_batch_current_size 2\n",
			reading{engine: EngineTGI, running: f(2), rejected: []string{"tgi_queue_size"}}},
		{"duplicates in an unmapped family do not matter", "vllm:num_requests_running 2\nfoo{a=\"1\"} 1\nfoo{a=\"1\"} 2\n",
			reading{engine: EngineVLLM, running: f(2)}},
		{"the first engine with a mapped name wins, alone",
			"sglang:num_running_reqs 9\nvllm:num_requests_running 2\nvllm:foo 1\n",
			reading{engine: EngineVLLM, running: f(2)}},
		{"an engine told by its prefix alone", "sglang:gen_throughput 12\n", reading{engine: EngineSGLang}},
		{"empty body", "", reading{}},
		{"comments only", "# HELP x y\n# TYPE x gauge\n", reading{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode([]byte(tc.body), "text/plain; version=0.0.4")
			require.NoError(t, err)
			requireReading(t, tc.want, got)
		})
	}
}

// TestDecodeFailures: bodies that are no exposition fail the scrape.
func TestDecodeFailures(t *testing.T) {
	om, _ := fixture(t, "vllm_v1.om")
	text, _ := fixture(t, "vllm_v1.prom")
	var many strings.Builder
	for i := range MaxSamples + 1 {
		fmt.Fprintf(&many, "vllm:num_requests_running{engine=\"%d\"} 0\n", i)
	}
	for _, tc := range []struct {
		name, contentType, body, reason string
	}{
		{"HTML", "text/html; charset=utf-8", "<html><body>Login</body></html>", ReasonParse},
		{"HTML labelled text/plain", "text/plain", "<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n", ReasonParse},
		{"JSON", "application/json", `{"num_requests_running": 3}`, ReasonParse},
		{"an exposition labelled JSON", "application/json", string(text), ReasonParse},
		{"protobuf", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited", "\x10\x02", ReasonParse},
		{"invalid Content-Type", "text/plain; version=\"", string(text), ReasonParse},
		{"OpenMetrics labelled text/plain (info type)", "text/plain; version=0.0.4", string(om), ReasonParse},
		{"duplicate label sets", "text/plain", "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3\nvllm:num_requests_waiting{model_name=\"m\",engine=\"0\"} 3\n", ReasonParse},
		{"duplicate unlabelled series", "text/plain", "tgi_queue_size 3\ntgi_queue_size 3\n", ReasonParse},
		{"syntax error", "text/plain", "vllm:num_requests_running{engine=\"0\" 3\n", ReasonParse},
		{"binary", "", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", ReasonParse},
		{"too many samples", "text/plain", many.String(), ReasonTooManySeries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode([]byte(tc.body), tc.contentType)
			require.Error(t, err)
			require.Equal(t, tc.reason, Reason(err), "%v", err)
			require.LessOrEqual(t, len(err.Error()), maxErrorBytes+64, "a bounded error")
		})
	}
}

// TestDecodeLenient: what is accepted though not by the book.
func TestDecodeLenient(t *testing.T) {
	text, _ := fixture(t, "vllm_v1.prom")
	for _, ct := range []string{
		"",                             // no Content-Type
		"text/plain",                   // no version
		"text/plain; version=1.0.0",    // the newer text format
		"application/openmetrics-text", // the text format labelled OpenMetrics
		"TEXT/PLAIN; charset=UTF-8",    // case
		"application/openmetrics-text; version=0.0.1",
	} {
		t.Run(ct, func(t *testing.T) {
			got, err := decode(text, ct)
			require.NoError(t, err)
			require.Equal(t, EngineVLLM, got.engine)
			require.InDelta(t, 5, *got.running, 0)
		})
	}
	// Exactly MaxSamples samples, with comments and blank lines around.
	var b strings.Builder
	b.WriteString("# HELP vllm:num_requests_running x\n\n")
	for i := range MaxSamples {
		fmt.Fprintf(&b, "  vllm:num_requests_running{engine=\"%d\"} 1\n", i)
	}
	got, err := decode([]byte(b.String()), "text/plain")
	require.NoError(t, err)
	require.InDelta(t, MaxSamples, *got.running, 0)
}
