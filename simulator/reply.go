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

// reply writes one reply, in the form of its API.
type reply struct {
	sim    *Simulator
	w      http.ResponseWriter
	api    apiKind
	req    *request
	src    tokenSource
	prompt prompt
	out    *output
	plan   faultPlan
	ident  *identity // read once, so a reply says one thing throughout
	enc    encoder
	id     uint64
	// created is the reply's Unix time, as the APIs report it.
	created int64
	// requestID is the client's X-Request-Id, for the debug log of each
	// reply's timings: the ground truth a prober's trace is checked against.
	requestID string
}

// encoder writes one API's form of a reply's stream. Each method appends to
// b and returns it; the reply writes and flushes.
type encoder interface {
	// start is what the stream begins with when the request is accepted,
	// before any token exists (possibly nothing).
	start(b []byte) []byte
	// token is the events of token i (1-based).
	token(b []byte, i int) []byte
	// malformed is an event whose data is not valid JSON.
	malformed(b []byte) []byte
	// fail is the API's in-stream error, which ends the stream.
	fail(b []byte) []byte
	// end is what follows the last token: the finish, the usage with the
	// timings, and, when done, the stream's end ([DONE], the Responses
	// API's terminal event, message_stop).
	end(b []byte, ph phases, t *Timings, done bool) []byte
}

func newEncoder(rp *reply) encoder {
	switch rp.api {
	case apiResponses:
		return newResponsesEncoder(rp)
	case apiMessages:
		return newMessagesEncoder(rp)
	}
	return newChatEncoder(rp)
}

// piece returns what token i (1-based) is part of and its text. Reasoning
// and filler are vocabulary tokens, each exactly one token for the
// simulator's own tokenizer.
func (rp *reply) piece(i int) (segment, string) {
	o, vocab := rp.out, rp.sim.vocab
	if i <= o.reasoning {
		return segReasoning, vocab[(int(rp.id)*11+i)%len(vocab)]
	}
	seg := segText
	if o.kind == kindToolCall {
		seg = segToolArgs
	}
	if j := i - o.reasoning; j <= len(o.pieces) {
		return seg, o.pieces[j-1]
	}
	return seg, vocab[(int(rp.id)*7+i)%len(vocab)]
}

// texts returns the reply's reasoning and answer as sent, for events that
// repeat them whole.
func (rp *reply) texts() (reasoning, answer string) {
	var r, a strings.Builder
	for i := 1; i <= rp.out.n; i++ {
		if seg, t := rp.piece(i); seg == segReasoning {
			r.WriteString(t)
		} else {
			a.WriteString(t)
		}
	}
	return r.String(), a.String()
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
			return seen, seen == rp.out.n
		}
	}
}

// stream writes the reply as server-sent events: what the API's stream
// starts with as soon as the request is accepted (for chat, a role-only
// chunk, sent before the request is queued, so that a client that counts it
// as the first token sees a fake-fast TTFT), the events of each token as it
// exists, then the finish, the usage and timings, and the stream's end.
// Faults strike halfway through the output.
func (rp *reply) stream(ctx context.Context) {
	w, st := rp.w, rp.sim.stats
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	st.response(http.StatusOK)
	rc := http.NewResponseController(w)
	flush := func() { _ = rc.Flush() }

	buf := rp.enc.start(make([]byte, 0, 1024))
	if len(buf) > 0 {
		_, _ = w.Write(buf)
		flush()
	}
	mid := (rp.out.n + 1) / 2
	emit := func(i int) bool {
		buf = rp.enc.token(buf[:0], i)
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
	timings := newTimings(ph, rp.prompt.tokens, rp.out.n)
	rp.logTimings(timings)
	if rp.plan.noDone {
		st.fault(faultMissingDone)
	}
	buf = rp.enc.end(buf[:0], ph, timings, !rp.plan.noDone)
	_, _ = w.Write(buf)
	flush()
	st.reply(rp.api, rp.out)
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

// midStreamFaults applies the faults planned for the middle of a stream, in
// this order: a malformed event, a stall, a reset, an in-stream error. It
// reports false when the stream must stop.
func (rp *reply) midStreamFaults(ctx context.Context, flush func()) bool {
	st := rp.sim.stats
	if rp.plan.malformed {
		st.fault(faultMalformed)
		_, _ = rp.w.Write(rp.enc.malformed(nil))
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
	if rp.plan.streamError {
		st.fault(faultStreamError)
		_, _ = rp.w.Write(rp.enc.fail(nil))
		flush()
		return false
	}
	return true
}

// whole writes a non-streaming reply once the last token exists (chat and
// completions; the other APIs stream only).
func (rp *reply) whole(ctx context.Context) {
	if _, ok := rp.produce(ctx, func(int) bool { return true }, func() {}); !ok {
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
	rp.w.Header().Set("Content-Type", "application/json")
	rp.w.WriteHeader(http.StatusOK)
	st.response(http.StatusOK)
	if rp.plan.malformed {
		st.fault(faultMalformed)
		_, _ = io.WriteString(rp.w, `{"id":"`+rp.chatID()+`","choices":[`)
		return
	}
	_ = json.NewEncoder(rp.w).Encode(rp.enc.(*chatEncoder).whole(ph, newTimings(ph, rp.prompt.tokens, rp.out.n)))
	st.reply(rp.api, rp.out)
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

// appendData appends v as an SSE event without a name: "data: <JSON>".
func appendData(b []byte, v any) []byte {
	j, _ := json.Marshal(v)
	b = append(b, "data: "...)
	b = append(b, j...)
	return append(b, "\n\n"...)
}

// appendEvent appends v as a named SSE event: "event: <name>", "data: <JSON>".
func appendEvent(b []byte, name string, v any) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, '\n')
	return appendData(b, v)
}

// appendStamp appends `,"sim_ts":<now in Unix ns>` when stamp_chunks asks.
func (rp *reply) appendStamp(b []byte) []byte {
	if !rp.sim.cfg.StampChunks {
		return b
	}
	return strconv.AppendInt(append(b, `,"sim_ts":`...), time.Now().UnixNano(), 10)
}

// stamp returns the time to put in a "sim_ts" field, 0 (omitted) unless
// stamp_chunks asks.
func (rp *reply) stamp() int64 {
	if !rp.sim.cfg.StampChunks {
		return 0
	}
	return time.Now().UnixNano()
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
