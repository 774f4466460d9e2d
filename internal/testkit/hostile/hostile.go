// Package hostile is a catalogue of misbehaving OpenAI-compatible HTTP
// servers, for tests of everything in sloprober that reads what a server
// sends. Each server is an http.Handler; Start serves one over loopback
// (127.0.0.1 only) and records what it received, so that a test can assert
// on what the prober sent as well as on how it judged the reply.
//
// Servers that lie (a *Liar; honest streams, false facts):
//   - ConstantCount: usage.prompt_tokens is always the same number (a proxy,
//     a cache, a recording); /v1/models advertises max_model_len.
//   - Truncating: reports min(true count, limit), as llama.cpp does when it
//     truncates an over-long prompt silently; /props advertises n_ctx.
//   - UsageMissing, UsageAbsurd: no usage, or usage numbers no server means
//     (huge, negative, fractional, strings).
//   - TimingsMissing, TimingsAbsurd, TimingsOverflow: a "timings" object
//     without fields, with absurd values (negative, the largest float and
//     int64), or with values no float64 holds (1e999, "NaN").
//   - LlamaTokenize: /tokenize in llama.cpp's form ({"content"} ->
//     {"tokens":[...]}; a vLLM-form request gets 200 {"tokens":[]}), with
//     /apply-template and /props.
//   - VLLMTokenize: /tokenize in vLLM's form ({"model","messages"} or
//     {"model","prompt"} -> {"count","max_model_len","tokens"}).
//   - BrokenTokenize: /tokenize answers 500, garbage, a 100 MB body, absurd
//     counts, a constant tiny count, or never.
//
// Streams (any path):
//   - TokensForever: text chunks at 10,000 a second, whatever max_tokens says.
//   - EmptyEventsForever: events without text, as fast as the client reads.
//   - HeadersThenSilence, NeverAnswers.
//   - EndlessLine: one line that never ends; HugeLine: a line of n bytes.
//   - InvalidUTF8 (invalid UTF-8 and an escaped NUL in the text), RawNUL (a
//     raw NUL byte inside a JSON string: not JSON).
//   - Gzip: the stream gzip-encoded although nobody asked for it.
//   - Redirect: a 3xx with a Location (to another port, say).
//   - HTML, BareJSON, JSONError200: 2xx bodies that are not SSE.
//   - ResetMidStream: a few chunks, then the connection is reset (RST).
//   - TooManyRequests: 429 with Retry-After.
//   - ErrorData, ErrorEvent, LlamaErrorField, ErrorObject: every in-stream
//     error form engines use.
//   - CROnly: CR alone as line end (allowed by the SSE specification).
//   - OneByteWrites, OddFields: valid streams, written one byte at a time, or
//     with every odd SSE field the specification allows.
//   - OK: an honest stream, for redirect targets and baselines.
//
// Every server is bounded: a handler returns when the client goes away, the
// server is closed, or after maxServe, and it never holds more than a
// request body of parseLimit bytes.
package hostile

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Model is the model name the servers answer with.
const Model = "hostile-model"

// maxServe bounds any one response, whatever the client does.
const maxServe = time.Minute

// parseLimit is the largest request body a server keeps and parses; the
// bytes of a larger one are counted and discarded.
const parseLimit = 4 << 20

// maxRecords bounds what a Recorder keeps; it counts on past it.
const maxRecords = 100_000

// Message is one chat message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is what a server parsed of a JSON request body: the fields of
// chat/completions, completions, and of /tokenize in either engine's form.
type Request struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Content             *string         `json:"content"` // llama.cpp's /tokenize
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	IgnoreEOS           bool            `json:"ignore_eos"`
}

// PromptText returns the prompt of a completions request ("" when none): a
// string, or strings joined with newlines.
func (r *Request) PromptText() string {
	if len(r.Prompt) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(r.Prompt, &s) == nil {
		return s
	}
	var ss []string
	if json.Unmarshal(r.Prompt, &ss) == nil {
		return strings.Join(ss, "\n")
	}
	return ""
}

// Text returns every text of the request: message contents, prompt and
// content, joined with newlines.
func (r *Request) Text() string {
	var parts []string
	for _, m := range r.Messages {
		parts = append(parts, m.Content)
	}
	if p := r.PromptText(); p != "" {
		parts = append(parts, p)
	}
	if r.Content != nil {
		parts = append(parts, *r.Content)
	}
	return strings.Join(parts, "\n")
}

