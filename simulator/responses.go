package simulator

// The OpenAI Responses API, POST /v1/responses, streaming only: the same
// plan as a chat reply, written as the Responses API's semantic events
// (https://platform.openai.com/docs/api-reference/responses-streaming).
// Every event carries its type in an "event:" line and in its data, with a
// sequence_number counting from 0.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// responsesRequest is the part of a Responses API request the simulator
// reads; unknown fields are ignored.
type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
	IgnoreEOS       bool            `json:"ignore_eos"` // vLLM's extension
	Text            *struct {
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	} `json:"text"`
	Tools []struct {
		Type       string          `json:"type"`
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// responsesItem is an input item: a message ({role, content}, with or
// without "type": "message"), or an earlier function call or its output.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

func (s *Simulator) parseResponses(body []byte) (*request, error) {
	var rr responsesRequest
	if err := json.Unmarshal(body, &rr); err != nil {
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	if !s.knownModel(rr.Model) {
		return nil, &requestError{status: http.StatusNotFound, param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist.", rr.Model)}
	}
	if !rr.Stream {
		return nil, badRequest("stream", `the simulator's /v1/responses only streams: set "stream": true`)
	}
	req := &request{api: apiResponses, stream: true, ignoreEOS: rr.IgnoreEOS,
		instructions: rr.Instructions, maxOutputTokens: rr.MaxOutputTokens}
	if rr.Instructions != nil {
		req.texts = append(req.texts, *rr.Instructions)
	}
	if err := req.readInput(rr.Input); err != nil {
		return nil, err
	}
	var err error
	if req.limit, err = limit("max_output_tokens", rr.MaxOutputTokens); err != nil {
		return nil, err
	}
	for i, t := range rr.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, badRequest(param+".type", "%s.type must be \"function\" (the simulator has no built-in tools), got %q", param, t.Type)
		}
		tl, err := newTool(t.Name, t.Parameters, param+".parameters")
		if err != nil {
			return nil, err
		}
		req.tools = append(req.tools, tl)
	}
	if req.choice, err = openAIToolChoice(rr.ToolChoice, true); err != nil {
		return nil, err
	}
	if err := req.checkChoice("tool_choice"); err != nil {
		return nil, err
	}
	if rr.Text != nil && rr.Text.Format != nil {
		switch f := rr.Text.Format; f.Type {
		case "text":
		case "json_object":
			req.format, _ = newFormat(nil, "")
		case "json_schema":
			if len(f.Schema) == 0 {
				return nil, badRequest("text.format.schema", "text.format.schema is required for type json_schema")
			}
			if req.format, err = newFormat(f.Schema, "text.format.schema"); err != nil {
				return nil, err
			}
		default:
			return nil, badRequest("text.format.type", "text.format.type must be text, json_object or json_schema, got %q", f.Type)
		}
	}
	return req, nil
}

// readInput reads the input: a string (one user message) or a list of
// items. The last user message is where a known-answer question is looked
// for.
func (req *request) readInput(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return badRequest("input", "'input' is a required property")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		req.texts, req.question = append(req.texts, text), text
		return nil
	}
	var items []responsesItem
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return badRequest("input", "'input' must be a string or a non-empty list of input items")
	}
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			switch it.Role {
			case "user", "assistant", "system", "developer":
			default:
				return badRequest(param+".role", "%s.role: unknown role %q", param, it.Role)
			}
			t, err := contentText(it.Content, "input_text", "output_text")
			if err != nil {
				return badRequest(param+".content", "%s.content: %v", param, err)
			}
			req.texts = append(req.texts, t)
			if it.Role == "user" {
				req.question = t
			}
		case "function_call":
			req.texts = append(req.texts, it.Name, it.Arguments)
		case "function_call_output":
			t, err := contentText(it.Output, "input_text", "output_text")
			if err != nil {
				return badRequest(param+".output", "%s.output: %v", param, err)
			}
			req.texts = append(req.texts, t)
		case "reasoning":
			// Earlier reasoning handed back: not part of the prompt, as
			// reasoning models drop it.
		default:
			return badRequest(param+".type", "%s.type %q is not supported", param, it.Type)
		}
	}
	return nil
}

// responsesEncoder writes a Responses API stream. Output items (reasoning,
// a message, a function call) are opened with their first token and closed
// when the next one opens or the reply ends; the done events repeat their
// whole text.
type responsesEncoder struct {
	rp    *reply
	id    string
	seq   int
	items []any // output items done, for the response object

	open  bool    // an item is open
	seg   segment // what the open item holds
	index int     // its output_index
	item  string  // its id
	text  []byte  // its text so far
}

