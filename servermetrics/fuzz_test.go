package servermetrics

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzMap: whatever an engine's /metrics holds, parsing and mapping it
// never panics, fails only with the reasons of a body (parse,
// too_many_series), and every value passed on obeys the bounds.
func FuzzMap(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		body, ct := fixture(f, filepath.Base(name))
		f.Add(body, ct)
	}
	for _, s := range []struct{ body, ct string }{
		{"vllm:num_requests_running NaN\nvllm:kv_cache_usage_perc 1.5\n", ""},
		{"vllm:num_requests_running{engine=\"0\"} 1\nvllm:num_requests_running{engine=\"0\"} 2\n", "text/plain"},
		{"sglang:token_usage -1\nsglang:cache_hit_rate +Inf\n", "text/plain; version=0.0.4"},
		{"vllm:prefix_cache_hits_total 9e15\nvllm:prefix_cache_queries_total 1e3\n", ""},
		{"# TYPE tgi_queue_size histogram\ntgi_queue_size_bucket{le=\"+Inf\"} 1\n", ""},
		{"llamacpp:requests_deferred 3 # {a=\"b\"} 1\n# EOF\n", "application/openmetrics-text"},
		{"<html></html>", "text/html"},
	} {
		f.Add([]byte(s.body), s.ct)
	}
	engineNames := []string{"", EngineVLLM, EngineSGLang, EngineTGI, EngineLlamaCPP}
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		r, err := decode(body, contentType)
		if err != nil {
			if reason := Reason(err); reason != ReasonParse && reason != ReasonTooManySeries {
				t.Fatalf("reason %q for %v", reason, err)
			}
			if len(err.Error()) > 2*maxErrorBytes {
				t.Fatalf("unbounded error of %d bytes", len(err.Error()))
			}
			return
		}
		if !slices.Contains(engineNames, r.engine) {
			t.Fatalf("engine %q", r.engine)
		}
		for name, v := range map[string]*float64{"running": r.running, "waiting": r.waiting} {
			if v != nil && !(*v >= 0 && *v <= MaxCount) {
				t.Fatalf("%s = %g", name, *v)
			}
		}
		for name, v := range map[string]*float64{"kvUsage": r.kvUsage, "hitRate": r.hitRate} {
			if v != nil && !(*v >= 0 && *v <= 1) {
				t.Fatalf("%s = %g", name, *v)
			}
		}
		if c := r.cache; c != nil {
			if !(c.hits >= 0 && c.hits <= MaxCounter && c.queries >= 0 && c.queries <= MaxCounter) {
				t.Fatalf("cache counters %+v", *c)
			}
			// The ratio of any two readings is a ratio or nothing.
			for _, prev := range []*cacheCounters{{}, {hits: c.hits / 2, queries: c.queries / 3}, {hits: MaxCounter, queries: MaxCounter}} {
				if v, _ := hitRatio(prev, c); v != nil && !(*v >= 0 && *v <= 1) {
					t.Fatalf("hit ratio %g from %+v to %+v", *v, *prev, *c)
				}
			}
		}
		if r.engine == "" && (r.running != nil || r.waiting != nil || r.kvUsage != nil || r.hitRate != nil || r.cache != nil) {
			t.Fatal("values without an engine")
		}
	})
}

// The fixtures are the fuzz seeds; a missing one would go unnoticed.
func TestFuzzSeeds(t *testing.T) {
	files, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("only %d fixtures", len(files))
	}
}
