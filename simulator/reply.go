package simulator

// Replies: tokens generated on the engine's schedule, streamed as SSE or sent whole.

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// reply writes one completion, streaming or whole.
type reply struct {
	sim     *Simulator
	w       http.ResponseWriter
	chat    bool
	src     tokenSource
	prompt  prompt
	n       int
	finish  string
	plan    faultPlan
	id      uint64
	created int64
	usage   bool
	// requestID is the client's X-Request-Id, for the debug log of each
	// reply's timings: the ground truth a prober's trace is checked against.
	requestID string
}

func (rp *reply) idString() string {
	if rp.chat {
		return "chatcmpl-sim-" + strconv.FormatUint(rp.id, 10)
	}
	return "cmpl-sim-" + strconv.FormatUint(rp.id, 10)
}

func (rp *reply) object() string {
	if rp.chat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

// token returns the text of token i (1-based). Every token is one token for
// the simulator's own tokenizer, so a reply sent back as history counts right.
func (rp *reply) token(i int) string {
	return rp.sim.vocab[(int(rp.id)*7+i)%len(rp.sim.vocab)]
}

// countTokens accounts for tokens written in fixed mode (the engine counts its own).
func (rp *reply) countTokens(n int) {
	if rp.sim.engine == nil {
		rp.sim.stats.generationTokens.Add(int64(n))
	}
}

// produce waits for tokens and calls emit for each one as it exists. It
// reports the number of tokens produced and false if the client left or the
// engine stopped before the end.
func (rp *reply) produce(ctx context.Context, emit func(i int) bool, flush func()) (int, bool) {
	seen := 0
	for {
		n, ended, err := rp.src.wait(ctx, seen)
		if err != nil {
			return seen, false
		}
		rp.countTokens(n - seen)
		for seen < n {
			seen++
			if !emit(seen) {
				return seen, false
			}
		}
		flush()
		if ended {
			return seen, seen == rp.n
		}
	}
}

// stream writes the reply as server-sent events: for chat a role-only first
// chunk as soon as the request is accepted (before it is queued, so that a
// client that counts it as the first token sees a fake-fast TTFT), a chunk
// per token, a finish chunk, a usage-only chunk when asked for, and
// "data: [DONE]". The last chunk before [DONE] carries "timings".
func (rp *reply) stream(ctx context.Context) {
	w, st := rp.w, rp.sim.stats
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	st.response(http.StatusOK)
	rc := http.NewResponseController(w)
	flush := func() { _ = rc.Flush() }

	id := rp.idString()
	// A token chunk is prefix [,"sim_ts":N] open token close.
	prefix := `data: {"id":"` + id + `","object":"` + rp.object() + `","created":` +
		strconv.FormatInt(rp.created, 10) + `,"model":` + rp.sim.modelJSON
	head := prefix + `,"choices":[{"index":0,`
	var open, close string
	if rp.chat {
		open, close = `,"choices":[{"index":0,"delta":{"content":"`, `"},"logprobs":null,"finish_reason":null}]}`+"\n\n"
		_, _ = io.WriteString(w, head+`"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n")
		flush()
	} else {
		open, close = `,"choices":[{"index":0,"text":"`, `","logprobs":null,"finish_reason":null}]}`+"\n\n"
	}

	mid := (rp.n + 1) / 2
	buf := make([]byte, 0, 512)
	stamp := rp.sim.cfg.StampChunks
	emit := func(i int) bool {
		buf = append(buf[:0], prefix...)
		if stamp {
			buf = strconv.AppendInt(append(buf, `,"sim_ts":`...), time.Now().UnixNano(), 10)
		}
		buf = append(append(append(buf, open...), rp.token(i)...), close...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if i != mid {
			return true
		}
		return rp.midStreamFaults(ctx, flush)
	}
	if _, ok := rp.produce(ctx, emit, flush); !ok {
		return
	}

	ph := rp.src.phases()
	timings := newTimings(ph, rp.prompt.tokens, rp.n)
	rp.logTimings(timings)
	fin := &chunk{ID: id, Object: rp.object(), Created: rp.created, Model: rp.sim.cfg.Model,
		Choices: []choice{{FinishReason: &rp.finish}}}
	if rp.chat {
		fin.Choices[0].Delta = &delta{}
	} else {
		fin.Choices[0].Text = new(string)
	}
	if rp.usage {
		writeEvent(w, fin)
		writeEvent(w, &chunk{ID: id, Object: rp.object(), Created: rp.created, Model: rp.sim.cfg.Model,
			Choices: []choice{}, Usage: newUsage(rp.prompt.tokens, rp.n, ph.cached), Timings: timings})
	} else {
		fin.Timings = timings
		writeEvent(w, fin)
	}
	if rp.plan.noDone {
		st.fault(faultMissingDone)
	} else {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
	flush()
}

// logTimings logs a reply's timings at debug level, by the client's
// request id (which a prober's trace id is): `sloprober sim
// --log.level=debug` shows the truth beside each trace.
func (rp *reply) logTimings(t *Timings) {
	if !rp.sim.logger.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	rp.sim.logger.Debug("Reply timings", "request_id", rp.requestID, "queue_ms", t.QueueMS, "prompt_ms", t.PromptMS,
		"predicted_ms", t.PredictedMS, "prompt_n", t.PromptN, "cache_n", t.CacheN, "predicted_n", t.PredictedN)
}

// midStreamFaults applies the faults planned for the middle of a stream. It
// reports false when the stream must stop.
func (rp *reply) midStreamFaults(ctx context.Context, flush func()) bool {
	st := rp.sim.stats
	if rp.plan.malformed {
		st.fault(faultMalformed)
		_, _ = io.WriteString(rp.w, `data: {"id":"`+rp.idString()+`","choices":[{"index":0,"delta":{"content":"`+"\n\n")
	}
	if rp.plan.stall {
		st.fault(faultStall)
		flush()
		if !sleep(ctx, rp.plan.stallFor) {
			return false
		}
	}
	if rp.plan.reset {
		st.fault(faultReset)
		flush()
		resetConnection(rp.w)
		return false
	}
	return true
}

// whole writes a non-streaming reply once the last token exists.
func (rp *reply) whole(ctx context.Context) {
	var text strings.Builder
	emit := func(i int) bool { text.WriteString(rp.token(i)); return true }
	if _, ok := rp.produce(ctx, emit, func() {}); !ok {
		return
	}
	st := rp.sim.stats
	if rp.plan.stall {
		st.fault(faultStall)
		if !sleep(ctx, rp.plan.stallFor) {
			return
		}
	}
	if rp.plan.reset {
		st.fault(faultReset)
		resetConnection(rp.w)
		return
	}
	ph := rp.src.phases()
	object := "text_completion"
	c := choice{FinishReason: &rp.finish}
	if rp.chat {
		object = "chat.completion"
		c.Message = &delta{Role: "assistant", Content: text.String()}
	} else {
		s := text.String()
		c.Text = &s
	}
	rp.w.Header().Set("Content-Type", "application/json")
	rp.w.WriteHeader(http.StatusOK)
	st.response(http.StatusOK)
	if rp.plan.malformed {
		st.fault(faultMalformed)
		_, _ = io.WriteString(rp.w, `{"id":"`+rp.idString()+`","choices":[`)
		return
	}
	_ = json.NewEncoder(rp.w).Encode(&chunk{
		ID: rp.idString(), Object: object, Created: rp.created, Model: rp.sim.cfg.Model,
		Choices: []choice{c}, Usage: newUsage(rp.prompt.tokens, rp.n, ph.cached),
		Timings: newTimings(ph, rp.prompt.tokens, rp.n),
	})
}

// chunk is a completion object, streamed or whole.
type chunk struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
	Timings *Timings `json:"timings,omitempty"`
}

type choice struct {
	Index        int     `json:"index"`
	Delta        *delta  `json:"delta,omitempty"`
	Message      *delta  `json:"message,omitempty"`
	Text         *string `json:"text,omitempty"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// Usage is the OpenAI usage object.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func newUsage(prompt, completion, cached int) *Usage {
	u := &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	u.PromptTokensDetails.CachedTokens = cached
	return u
}

// Timings is the true time of each phase of a request, with llama.cpp's field
// names plus queue_ms. The phases follow one another without gaps:
// queue_ms + prompt_ms + predicted_ms is the time from the request entering
// the queue to its last token.
type Timings struct {
	// QueueMS is the time from the request's arrival (after header_delay)
	// to its admission into a batch slot; reading and parsing the request
	// count as queueing.
	QueueMS float64 `json:"queue_ms"`
	// PromptN is the number of prompt tokens prefilled (not from the cache);
	// PromptMS the prefill time, which ends with the first token.
	PromptN          int     `json:"prompt_n"`
	PromptMS         float64 `json:"prompt_ms"`
	PromptPerTokenMS float64 `json:"prompt_per_token_ms"`
	PromptPerSecond  float64 `json:"prompt_per_second"`
	// PredictedN is the number of output tokens; PredictedMS the time from
	// the first token to the last, so TPOT = predicted_ms / (predicted_n - 1).
	// PredictedPerTokenMS is predicted_ms / predicted_n, as llama.cpp has it.
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
	// CacheN is the number of prompt tokens served from the prefix cache.
	CacheN int `json:"cache_n"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func newTimings(ph phases, promptTokens, n int) *Timings {
	t := &Timings{
		QueueMS:     ms(ph.queue()),
		PromptN:     promptTokens - ph.cached,
		PromptMS:    ms(ph.prefill()),
		PredictedN:  n,
		PredictedMS: ms(ph.decode()),
		CacheN:      ph.cached,
	}
	if t.PromptN > 0 && t.PromptMS > 0 {
		t.PromptPerTokenMS = t.PromptMS / float64(t.PromptN)
		t.PromptPerSecond = 1e3 / t.PromptPerTokenMS
	}
	if n > 0 && t.PredictedMS > 0 {
		t.PredictedPerTokenMS = t.PredictedMS / float64(n)
		t.PredictedPerSecond = 1e3 / t.PredictedPerTokenMS
	}
	return t
}

func writeEvent(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	_, _ = io.WriteString(w, "data: ")
	_, _ = w.Write(b)
	_, _ = io.WriteString(w, "\n\n")
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