// MaxOut returns the requested output length: max_tokens, else
// max_completion_tokens, else def.
func (r *Request) MaxOut(def int) int {
	switch {
	case r.MaxTokens != nil && *r.MaxTokens > 0:
		return *r.MaxTokens
	case r.MaxCompletionTokens != nil && *r.MaxCompletionTokens > 0:
		return *r.MaxCompletionTokens
	}
	return def
}

// Received is what a server saw of one request.
type Received struct {
	At     time.Time
	Method string
	Path   string
	// BodyBytes is the whole body's length, however large.
	BodyBytes int64

	Authorization  string
	UserAgent      string
	RequestID      string // X-Request-Id
	ContentType    string
	Accept         string
	AcceptEncoding string

	// Parsed is false when the body was not JSON or above parseLimit;
	// the fields below are then zero (Words and Tokens -1).
	Parsed    bool
	Model     string
	MaxTokens int // max_tokens or max_completion_tokens; 0 when absent
	// Messages is the number of chat messages: 2n-1 for the n-th turn of
	// a conversation.
	Messages int
	// Words is the number of whitespace-separated words of every text
	// (messages, prompt, content).
	Words int
	// Tokens is the server's own count of the prompt (its tokenizer over
	// its chat template), what a truthful usage.prompt_tokens would say;
	// for servers without a tokenizer of their own, Words.
	Tokens int
	// Form is, for /tokenize, the request's form: "llama" ({"content"}),
	// "vllm" ({"messages"} or {"prompt"}), or "".
	Form string
}

// Recorder keeps what a server received, safely for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	reqs   []Received
	n      int
	notify chan struct{}
}

func newRecorder() *Recorder { return &Recorder{notify: make(chan struct{}, 1)} }

func (r *Recorder) add(rec Received) {
	r.mu.Lock()
	r.n++
	if len(r.reqs) < maxRecords {
		r.reqs = append(r.reqs, rec)
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// All returns a copy of every request kept, in arrival order.
func (r *Recorder) All() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Received(nil), r.reqs...)
}

// Count returns the number of requests received.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Path returns the requests whose path ends with suffix.
func (r *Recorder) Path(suffix string) []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Received
	for _, rec := range r.reqs {
		if strings.HasSuffix(rec.Path, suffix) {
			out = append(out, rec)
		}
	}
	return out
}

// Changed returns a channel that receives after a request was recorded
// (coalesced: one receive may stand for several requests).
func (r *Recorder) Changed() <-chan struct{} { return r.notify }

// Counter is implemented by servers that know their own count of a
// request's prompt tokens (see Received.Tokens).
type Counter interface {
	Count(*Request) int
}

// Server is one hostile server listening on 127.0.0.1.
type Server struct {
	// Base is the server's root URL, http://127.0.0.1:port.
	Base string
	// URL is the OpenAI base URL: Base + "/v1".
	URL string
	// Rec records every request.
	Rec *Recorder

	h      http.Handler
	ts     *httptest.Server
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

type requestKey struct{}

// RequestOf returns the parsed body of a request served by a Server, or nil.
func RequestOf(r *http.Request) *Request {
	req, _ := r.Context().Value(requestKey{}).(*Request)
	return req
}

// Start serves h on 127.0.0.1 (a port of its own). Close stops it.
func Start(h http.Handler) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Rec: newRecorder(), h: h, ctx: ctx, cancel: cancel}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		panic(fmt.Sprintf("hostile: listening on 127.0.0.1: %v", err))
	}
	_ = ts.Listener.Close()
	ts.Listener = ln
	ts.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // resets and hijacks are the point
	ts.Start()
	s.ts = ts
	s.Base = ts.URL
	s.URL = ts.URL + "/v1"
	return s
}

// Close ends every response in progress and stops the server; it returns
// once every handler has returned. It may be called more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		s.cancel()
		s.ts.CloseClientConnections()
		s.ts.Close()
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), maxServe)
	defer cancel()
	rec := Received{
		At:             time.Now(),
		Method:         r.Method,
		Path:           r.URL.Path,
		Authorization:  r.Header.Get("Authorization"),
		UserAgent:      r.Header.Get("User-Agent"),
		RequestID:      r.Header.Get("X-Request-Id"),
		ContentType:    r.Header.Get("Content-Type"),
		Accept:         r.Header.Get("Accept"),
		AcceptEncoding: r.Header.Get("Accept-Encoding"),
		Words:          -1,
		Tokens:         -1,
	}
	var buf bytes.Buffer
	n, _ := io.Copy(&buf, io.LimitReader(r.Body, parseLimit+1))
	if n > parseLimit {
		rest, _ := io.Copy(io.Discard, r.Body)
		n += rest
		buf = bytes.Buffer{}
	}
	rec.BodyBytes = n
	var req *Request
	if n > 0 && n <= parseLimit {
		req = &Request{}
		if json.Unmarshal(buf.Bytes(), req) != nil {
			req = nil
		}
	}
	if req != nil {
		rec.Parsed = true
		rec.Model = req.Model
		rec.MaxTokens = req.MaxOut(0)
		rec.Messages = len(req.Messages)
		rec.Words = len(strings.Fields(req.Text()))
		rec.Tokens = rec.Words
		if c, ok := s.h.(Counter); ok {
			rec.Tokens = c.Count(req)
		}
		switch {
		case !strings.HasSuffix(rec.Path, "/tokenize"):
		case req.Content != nil:
			rec.Form = "llama"
		case req.Messages != nil || len(req.Prompt) > 0:
			rec.Form = "vllm"
		}
	}
	s.Rec.add(rec)
	r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	s.h.ServeHTTP(w, r.WithContext(context.WithValue(ctx, requestKey{}, req)))
}

