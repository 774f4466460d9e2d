package simulator

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Fault names, as counted in stats and metrics.
const (
	faultError       = "error"
	faultReset       = "reset"
	faultStall       = "stall"
	faultMalformed   = "malformed"
	faultMissingDone = "missing_done"
	faultHeaderDelay = "header_delay"
)

var faultNames = []string{faultError, faultReset, faultStall, faultMalformed, faultMissingDone, faultHeaderDelay}

// stats are the simulator's own counters, served as JSON by GET /sim/stats
// and as Prometheus metrics by /metrics.
type stats struct {
	running          atomic.Int64
	waiting          atomic.Int64
	promptTokens     atomic.Int64
	cachedTokens     atomic.Int64
	generationTokens atomic.Int64

	mu        sync.Mutex
	responses map[int]int64    // by HTTP status
	faults    map[string]int64 // by fault name
}

func newStats() *stats {
	st := &stats{responses: map[int]int64{}, faults: map[string]int64{}}
	for _, f := range faultNames {
		st.faults[f] = 0
	}
	return st
}

func (st *stats) response(code int) {
	st.mu.Lock()
	st.responses[code]++
	st.mu.Unlock()
}

func (st *stats) fault(name string) {
	st.mu.Lock()
	st.faults[name]++
	st.mu.Unlock()
}

// Stats is the body of GET /sim/stats.
type Stats struct {
	Running                 int64            `json:"running"`
	Waiting                 int64            `json:"waiting"`
	RequestsTotal           int64            `json:"requests_total"`
	Responses               map[string]int64 `json:"responses"`
	PromptTokensTotal       int64            `json:"prompt_tokens_total"`
	CachedPromptTokensTotal int64            `json:"cached_prompt_tokens_total"`
	GenerationTokensTotal   int64            `json:"generation_tokens_total"`
	FaultsInjected          map[string]int64 `json:"faults_injected"`
}

func (st *stats) snapshot() Stats {
	s := Stats{
		Running:                 st.running.Load(),
		Waiting:                 st.waiting.Load(),
		PromptTokensTotal:       st.promptTokens.Load(),
		CachedPromptTokensTotal: st.cachedTokens.Load(),
		GenerationTokensTotal:   st.generationTokens.Load(),
		Responses:               map[string]int64{},
		FaultsInjected:          map[string]int64{},
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for code, n := range st.responses {
		s.Responses[strconv.Itoa(code)] = n
		s.RequestsTotal += n
	}
	for f, n := range st.faults {
		s.FaultsInjected[f] = n
	}
	return s
}

// collector exposes stats as metrics. The engine metrics use vLLM's names and
// its model_name label, so that dashboards and correlation built for a real
// vLLM server work against the simulator too.
type collector struct {
	st       *stats
	model    string
	slots    int
	faultSet *atomic.Pointer[faultSet]

	kvUsage, running, waiting, prompt, generation, cacheQueries, cacheHits, responses, faults, degradeFactor, leak *prometheus.Desc
}

func newCollector(st *stats, model string, slots int, faults *atomic.Pointer[faultSet]) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"model_name"}, labels...), nil)
	}
	return &collector{
		st:       st,
		model:    model,
		slots:    slots,
		faultSet: faults,
		// A proxy: the simulator has no KV blocks; a slot holds one
		// sequence, so the share of slots in use is what a full KV cache
		// means to a batch.
		kvUsage:      d("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage (the simulator: running sequences over slots)."),
		running:      d("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:      d("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		prompt:       d("vllm:prompt_tokens_total", "Number of prefill tokens processed (cached ones included)."),
		generation:   d("vllm:generation_tokens_total", "Number of generation tokens processed."),
		cacheQueries: d("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		cacheHits:    d("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		responses:    d("sloprober_sim_responses_total", "HTTP responses of the completion endpoints, by status code.", "code"),
		faults:       d("sloprober_sim_faults_injected_total", "Faults injected, by fault.", "fault"),
		degradeFactor: d("sloprober_sim_degrade_factor",
			"Factor by which the degrade fault currently stretches prefill time or decode step time (1: no degradation).", "phase"),
		leak: d("sloprober_sim_degrade_leak_seconds", "Time the degrade fault's leak currently adds to every decode step."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.kvUsage, c.running, c.waiting, c.prompt, c.generation, c.cacheQueries, c.cacheHits, c.responses, c.faults, c.degradeFactor, c.leak} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.st.snapshot()
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(s.Running), c.model)
	if c.slots > 0 {
		ch <- prometheus.MustNewConstMetric(c.kvUsage, prometheus.GaugeValue, float64(s.Running)/float64(c.slots), c.model)
	}
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(s.Waiting), c.model)
	ch <- prometheus.MustNewConstMetric(c.prompt, prometheus.CounterValue, float64(s.PromptTokensTotal), c.model)
	ch <- prometheus.MustNewConstMetric(c.generation, prometheus.CounterValue, float64(s.GenerationTokensTotal), c.model)
	ch <- prometheus.MustNewConstMetric(c.cacheQueries, prometheus.CounterValue, float64(s.PromptTokensTotal), c.model)
	ch <- prometheus.MustNewConstMetric(c.cacheHits, prometheus.CounterValue, float64(s.CachedPromptTokensTotal), c.model)
	for code, n := range s.Responses {
		ch <- prometheus.MustNewConstMetric(c.responses, prometheus.CounterValue, float64(n), c.model, code)
	}
	for f, n := range s.FaultsInjected {
		ch <- prometheus.MustNewConstMetric(c.faults, prometheus.CounterValue, float64(n), c.model, f)
	}
	prefill, decode, leak := c.faultSet.Load().degrade.at(time.Now())
	ch <- prometheus.MustNewConstMetric(c.degradeFactor, prometheus.GaugeValue, prefill, c.model, "prefill")
	ch <- prometheus.MustNewConstMetric(c.degradeFactor, prometheus.GaugeValue, decode, c.model, "decode")
	ch <- prometheus.MustNewConstMetric(c.leak, prometheus.GaugeValue, leak.Seconds(), c.model)
}
