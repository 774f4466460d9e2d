package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBodyBytes bounds a request body: 32 MiB holds a 128k-token prompt
// several times over.
const maxBodyBytes = 32 << 20

// Simulator is a simulated OpenAI-compatible LLM server. Create it with New,
// run its engine with Run and serve Handler.
type Simulator struct {
	cfg    Config
	logger *slog.Logger
	reg    *prometheus.Registry

	tok         tokenizer
	blockTokens int
	engine      *engine // nil with slots: 0
	lengths     *randomStream
	faultRand   *randomStream
	faults      atomic.Pointer[faultSet]
	stats       *stats
	ids         atomic.Uint64
	vocab       []string
	modelJSON   string
	started     int64
}

// New builds a simulator from a validated configuration. Its metrics are
// registered with reg, which Handler serves on /metrics; reg may be nil.
func New(cfg *Config, logger *slog.Logger, reg *prometheus.Registry) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid simulator configuration: %w", err)
	}
	modelJSON, _ := json.Marshal(cfg.Model)
	s := &Simulator{
		cfg:       *cfg,
		logger:    logger,
		reg:       reg,
		tok:       newTokenizer(cfg.Tokenizer),
		lengths:   newRandomStream(cfg.Seed, 1),
		faultRand: newRandomStream(cfg.Seed, 2),
		stats:     newStats(),
		vocab:     vocabulary(cfg.Tokenizer),
		modelJSON: string(modelJSON),
		started:   time.Now().Unix(),
	}
	if cfg.PrefixCache != nil {
		s.blockTokens = cfg.PrefixCache.BlockTokens
	}
	if cfg.Slots > 0 {
		s.engine = newEngine(cfg, s.stats)
	}
	s.SetFaults(cfg.Faults)
	if reg != nil {
		if err := reg.Register(newCollector(s.stats, cfg.Model)); err != nil {
			return nil, fmt.Errorf("registering simulator metrics: %w", err)
		}
	}
	return s, nil
}

// Run runs the engine loop until ctx is done; requests in the engine are then
// ended. Without an engine (slots: 0) it only waits for ctx.
func (s *Simulator) Run(ctx context.Context) {
	if s.engine == nil {
		<-ctx.Done()
		return
	}
	s.engine.run(ctx)
}

// Config returns the configuration with the current faults.
func (s *Simulator) Config() Config {
	c := s.cfg
	c.Faults = s.faults.Load().Faults
	return c
}

// SetFaults replaces the injected faults.
func (s *Simulator) SetFaults(f Faults) {
	fs := &faultSet{Faults: f}
	for code, rate := range f.ErrorRate {
		n, _ := strconv.Atoi(code)
		if rate > 0 {
			fs.codes = append(fs.codes, codeRate{n, rate})
		}
	}
	slices.SortFunc(fs.codes, func(a, b codeRate) int { return a.code - b.code })
	s.faults.Store(fs)
}

// Stats returns the simulator's counters.
func (s *Simulator) Stats() Stats { return s.stats.snapshot() }

// Handler serves the OpenAI-compatible API, the simulator's own endpoints and
// /metrics.
func (s *Simulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveCompletion(w, r, true) })
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveCompletion(w, r, false) })
	mux.HandleFunc("/v1/models", s.serveModels)
	mux.HandleFunc("/tokenize", s.serveTokenize)
	mux.HandleFunc("/sim/config", s.serveConfig)
	mux.HandleFunc("/sim/faults", s.serveFaults)
	mux.HandleFunc("/sim/stats", s.serveStats)
	if s.reg != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/", s.serveIndex)
	return mux
}

// codeRate is one injected HTTP error.
type codeRate struct {
	code int
	rate float64
}

// faultSet is Faults with the error codes in a fixed order for drawing.
type faultSet struct {
	Faults
	codes []codeRate
}

// faultPlan is what will go wrong with one request.
type faultPlan struct {
	status                          int
	reset, stall, malformed, noDone bool
	stallFor, headerDelay           time.Duration
}

// plan draws a request's faults: five consecutive draws from the fault stream
// per request, whatever the rates, so that a seed gives the same sequence of
// decisions for the same rates.
func (s *Simulator) plan() faultPlan {
	f := s.faults.Load()
	var u [5]float64
	s.faultRand.float64s(u[:])
	p := faultPlan{
		reset:       u[1] < f.ResetRate,
		stall:       u[2] < f.Stall.Rate,
		malformed:   u[3] < f.MalformedRate,
		noDone:      u[4] < f.MissingDoneRate,
		stallFor:    time.Duration(f.Stall.Duration),
		headerDelay: time.Duration(f.HeaderDelay),
	}
	cum := 0.0
	for _, c := range f.codes {
		cum += c.rate
		if u[0] < cum {
			p.status = c.code
			break
		}
	}
	return p
}

