package capacity

import (
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// Low-confidence thresholds of the README's "Percentiles in reports": a
// P99 over fewer than 1,000 samples has fewer than 10 samples above it, a
// P95 over fewer than 200 fewer than 10 too.
const (
	minSamplesP95 = 200
	minSamplesP99 = 1000
)

// Percentiles are exact percentiles of one latency over a window's
// records (nearest rank), in seconds, with their sample count.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	// LowConfidence names the percentiles over too few samples: "p95"
	// below 200, "p99" below 1,000.
	LowConfidence []string `json:"low_confidence,omitempty"`
	// Sampled: the window had more gaps than it keeps (ITL only); the
	// percentiles are of a uniform sample of N of them.
	Sampled bool `json:"sampled,omitempty"`
}

// percentiles computes Percentiles of values (sorted in place).
func percentiles(values []float64) Percentiles {
	p := Percentiles{N: len(values)}
	if len(values) == 0 {
		return p
	}
	slices.Sort(values)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(values)))) - 1
		return values[max(i, 0)]
	}
	p.P50, p.P95, p.P99 = rank(0.50), rank(0.95), rank(0.99)
	if p.N < minSamplesP95 {
		p.LowConfidence = append(p.LowConfidence, "p95")
	}
	if p.N < minSamplesP99 {
		p.LowConfidence = append(p.LowConfidence, "p99")
	}
	return p
}

// ScenarioResult is one scenario's attainment in a level.
type ScenarioResult struct {
	Scenario string  `json:"scenario"`
	Counted  int     `json:"counted"`
	Good     int     `json:"good"`
	Goodput  float64 `json:"goodput"` // good requests per second
	// Attainment is good / counted (overall, every SLO at once);
	// SLOAttainment is 1 - missed / counted per SLO.
	Attainment    float64            `json:"attainment"`
	SLOAttainment map[string]float64 `json:"slo_attainment"`
	Objective     float64            `json:"objective"`
	Met           bool               `json:"met"`
}

// Level is what one step of a test measured over its steady window.
type Level struct {
	// Stage is baseline, sweep, refine, verify or burst.
	Stage string `json:"stage"`
	// Concurrency is the closed-loop clients; IntendedRate the open-loop
	// rate, req/s.
	Concurrency  int       `json:"concurrency,omitempty"`
	IntendedRate float64   `json:"intended_rate,omitempty"`
	Start        time.Time `json:"start"`
	// WindowSeconds is the length of the steady window the rates are
	// over: the requests sent in it are the level's sample, each awaited.
	WindowSeconds float64 `json:"window_seconds"`

	Scheduled int                    `json:"scheduled"`
	Sent      int                    `json:"sent"`
	Dropped   map[string]int         `json:"dropped,omitempty"`
	Outcomes  map[prober.Outcome]int `json:"outcomes"`

	// Rates over the window, per second: requests sent (offered), ok
	// requests (completed), input and output tokens (apart: never only
	// their sum), and good requests (goodput).
	OfferedRate      float64 `json:"offered_rate"`
	CompletedRate    float64 `json:"completed_rate"`
	InputTokensRate  float64 `json:"input_tokens_rate"`
	OutputTokensRate float64 `json:"output_tokens_rate"`
	Goodput          float64 `json:"goodput"`

	// LengthMismatches counts the requests whose server-counted length
	// was off what was asked (the contract's length_mismatches_total):
	// "input" when usage.prompt_tokens is off the prompt sent beyond the
	// tolerance, "output" when an ok reply is off the requested maximum.
	// The token rates above are the server's counts (usage); where they
	// disagree with what was sent, these say how often.
	LengthMismatches map[string]int `json:"length_mismatches,omitempty"`

	Counted       int                `json:"counted"`
	Attainment    float64            `json:"attainment"`
	SLOAttainment map[string]float64 `json:"slo_attainment"`
	Scenarios     []ScenarioResult   `json:"scenarios"`

	TTFT Percentiles `json:"ttft"`
	TPOT Percentiles `json:"tpot"`
	ITL  Percentiles `json:"itl"`
	E2E  Percentiles `json:"e2e"`

	// Lengths and Longest are the level's token lengths and its top
	// decile by input length; Prober the prober's own health over it.
	Lengths *Lengths      `json:"lengths,omitempty"`
	Longest *Longest      `json:"longest,omitempty"`
	Prober  *ProberHealth `json:"prober,omitempty"`
	// Timeline is the burst's requests in flight over time.
	Timeline *Timeline `json:"timeline,omitempty"`

	// Server is the server's own account of the window's requests, where
	// it gave one; nil when none did.
	Server *ServerSignals `json:"server,omitempty"`
	// EngineQueue is the engine's own queue depth over the window, from
	// its metrics (the target's server_metrics); nil without them.
	EngineQueue *EngineQueue `json:"engine_queue,omitempty"`

	// DrainSeconds is how long the requests in flight took to end after
	// the window (the cooldown), or after a burst.
	DrainSeconds float64 `json:"drain_seconds"`
	// Insufficient: fewer requests than window.min_requests; its
	// percentiles are shown, flagged.
	Insufficient bool `json:"insufficient,omitempty"`
	// Met: every scenario's attainment at or above its objective.
	Met bool `json:"met"`
	// Note says why a level is what it is (a stop rule, a cap).
	Note string `json:"note,omitempty"`
}

