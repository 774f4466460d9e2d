// Package prober sends synthetic load to OpenAI-compatible LLM endpoints
// and measures every request: scheduling (open loop: absolute-time
// arrivals, drop-never-queue, in scheduler.go and schedule.go; closed loop:
// N clients, in closed.go), the HTTP client and SSE stream reader, and the
// pure measurement functions that turn a per-request Result into TTFT,
// TPOT, ITL, E2E and an SLO verdict, as the README's metric reference
// defines them. The Manager (manager.go) runs config.LoadSpecs for their
// owners, the canary and test runs, within global caps; each load
// (load.go) runs on its target's shared client and calibration
// (target.go).
//
// prober never imports the exporter: each finished request is measured
// once and handed with its Measurement to the Observers of an
// ObserverFactory (observer.go), which Fanout composes.
package prober

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Outcome is how a sent request ended: exactly one per request, decided by
// Classify in the contract's order.
type Outcome string

// Outcomes, in the order Classify decides them.
const (
	OutcomeCancelled     Outcome = "cancelled"
	OutcomeShutdown      Outcome = "shutdown"
	OutcomeTimeout       Outcome = "timeout"
	OutcomeConnectError  Outcome = "connect_error"
	OutcomeHTTP429       Outcome = "http_429"
	OutcomeHTTP4xx       Outcome = "http_4xx"
	OutcomeHTTP5xx       Outcome = "http_5xx"
	OutcomeProtocolError Outcome = "protocol_error"
	OutcomeStreamError   Outcome = "stream_error"
	OutcomeOK            Outcome = "ok"
)

// Outcomes lists every outcome, for zero-initialised series.
var Outcomes = []Outcome{
	OutcomeCancelled, OutcomeShutdown, OutcomeTimeout, OutcomeConnectError, OutcomeHTTP429,
	OutcomeHTTP4xx, OutcomeHTTP5xx, OutcomeProtocolError, OutcomeStreamError, OutcomeOK,
}

// DropReason is why a scheduled arrival was never sent.
type DropReason string

// Drop reasons.
const (
	// DropMaxInFlight: the load (or the global cap) had its maximum of
	// requests in flight.
	DropMaxInFlight DropReason = "max_in_flight"
	// DropLate: the prober itself fell behind; sending now would fire a
	// catch-up burst no production client makes.
	DropLate DropReason = "late"
	// DropShutdown: due while the load was stopping.
	DropShutdown DropReason = "shutdown"
)

// DropReasons lists every drop reason, for zero-initialised series.
var DropReasons = []DropReason{DropMaxInFlight, DropLate, DropShutdown}

// Causes of a request context ending early, told apart by context.Cause.
var (
	ErrCancelled = errors.New("cancelled by the workload")
	ErrShutdown  = errors.New("cancelled: sloprober is stopping")
	ErrTimeout   = errors.New("request timeout")
	// ErrConversationFull ends a later turn of a conversation whose history
	// leaves no room in the target's context or the history's byte bound:
	// the workload's user gives up (outcome cancelled).
	ErrConversationFull = fmt.Errorf("%w: the conversation's history fills the context", ErrCancelled)
)

// Usage is the token usage a server reported.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is nil when the server did not report it
	// (usage.prompt_tokens_details.cached_tokens, the Responses API's
	// input_tokens_details.cached_tokens, the Messages API's
	// cache_read_input_tokens).
	CachedTokens *int
	// ReasoningTokens, within CompletionTokens, is nil when the server did
	// not report it (completion_tokens_details.reasoning_tokens, the
	// Responses API's output_tokens_details.reasoning_tokens).
	ReasoningTokens *int
}

// ServerTimings is the per-phase timing a server reported in a "timings"
// object (llama.cpp's field names; the simulator adds queue_ms).
type ServerTimings struct {
	QueueMS     *float64 `json:"queue_ms"`
	PromptN     int      `json:"prompt_n"`
	PromptMS    float64  `json:"prompt_ms"`
	PredictedN  int      `json:"predicted_n"`
	PredictedMS float64  `json:"predicted_ms"`
	// CacheN is nil when the server did not say.
	CacheN *int `json:"cache_n"`
}