// ---- SSE writing ----

// stream writes a response body, flushing as it goes; it stops at the first
// failed write or when the request's context ends.
type stream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	ctx context.Context
	end string // the line end
	err error
}

func startStream(w http.ResponseWriter, r *http.Request, contentType string) *stream {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, rc: http.NewResponseController(w), ctx: r.Context(), end: "\n"}
	s.flush()
	return s
}

func (s *stream) ok() bool {
	if s.err == nil {
		s.err = s.ctx.Err()
	}
	return s.err == nil
}

func (s *stream) raw(b []byte) bool {
	if !s.ok() {
		return false
	}
	_, s.err = s.w.Write(b)
	return s.err == nil
}

func (s *stream) str(str string) bool { return s.raw([]byte(str)) }

// event writes one "data:" event and flushes it.
func (s *stream) event(data string) bool {
	return s.str("data: "+data+s.end+s.end) && s.flush()
}

func (s *stream) flush() bool {
	if !s.ok() {
		return false
	}
	s.err = s.rc.Flush()
	return s.err == nil
}

// Chunks of a stream. Contents are raw JSON string contents (escapes
// included), so a server can send what json.Marshal never would.
func chatText(content string) string {
	return `{"id":"chatcmpl-hostile","object":"chat.completion.chunk","created":1,"model":"` + Model +
		`","choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]}`
}

func completionText(content string) string {
	return `{"id":"cmpl-hostile","object":"text_completion","created":1,"model":"` + Model +
		`","choices":[{"index":0,"text":"` + content + `","finish_reason":null}]}`
}

const roleChunk = `{"id":"chatcmpl-hostile","object":"chat.completion.chunk","created":1,"model":"` + Model +
	`","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`

// reply is an honest stream's events.
type reply struct {
	completions bool
	n           int    // text chunks
	content     string // raw JSON string contents of each text chunk
	timings     string // raw JSON of a "timings" object on the finish chunk; "" none
	// prompt and completion are the raw JSON values of the usage fields;
	// prompt "" sends no usage.
	prompt, completion string
}

func (p reply) events() []string {
	content := p.content
	if content == "" {
		content = "tok "
	}
	var ev []string
	if !p.completions {
		ev = append(ev, roleChunk)
	}
	for range p.n {
		if p.completions {
			ev = append(ev, completionText(content))
		} else {
			ev = append(ev, chatText(content))
		}
	}
	finish := `{"id":"chatcmpl-hostile","object":"chat.completion.chunk","created":1,"model":"` + Model +
		`","choices":[{"index":0,"delta":{},"finish_reason":"length"}]`
	if p.completions {
		finish = `{"id":"cmpl-hostile","object":"text_completion","created":1,"model":"` + Model +
			`","choices":[{"index":0,"text":"","finish_reason":"length"}]`
	}
	if p.timings != "" {
		finish += `,"timings":` + p.timings
	}
	ev = append(ev, finish+"}")
	if p.prompt != "" {
		completion := p.completion
		if completion == "" {
			completion = strconv.Itoa(p.n)
		}
		ev = append(ev, `{"id":"chatcmpl-hostile","object":"chat.completion.chunk","created":1,"model":"`+Model+
			`","choices":[],"usage":{"prompt_tokens":`+p.prompt+`,"completion_tokens":`+completion+`}}`)
	}
	return append(ev, "[DONE]")
}

// honest returns the reply of an honest server to r: one text chunk a
// requested token (at most 256), and true usage.
func honest(r *http.Request, words int) reply {
	n := 16
	if req := RequestOf(r); req != nil {
		n = min(req.MaxOut(16), 256)
	}
	return reply{completions: isCompletions(r), n: n, prompt: strconv.Itoa(max(words, 1))}
}

