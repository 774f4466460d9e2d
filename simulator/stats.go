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
	faultStreamError = "stream_error"
)

var faultNames = []string{faultError, faultReset, faultStall, faultMalformed, faultMissingDone, faultHeaderDelay, faultStreamError}

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
	quality   [numAPIs]QualityStats
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

// reply counts a reply of api whose every token was sent: what it said,
// and whether that was right. Replies cut short by a fault (reset, stream
// error) or by their client are not counted: they have no answer to judge.
func (st *stats) reply(api apiKind, o *output) {
	st.mu.Lock()
	defer st.mu.Unlock()
	q := &st.quality[api]
	q.Replies++
	if o.reasoning > 0 {
		q.Reasoning++
		q.ReasoningTokens += int64(o.reasoning)
	}
	// A content fault is counted as its kind; otherwise an answer the
	// token limit cut short is counted as cut.
	cut := o.cut() && o.fault == noContentFault
	switch o.kind {
	case kindToolCall:
		q.ToolCalls++
		q.WrongToolName += b2i(o.fault == faultWrongToolName)
		q.MissingArgument += b2i(o.fault == faultMissingArgument)
		q.ToolCallsCut += b2i(cut)
		q.ToolCallsWrong += b2i(o.fault != noContentFault || cut)
	case kindStructured:
		q.Structured++
		q.JSONTruncated += b2i(o.fault == faultJSONTruncated)
		q.JSONMissingField += b2i(o.fault == faultJSONMissingField)
		q.StructuredCut += b2i(cut)
		q.StructuredInvalid += b2i(o.fault != noContentFault || cut)
	case kindQuestion:
		q.Questions++
		q.WrongAnswer += b2i(o.fault == faultWrongAnswer)
		q.AnswersCut += b2i(cut)
		q.AnswersWrong += b2i(o.fault != noContentFault || cut)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// QualityStats is the ground truth of what one API's replies said: a
// prober's quality SLOs are checked against it. It counts replies whose
// every token was sent; the ..._wrong and ..._invalid totals are the sums
// of their kinds.
type QualityStats struct {
	Replies         int64 `json:"replies"`
	Reasoning       int64 `json:"reasoning"`        // replies with reasoning
	ReasoningTokens int64 `json:"reasoning_tokens"` // reasoning tokens sent
	// ToolCalls are replies that call a tool; ToolCallsWrong those that
	// call a name not among the tools, leave out a required argument, or
	// whose arguments the token limit cut short.
	ToolCalls       int64 `json:"tool_calls"`
	ToolCallsWrong  int64 `json:"tool_calls_wrong"`
	WrongToolName   int64 `json:"wrong_tool_name"`
	MissingArgument int64 `json:"missing_argument"`
	ToolCallsCut    int64 `json:"tool_calls_cut"`
	// Structured are structured-output replies; StructuredInvalid those
	// truncated by the fault, missing a required property, or cut short
	// by the token limit.
	Structured        int64 `json:"structured"`
	StructuredInvalid int64 `json:"structured_invalid"`
	JSONTruncated     int64 `json:"json_truncated"`
	JSONMissingField  int64 `json:"json_missing_field"`
	StructuredCut     int64 `json:"structured_cut"`
	// Questions are known-answer questions answered; AnswersWrong those
	// answered wrong on purpose or cut short by the token limit.
	Questions    int64 `json:"questions"`
	AnswersWrong int64 `json:"answers_wrong"`
	WrongAnswer  int64 `json:"wrong_answer"`
	AnswersCut   int64 `json:"answers_cut"`
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
	// Quality is the ground truth of replies, by API: chat, completions,
	// responses, messages.
	Quality map[string]QualityStats `json:"quality"`
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
		Quality:                 map[string]QualityStats{},
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
	for api, q := range st.quality {
		s.Quality[apiNames[api]] = q
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
		responses:    d("sloprober_sim_responses_total", "HTTP responses of the generation endpoints, by status code.", "code"),
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
