package prober

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"go.opentelemetry.io/otel/trace"

	"github.com/sloprober/sloprober/config"
)

// RequestIDHeader carries a unique id on every probe request, so servers can
// find (or exclude) synthetic traffic.
const RequestIDHeader = "X-Request-Id"

// maxReplyBytes bounds the generated text kept for a conversation's next
// turn: 16 bytes a requested token plus 4 KiB, at most 4 MiB. A server that
// sends more than it was asked for cannot grow the history beyond that.
func maxReplyBytes(maxTokens int) int {
	return min(16*max(maxTokens, 0)+4<<10, 4<<20)
}

// drainTimeout bounds the wait for the end of a response after [DONE]:
// reading to the end keeps the connection reusable, but a server that keeps
// the stream open must not hold the request.
const drainTimeout = 100 * time.Millisecond

// Client sends probe requests to one target over keep-alive connection pools.
type Client struct {
	target   *config.TargetConfig
	api      *wireAPI
	timing   *timingMap
	endpoint string
	pools    []*http.Client // requests take them in turn
	next     atomic.Uint64
	// retry sends again a request that never reached the server, on a
	// connection of its own (keep-alives off): see Result.Retry. The
	// calibration's calls (/tokenize) go on it too.
	retry *http.Client
	conns *connTracker
	// FastOff is why the fast reader, asked for, does not serve this
	// target ("" when it does or was not asked for).
	FastOff string
}

// idlePerPool is the idle-connection limit of prometheus/common's
// transport per host (MaxIdleConnsPerHost). Above it, connections of ended
// streams would be closed and new ones dialed for every request, so a client
// for more concurrent streams gets one pool per idlePerPool streams.
const idlePerPool = 1000

// NewClient builds the client of a target for up to maxStreams concurrent
// requests; userAgent is sent on every request.
func NewClient(t *config.TargetConfig, userAgent string, maxStreams int, opts ...ClientOption) (*Client, error) {
	o := clientOptions{reader: DefaultReader}
	for _, opt := range opts {
		opt(&o)
	}
	c := &Client{target: t, api: apiOf(t.API), timing: newTimingMap(t.TimingOf()), conns: newConnTracker()}
	client := func(dial commoncfg.DialContextFunc, keepAlive bool) (*http.Client, error) {
		opts := []commoncfg.HTTPClientOption{commoncfg.WithUserAgent(userAgent), commoncfg.WithDialContextFunc(dial)}
		if !keepAlive {
			opts = append(opts, commoncfg.WithKeepAlivesDisabled())
		}
		rt, err := commoncfg.NewRoundTripperFromConfig(t.HTTPClientConfig, "sloprober_"+t.Name, opts...)
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", t.Name, err)
		}
		return &http.Client{Transport: rt, CheckRedirect: checkRedirect(t.HTTPClientConfig.FollowRedirects)}, nil
	}
	if o.reader == ReaderFast {
		if c.FastOff = fastUnsupported(t); c.FastOff == "" {
			tlsConfig, err := commoncfg.NewTLSConfig(&t.HTTPClientConfig.TLSConfig)
			if err != nil {
				return nil, fmt.Errorf("target %q: %w", t.Name, err)
			}
			client = func(dial commoncfg.DialContextFunc, keepAlive bool) (*http.Client, error) {
				// prometheus/common's idle timeout.
				base := &h1Transport{dial: dial, tlsConfig: tlsConfig, keepAlive: keepAlive, idleTimeout: 5 * time.Minute}
				rt := fastChain(&t.HTTPClientConfig, base, userAgent)
				return &http.Client{Transport: rt, CheckRedirect: checkRedirect(t.HTTPClientConfig.FollowRedirects)}, nil
			}
		}
	}
	for range poolsFor(maxStreams) {
		hc, err := client(c.conns.dial, true)
		if err != nil {
			return nil, err
		}
		c.pools = append(c.pools, hc)
	}
	var err error
	if c.retry, err = client(c.conns.dialOneShot, false); err != nil {
		return nil, err
	}
	c.endpoint = joinPath(t.URL, c.api.path)
	return c, nil
}

