package simulator

// The OpenAI-compatible API: parsing requests, errors, /v1/models and /tokenize.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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
		// A slow gateway in front: not the engine's time. It reports its
		// own time as a gateway would, in Server-Timing, so that the
		// prober's gateway phase has a ground truth; the engine's phases
		// (timings) count from here, so the two tile the request.
		now := time.Now()
		w.Header().Set("Server-Timing", "gateway;dur="+strconv.FormatFloat(ms(now.Sub(arrived)), 'f', 3, 64))
		arrived = now
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
		fs := newFixedSource(arrived, time.Duration(s.cfg.Fixed.TTFT), time.Duration(s.cfg.Fixed.ITL), n, &s.faults)
		s.stats.promptTokens.Add(int64(p.tokens))
		src = fs
	}
	rs := &reply{
		sim: s, w: w, chat: chat, src: src, prompt: p, n: n, finish: finish, plan: plan,
		id: s.ids.Add(1), created: time.Now().Unix(),
		usage:     req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		requestID: r.Header.Get("X-Request-Id"),
	}
	if req.Stream {
		rs.stream(ctx)
	} else {
		rs.whole(ctx)
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