func newResponsesEncoder(rp *reply) *responsesEncoder {
	return &responsesEncoder{rp: rp, id: "resp_sim_" + strconv.FormatUint(rp.id, 10)}
}

// responsesEvent is any event of the stream; each kind sets its fields.
type responsesEvent struct {
	Type           string             `json:"type"`
	SequenceNumber int                `json:"sequence_number"`
	Response       *responsesResponse `json:"response,omitempty"`
	OutputIndex    *int               `json:"output_index,omitempty"`
	ItemID         string             `json:"item_id,omitempty"`
	ContentIndex   *int               `json:"content_index,omitempty"`
	Item           any                `json:"item,omitempty"`
	Part           any                `json:"part,omitempty"`
	Delta          *string            `json:"delta,omitempty"`
	Text           *string            `json:"text,omitempty"`
	Name           string             `json:"name,omitempty"`
	Arguments      *string            `json:"arguments,omitempty"`
	Logprobs       json.RawMessage    `json:"logprobs,omitempty"`
	SimTS          int64              `json:"sim_ts,omitempty"`
	Timings        *Timings           `json:"timings,omitempty"`
}

// responsesResponse is the response object of the lifecycle events.
type responsesResponse struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	CreatedAt         int64           `json:"created_at"`
	Status            string          `json:"status"`
	Error             *responsesError `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Model           string          `json:"model"`
	Output          []any           `json:"output"`
	Usage           *responsesUsage `json:"usage"`
}

type responsesError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// responsesUsage counts reasoning within the output tokens, as OpenAI does.
type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type messageItem struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type reasoningItem struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Status  string          `json:"status"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type functionCallItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Status    string `json:"status"`
	Arguments string `json:"arguments"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
}

var noLogprobs = json.RawMessage(`[]`)

func (e *responsesEncoder) event(b []byte, ev *responsesEvent) []byte {
	ev.SequenceNumber = e.seq
	e.seq++
	return appendEvent(b, ev.Type, ev)
}

func (e *responsesEncoder) response(status string) *responsesResponse {
	rp := e.rp
	out := e.items
	if out == nil {
		out = []any{}
	}
	return &responsesResponse{ID: e.id, Object: "response", CreatedAt: rp.created, Status: status,
		Instructions: rp.req.instructions, MaxOutputTokens: rp.req.maxOutputTokens, Model: rp.ident.Model, Output: out}
}

// start: response.created and response.in_progress, as soon as the request
// is accepted.
func (e *responsesEncoder) start(b []byte) []byte {
	b = e.event(b, &responsesEvent{Type: "response.created", Response: e.response("in_progress")})
	return e.event(b, &responsesEvent{Type: "response.in_progress", Response: e.response("in_progress")})
}

func (e *responsesEncoder) token(b []byte, i int) []byte {
	seg, text := e.rp.piece(i)
	if !e.open || e.seg != seg {
		b = e.closeItem(b, "completed")
		b = e.openItem(b, seg)
	}
	e.text = append(e.text, text...)
	ev := &responsesEvent{OutputIndex: &e.index, ItemID: e.item, Delta: &text, SimTS: e.rp.stamp()}
	switch seg {
	case segReasoning:
		ev.Type, ev.ContentIndex = "response.reasoning_text.delta", new(int)
	case segText:
		ev.Type, ev.ContentIndex, ev.Logprobs = "response.output_text.delta", new(int), noLogprobs
	default:
		ev.Type = "response.function_call_arguments.delta"
	}
	return e.event(b, ev)
}

// openItem writes output_item.added (and content_part.added for reasoning
// and messages) for an item holding seg.
func (e *responsesEncoder) openItem(b []byte, seg segment) []byte {
	rp := e.rp
	e.open, e.seg, e.index, e.text = true, seg, len(e.items), e.text[:0]
	n := strconv.FormatUint(rp.id, 10)
	var item, part any
	switch seg {
	case segReasoning:
		e.item = "rs_sim_" + n
		item = &reasoningItem{ID: e.item, Type: "reasoning", Status: "in_progress", Summary: []any{}, Content: []reasoningText{}}
		part = &reasoningText{Type: "reasoning_text"}
	case segText:
		e.item = "msg_sim_" + n
		item = &messageItem{ID: e.item, Type: "message", Status: "in_progress", Role: "assistant", Content: []outputText{}}
		part = &outputText{Type: "output_text", Annotations: []any{}}
	default:
		e.item = "fc_sim_" + n
		item = &functionCallItem{ID: e.item, Type: "function_call", Status: "in_progress", CallID: rp.callID(), Name: rp.out.call}
	}
	b = e.event(b, &responsesEvent{Type: "response.output_item.added", OutputIndex: &e.index, Item: item})
	if part != nil {
		b = e.event(b, &responsesEvent{Type: "response.content_part.added", ItemID: e.item, OutputIndex: &e.index, ContentIndex: new(int), Part: part})
	}
	return b
}

// closeItem writes the done events of the open item, if any, with its
// whole text, and keeps the item for the response object.
func (e *responsesEncoder) closeItem(b []byte, status string) []byte {
	if !e.open {
		return b
	}
	e.open = false
	text := string(e.text)
	var item any
	switch e.seg {
	case segReasoning:
		part := reasoningText{Type: "reasoning_text", Text: text}
		b = e.event(b, &responsesEvent{Type: "response.reasoning_text.done", ItemID: e.item, OutputIndex: &e.index, ContentIndex: new(int), Text: &text})
		b = e.event(b, &responsesEvent{Type: "response.content_part.done", ItemID: e.item, OutputIndex: &e.index, ContentIndex: new(int), Part: &part})
		item = &reasoningItem{ID: e.item, Type: "reasoning", Status: status, Summary: []any{}, Content: []reasoningText{part}}
	case segText:
		part := outputText{Type: "output_text", Text: text, Annotations: []any{}}
		b = e.event(b, &responsesEvent{Type: "response.output_text.done", ItemID: e.item, OutputIndex: &e.index, ContentIndex: new(int), Text: &text, Logprobs: noLogprobs})
		b = e.event(b, &responsesEvent{Type: "response.content_part.done", ItemID: e.item, OutputIndex: &e.index, ContentIndex: new(int), Part: &part})
		item = &messageItem{ID: e.item, Type: "message", Status: status, Role: "assistant", Content: []outputText{part}}
	default:
		b = e.event(b, &responsesEvent{Type: "response.function_call_arguments.done", ItemID: e.item, OutputIndex: &e.index, Name: e.rp.out.call, Arguments: &text})
		item = &functionCallItem{ID: e.item, Type: "function_call", Status: status, Arguments: text, CallID: e.rp.callID(), Name: e.rp.out.call}
	}
	b = e.event(b, &responsesEvent{Type: "response.output_item.done", OutputIndex: &e.index, Item: item})
	e.items = append(e.items, item)
	return b
}

// malformed is an event cut off inside a string; it takes no sequence
// number, so the next event's shows none lost.
func (e *responsesEncoder) malformed(b []byte) []byte {
	return append(b, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\""+e.item+"\",\"delta\":\"\n\n"...)
}

// fail is response.failed, whose response carries the error and the items
// done so far; the stream ends with it.
func (e *responsesEncoder) fail(b []byte) []byte {
	r := e.response("failed")
	r.Error = &responsesError{Code: "server_error", Message: "injected fault: stream error"}
	return e.event(b, &responsesEvent{Type: "response.failed", Response: r})
}

// end closes the open item (incomplete when the limit cut it) and, when
// done, ends with response.completed, or response.incomplete with reason
// max_output_tokens, whose response carries the usage; the timings ride
// beside it.
func (e *responsesEncoder) end(b []byte, ph phases, t *Timings, done bool) []byte {
	rp := e.rp
	status := "completed"
	if rp.out.finish == finishLength {
		status = "incomplete"
	}
	b = e.closeItem(b, status)
	if !done {
		return b
	}
	r := e.response(status)
	if status == "incomplete" {
		r.IncompleteDetails = &struct {
			Reason string `json:"reason"`
		}{"max_output_tokens"}
	}
	u := &responsesUsage{InputTokens: rp.prompt.tokens, OutputTokens: rp.out.n, TotalTokens: rp.prompt.tokens + rp.out.n}
	u.InputTokensDetails.CachedTokens = ph.cached
	u.OutputTokensDetails.ReasoningTokens = rp.out.reasoning
	r.Usage = u
	return e.event(b, &responsesEvent{Type: "response." + status, Response: r, Timings: t})
}