// oneShotProbe: against a server that closes every connection, one request
// in oneShotProbe still goes on a kept-alive pool, so that a server that
// starts keeping connections is noticed (its next reuse ends oneShot).
const oneShotProbe = 64

// maxRedirects bounds the redirects a probe follows where following them is
// configured.
const maxRedirects = 3

// checkRedirect returns the redirect policy of probes. A probe must send
// what it says: by default no redirect is followed (the 3xx is a
// protocol_error naming the Location). With follow_redirects, only
// redirects that keep the method and body (307, 308) to the same scheme,
// host and port are followed: net/http turns a POST into a body-less GET on
// 301, 302 and 303, and prometheus/common's round tripper sends the
// target's credentials to whatever URL a request goes to.
func checkRedirect(follow bool) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0]
		if !follow || len(via) > maxRedirects || req.Method != first.Method ||
			req.URL.Scheme != first.URL.Scheme || req.URL.Host != first.URL.Host {
			return http.ErrUseLastResponse
		}
		return nil
	}
}

// Close releases the client's idle connections.
func (c *Client) Close() {
	for _, p := range c.pools {
		p.CloseIdleConnections()
	}
}

// Request is one probe request.
type Request struct {
	ID           string
	Prompt       string
	InputTokens  int // the workload's estimate of the prompt length
	OutputTokens int
	IgnoreEOS    bool
	// Messages, when set, are sent instead of Prompt (chat API): the
	// history of a conversation.
	Messages []Message
	// KeepReply keeps the generated text in Result.Reply, for the next
	// turn of a conversation.
	KeepReply bool
	// CancelAfter, when set, is when the workload cancels the request (a
	// user closing the tab), from sending.
	CancelAfter time.Duration
	// Words is the number of synthesized words in the prompt.
	Words int
	// InputBase is the part of InputTokens the server counted before: a
	// conversation's history up to the previous prompt. Only the rest is
	// judged against the server's count.
	InputBase int
	// TurnReply is the previous reply's tokens in a later turn of a
	// conversation (within InputTokens).
	TurnReply int
	// CutToContext: the workload asked for more input than the target's
	// context holds with the output; the prompt was cut to fit.
	CutToContext bool
	// Tenant is the request's tenant (config.TenantsConfig), "" without
	// tenants: sent in TenantHeader when set, else in the body (OpenAI's
	// user field; the Messages API's metadata.user_id).
	Tenant       string
	TenantHeader string
	// Check is the scenario's quality check of this request: its
	// question follows the filler, its fields go in the body, and the
	// reply is judged into Result.Check.
	Check *CheckRequest

	// Skip, when set, ends the request before it is sent, with this
	// cause (ErrConversationFull): Do reports it as the outcome of the
	// cause, cancelled.
	Skip error
	// SpanContext, when valid, is the probe's trace context: sent as the
	// W3C traceparent header and kept in the result.
	SpanContext trace.SpanContext
	// OnSend, when set, is called with t0 when the HTTP call starts (or,
	// for a request that fails before, when it ends); never for a request
	// not sent (Result.NotSent).
	OnSend func(t0 time.Time)

	calibrate  bool // the server's count of this prompt calibrates its target
	calibrated bool // built from a model calibrated by at least one count
	// fillerWords are the filler's words of a check's request (the rest
	// is the check's); inputUnjudged: what the check adds is not yet
	// measured, so the server's count is not judged (Result.InputUnjudged).
	fillerWords   int
	inputUnjudged bool
	turn          *Turn
}