func isCompletions(r *http.Request) bool {
	return strings.HasSuffix(r.URL.Path, "/completions") && !strings.HasSuffix(r.URL.Path, "/chat/completions")
}

func words(r *http.Request) int {
	if req := RequestOf(r); req != nil {
		return len(strings.Fields(req.Text()))
	}
	return 1
}

func writeEvents(s *stream, events []string) {
	for _, e := range events {
		if !s.event(e) {
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// ---- Servers that lie ----

// TokenizeForm is how a Liar's /tokenize answers.
type TokenizeForm int

// /tokenize behaviours.
const (
	TokenizeNone     TokenizeForm = iota // 404
	TokenizeLlama                        // llama.cpp: {"content"} -> {"tokens":[...]}
	TokenizeVLLM                         // vLLM: {"model","messages"|"prompt"} -> {"count","max_model_len","tokens"}
	Tokenize500                          // 500 with an error object
	TokenizeGarbage                      // 200, bytes that are not JSON
	TokenizeHuge                         // 200, a 100 MB token list
	TokenizeAbsurd                       // 200, {"count": the largest int64, "max_model_len": -1, "tokens": []}
	TokenizeConstant                     // 200, llama.cpp's form, two tokens for any text (a lying tokenizer)
	TokenizeHang                         // never answers
)

var tokenizeNames = map[TokenizeForm]string{
	TokenizeNone: "none", TokenizeLlama: "llama", TokenizeVLLM: "vllm", Tokenize500: "500",
	TokenizeGarbage: "garbage", TokenizeHuge: "huge", TokenizeAbsurd: "absurd",
	TokenizeConstant: "constant", TokenizeHang: "hang",
}

func (f TokenizeForm) String() string { return tokenizeNames[f] }

// HugeBody is the size of TokenizeHuge's body and of the catalogue's huge line.
const HugeBody = 100 << 20

// Liar is an OpenAI-compatible server whose streams are well formed but
// whose facts may be false. It answers /v1/chat/completions,
// /v1/completions, /v1/models, and, as configured, /tokenize, /props and
// /apply-template. Its zero value is an honest server that counts one
// token a word and sends no timings.
type Liar struct {
	// Tokens is the server's tokenizer: the true token count of a text;
	// nil counts words.
	Tokens func(text string) int
	// Template renders chat messages as the server's chat template does;
	// nil joins their contents with newlines (no overhead).
	Template func([]Message) string
	// Report returns the usage.prompt_tokens reported for a prompt of the
	// given true count; nil reports the truth.
	Report func(tokens int) int
	// NoUsage sends no usage at all.
	NoUsage bool
	// Usage, when set, returns the raw JSON values of prompt_tokens and
	// completion_tokens of the n-th request (absurd values).
	Usage func(n int64) (prompt, completion string)
	// Timings is the raw JSON of a "timings" object on the finish chunk;
	// "" sends none.
	Timings string
	// MaxModelLen is advertised in /v1/models (max_model_len) and in
	// vLLM-form /tokenize replies; 0 advertises none.
	MaxModelLen int
	// NCtx is advertised in /props (default_generation_settings.n_ctx);
	// 0: no /props (404).
	NCtx int
	// Tokenize is how /tokenize answers.
	Tokenize TokenizeForm
	// ApplyTemplate serves llama.cpp's /apply-template.
	ApplyTemplate bool

	seq atomic.Int64
}

// WordTokens counts one token a whitespace-separated word.
func WordTokens(text string) int { return len(strings.Fields(text)) }

// MarkerTokens counts one token a whitespace-separated word and one a
// special token ("<|eot_id|>", "<|im_start|>"), as a model's tokenizer
// counts a chat template's markers even where no space separates them from
// a word.
func MarkerTokens(text string) int {
	n := 0
	for {
		i := strings.Index(text, "<|")
		if i < 0 {
			break
		}
		j := strings.Index(text[i:], "|>")
		if j < 0 {
			break
		}
		n += len(strings.Fields(text[:i])) + 1
		text = text[i+j+2:]
	}
	return n + len(strings.Fields(text))
}

// CharsPerToken returns a tokenizer of n characters a token (rounded up).
func CharsPerToken(n int) func(string) int {
	return func(text string) int { return (len(text) + n - 1) / n }
}

// LlamaTemplate is a chat template in the style of llama.cpp's built-in
// ones: "<|user|>\n...<|end|>\n" per message, then "<|assistant|>\n".
func LlamaTemplate(ms []Message) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("<|" + m.Role + "|>\n" + m.Content + "<|end|>\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// Llama3Template is Llama 3.1's template in outline: a default system
// message once (the knowledge-date lines its template adds when the request
// has no system message), then a header and an end-of-turn token around
// each message, then the assistant's header. Unlike ChatMLTemplate and
// LlamaTemplate, most of its overhead comes once, not with every message:
// a later turn of a conversation adds much less than the first one.
func Llama3Template(ms []Message) string {
	var b strings.Builder
	b.WriteString("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
		"Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>")
	for _, m := range ms {
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + m.Content + "<|eot_id|>")
	}
	b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	return b.String()
}

// ChatMLTemplate is the ChatML template (Qwen, many vLLM models).
func ChatMLTemplate(ms []Message) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}

func (l *Liar) tokens(text string) int {
	if l.Tokens == nil {
		return WordTokens(text)
	}
	return l.Tokens(text)
}

func (l *Liar) render(ms []Message) string {
	if l.Template == nil {
		parts := make([]string, len(ms))
		for i, m := range ms {
			parts[i] = m.Content
		}
		return strings.Join(parts, "\n")
	}
	return l.Template(ms)
}

// Count implements Counter: the true token count of a request's prompt.
func (l *Liar) Count(req *Request) int {
	if req.Messages != nil {
		return l.tokens(l.render(req.Messages))
	}
	if req.Content != nil {
		return l.tokens(*req.Content)
	}
	return l.tokens(req.PromptText())
}

func (l *Liar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/chat/completions") || strings.HasSuffix(p, "/completions"):
		l.serveCompletion(w, r)
	case strings.HasSuffix(p, "/models"):
		m := map[string]any{"id": Model, "object": "model", "owned_by": "hostile"}
		if l.MaxModelLen != 0 {
			m["max_model_len"] = l.MaxModelLen
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{m}})
	case strings.HasSuffix(p, "/props") && l.NCtx != 0:
		writeJSON(w, http.StatusOK, map[string]any{
			"default_generation_settings": map[string]any{"n_ctx": l.NCtx, "params": map[string]any{"n_predict": -1}},
			"total_slots":                 1,
			"model_path":                  "/models/hostile.gguf",
		})
	case strings.HasSuffix(p, "/apply-template") && l.ApplyTemplate:
		req := RequestOf(r)
		if req == nil {
			writeJSON(w, http.StatusBadRequest, errorBody("invalid JSON", 400))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"prompt": l.render(req.Messages)})
	case strings.HasSuffix(p, "/tokenize"):
		l.serveTokenize(w, r)
	default:
		http.NotFound(w, r)
	}
}