// completionRequest is the part of an OpenAI request the simulator reads.
// Unknown fields are ignored, as real servers do.
type completionRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS bool `json:"ignore_eos"`
	N         *int `json:"n"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// requestError is a client error, answered as an OpenAI error object.
type requestError struct {
	status int
	param  string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

// texts returns the prompt text: each message's content for chat, the prompt
// for completions.
func (r *completionRequest) texts(chat bool) ([]string, error) {
	if !chat {
		if len(r.Prompt) == 0 || string(r.Prompt) == "null" {
			return nil, badRequest("prompt", "'prompt' is a required property")
		}
		var p string
		if err := json.Unmarshal(r.Prompt, &p); err == nil {
			return []string{p}, nil
		}
		var ps []string
		if err := json.Unmarshal(r.Prompt, &ps); err != nil || len(ps) != 1 {
			return nil, badRequest("prompt", "'prompt' must be a string or a list of one string")
		}
		return ps, nil
	}
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "'messages' is a required property and must not be empty")
	}
	texts := make([]string, 0, len(r.Messages))
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: unknown role %q", i, m.Role)
		}
		t, err := contentText(m.Content)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
		}
		texts = append(texts, t)
	}
	return texts, nil
}

// contentText reads a message content: a string, null, or a list of parts of
// which the text parts count.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or a list of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part type %q is not supported", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// maxTokens returns the requested output limit, 0 for none.
func (r *completionRequest) maxTokens() (int, error) {
	param, v := "max_tokens", r.MaxTokens
	if r.MaxCompletionTokens != nil {
		param, v = "max_completion_tokens", r.MaxCompletionTokens
	}
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, badRequest(param, "%s must be at least 1, got %d", param, *v)
	}
	return *v, nil
}

// parse reads and checks a completion request. It returns the prompt, the
// number of tokens to generate and the finish reason.
func (s *Simulator) parse(body []byte, chat bool) (*completionRequest, prompt, int, string, error) {
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, prompt{}, 0, "", badRequest("", "invalid JSON body: %v", err)
	}
	if req.Model != s.cfg.Model {
		return nil, prompt{}, 0, "", &requestError{status: http.StatusNotFound, param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist.", req.Model)}
	}
	if req.N != nil && *req.N != 1 {
		return nil, prompt{}, 0, "", badRequest("n", "n must be 1, got %d", *req.N)
	}
	texts, err := req.texts(chat)
	if err != nil {
		return nil, prompt{}, 0, "", err
	}
	limit, err := req.maxTokens()
	if err != nil {
		return nil, prompt{}, 0, "", err
	}
	p := s.tok.tokenize(texts, s.blockTokens)
	room := s.cfg.MaxModelLen - p.tokens
	if room < 1 || limit > room {
		return nil, prompt{}, 0, "", badRequest("messages",
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the input, %d in the completion).",
			s.cfg.MaxModelLen, p.tokens+max(limit, 1), p.tokens, max(limit, 1))
	}
	// The output ends at the limit, or where the sequence "emits EOS": a
	// draw from output_tokens, unless ignore_eos asks to go on. Without a
	// limit, ignore_eos runs to output_tokens.max.
	n, finish := s.cfg.OutputTokens.Max, "length"
	if !req.IgnoreEOS {
		n, finish = s.lengths.sample(s.cfg.OutputTokens), "stop"
	}
	if limit > 0 && n >= limit {
		n, finish = limit, "length"
	}
	if n >= room {
		n, finish = room, "length"
	}
	return &req, p, n, finish, nil
}

func (s *Simulator) serveCompletion(w http.ResponseWriter, r *http.Request, chat bool) {
	// The request's phases count from here: reading and parsing it is part
	// of the time it waits, as in a real server.
	arrived := time.Now()
	if r.Method != http.MethodPost {
		s.writeError(w, &requestError{status: http.StatusMethodNotAllowed, msg: "method " + r.Method + " is not allowed, use POST"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		s.writeError(w, badRequest("", "reading request body: %v", err))
		return
	}
	req, p, n, finish, err := s.parse(body, chat)
	if err != nil {
		s.writeError(w, err)
		return
	}
	ctx := r.Context()
	plan := s.plan()
	if plan.headerDelay > 0 {
		s.stats.fault(faultHeaderDelay)
		if !sleep(ctx, plan.headerDelay) {
			return
		}
		arrived = time.Now() // a slow gateway in front: not the engine's time
	}
	if plan.status != 0 {
		s.stats.fault(faultError)
		if plan.status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		s.writeError(w, &requestError{status: plan.status, msg: fmt.Sprintf("injected fault: %d %s", plan.status, http.StatusText(plan.status))})
		return
	}

	var src tokenSource
	if s.engine != nil {
		seq := newSequence(ctx, arrived, p, n)
		if err := s.engine.submit(seq); err != nil {
			w.Header().Set("Retry-After", "1")
			s.writeError(w, &requestError{status: http.StatusTooManyRequests, msg: fmt.Sprintf("the waiting queue is full (max_queue %d)", s.cfg.MaxQueue)})
			return
		}
		defer s.engine.withdraw(seq)
		src = seq
	} else {
		s.stats.running.Add(1)
		defer s.stats.running.Add(-1)
		fs := newFixedSource(arrived, time.Duration(s.cfg.Fixed.TTFT), time.Duration(s.cfg.Fixed.ITL), n)
		s.stats.promptTokens.Add(int64(p.tokens))
		src = fs
	}
	rs := &reply{
		sim: s, w: w, chat: chat, src: src, prompt: p, n: n, finish: finish, plan: plan,
		id: s.ids.Add(1), created: time.Now().Unix(),
		usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
	}
	if req.Stream {
		rs.stream(ctx)
	} else {
		rs.whole(ctx)
	}
}

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

// resetConnection closes the client connection with a TCP RST, as a crashed
// server or a load balancer dropping the stream would.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // not HTTP/1: abort the stream instead
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
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

// writeError answers with an OpenAI error object; completion endpoints count it.
func (s *Simulator) writeError(w http.ResponseWriter, err error) {
	var re *requestError
	if !errors.As(err, &re) {
		re = &requestError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	typ := "invalid_request_error"
	switch {
	case re.status == http.StatusNotFound:
		typ = "not_found_error"
	case re.status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case re.status >= 500:
		typ = "server_error"
	}
	var param any
	if re.param != "" {
		param = re.param
	}
	s.stats.response(re.status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(re.status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": re.msg, "type": typ, "param": param, "code": re.status,
	}})
}

// writeJSON writes v with status 200.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *Simulator) serveModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		s.writeError(w, &requestError{status: http.StatusMethodNotAllowed, msg: "use GET"})
		return
	}
	writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.cfg.Model, "object": "model", "created": s.started, "owned_by": "sloprober",
		"root": s.cfg.Model, "max_model_len": s.cfg.MaxModelLen,
	}}})
}

// serveTokenize answers POST /tokenize in vLLM's form.
func (s *Simulator) serveTokenize(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.writeError(w, &requestError{status: http.StatusMethodNotAllowed, msg: "use POST"})
		return
	}
	var req completionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&req); err != nil {
		s.writeError(w, badRequest("", "invalid JSON body: %v", err))
		return
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		s.writeError(w, &requestError{status: http.StatusNotFound, param: "model", msg: fmt.Sprintf("The model `%s` does not exist.", req.Model)})
		return
	}
	texts, err := req.texts(len(req.Messages) > 0)
	if err != nil {
		s.writeError(w, badRequest("", "send either 'prompt' or 'messages'"))
		return
	}
	tokens := []int{}
	for _, t := range texts {
		s.tok.forEach(t, func(tok string) { tokens = append(tokens, tokenID(tok)) })
	}
	writeJSON(w, map[string]any{"count": len(tokens), "max_model_len": s.cfg.MaxModelLen, "tokens": tokens})
}

func (s *Simulator) serveConfig(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.Config())
}

// serveFaults: GET shows the current faults, PUT replaces them with a faults
// block in JSON or YAML (keys it omits are 0).
func (s *Simulator) serveFaults(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, s.faults.Load().Faults)
	case http.MethodPut, http.MethodPost:
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			s.writeError(w, badRequest("", "reading body: %v", err))
			return
		}
		f, err := ParseFaults(b)
		if err != nil {
			s.writeError(w, badRequest("", "invalid faults: %v", err))
			return
		}
		s.SetFaults(f)
		s.logger.Info("Faults replaced", "faults", string(b))
		writeJSON(w, f)
	default:
		s.writeError(w, &requestError{status: http.StatusMethodNotAllowed, msg: "use GET or PUT"})
	}
}

func (s *Simulator) serveStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.stats.snapshot())
}

func (s *Simulator) serveIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		s.writeError(w, &requestError{status: http.StatusNotFound, msg: "no such endpoint: " + r.URL.Path})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, `sloprober simulator, model %q, %s