// body encodes the request for the target's API. It always streams and asks
// for usage (chat's stream_options.include_usage; the Responses and
// Messages APIs always send it); ignore_eos is sent only when set, since
// hosted APIs reject unknown keys.
func (c *Client) body(req *Request) ([]byte, error) {
	b := c.api.body(c.target, req)
	b["model"], b["stream"] = c.target.Model, true
	if req.Check != nil {
		maps.Copy(b, req.Check.fields(c.target.API))
	}
	if req.IgnoreEOS {
		b["ignore_eos"] = true
	}
	if req.Tenant != "" && req.TenantHeader == "" {
		if c.target.API == "messages" {
			b["metadata"] = map[string]any{"user_id": req.Tenant}
		} else {
			b["user"] = req.Tenant
		}
	}
	// No HTML escaping: a reply full of <, > and & is resent in the next
	// turn at its size, not six bytes a character.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Do sends req and reads the reply into r, which it fills from Sent on; the
// caller sets the labels and Scheduled. The request's deadline is the
// target's timeout. r.Outcome is set on return. The response is bounded
// (LimitsFor): a stream beyond its bounds is cut (stream_error).
func (c *Client) Do(ctx context.Context, req *Request, r *Result) {
	r.RequestID = req.ID
	r.InputTokens, r.OutputTokens, r.IgnoreEOS = req.InputTokens, req.OutputTokens, req.IgnoreEOS
	r.InputBase, r.InputUnjudged = req.InputBase, req.inputUnjudged
	r.Tenant = req.Tenant
	defer func() {
		r.Outcome = Classify(r)
		r.Check = req.Check.Judge(r)
	}()

	markSent := func() {
		r.Sent = time.Now()
		if req.OnSend != nil {
			req.OnSend(r.Sent)
		}
	}
	// Stopping (or cancelled), or a request the workload does not make
	// after all: it ends before it is sent, and is not counted as sent.
	if cause := cmp.Or(context.Cause(ctx), req.Skip); cause != nil {
		r.Sent, r.NotSent = time.Now(), true
		r.Cause = cause
		return
	}
	body, err := c.body(req)
	if err != nil {
		markSent()
		r.ProtocolErr = "encoding request: " + err.Error()
		return
	}
	ctx, cancel := context.WithTimeoutCause(ctx, time.Duration(c.target.Timeout), ErrTimeout)
	defer cancel()
	tr := &tracer{conns: c.conns}
	ctx = httptrace.WithClientTrace(ctx, tr.clientTrace())
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		markSent()
		r.ConnectErr = err.Error()
		return
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	hreq.Header.Set(RequestIDHeader, req.ID)
	if req.Tenant != "" && req.TenantHeader != "" {
		hreq.Header.Set(req.TenantHeader, req.Tenant)
	}
	if c.api.header != nil {
		c.api.header(c.target, hreq.Header)
	}
	if req.SpanContext.IsValid() {
		r.SpanContext = req.SpanContext
		hreq.Header.Set("Traceparent", traceparent(req.SpanContext))
	}

	n := c.next.Add(1)
	pool := c.pools[n%uint64(len(c.pools))]
	switch {
	case c.conns.oneShot() && n%oneShotProbe != 0:
		// The server closes every connection after one response: a
		// connection of its own for each request (see connTracker).
		pool = c.retry
	case c.conns.unsettled():
		// Whether the server keeps connections is not known yet, and
		// one just became idle: it may be closing (see connTracker).
		pool = c.retry
	}
	markSent()
	tr.start = r.Sent
	resp, err := pool.Do(hreq)
	defer func() {
		r.Ended = time.Since(r.Sent)
		r.Trace = tr.result()
		// Any response read (a 503's too) leaves the connection idle:
		// a close long after it is the server's idle timeout, not a
		// close after each response.
		if tc := tr.given(); tc != nil && resp != nil {
			tc.idle()
		}
	}()
	if reason := tr.neverReached(err); reason != "" && ctx.Err() == nil {
		// Sent again, once, on a connection of its own; TTFT and E2E
		// still run from the first attempt: what a user would wait.
		r.Retry = reason
		retry := hreq.Clone(ctx)
		if retry.Body, err = hreq.GetBody(); err == nil {
			resp, err = c.retry.Do(retry)
		}
	} else if tr.attempts() > 1 {
		r.Retry = RetryNothingWritten
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			r.Cause = context.Cause(ctx)
		case !tr.connected():
			r.ConnectErr = describeConnectError(err)
		default:
			// A malformed header line is quoted whole in the error:
			// a 1 MB header would be a 1 MB message.
			r.StreamErr = "no response: " + boundMessage(err.Error())
		}
		return
	}
	defer resp.Body.Close()
	r.StatusCode = resp.StatusCode
	c.timing.fromHeaders(resp.Header, r)
	if v := resp.Header.Get("Server"); v != "" {
		r.ServerHeader = boundIdentity(v)
	}
	if h := c.target.IdentityHeader; h != "" {
		if v := resp.Header.Get(h); v != "" {
			r.IdentityHeader = boundIdentity(v)
		}
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		r.ProtocolErr = fmt.Sprintf("redirect (HTTP %d) to %q not followed: a probe sends its POST to the configured URL only",
			resp.StatusCode, boundMessage(config.RedactURL(resp.Header.Get("Location"))))
		return
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		r.ErrorBody = serverMessage(b)
		return
	}
	limits := LimitsFor(req.OutputTokens)
	// One chunk a token, as a rule: room for all of them up front, not
	// twice as much after append's doublings.
	r.Chunks = make([]time.Duration, 0, min(req.OutputTokens, 4096))
	var reply *strings.Builder
	if req.KeepReply {
		reply = &strings.Builder{}
		defer func() { r.Reply = reply.String() }()
	}
	if fb, ok := resp.Body.(*h1Body); ok {
		tr.receivedFirstByte(fb.firstByte)
		st := newStreamState(c.api, r, reply, limits)
		fb.stream(ctx, st, limits.Bytes, r.Sent)
		st.finish()
	} else {
		limited := &limitedBody{r: resp.Body, limit: limits.Bytes}
		readStream(c.api, readCloser{limited, resp.Body}, r, func() time.Duration { return time.Since(r.Sent) }, reply, limits)
	}
	if r.timingsRaw != nil {
		c.timing.fromTimings(r.timingsRaw, r)
		r.timingsRaw = nil
	}
	if !r.Done && ctx.Err() != nil {
		r.Cause = context.Cause(ctx)
	}
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// readStream reads an SSE stream of the API into r from body, as
// net/http's standard path gives it. now returns the current offset from
// t0; it is read in this goroutine the moment an event has been parsed. The
// answer's text goes to reply when it is not nil. After the stream's end
// ([DONE], or the API's end event) the rest of the body is drained for at
// most drainTimeout, so the connection can be reused. The stream is cut
// (stream_error) beyond the text chunks and events of limits; the bytes are
// bounded by the caller.
func readStream(api *wireAPI, body io.ReadCloser, r *Result, now func() time.Duration, reply *strings.Builder, limits StreamLimits) {
	st := newStreamState(api, r, reply, limits)
	st.clock = now
	var drain *time.Timer
	defer func() {
		if drain != nil {
			drain.Stop()
		}
	}()
	st.onDone = func() { drain = time.AfterFunc(drainTimeout, func() { _ = body.Close() }) }
	defer st.finish()
	buf := make([]byte, stdReadBytes)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			stop, perr := st.sse.feed(buf[:n], st)
			if stop {
				return
			}
			if perr != nil {
				st.end(perr)
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = st.sse.end()
			}
			st.end(err)
			return
		}
	}
}