func errorBody(msg string, code int) map[string]any {
	return map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": code}}
}

func (l *Liar) serveCompletion(w http.ResponseWriter, r *http.Request) {
	n := l.seq.Add(1)
	req := RequestOf(r)
	truth := 1 << 30 // a body too large to parse: more than any context
	if req != nil {
		truth = l.Count(req)
	}
	p := honest(r, 1)
	switch {
	case l.NoUsage:
		p.prompt = ""
	case l.Usage != nil:
		p.prompt, p.completion = l.Usage(n)
	case l.Report != nil:
		p.prompt = strconv.Itoa(l.Report(truth))
	default:
		p.prompt = strconv.Itoa(truth)
	}
	p.timings = l.Timings
	writeEvents(startStream(w, r, "text/event-stream"), p.events())
}

func (l *Liar) serveTokenize(w http.ResponseWriter, r *http.Request) {
	req := RequestOf(r)
	switch l.Tokenize {
	case TokenizeLlama, TokenizeConstant:
		if req == nil {
			writeJSON(w, http.StatusBadRequest, errorBody("invalid JSON", 400))
			return
		}
		if req.Content == nil {
			// llama.cpp reads only "content": any other form gets an
			// empty token list, and 200.
			writeJSON(w, http.StatusOK, map[string][]int{"tokens": {}})
			return
		}
		n := l.tokens(*req.Content)
		if l.Tokenize == TokenizeConstant {
			n = 2
		}
		writeJSON(w, http.StatusOK, map[string][]int{"tokens": tokenIDs(n)})
	case TokenizeVLLM:
		var text string
		switch {
		case req == nil:
			writeJSON(w, http.StatusBadRequest, errorBody("invalid JSON", 400))
			return
		case req.Messages != nil:
			text = l.render(req.Messages)
		case len(req.Prompt) > 0:
			text = req.PromptText()
		default:
			writeJSON(w, http.StatusBadRequest, map[string]any{
				"object": "error", "message": "[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'}]",
				"type": "BadRequestError", "param": nil, "code": 400,
			})
			return
		}
		n := l.tokens(text)
		writeJSON(w, http.StatusOK, map[string]any{"count": n, "max_model_len": l.MaxModelLen, "tokens": tokenIDs(n)})
	case Tokenize500:
		writeJSON(w, http.StatusInternalServerError, errorBody("tokenizer crashed", 500))
	case TokenizeGarbage:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("\x00\xff\xfe<html>{{{\"count\": [}\x00"))
	case TokenizeHuge:
		s := startStream(w, r, "application/json")
		if !s.str(`{"tokens":[`) {
			return
		}
		block := []byte(strings.Repeat("1,", 32<<10))
		for written := 0; written < HugeBody && s.raw(block); written += len(block) {
		}
		s.str(`1],"count":1}`)
	case TokenizeAbsurd:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"count":9223372036854775807,"max_model_len":-1,"tokens":[]}`))
	case TokenizeHang:
		<-r.Context().Done()
	default:
		http.NotFound(w, r)
	}
}

func tokenIDs(n int) []int {
	ids := make([]int, max(n, 0))
	for i := range ids {
		ids[i] = 1 + i%31999
	}
	return ids
}

// ConstantCount reports prompt_tokens n whatever the prompt, as a proxy, a
// cache or a recording does; /v1/models advertises max_model_len 32768.
func ConstantCount(n int) *Liar {
	return &Liar{Report: func(int) int { return n }, MaxModelLen: 32768}
}

// Truncating reports min(true count, limit), as llama.cpp does when it
// truncates an over-long prompt silently (3,000 tokens reported as 647 at
// -c 1024); /props advertises n_ctx.
func Truncating(limit, nCtx int) *Liar {
	return &Liar{Report: func(t int) int { return min(t, limit) }, NCtx: nCtx}
}

// UsageMissing never sends usage.
func UsageMissing() *Liar { return &Liar{NoUsage: true} }

// absurdUsage are usage values no server means, in turn.
var absurdUsage = [][2]string{
	{"1e30", "-1"},
	{"-5", "1e300"},
	{"9223372036854775807", "9223372036854775807"},
	{"1.5", "0.5"},
	{`"many"`, `"few"`},
	{"null", "null"},
	{"-9223372036854775808", "-9223372036854775808"},
	{"0", "0"},
}

// UsageAbsurd sends absurd usage numbers, a different kind each request.
func UsageAbsurd() *Liar {
	return &Liar{Usage: func(n int64) (string, string) {
		u := absurdUsage[int(n-1)%len(absurdUsage)]
		return u[0], u[1]
	}}
}

// TimingsMissing sends a "timings" object without any field.
func TimingsMissing() *Liar { return &Liar{Timings: `{}`} }

// TimingsAbsurd sends timings that fit their types but mean nothing:
// negative durations and counts, the largest float64 and int64.
func TimingsAbsurd() *Liar {
	return &Liar{Timings: `{"queue_ms":-1,"prompt_n":-5,"prompt_ms":-1.7976931348623157e308,` +
		`"predicted_n":9223372036854775807,"predicted_ms":1.7976931348623157e308,` +
		`"cache_n":-9223372036854775808,"prompt_per_second":-0.0}`}
}

// TimingsOverflow sends timings no float64 holds (1e999) and NaN-like strings.
func TimingsOverflow() *Liar {
	return &Liar{Timings: `{"queue_ms":"NaN","prompt_n":1e999,"prompt_ms":1e999,` +
		`"predicted_n":-1e999,"predicted_ms":"Infinity","cache_n":"-Inf"}`}
}

// LlamaTokenize is llama.cpp's server as calibration sees it: /tokenize in
// llama.cpp's form over a tokenizer of three characters a token,
// /apply-template with LlamaTemplate, and /props advertising n_ctx. Its
// usage is true (set NoUsage to leave /tokenize as the only source).
func LlamaTokenize(nCtx int) *Liar {
	return &Liar{Tokens: CharsPerToken(3), Template: LlamaTemplate, Tokenize: TokenizeLlama, ApplyTemplate: true, NCtx: nCtx}
}

// VLLMTokenize is vLLM's server as calibration sees it: /tokenize in vLLM's
// form with the ChatML template, max_model_len in /v1/models and /tokenize.
func VLLMTokenize(maxModelLen int) *Liar {
	return &Liar{Template: ChatMLTemplate, Tokenize: TokenizeVLLM, MaxModelLen: maxModelLen}
}

// BrokenTokenize is an honest server whose /tokenize is broken as f says.
func BrokenTokenize(f TokenizeForm) *Liar { return &Liar{Tokenize: f} }

// ---- Streams ----

// OK is an honest server: one text chunk a requested token, true usage
// (one token a word), [DONE].
func OK() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeEvents(startStream(w, r, "text/event-stream"), honest(r, words(r)).events())
	})
}

// TokensForever streams text chunks at 10,000 a second (ten a
// millisecond), whatever max_tokens or max_completion_tokens say, until the
// client goes away.
func TokensForever() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		batch := []byte(strings.Repeat("data: "+chatText("tok ")+"\n\n", 10))
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for s.raw(batch) && s.flush() {
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
	})
}

// EmptyEventsForever streams events that carry no text (empty choices, a
// role-only delta, usage without choices), as fast as the client reads.
func EmptyEventsForever() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		var b strings.Builder
		for range 100 {
			b.WriteString("data: {}\n\ndata: {\"choices\":[]}\n\ndata: " + roleChunk + "\n\n")
		}
		batch := []byte(b.String())
		for s.raw(batch) && s.flush() {
		}
	})
}

// HeadersThenSilence sends 200 and the stream's headers, then nothing.
func HeadersThenSilence() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		startStream(w, r, "text/event-stream")
		<-r.Context().Done()
	})
}

// NeverAnswers reads the request and never writes a byte.
func NeverAnswers() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
}

// EndlessLine starts a data line and never ends it: 64 KiB of letters at a
// time, as fast as the client reads, no newline ever.
func EndlessLine() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		block := bytes.Repeat([]byte("a"), 64<<10)
		if !s.str(`data: {"choices":[{"delta":{"content":"`) {
			return
		}
		for s.raw(block) && s.flush() {
		}
	})
}