// Trace holds the httptrace times of a request, as offsets from Sent; zero
// where the event did not happen (a reused connection has no connect).
type Trace struct {
	DNSDone      time.Duration
	ConnectDone  time.Duration
	TLSDone      time.Duration
	GotConn      time.Duration
	WroteRequest time.Duration
	FirstByte    time.Duration
	Reused       bool
}

// Result is everything known about one probe request: what was asked, the
// timeline, what came back and how it ended. Every derived number comes from
// pure functions over it (see Measure), so the same Result serves metrics,
// spans and reports.
type Result struct {
	RequestID string
	Target    string
	Scenario  string
	Test      string
	// Tenant is the request's tenant (tenant-<n>), "" when its scenario
	// has no tenants: attainment can be split by it.
	Tenant string

	// What was asked.
	InputTokens int // the workload's estimate of the prompt length
	InputBase   int // the part of InputTokens counted before (Request.InputBase)
	// InputUnjudged: the expected input length is not known yet (a quality
	// check's additions not yet measured): no input mismatch is counted.
	InputUnjudged bool
	OutputTokens  int // sent in the max-tokens field
	IgnoreEOS     bool

	// Scheduled is when the arrival process said the request was due (ts).
	Scheduled time.Time
	// Sent is when the HTTP call started (t0). Every offset below is from
	// Sent, on the monotonic clock.
	Sent time.Time
	// NotSent: the request ended before it was handed to the HTTP client
	// (stopping, or a turn the workload no longer makes). It is counted
	// by its outcome only, never as sent: Sent is then when it ended.
	NotSent bool
	// Retry is why the request was sent a second time, on a new
	// connection, having provably never reached the server (the Retry
	// reasons); "" when it was sent once. Sent, and so TTFT and E2E, are
	// from the first attempt.
	Retry string
	Trace Trace
	// Chunks are the arrival offsets of the chunks that carried generated
	// text (content, reasoning or a tool call): Chunks[0] is t1 - t0, the
	// last one tN - t0.
	Chunks []time.Duration
	// FirstAnswer is the index in Chunks of the first chunk that carried
	// answer text (content or a tool call, not reasoning), -1 when none
	// did: Chunks[FirstAnswer] is the time to first answer token.
	FirstAnswer int
	// Ended is when the response ended, completely or not.
	Ended time.Duration
	// Stamps are the server's write times (Unix ns) of the text chunks,
	// where it sends them ("sim_ts" of the simulator's stamp_chunks): the
	// truth Chunks is checked against by `sloprober bench`.
	Stamps []int64

	StatusCode int
	// Who the server says it is, bounded (MaxIdentityBytes): its Server
	// header, the first "model" and "system_fingerprint" of its reply,
	// and the target's identity_header. Empty when not sent.
	ServerHeader, Model, SystemFingerprint, IdentityHeader string

	Usage   *Usage
	Timings *ServerTimings
	// Reported are the phase times the target's timing sources found in
	// the reply (see SplitPhases), bounded.
	Reported   []ReportedPhase
	timingsRaw []byte // the last "timings" object, until Do has read Reported from it

	// SpanContext is the probe's trace context when tracing is on (sent
	// as traceparent): its trace id is the request id, its sampled flag
	// the head sampling decision.
	SpanContext trace.SpanContext

	FinishReason string
	// Done is set when the stream's end was read: "data: [DONE]", or the
	// API's end event (response.completed, message_stop).
	Done bool
	end  string // that end, named in Error
	// Reply is the answer's text (content, not reasoning), kept only when
	// the request asked for it (a conversation, a quality check).
	Reply string
	// ToolCalls are the reply's tool calls, kept likewise: at most
	// MaxToolCalls, their names and arguments within the reply's bound.
	ToolCalls []ToolCall
	// Check is the verdict of the scenario's quality check (nil without
	// one, or for a request that ended before a reply).
	Check *CheckVerdict

	// Failure facts, from which Classify decides the outcome.
	Cause       error  // why the request context ended before the response did, if it did
	ConnectErr  string // no connection could be established
	ProtocolErr string // a 2xx whose body is not an SSE stream, or a chunk that is not JSON
	StreamErr   string // an error object in the stream, or a broken connection
	ErrorBody   string // the start of a non-2xx response body

	Outcome Outcome
}