// stdReadBytes is the standard path's read size: a chunk is a few hundred
// bytes, longer lines are assembled, and at 5,000 concurrent streams every
// KiB a stream costs is 5 MB.
const stdReadBytes = 1 << 10

// streamState turns a stream's events into its Result, whichever path reads
// them: the standard one (readStream) or the fast one (reader_linux.go).
type streamState struct {
	api        *wireAPI
	r          *Result
	reply      *strings.Builder
	limits     StreamLimits
	replyLimit int
	sse        *sseParser
	// clock returns the offset from t0 at which the event being handled
	// arrived.
	clock func() time.Duration
	// onDone is called once, at the stream's end event: the rest of the
	// body is drained for at most drainTimeout.
	onDone func()

	c         chunk
	events    int
	calls     toolCalls
	parts     promptParts
	replyFull bool
}

func newStreamState(api *wireAPI, r *Result, reply *strings.Builder, limits StreamLimits) *streamState {
	replyLimit := maxReplyBytes(r.OutputTokens)
	r.FirstAnswer, r.end = -1, api.end
	return &streamState{api: api, r: r, reply: reply, limits: limits, replyLimit: replyLimit,
		sse: newSSEParser(), calls: toolCalls{limit: replyLimit}}
}

// finish completes r once the stream ended.
func (s *streamState) finish() {
	if s.reply != nil {
		s.r.ToolCalls = s.calls.list()
	}
}

