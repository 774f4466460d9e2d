package prober

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/sloprober/sloprober/internal/safetext"
)

// Bounds on what a server can make sloprober read, store or send. A probe
// runs 24/7 against servers nobody on the project wrote: whatever a server
// sends (endless streams, giant lines, absurd counts) must end in a bounded
// time with bounded memory, and must never make sloprober send more.

// errStreamCut reports a response cut at one of its bounds (stream_error).
var errStreamCut = errors.New("stream cut")

const (
	// textChunksPerToken and textChunksMargin bound the text-carrying
	// chunks of one response: 4 x max_tokens + 64. An engine sends one
	// chunk a token, sometimes an empty or a split one; four times as many
	// means the server ignores the requested maximum (llama.cpp ignores
	// max_completion_tokens, and with ignore_eos never stops). At
	// max_tokens 64 a stream is cut after its 320th text chunk.
	textChunksPerToken = 4
	textChunksMargin   = 64
	// eventsMargin is how many events beyond the text chunks a response
	// may have: role, finish and usage chunks, empty deltas.
	eventsMargin = 1024
	// baseResponseBytes and bytesPerTextChunk bound the bytes of one
	// response: 4 MiB plus 4 KiB for every text chunk allowed (a chunk is
	// about 200 bytes, 2-3 KiB with logprobs), at most maxResponseBytes.
	// At max_tokens 64: 4 MiB + 320 x 4 KiB = 5.25 MiB.
	baseResponseBytes = 4 << 20
	bytesPerTextChunk = 4 << 10
	maxResponseBytes  = 256 << 20
	// MaxServerMessageBytes bounds a server's error message kept in a
	// result (log, landing page, probe).
	MaxServerMessageBytes = 512
	// maxErrorBodyBytes bounds what is read of a non-2xx body to find its
	// message: a JSON error with a stack trace or a long HTML page.
	maxErrorBodyBytes = 16 << 10
	// maxReportedTokens bounds a token count a server reports (usage); a
	// count beyond it, or below zero, is taken as not reported.
	maxReportedTokens = 100_000_000
	// maxTimingMS bounds a phase time a server reports (timings), in
	// milliseconds: a day. Timings with a negative or larger value are
	// dropped whole.
	maxTimingMS = 86_400_000
)

// StreamLimits bounds one response.
type StreamLimits struct {
	TextChunks int   // chunks that carry generated text
	Events     int   // all dispatched SSE events
	Bytes      int64 // body bytes
}

// LimitsFor returns the bounds of the response to a request for maxTokens
// output tokens.
func LimitsFor(maxTokens int) StreamLimits {
	maxTokens = min(max(maxTokens, 1), maxReportedTokens)
	text := textChunksPerToken*maxTokens + textChunksMargin
	return StreamLimits{
		TextChunks: text,
		Events:     2*text + eventsMargin,
		Bytes:      min(int64(baseResponseBytes)+int64(bytesPerTextChunk)*int64(text), maxResponseBytes),
	}
}

// limitedBody returns errStreamCut once more than limit bytes were read: a
// body of limit bytes reads to its end, and one byte more is the cut.
type limitedBody struct {
	r     io.Reader
	limit int64
	read  int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	left := l.limit + 1 - l.read
	if left <= 0 {
		return 0, fmt.Errorf("%w: more than %d bytes", errStreamCut, l.limit)
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
}

// serverMessage turns a server's error payload into a bounded one-line
// message: the "message" of a JSON object ({"message": ...}, {"error":
// {"message": ...}} or {"error": "..."}) or the text itself, invalid UTF-8
// replaced, white space runs collapsed, at most MaxServerMessageBytes.
func serverMessage(b []byte) string {
	var obj struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	msg := ""
	if json.Unmarshal(b, &obj) == nil {
		msg = obj.Message
		if msg == "" && len(obj.Error) > 0 {
			msg = errorValueMessage(obj.Error)
		}
	}
	if msg == "" {
		msg = string(b)
	}
	return boundMessage(msg)
}

// errorValueMessage returns the message of an "error" value as engines send
// it: an object's "message" ({"message": ...}, OpenAI and vLLM) or a string;
// "" for anything else.
func errorValueMessage(raw []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	var s string
	switch {
	case json.Unmarshal(raw, &e) == nil && e.Message != "":
		return e.Message
	case json.Unmarshal(raw, &s) == nil:
		return s
	}
	return ""
}

// boundMessage makes s one line of valid UTF-8 of at most
// MaxServerMessageBytes.
func boundMessage(s string) string { return safetext.Line(s, MaxServerMessageBytes) }

// MaxIdentityBytes bounds what is kept of a server's statement of who it
// is (a Server header, a reply's model, a system_fingerprint): enough for
// "vllm/0.11.0" or a fingerprint, not for a page of text.
const MaxIdentityBytes = 128

// boundIdentity makes what a server says of itself safe to keep, show
// and use as a label value: valid UTF-8, one line of printable characters,
// at most MaxIdentityBytes. A longer statement keeps its start and a hash
// of the whole ("~" and 8 hex digits), so two that differ only beyond the
// bound stay apart (an identity change is still seen).
func boundIdentity(s string) string {
	b := boundMessage(s[:min(len(s), 4*MaxIdentityBytes)])
	if len(b) <= MaxIdentityBytes && len(s) <= 4*MaxIdentityBytes {
		return b
	}
	sum := sha256.Sum256([]byte(s))
	cut := min(len(b), MaxIdentityBytes-9)
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut] + "~" + hex.EncodeToString(sum[:4])
}

// validTimings reports whether every time a server reported is in [0, a day].
func validTimings(t *ServerTimings) bool {
	ok := func(ms float64) bool { return ms >= 0 && ms <= maxTimingMS && !math.IsNaN(ms) }
	if t.QueueMS != nil && !ok(*t.QueueMS) {
		return false
	}
	return ok(t.PromptMS) && ok(t.PredictedMS) &&
		t.PromptN >= 0 && t.PromptN <= maxReportedTokens &&
		t.PredictedN >= 0 && t.PredictedN <= maxReportedTokens &&
		(t.CacheN == nil || *t.CacheN >= 0 && *t.CacheN <= maxReportedTokens)
}