// HugeLine sends one text chunk whose content is size bytes long, then
// [DONE].
func HugeLine(size int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		block := bytes.Repeat([]byte("x"), 64<<10)
		if !s.str(`data: {"choices":[{"index":0,"delta":{"content":"`) {
			return
		}
		for left := size; left > 0; left -= len(block) {
			if !s.raw(block[:min(left, len(block))]) {
				return
			}
		}
		s.str(`"},"finish_reason":null}]}` + "\n\n")
		writeEvents(s, []string{`{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":1}}`, "[DONE]"})
	})
}

// InvalidUTF8 streams text chunks whose content holds invalid UTF-8 (a
// lone 0xff, 0xfe, a truncated two-byte sequence) and an escaped NUL
// (\u0000, valid JSON), then true usage and [DONE].
func InvalidUTF8() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := honest(r, words(r))
		p.content = "bad \xff\xfe\xc3 nul \\u0000 end "
		writeEvents(startStream(w, r, "text/event-stream"), p.events())
	})
}

// RawNUL streams a text chunk with a raw NUL byte inside its JSON string
// (a control character JSON forbids), then [DONE].
func RawNUL() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := honest(r, words(r))
		p.content = "a\x00b"
		writeEvents(startStream(w, r, "text/event-stream"), p.events())
	})
}