// end records why the stream ended: nil at its end, errNotSSE for a body
// that is not SSE, a cut, or the read's error (after the end event, a read
// error is the drain's and changes nothing).
func (s *streamState) end(err error) {
	r := s.r
	switch {
	case err == nil, errors.Is(err, io.EOF):
	case errors.Is(err, errNotSSE):
		r.ProtocolErr = err.Error()
	case r.Done:
	case errors.Is(err, errStreamCut):
		r.StreamErr = err.Error()
	default:
		r.StreamErr = "stream broken: " + err.Error()
	}
}

func (s *streamState) done() {
	s.r.Done = true
	if s.onDone != nil {
		s.onDone()
	}
}

// event handles one event; it returns false when the stream is cut.
func (s *streamState) event(ev sseEvent) bool {
	r := s.r
	at := s.clock()
	if r.Done {
		return true // nothing counts after the end
	}
	if s.events++; s.events > s.limits.Events {
		r.StreamErr = fmt.Sprintf("%v: more than %d SSE events", errStreamCut, s.limits.Events)
		return false
	}
	if string(ev.Data) == "[DONE]" {
		s.done()
		return true
	}
	if string(ev.Name) == "error" {
		if r.StreamErr == "" {
			r.StreamErr = "error event in stream: " + serverMessage(ev.Data)
		}
		return true
	}
	c := &s.c
	if err := s.api.parse(ev.Name, ev.Data, c, s.reply != nil); err != nil {
		if r.ProtocolErr == "" {
			r.ProtocolErr = fmt.Sprintf("chunk is not valid JSON: %v: %s", err, boundMessage(excerpt(ev.Data, 80)))
		}
		return true
	}
	if msg := c.errorMessage(); msg != "" {
		if r.StreamErr == "" {
			r.StreamErr = "error in stream: " + msg
		}
		return true
	}
	if c.text {
		if len(r.Chunks) >= s.limits.TextChunks {
			r.StreamErr = fmt.Sprintf("%v: more than %d text chunks for %d requested tokens (the server does not stop at the maximum)",
				errStreamCut, s.limits.TextChunks, r.OutputTokens)
			return false
		}
		if c.answer && r.FirstAnswer < 0 {
			r.FirstAnswer = len(r.Chunks)
		}
		r.Chunks = append(r.Chunks, at)
		if c.simTS != 0 {
			r.Stamps = append(r.Stamps, c.simTS)
		}
		if s.reply != nil {
			// The reply is the text's start, whole pieces only: a
			// piece beyond the bound ends it, so that no later
			// piece makes a text the server never sent (a JSON
			// reply without its middle).
			for _, t := range c.contents {
				if s.replyFull {
					break
				}
				if t := unquote(t); s.reply.Len()+len(t) <= s.replyLimit {
					s.reply.WriteString(t)
				} else {
					s.replyFull = true
				}
			}
			s.calls.add(c.calls)
		}
	}
	if len(c.finish) > 0 {
		r.FinishReason = boundMessage(decodeString(c.finish))
	}
	if r.Model == "" && len(c.model) > 0 {
		r.Model = boundIdentity(decodeString(c.model))
	}
	if r.SystemFingerprint == "" && len(c.fingerprint) > 0 {
		r.SystemFingerprint = boundIdentity(decodeString(c.fingerprint))
	}
	if c.hasPrompt || c.hasComplete || c.hasCached || c.hasReasoning || c.hasCacheWrite {
		r.Usage = mergeUsage(r.Usage, c, &s.parts)
	}
	if c.timings != nil {
		var t ServerTimings
		if json.Unmarshal(c.timings, &t) == nil && validTimings(&t) {
			r.Timings = &t
		}
		r.timingsRaw = append(r.timingsRaw[:0], c.timings...)
	}
	if c.done {
		s.done()
	}
	return true
}

