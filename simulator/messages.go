package simulator

// The Anthropic Messages API, POST /v1/messages, streaming only: the same
// plan as a chat reply, written as the Messages API's events
// (https://docs.anthropic.com/en/docs/build-with-claude/streaming):
// message_start, a content block per part of the reply (thinking, text,
// tool_use) with its deltas, message_delta with the stop reason and usage,
// message_stop. Errors are Anthropic's error objects; the simulator's 503
// fault is Anthropic's overload, HTTP 529 overloaded_error.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// messagesRequest is the part of a Messages API request the simulator
// reads; unknown fields (temperature, thinking, metadata, ...) are ignored.
type messagesRequest struct {
	Model     string `json:"model"`
	MaxTokens *int   `json:"max_tokens"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	System    json.RawMessage `json:"system"`
	Stream    bool            `json:"stream"`
	IgnoreEOS bool            `json:"ignore_eos"` // vLLM's extension
	Tools     []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
	// Structured outputs: output_config.format, and output_format, its
	// name while it was in beta.
	OutputConfig *struct {
		Format *messagesFormat `json:"format"`
	} `json:"output_config"`
	OutputFormat *messagesFormat `json:"output_format"`
}

type messagesFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema"`
}

// parseMessages reads a Messages request. The anthropic-version header is
// required, as Anthropic requires it (its value is not checked); x-api-key
// is not checked.
func (s *Simulator) parseMessages(h http.Header, body []byte) (*request, error) {
	if h.Get("Anthropic-Version") == "" {
		return nil, badRequest("", "anthropic-version: header is required")
	}
	var mr messagesRequest
	if err := json.Unmarshal(body, &mr); err != nil {
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	if !s.knownModel(mr.Model) {
		return nil, &requestError{status: http.StatusNotFound, param: "model", msg: "model: " + mr.Model}
	}
	if mr.MaxTokens == nil {
		return nil, badRequest("max_tokens", "max_tokens: Field required")
	}
	if !mr.Stream {
		return nil, badRequest("stream", `the simulator's /v1/messages only streams: set "stream": true`)
	}
	req := &request{api: apiMessages, stream: true, ignoreEOS: mr.IgnoreEOS}
	var err error
	if req.limit, err = limit("max_tokens", mr.MaxTokens); err != nil {
		return nil, err
	}
	if len(mr.System) > 0 && string(mr.System) != "null" {
		t, err := contentText(mr.System, "text")
		if err != nil {
			return nil, badRequest("system", "system: %v", err)
		}
		req.texts = append(req.texts, t)
	}
	if len(mr.Messages) == 0 {
		return nil, badRequest("messages", "messages: at least one message is required")
	}
	for i, m := range mr.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, badRequest("messages", "messages.%d.role: Input should be 'user' or 'assistant', got %q", i, m.Role)
		}
		t, err := messagesContent(m.Content)
		if err != nil {
			return nil, badRequest("messages", "messages.%d.content: %v", i, err)
		}
		req.texts = append(req.texts, t)
		if m.Role == "user" {
			req.question = t
		}
	}
	for i, t := range mr.Tools {
		param := fmt.Sprintf("tools.%d", i)
		if t.Type != "" && t.Type != "custom" {
			return nil, badRequest(param+".type", "%s.type: only custom tools are supported by the simulator, got %q", param, t.Type)
		}
		if len(t.InputSchema) == 0 {
			return nil, badRequest(param+".input_schema", "%s.input_schema: Field required", param)
		}
		tl, err := newTool(t.Name, t.InputSchema, param+".input_schema")
		if err != nil {
			return nil, err
		}
		req.tools = append(req.tools, tl)
	}
	req.choice = toolChoice{mode: "auto"}
	if c := mr.ToolChoice; c != nil {
		switch c.Type {
		case "auto", "none":
			req.choice.mode = c.Type
		case "any":
			req.choice.mode = "required"
		case "tool":
			req.choice = toolChoice{mode: "named", name: c.Name}
		default:
			return nil, badRequest("tool_choice.type", "tool_choice.type must be auto, any, tool or none, got %q", c.Type)
		}
	}
	if err := req.checkChoice("tool_choice"); err != nil {
		return nil, err
	}
	f, param := mr.OutputFormat, "output_format"
	if mr.OutputConfig != nil && mr.OutputConfig.Format != nil {
		f, param = mr.OutputConfig.Format, "output_config.format"
	}
	if f != nil {
		if f.Type != "json_schema" || len(f.Schema) == 0 {
			return nil, badRequest(param, "%s must be {\"type\": \"json_schema\", \"schema\": {...}}", param)
		}
		if req.format, err = newFormat(f.Schema, param+".schema"); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// messagesContent reads a message's content: a string, or blocks of which
// text, tool_use (its name and input) and tool_result (its text) count.
// Earlier thinking is not part of the prompt, as Anthropic strips it.
func messagesContent(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		Name    string          `json:"name"`
		Input   json.RawMessage `json:"input"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", fmt.Errorf("must be a string or a list of content blocks")
	}
	var b strings.Builder
	for _, bl := range blocks {
		switch bl.Type {
		case "text":
			b.WriteString(bl.Text)
		case "tool_use":
			b.WriteString(bl.Name)
			b.Write(bl.Input)
		case "tool_result":
			t, err := contentText(bl.Content, "text")
			if err != nil {
				return "", fmt.Errorf("tool_result content: %v", err)
			}
			b.WriteString(t)
		case "thinking", "redacted_thinking":
		default:
			return "", fmt.Errorf("content block type %q is not supported", bl.Type)
		}
	}
	return b.String(), nil
}

// writeAnthropicError answers with Anthropic's error object,
// {"type": "error", "error": {"type", "message"}}, and counts it.
func (s *Simulator) writeAnthropicError(w http.ResponseWriter, err error) {
	re := asRequestError(err)
	s.stats.response(re.status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(re.status)
	_ = json.NewEncoder(w).Encode(&struct {
		Type  string         `json:"type"`
		Error messagesErrObj `json:"error"`
	}{"error", messagesErrObj{anthropicErrorType(re.status), re.msg}})
}

type messagesErrObj struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicErrorType is the error type Anthropic gives a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case statusOverloaded:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// messagesEncoder writes a Messages API stream. message_start goes out
// with the first token, when the prompt's cached part is known; a content
// block is opened with its first token and stopped when the next one opens
// or the reply ends. A ping follows the first content_block_start, as
// Anthropic sends one.
type messagesEncoder struct {
	rp      *reply
	id      string
	started bool // message_start was sent
	open    bool // a block is open
	seg     segment
	index   int // the open block's index
	blocks  int
}

func newMessagesEncoder(rp *reply) *messagesEncoder {
	return &messagesEncoder{rp: rp, id: "msg_sim_" + strconv.FormatUint(rp.id, 10)}
}

// messagesUsage is Anthropic's usage: input_tokens excludes the prompt
// tokens read from the cache; output tokens include thinking.
type messagesUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

type messagesEvent struct {
	Type         string          `json:"type"`
	Message      *messagesObject `json:"message,omitempty"`
	Index        *int            `json:"index,omitempty"`
	ContentBlock any             `json:"content_block,omitempty"`
	Delta        any             `json:"delta,omitempty"`
	Usage        *messagesUsage  `json:"usage,omitempty"`
	SimTS        int64           `json:"sim_ts,omitempty"`
	Timings      *Timings        `json:"timings,omitempty"`
}

type messagesObject struct {
	ID           string        `json:"id"`
	Type         string        `json:"type"`
	Role         string        `json:"role"`
	Model        string        `json:"model"`
	Content      []any         `json:"content"`
	StopReason   *string       `json:"stop_reason"`
	StopSequence *string       `json:"stop_sequence"`
	Usage        messagesUsage `json:"usage"`
}

// textBlock is a text block, and a text_delta.
type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type messagesStop struct {
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

func (e *messagesEncoder) usage(output int) *messagesUsage {
	rp := e.rp
	cached := rp.src.cached()
	return &messagesUsage{InputTokens: rp.prompt.tokens - cached, CacheReadInputTokens: cached, OutputTokens: output}
}

func (e *messagesEncoder) start(b []byte) []byte { return b }

func (e *messagesEncoder) token(b []byte, i int) []byte {
	rp := e.rp
	if !e.started {
		e.started = true
		b = appendEvent(b, "message_start", &messagesEvent{Type: "message_start", Message: &messagesObject{
			ID: e.id, Type: "message", Role: "assistant", Model: rp.ident.Model, Content: []any{}, Usage: *e.usage(1),
		}})
	}
	seg, text := rp.piece(i)
	if !e.open || e.seg != seg {
		b = e.closeBlock(b)
		b = e.openBlock(b, seg)
	}
	var d any
	switch seg {
	case segReasoning:
		d = &struct {
			Type     string `json:"type"`
			Thinking string `json:"thinking"`
		}{"thinking_delta", text}
	case segText:
		d = &textBlock{"text_delta", text}
	default:
		d = &struct {
			Type        string `json:"type"`
			PartialJSON string `json:"partial_json"`
		}{"input_json_delta", text}
	}
	return appendEvent(b, "content_block_delta", &messagesEvent{Type: "content_block_delta", Index: &e.index, Delta: d, SimTS: rp.stamp()})
}

func (e *messagesEncoder) openBlock(b []byte, seg segment) []byte {
	e.open, e.seg, e.index = true, seg, e.blocks
	e.blocks++
	var block any
	switch seg {
	case segReasoning:
		block = &struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{Type: "thinking"}
	case segText:
		block = &textBlock{Type: "text"}
	default:
		block = &struct {
			Type  string   `json:"type"`
			ID    string   `json:"id"`
			Name  string   `json:"name"`
			Input struct{} `json:"input"`
		}{Type: "tool_use", ID: "toolu_sim_" + strconv.FormatUint(e.rp.id, 10), Name: e.rp.out.call}
	}
	b = appendEvent(b, "content_block_start", &messagesEvent{Type: "content_block_start", Index: &e.index, ContentBlock: block})
	if e.index == 0 {
		b = appendEvent(b, "ping", &messagesEvent{Type: "ping"})
	}
	return b
}

// closeBlock stops the open block; a thinking block gets its signature
// first, as Anthropic sends it.
func (e *messagesEncoder) closeBlock(b []byte) []byte {
	if !e.open {
		return b
	}
	e.open = false
	if e.seg == segReasoning {
		sig := base64.StdEncoding.EncodeToString([]byte("sloprober-sim-" + e.id))
		b = appendEvent(b, "content_block_delta", &messagesEvent{Type: "content_block_delta", Index: &e.index,
			Delta: &struct {
				Type      string `json:"type"`
				Signature string `json:"signature"`
			}{"signature_delta", sig}})
	}
	return appendEvent(b, "content_block_stop", &messagesEvent{Type: "content_block_stop", Index: &e.index})
}

// malformed is a content_block_delta cut off inside a string.
func (e *messagesEncoder) malformed(b []byte) []byte {
	return append(b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"+strconv.Itoa(e.index)+",\"delta\":{\"type\":\"text_delta\",\"text\":\"\n\n"...)
}

// fail is Anthropic's in-stream overload: an error event, which ends the
// stream.
func (e *messagesEncoder) fail(b []byte) []byte {
	return appendEvent(b, "error", &struct {
		Type  string         `json:"type"`
		Error messagesErrObj `json:"error"`
	}{"error", messagesErrObj{"overloaded_error", "Overloaded"}})
}

// end stops the open block, then message_delta with the stop reason
// (end_turn, max_tokens, tool_use), the usage and the timings, and, when
// done, message_stop.
func (e *messagesEncoder) end(b []byte, ph phases, t *Timings, done bool) []byte {
	rp := e.rp
	b = e.closeBlock(b)
	reason := "end_turn"
	switch rp.out.finish {
	case finishLength:
		reason = "max_tokens"
	case finishToolCalls:
		reason = "tool_use"
	}
	b = appendEvent(b, "message_delta", &messagesEvent{Type: "message_delta", Delta: &messagesStop{StopReason: reason},
		Usage: e.usage(rp.out.n), Timings: t})
	if done {
		b = appendEvent(b, "message_stop", &messagesEvent{Type: "message_stop"})
	}
	return b
}