// Gzip sends an honest stream gzip-encoded (Content-Encoding: gzip),
// whether or not the client asked for it.
func Gzip() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		s := startStream(w, r, "text/event-stream")
		zw := gzip.NewWriter(w)
		for _, e := range honest(r, words(r)).events() {
			if !s.ok() {
				return
			}
			if _, err := zw.Write([]byte("data: " + e + "\n\n")); err != nil {
				return
			}
			if zw.Flush() != nil || !s.flush() {
				return
			}
		}
		_ = zw.Close()
	})
}

// Redirect answers every request with code (301, 302, 303, 307, 308) and
// Location: location.
func Redirect(code int, location string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", location)
		w.WriteHeader(code)
	})
}

// HTML answers 200 with an HTML page, as a proxy's error page does.
func HTML() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n" +
			"<body><h1>Bad Gateway</h1><script>alert(1)</script></body></html>\n"))
	})
}

// BareJSON answers 200 with a whole non-streamed completion, as a server
// that ignores "stream": true does.
func BareJSON() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "chatcmpl-hostile", "object": "chat.completion", "created": 1, "model": Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "not streamed"}, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 2},
		})
	})
}

// JSONError200 answers 200 with a bare JSON error object.
func JSONError200(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, errorBody(msg, 500))
	})
}

// ResetMidStream sends after text chunks, then hijacks the connection and
// resets it (SO_LINGER 0: an RST, not a FIN).
func ResetMidStream(after int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		p := honest(r, words(r))
		p.n = after
		ev := p.events()
		writeEvents(s, ev[:len(ev)-3]) // no finish, usage or [DONE]
		if s.err != nil {
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	})
}