// toolCalls gathers a reply's tool calls from their deltas, by index, at
// most MaxToolCalls, their text within limit bytes in all. As with the
// reply's text, the first piece beyond the limit ends them all: no call
// is kept with a piece missing in its middle.
type toolCalls struct {
	limit, size int
	full        bool
	index       []int64
	names, args []strings.Builder
}

func (t *toolCalls) add(deltas []toolDelta) {
	for _, d := range deltas {
		if t.full {
			return
		}
		i := slices.Index(t.index, d.index)
		if i < 0 {
			if len(t.index) >= MaxToolCalls {
				continue
			}
			i = len(t.index)
			t.index = append(t.index, d.index)
			t.names = append(t.names, strings.Builder{})
			t.args = append(t.args, strings.Builder{})
		}
		for _, piece := range []struct {
			b   *strings.Builder
			raw []byte
		}{{&t.names[i], d.name}, {&t.args[i], d.args}} {
			s := unquote(piece.raw)
			if t.size+len(s) > t.limit {
				t.full = true
				return
			}
			piece.b.WriteString(s)
			t.size += len(s)
		}
	}
}

// list returns the calls in the order they began.
func (t *toolCalls) list() []ToolCall {
	var out []ToolCall
	for i := range t.index {
		out = append(out, ToolCall{Name: t.names[i].String(), Arguments: t.args[i].String()})
	}
	return out
}

// promptParts are the parts of a Messages API prompt's count sent so far
// (chunk.promptParts): input_tokens, cache_read_input_tokens and
// cache_creation_input_tokens, each the last one sent.
type promptParts struct {
	input, read, write int
}

// mergeUsage adds the counts an event reported to u (nil: none before): a
// count sent again replaces the earlier one. The Messages API reports the
// prompt's count and the output's in different events, and the prompt's
// in parts (parts keeps them across events): a message_delta that sends
// input_tokens again without the cache's parts leaves those as they were.
func mergeUsage(u *Usage, c *chunk, parts *promptParts) *Usage {
	if u == nil {
		u = &Usage{}
	}
	switch {
	case c.promptParts:
		if c.hasPrompt {
			parts.input = c.prompt
		}
		if c.hasCached {
			parts.read = c.cached
		}
		if c.hasCacheWrite {
			parts.write = c.cacheWrite
		}
		if c.hasPrompt || c.hasCached || c.hasCacheWrite {
			u.PromptTokens = min(parts.input+parts.read+parts.write, maxReportedTokens)
		}
	case c.hasPrompt:
		u.PromptTokens = c.prompt
	}
	if c.hasComplete {
		u.CompletionTokens = c.complete
	}
	if c.hasCached {
		n := c.cached // c is reused for the next event
		u.CachedTokens = &n
	}
	if c.hasReasoning {
		n := c.reasoning
		u.ReasoningTokens = &n
	}
	return u
}