// ServerSignals is what a server said of its own work on a window's
// requests: the "timings" of llama.cpp (and of the simulator, which adds
// queue_ms) and usage's cached prompt tokens. The seed's first question
// when TTFT grows is whether the server's queue grew: if the prefill and
// decode times stayed while the queue grew, the server is near
// saturation; if decode slowed at the same load, it degraded.
type ServerSignals struct {
	// Reported is the requests whose timings were used; Implausible
	// those whose timings added up to more than the request took at the
	// client (5% and 5 ms of slack), which are not.
	Reported    int `json:"reported"`
	Implausible int `json:"implausible,omitempty"`
	// Queue, Prefill and DecodePerToken are seconds (decode per output
	// token: predicted_ms / predicted_n); Queue's N may be below Reported
	// (queue_ms is the simulator's).
	Queue          Percentiles `json:"queue"`
	Prefill        Percentiles `json:"prefill"`
	DecodePerToken Percentiles `json:"decode_per_token"`
	// CachedShare is the cached prompt tokens over the prompt tokens of
	// the requests that reported both (prefix caching at work); nil when
	// none did.
	CachedShare *float64 `json:"cached_share,omitempty"`
	// CachedTokens and PromptTokens are the sums the share is of.
	CachedTokens int `json:"cached_tokens,omitempty"`
	PromptTokens int `json:"prompt_tokens,omitempty"`
}

// serverSignals summarizes the server's own account of records, or nil.
func serverSignals(records []Record) *ServerSignals {
	var s ServerSignals
	var queue, prefill, decode []float64
	cached, prompt, reportedCache := 0, 0, false
	for i := range records {
		r := &records[i].Server
		if r.HasCached {
			reportedCache = true
			cached += r.Cached
			prompt += r.Prompt
		}
		if r.Implausible {
			s.Implausible++
		}
		if !r.HasTimings {
			continue
		}
		s.Reported++
		prefill = append(prefill, r.Prefill)
		if r.HasQueue {
			queue = append(queue, r.Queue)
		}
		if r.DecodePerToken > 0 {
			decode = append(decode, r.DecodePerToken)
		}
	}
	if s.Reported == 0 && s.Implausible == 0 && !reportedCache {
		return nil
	}
	s.Queue, s.Prefill, s.DecodePerToken = percentiles(queue), percentiles(prefill), percentiles(decode)
	if reportedCache {
		share := ratio(cached, prompt)
		s.CachedShare, s.CachedTokens, s.PromptTokens = &share, cached, prompt
	}
	return &s
}