// TooManyRequests answers 429 with Retry-After and an OpenAI error object.
func TooManyRequests(retryAfter string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", retryAfter)
		writeJSON(w, http.StatusTooManyRequests, errorBody("rate limit exceeded, retry after "+retryAfter+"s", 429))
	})
}

// textThen streams after text chunks, then the given raw SSE text, then
// nothing more.
func textThen(after int, tail func(http.ResponseWriter, *http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		if after > 0 {
			p := honest(r, words(r))
			p.n = after
			ev := p.events()
			writeEvents(s, ev[:len(ev)-3])
		}
		s.str(tail(w, r))
		s.flush()
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ErrorData streams after text chunks, then an OpenAI/vLLM error chunk
// (data: {"error":{"message":msg,...}}), then [DONE].
func ErrorData(msg string, after int) http.Handler {
	return textThen(after, func(http.ResponseWriter, *http.Request) string {
		return `data: {"error":{"message":` + jsonString(msg) + `,"type":"server_error","param":null,"code":500}}` +
			"\n\ndata: [DONE]\n\n"
	})
}

// ErrorEvent streams an SSE event named error (event: error) whose data is
// an error object with msg, then [DONE].
func ErrorEvent(msg string) http.Handler {
	return textThen(0, func(http.ResponseWriter, *http.Request) string {
		return "event: error\ndata: {\"error\":{\"message\":" + jsonString(msg) + ",\"type\":\"server_error\",\"code\":500}}\n\n" +
			"data: [DONE]\n\n"
	})
}

// LlamaErrorField is llama-server's in-stream error (--no-context-shift
// with a prompt above the context): 200, a line in the field "error", then
// data: [DONE].
func LlamaErrorField(msg string) http.Handler {
	return textThen(0, func(http.ResponseWriter, *http.Request) string {
		return `error: {"code":400,"message":` + jsonString(msg) +
			`,"type":"exceed_context_size_error","n_prompt_tokens":3000,"n_ctx":1024}` + "\n\ndata: [DONE]\n\n"
	})
}

// ErrorObject streams a chunk that is itself an error object (vLLM's
// {"object":"error","message":...}), then [DONE].
func ErrorObject(msg string) http.Handler {
	return textThen(0, func(http.ResponseWriter, *http.Request) string {
		return `data: {"object":"error","message":` + jsonString(msg) + `,"type":"BadRequestError","param":null,"code":400}` +
			"\n\ndata: [DONE]\n\n"
	})
}

// CROnly is an honest stream whose lines end in CR alone.
func CROnly() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		s.end = "\r"
		writeEvents(s, honest(r, words(r)).events())
	})
}

// OneByteWrites is an honest stream written and flushed one byte at a time.
func OneByteWrites() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		var b strings.Builder
		for _, e := range honest(r, words(r)).events() {
			b.WriteString("data: " + e + "\n\n")
		}
		body := []byte(b.String())
		for i := range body {
			if !s.raw(body[i:i+1]) || !s.flush() {
				return
			}
		}
	})
}

// OddFields is an honest stream with every odd thing the SSE specification
// allows: comments, id and retry fields, event names, unknown fields after
// data, data split over several lines, CRLF line ends, no space after the
// colon, and keep-alive comments between events.
func OddFields() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w, r, "text/event-stream")
		if !s.str(": hostile stream\n\nretry: 1000\n\n") {
			return
		}
		for i, e := range honest(r, words(r)).events() {
			var ev string
			switch i % 4 {
			case 0:
				ev = "id: " + strconv.Itoa(i) + "\nevent: message\ndata: " + e + "\n\n"
			case 1:
				ev = "data:" + e + "\r\n\r\n"
			case 2:
				if j := strings.Index(e, `"choices"`); j > 0 {
					ev = "data: " + e[:j] + "\ndata: " + e[j:] + "\nx-unknown: 1\n\n"
				} else {
					ev = "data: " + e + "\n\n"
				}
			default:
				ev = ": keep-alive\n\ndata: " + e + "\n\n"
			}
			if !s.str(ev) || !s.flush() {
				return
			}
		}
	})
}

// LongMessage returns a server message of n bytes: readable words, no
// characters JSON escapes, its end marked so that a cut shows.
func LongMessage(n int) string {
	const unit = "the backend failed while decoding the request; "
	s := strings.Repeat(unit, n/len(unit)+1)[:max(n-4, 0)]
	return s + "#END"[:min(4, n)]
}