// describeConnectError shortens the errors of a failed connection.
func describeConnectError(err error) string {
	var tlsErr *tls.CertificateVerificationError
	if errors.As(err, &tlsErr) {
		return "TLS: " + tlsErr.Error()
	}
	var urlErr interface{ Unwrap() error }
	if errors.As(err, &urlErr) {
		if inner := urlErr.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}

// tracer records httptrace events as offsets from start.
type tracer struct {
	mu    sync.Mutex
	start time.Time
	t     Trace
	conn  bool

	conns     *connTracker
	gotConns  int          // connections given to the request (net/http retries)
	closed    bool         // the server had closed the connection given before it was written
	tc        *trackedConn // the connection given, when tracked
	firstByte bool
}

func (tr *tracer) mark(d *time.Duration) {
	tr.mu.Lock()
	*d = time.Since(tr.start)
	tr.mu.Unlock()
}

func (tr *tracer) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		DNSDone:          func(httptrace.DNSDoneInfo) { tr.mark(&tr.t.DNSDone) },
		ConnectDone:      func(_, _ string, err error) { tr.mark(&tr.t.ConnectDone) },
		TLSHandshakeDone: func(tls.ConnectionState, error) { tr.mark(&tr.t.TLSDone) },
		WroteRequest:     func(httptrace.WroteRequestInfo) { tr.mark(&tr.t.WroteRequest) },
		GotFirstResponseByte: func() {
			tr.mu.Lock()
			tr.t.FirstByte = time.Since(tr.start)
			tr.firstByte = true
			tc := tr.tc
			tr.mu.Unlock()
			if tc != nil {
				tc.response()
			}
		},
		GotConn: func(info httptrace.GotConnInfo) {
			// Asked before the request is written: a close seen now
			// came before any of it.
			// net/http marks a connection dialed for one request and
			// handed to another "reused" although it carried nothing:
			// the tracker's count of requests is the truth.
			var tc *trackedConn
			var closed bool
			if tr.conns != nil && info.Conn != nil {
				tc, closed = tr.conns.gotConn(info.Conn.LocalAddr())
			}
			tr.mu.Lock()
			tr.t.GotConn = time.Since(tr.start)
			tr.t.Reused = info.Reused
			tr.conn = true
			tr.gotConns++
			tr.closed, tr.tc = closed, tc
			tr.mu.Unlock()
		},
	}
}

// neverReached returns why a request that failed with err provably never
// reached the server, or "": it was given a kept-alive connection, no byte
// of a response came, and the server had closed that connection before the
// request was written, or reset it with the request unread (see the Retry
// reasons). Any other failure may have been seen by the server and is never
// sent twice: a reset or an EOF just after the request was written may be a
// server that closed the connection as the request arrived, or one that
// read it and failed.
func (tr *tracer) neverReached(err error) string {
	if err == nil {
		return ""
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	switch {
	case tr.firstByte:
		return ""
	case tr.closed || isServerClosedIdle(err):
		return RetryServerClosedIdle
	}
	return ""
}

// given is the tracked connection the request was last given, nil for
// none.
func (tr *tracer) given() *trackedConn {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.tc
}

// attempts is how many connections the request was given.
func (tr *tracer) attempts() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.gotConns
}

// receivedFirstByte moves the first response byte's time back to when it
// arrived (h1Body.firstByte), where that is after the request was sent:
// on the same clock as the chunks' (pollStream.arrival), the first byte
// cannot come after the first token, which phases.go's "the server held
// its headers" test relies on.
func (tr *tracer) receivedFirstByte(at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if d := at.Sub(tr.start); tr.firstByte && !at.IsZero() && d >= 0 && d < tr.t.FirstByte {
		tr.t.FirstByte = d
	}
}

func (tr *tracer) connected() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.conn
}

func (tr *tracer) result() Trace {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.t
}