// summarize computes a level from a window's records.
func summarize(l *Level, spec *config.LoadSpec, w windowData, minRequests int) {
	records := w.records
	secs := w.end.Sub(w.start).Seconds()
	l.Start, l.WindowSeconds = w.start, secs
	l.Scheduled = w.scheduled
	l.Sent = len(records)
	l.Outcomes = map[prober.Outcome]int{}
	if len(w.dropped) > 0 {
		l.Dropped = map[string]int{}
		for r, n := range w.dropped {
			l.Dropped[string(r)] = n
		}
	}
	type acc struct {
		counted, good int
		missed        map[string]int
	}
	byScenario := map[string]*acc{}
	for _, s := range spec.Scenarios {
		byScenario[s.Key.Scenario] = &acc{missed: map[string]int{}}
	}
	missed := map[string]int{}
	var ttft, tpot, e2e []float64
	var ok, good, in, out int
	mismatch := func(kind string) {
		if l.LengthMismatches == nil {
			l.LengthMismatches = map[string]int{}
		}
		l.LengthMismatches[kind]++
	}
	for i := range records {
		r := &records[i]
		l.Outcomes[r.Outcome]++
		a := byScenario[r.Scenario]
		if a == nil {
			continue
		}
		if r.Outcome == prober.OutcomeOK {
			ok++
		}
		in += r.InputTokens
		out += r.OutputTokens
		if r.InputMismatch {
			mismatch("input")
		}
		if r.OutputMismatch {
			mismatch("output")
		}
		if r.Counted {
			a.counted++
			l.Counted++
			for _, slo := range r.Missed {
				a.missed[slo]++
				missed[slo]++
			}
		}
		if r.Good {
			a.good++
			good++
		}
		if r.HasTTFT {
			ttft = append(ttft, r.TTFT.Seconds())
		}
		if r.HasTPOT {
			tpot = append(tpot, r.TPOT.Seconds())
		}
		if r.HasE2E {
			e2e = append(e2e, r.E2E.Seconds())
		}
	}
	per := func(n int) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(n) / secs
	}
	l.OfferedRate, l.CompletedRate, l.Goodput = per(len(records)), per(ok), per(good)
	l.InputTokensRate, l.OutputTokensRate = per(in), per(out)
	l.Attainment = ratio(good, l.Counted)
	l.SLOAttainment = sloAttainment(spec, missed, l.Counted)
	l.Met = l.Counted > 0
	for _, s := range spec.Scenarios {
		a := byScenario[s.Key.Scenario]
		sr := ScenarioResult{
			Scenario: s.Key.Scenario, Counted: a.counted, Good: a.good, Goodput: per(a.good),
			Attainment: ratio(a.good, a.counted), Objective: s.Objective,
			SLOAttainment: sloAttainment(&config.LoadSpec{Scenarios: []config.ScenarioSpec{s}}, a.missed, a.counted),
		}
		// A scenario of a mix that drew no request in the window does
		// not fail the level; one that drew requests meets its own
		// objective or fails it.
		sr.Met = a.counted == 0 || sr.Attainment >= s.Objective
		l.Met = l.Met && sr.Met
		l.Scenarios = append(l.Scenarios, sr)
	}
	l.TTFT, l.TPOT, l.E2E = percentiles(ttft), percentiles(tpot), percentiles(e2e)
	l.ITL = percentiles(float64s(w.gaps))
	l.ITL.Sampled = w.gapsSeen > int64(len(w.gaps))
	l.Insufficient = len(records) < minRequests
	l.Server = serverSignals(records)
	l.Lengths, l.Longest = lengths(spec, records)
	l.Prober = proberHealth(w)
}

func float64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// Lengths are the token lengths of a level's requests: the input as sent
// (the workload's count of each prompt, calibrated against the server's
// tokenizer: what was sent, not what the configuration asked for) and the
// output as received (usage, else the chunks).
type Lengths struct {
	Input  Percentiles `json:"input"`
	Output Percentiles `json:"output"`
}

// Longest is the top decile of a level's requests by input length (a
// level of at least 10 requests): long prompts queue behind their own
// prefill, and an average over every request hides what they see.
type Longest struct {
	// SameLength: every request of the level had the same input length:
	// the decile singles out nothing.
	SameLength bool `json:"same_length"`
	// MinInputTokens is the decile's shortest input.
	MinInputTokens int         `json:"min_input_tokens"`
	Requests       int         `json:"requests"`
	Counted        int         `json:"counted"`
	Good           int         `json:"good"`
	Attainment     float64     `json:"attainment"`
	TTFT           Percentiles `json:"ttft"`
}