POST /v1/chat/completions   OpenAI chat completions (stream or not)
POST /v1/completions        OpenAI completions (stream or not)
GET  /v1/models             the served model
POST /tokenize              token count, vLLM's form
GET  /sim/config            the configuration with the current faults
GET  /sim/faults            the current faults
PUT  /sim/faults            replace the faults (JSON or YAML; omitted keys are 0)
GET  /sim/stats             running, waiting, totals
GET  /metrics               Prometheus metrics
`, s.cfg.Model, s.describe())
}

func (s *Simulator) describe() string {
	if s.engine == nil {
		return fmt.Sprintf("fixed timing (ttft %s, itl %s)", s.cfg.Fixed.TTFT, s.cfg.Fixed.ITL)
	}
	return fmt.Sprintf("engine with %d slots", s.cfg.Slots)
}

// vocabulary returns the texts output tokens are drawn from: each is exactly
// one token for the configured tokenizer (chars_per_token characters, or one
// word followed by a space).
func vocabulary(c TokenizerConfig) []string {
	words := strings.Fields(`the of and to in is was for that on as with by he at from his it an were
		are which this be or has had not but also first one their its new after who they have her
		she two been other when there all during into school time may years more most only over
		city some world would where later up such used many can state about national out known
		university united then made`)
	out := make([]string, len(words))
	for i, w := range words {
		if c.Words {
			out[i] = w + " "
			continue
		}
		k := c.CharsPerToken
		if k == 1 {
			out[i] = w[:1]
			continue
		}
		for len(w) < k-1 {
			w += w
		}
		out[i] = w[:k-1] + " "
	}
	return out
}