// ServedIdentity is who a reply said the target is: the model it names,
// its system_fingerprint and the target's identity_header, each bounded.
type ServedIdentity struct {
	Model, Fingerprint, Header string
}

// Identity returns who the reply said the target is.
func (r *Result) Identity() ServedIdentity {
	return ServedIdentity{Model: r.Model, Fingerprint: r.SystemFingerprint, Header: r.IdentityHeader}
}

// ToolCall is one tool call of a reply, as streamed: the function's name
// and its arguments (a JSON text, unparsed).
type ToolCall struct {
	Name, Arguments string
}

// MaxToolCalls bounds the tool calls kept of one reply.
const MaxToolCalls = 16

// Lag is t0 - ts: how late the request was sent.
func (r *Result) Lag() time.Duration { return r.Sent.Sub(r.Scheduled) }

// Classify decides the outcome of a finished request, in the contract's
// order: cancelled, shutdown, timeout, connect_error, the HTTP status,
// protocol_error, stream_error (including a stream without [DONE]), ok.
func Classify(r *Result) Outcome {
	switch {
	case errors.Is(r.Cause, ErrCancelled):
		return OutcomeCancelled
	case errors.Is(r.Cause, ErrShutdown):
		return OutcomeShutdown
	case r.Cause != nil:
		return OutcomeTimeout
	case r.ConnectErr != "":
		return OutcomeConnectError
	case r.StatusCode == 429:
		return OutcomeHTTP429
	case r.StatusCode >= 400 && r.StatusCode < 500:
		return OutcomeHTTP4xx
	case r.StatusCode >= 500:
		return OutcomeHTTP5xx
	case r.StatusCode < 200 || r.StatusCode > 299:
		return OutcomeProtocolError
	case r.ProtocolErr != "":
		return OutcomeProtocolError
	case r.StreamErr != "" || !r.Done:
		return OutcomeStreamError
	}
	return OutcomeOK
}

// Error returns a one-line description of what went wrong, or "".
func (r *Result) Error() string {
	switch {
	case r.Cause != nil:
		return r.Cause.Error()
	case r.ConnectErr != "":
		return r.ConnectErr
	case r.ProtocolErr != "" && r.StatusCode >= 300 && r.StatusCode <= 399: // a redirect
		return r.ProtocolErr
	case r.StatusCode != 0 && (r.StatusCode < 200 || r.StatusCode > 299):
		if r.ErrorBody != "" {
			return "HTTP " + strconv.Itoa(r.StatusCode) + ": " + r.ErrorBody
		}
		return "HTTP " + strconv.Itoa(r.StatusCode)
	case r.ProtocolErr != "":
		return r.ProtocolErr
	case r.StreamErr != "":
		return r.StreamErr
	case !r.Done && r.StatusCode != 0:
		return "stream ended without " + cmp.Or(r.end, "[DONE]")
	}
	return ""
}

// CachedPromptTokens is what the reply said of the server's prefix
// cache: the prompt tokens found in it, of how many. Its usage's cached
// tokens of its prompt tokens, else llama.cpp's timings.cache_n of
// cache_n + prompt_n (prompt_n counts the tokens it processed). ok is
// false when it said neither, or claimed more cached than prompt: the
// canary's counter and a test's cached share count the same replies.
func (r *Result) CachedPromptTokens() (cached, prompt int, ok bool) {
	switch {
	case r.Usage != nil && r.Usage.CachedTokens != nil:
		cached, prompt = *r.Usage.CachedTokens, r.Usage.PromptTokens
	case r.Timings != nil && r.Timings.CacheN != nil:
		cached, prompt = *r.Timings.CacheN, *r.Timings.CacheN+r.Timings.PromptN
		if r.Usage != nil && r.Usage.PromptTokens > 0 {
			prompt = r.Usage.PromptTokens
		}
	default:
		return 0, 0, false
	}
	if cached < 0 || prompt <= 0 || cached > prompt {
		return 0, 0, false
	}
	return cached, prompt, true
}