// lengths computes a level's Lengths and its Longest decile.
func lengths(spec *config.LoadSpec, records []Record) (*Lengths, *Longest) {
	if len(records) == 0 {
		return nil, nil
	}
	var in, out []float64
	for i := range records {
		if r := &records[i]; r.InputSent > 0 {
			in = append(in, float64(r.InputSent))
		}
		if r := &records[i]; r.Outcome == prober.OutcomeOK {
			out = append(out, float64(records[i].OutputTokens))
		}
	}
	ls := &Lengths{Input: percentiles(in), Output: percentiles(out)}
	if len(records) < 10 {
		return ls, nil
	}
	byInput := slices.Clone(records)
	slices.SortStableFunc(byInput, func(a, b Record) int { return b.InputSent - a.InputSent })
	top := byInput[:len(byInput)/10]
	lg := &Longest{MinInputTokens: top[len(top)-1].InputSent, Requests: len(top), SameLength: byInput[0].InputSent == byInput[len(byInput)-1].InputSent}
	var ttft []float64
	for i := range top {
		r := &top[i]
		if r.Counted {
			lg.Counted++
		}
		if r.Good {
			lg.Good++
		}
		if r.HasTTFT {
			ttft = append(ttft, r.TTFT.Seconds())
		}
	}
	lg.Attainment = ratio(lg.Good, lg.Counted)
	lg.TTFT = percentiles(ttft)
	return ls, lg
}

// ProberLagLimit and ProberCPULimit are where the prober's own health
// starts to shape what it measures: a send lag P99 over 10 ms, or more
// than 90% of its CPUs busy. A level over either says so.
const (
	ProberLagLimit = 10 * time.Millisecond
	ProberCPULimit = 0.9
)

// ProberHealth is the prober's own state over a window: a prober that is
// late to send or short of CPU adds its own delay to what it measures,
// and a report must show when a run was distorted so.
type ProberHealth struct {
	// LagP99 and LagMax are the send lags (sent minus scheduled, seconds)
	// of the window's sends, Sends of them.
	Sends  int     `json:"sends"`
	LagP99 float64 `json:"lag_p99"`
	LagMax float64 `json:"lag_max"`
	// CPUSeconds is the process's CPU time over the window, CPUShare it
	// over the window and GOMAXPROCS: 1 is every core busy.
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUShare   float64 `json:"cpu_share"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	// SchedulerP99 and GCPauseP99 are the P99s (seconds, bucket upper
	// bounds) of the Go scheduler's latency and GC pauses over the window.
	SchedulerP99 float64 `json:"scheduler_latency_p99,omitempty"`
	GCPauseP99   float64 `json:"gc_pause_p99,omitempty"`
	// Invalid are the reasons the prober's own measurements were not to
	// be trusted over the window (the validity rule's thresholds, with
	// the window as its sustain): empty when they were, or when the run
	// judged none (Step.Validity nil).
	Invalid []string `json:"invalid,omitempty"`
}

// ProberBound reports whether the level was measured while the prober,
// not the target, was the limit: its percentiles are shown but not used
// for the capacity conclusion.
func (l *Level) ProberBound() bool { return l.Prober != nil && len(l.Prober.Invalid) > 0 }

func proberHealth(w windowData) *ProberHealth {
	h := &ProberHealth{Sends: int(w.lagsSeen), CPUSeconds: w.cpu.Seconds(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		SchedulerP99: w.sched.Seconds(), GCPauseP99: w.gc.Seconds()}
	lags := percentiles(float64s(w.lags))
	h.LagP99 = lags.P99
	for _, v := range w.lags {
		h.LagMax = max(h.LagMax, float64(v))
	}
	if secs := w.end.Sub(w.start).Seconds(); secs > 0 {
		h.CPUShare = h.CPUSeconds / secs / float64(h.GOMAXPROCS)
	}
	return h
}

// sloAttainment is 1 - missed/counted for every SLO of the spec's
// scenarios.
func sloAttainment(spec *config.LoadSpec, missed map[string]int, counted int) map[string]float64 {
	out := map[string]float64{}
	for _, s := range spec.Scenarios {
		for _, slo := range s.SLOs() {
			out[slo.Name] = 1 - ratio(missed[slo.Name], counted)
		}
	}
	return out
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
