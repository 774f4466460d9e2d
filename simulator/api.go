package simulator

// The OpenAI chat and completions APIs: parsing requests, errors, /v1/models and /tokenize.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// completionRequest is the part of an OpenAI chat or completions request
// the simulator reads. Unknown fields are ignored, as real servers do.
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
	// Chat only: [{type: function, function: {name, description, parameters}}].
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// An assistant's earlier tool calls are part of the prompt too.
	ToolCalls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// requestError is a client error, answered as the API's error object.
type requestError struct {
	status int
	param  string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

// statusOverloaded is Anthropic's "overloaded" status, which Go does not name.
const statusOverloaded = 529

func statusText(code int) string {
	if code == statusOverloaded {
		return "Overloaded"
	}
	return http.StatusText(code)
}

// texts returns the prompt text: each message's content (and earlier tool
// calls) for chat, the prompt for completions.
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
		t, err := contentText(m.Content, "text")
		if err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
		}
		texts = append(texts, t)
		for _, c := range m.ToolCalls {
			texts = append(texts, c.Function.Name, c.Function.Arguments)
		}
	}
	return texts, nil
}

// lastUser returns the text of the last user message, where a known-answer
// question is looked for: the prompt, for completions.
func lastUser(roles, texts []string) string {
	for i := len(roles) - 1; i >= 0; i-- {
		if roles[i] == "user" {
			return texts[i]
		}
	}
	return ""
}

// contentText reads a message content: a string, null, or a list of parts
// of which the parts of the text types count; other parts are errors.
func contentText(raw json.RawMessage, textTypes ...string) (string, error) {
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
		if !slices.Contains(textTypes, p.Type) {
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
	return limit(param, v)
}

// limit checks an output limit named param; nil is none (0).
func limit(param string, v *int) (int, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, badRequest(param, "%s must be at least 1, got %d", param, *v)
	}
	return *v, nil
}

// parseCompletion reads a chat or completions request. Tools and
// response_format are read for chat only: the completions API has neither.
func (s *Simulator) parseCompletion(body []byte, api apiKind) (*request, error) {
	var cr completionRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	if !s.knownModel(cr.Model) {
		return nil, &requestError{status: http.StatusNotFound, param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist.", cr.Model)}
	}
	if cr.N != nil && *cr.N != 1 {
		return nil, badRequest("n", "n must be 1, got %d", *cr.N)
	}
	chat := api == apiChat
	texts, err := cr.texts(chat)
	if err != nil {
		return nil, err
	}
	req := &request{api: api, texts: texts, stream: cr.Stream, ignoreEOS: cr.IgnoreEOS,
		usage: cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage}
	if req.limit, err = cr.maxTokens(); err != nil {
		return nil, err
	}
	if !chat {
		req.question = texts[0]
		return req, nil
	}
	roles := make([]string, 0, len(texts))
	for _, m := range cr.Messages {
		roles = append(roles, m.Role)
		for range m.ToolCalls {
			roles = append(roles, "", "")
		}
	}
	req.question = lastUser(roles, texts)
	for i, t := range cr.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, badRequest(param+".type", "%s.type must be \"function\", got %q", param, t.Type)
		}
		tl, err := newTool(t.Function.Name, t.Function.Parameters, param+".function.parameters")
		if err != nil {
			return nil, err
		}
		req.tools = append(req.tools, tl)
	}
	if req.choice, err = openAIToolChoice(cr.ToolChoice, false); err != nil {
		return nil, err
	}
	if err := req.checkChoice("tool_choice"); err != nil {
		return nil, err
	}
	if f := cr.ResponseFormat; f != nil {
		switch f.Type {
		case "text":
		case "json_object":
			req.format, _ = newFormat(nil, "")
		case "json_schema":
			if f.JSONSchema == nil || len(f.JSONSchema.Schema) == 0 {
				return nil, badRequest("response_format.json_schema.schema", "response_format.json_schema.schema is required for type json_schema")
			}
			if req.format, err = newFormat(f.JSONSchema.Schema, "response_format.json_schema.schema"); err != nil {
				return nil, err
			}
		default:
			return nil, badRequest("response_format.type", "response_format.type must be text, json_object or json_schema, got %q", f.Type)
		}
	}
	return req, nil
}

// openAIToolChoice reads an OpenAI tool_choice: "none", "auto",
// "required", or a named function, {"type": "function", "function":
// {"name": N}} in chat, {"type": "function", "name": N} in the Responses
// API (flat). Absent is "auto", as OpenAI has it when tools are given.
func openAIToolChoice(raw json.RawMessage, flat bool) (toolChoice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return toolChoice{mode: "auto"}, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "none", "auto", "required":
			return toolChoice{mode: mode}, nil
		}
		return toolChoice{}, badRequest("tool_choice", "tool_choice must be none, auto, required or a named function, got %q", mode)
	}
	var named struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" {
		return toolChoice{}, badRequest("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", ...}")
	}
	name := named.Function.Name
	if flat {
		name = named.Name
	}
	if name == "" {
		return toolChoice{}, badRequest("tool_choice", "tool_choice names no function")
	}
	return toolChoice{mode: "named", name: name}, nil
}

// writeError answers with an OpenAI error object; generation endpoints count it.
func (s *Simulator) writeError(w http.ResponseWriter, err error) {
	re := asRequestError(err)
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

func asRequestError(err error) *requestError {
	var re *requestError
	if !errors.As(err, &re) {
		re = &requestError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	return re
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
	// The served name first; the configured one, which requests may
	// still use, after it when an identity change made them differ.
	served := s.identity.Load().Model
	var data []any
	for _, name := range slices.Compact([]string{served, s.cfg.Model}) {
		data = append(data, map[string]any{
			"id": name, "object": "model", "created": s.started, "owned_by": "sloprober",
			"root": served, "max_model_len": s.cfg.MaxModelLen,
		})
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
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
	if req.Model != "" && !s.knownModel(req.Model) {
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
