package simulator_test

// How the tests speak the generation APIs: a request spec written in each
// API's form, and each API's stream read back into one view, so that one
// table test covers every API. The readers are written from the APIs'
// documentation, not from the simulator's code.

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/simulator"
)

// spec is a generation request, whatever its API.
type spec struct {
	model     string   // "" for sim-model
	earlier   []string // user messages before the last, with replies between
	user      string   // the last user message
	maxTokens int      // 0: none (the Messages API, which requires one, gets 4096)
	ignoreEOS bool
	tools     []toolSpec
	choice    string // "", "none", "auto", "required" or a tool's name
	schema    string // a structured output's JSON schema, "json_object", or "" for text
	whole     bool   // not streamed (chat and completions)
}

type toolSpec struct{ name, params string }

// weatherTool's schema uses every construct the generator knows.
var weatherTool = toolSpec{name: "get_weather", params: `{"type":"object","properties":{
	"city":{"type":"string","minLength":3,"description":"where"},
	"days":{"type":"integer","minimum":1,"maximum":7},
	"unit":{"type":"string","enum":["celsius","fahrenheit"]},
	"hourly":{"type":"boolean"},
	"threshold":{"type":"number","minimum":0.5},
	"tags":{"type":"array","items":{"type":"string"},"minItems":2},
	"source":{"const":"sim"}},
	"required":["city","days"],"additionalProperties":false}`}

var lookupTool = toolSpec{name: "lookup", params: `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`}

// personSchema is a structured output's schema.
const personSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
	"email":{"type":["string","null"]},"scores":{"type":"array","items":{"type":"number"}}},"required":["name","age"],"additionalProperties":false}`

// api is how a test speaks one API.
type api struct {
	name   string
	path   string
	header map[string]string
	body   func(sp spec) map[string]any
	read   func(t *testing.T, r *result) *view
}

var (
	chatAPI        = api{name: "chat", path: "/v1/chat/completions", body: chatBody, read: readChat}
	completionsAPI = api{name: "completions", path: "/v1/completions", body: completionsBody, read: readChat}
	responsesAPI   = api{name: "responses", path: "/v1/responses", body: responsesBody, read: readResponses}
	messagesAPI    = api{name: "messages", path: "/v1/messages", body: messagesBody, read: readMessages,
		header: map[string]string{"anthropic-version": "2023-06-01", "x-api-key": "not-checked"}}
	// streamingAPIs are the APIs with reasoning, tools and structured output.
	streamingAPIs = []api{chatAPI, responsesAPI, messagesAPI}
)

func (a api) post(t *testing.T, s *testSim, sp spec) *result {
	t.Helper()
	return s.postHeaders(context.Background(), t, a.path, a.header, a.body(sp), nil)
}

// do posts sp and reads the reply, which must be a 200.
func (a api) do(t *testing.T, s *testSim, sp spec) *view {
	t.Helper()
	r := a.post(t, s, sp)
	require.Equal(t, 200, r.status, "%s: %s", a.name, r.body)
	return a.read(t, r)
}

func model(sp spec) string {
	if sp.model == "" {
		return "sim-model"
	}
	return sp.model
}

func rawJSON(t string) json.RawMessage { return json.RawMessage(t) }

func chatMessages(sp spec) []map[string]any {
	var msgs []map[string]any
	for _, e := range sp.earlier {
		msgs = append(msgs, map[string]any{"role": "user", "content": e}, map[string]any{"role": "assistant", "content": "ok"})
	}
	return append(msgs, map[string]any{"role": "user", "content": sp.user})
}

func chatBody(sp spec) map[string]any {
	b := map[string]any{"model": model(sp), "stream": !sp.whole, "messages": chatMessages(sp), "ignore_eos": sp.ignoreEOS}
	if !sp.whole {
		b["stream_options"] = map[string]any{"include_usage": true}
	}
	if sp.maxTokens > 0 {
		b["max_completion_tokens"] = sp.maxTokens
	}
	if sp.tools != nil {
		var tools []any
		for _, tl := range sp.tools {
			tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
				"name": tl.name, "description": "a tool", "parameters": rawJSON(tl.params)}})
		}
		b["tools"] = tools
	}
	switch sp.choice {
	case "":
	case "none", "auto", "required":
		b["tool_choice"] = sp.choice
	default:
		b["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": sp.choice}}
	}
	switch sp.schema {
	case "":
	case "json_object":
		b["response_format"] = map[string]any{"type": "json_object"}
	default:
		b["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{
			"name": "out", "schema": rawJSON(sp.schema), "strict": true}}
	}
	return b
}

func completionsBody(sp spec) map[string]any {
	b := map[string]any{"model": model(sp), "stream": !sp.whole, "prompt": sp.user, "ignore_eos": sp.ignoreEOS}
	if !sp.whole {
		b["stream_options"] = map[string]any{"include_usage": true}
	}
	if sp.maxTokens > 0 {
		b["max_tokens"] = sp.maxTokens
	}
	return b
}

func responsesBody(sp spec) map[string]any {
	var input []any
	for _, e := range sp.earlier {
		input = append(input, map[string]any{"role": "user", "content": e},
			map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "ok"}}})
	}
	input = append(input, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": sp.user}}})
	b := map[string]any{"model": model(sp), "stream": true, "input": input, "instructions": "Be brief.", "ignore_eos": sp.ignoreEOS}
	if sp.maxTokens > 0 {
		b["max_output_tokens"] = sp.maxTokens
	}
	if sp.tools != nil {
		var tools []any
		for _, tl := range sp.tools {
			tools = append(tools, map[string]any{"type": "function", "name": tl.name, "description": "a tool", "parameters": rawJSON(tl.params), "strict": true})
		}
		b["tools"] = tools
	}
	switch sp.choice {
	case "":
	case "none", "auto", "required":
		b["tool_choice"] = sp.choice
	default:
		b["tool_choice"] = map[string]any{"type": "function", "name": sp.choice}
	}
	switch sp.schema {
	case "":
	case "json_object":
		b["text"] = map[string]any{"format": map[string]any{"type": "json_object"}}
	default:
		b["text"] = map[string]any{"format": map[string]any{"type": "json_schema", "name": "out", "schema": rawJSON(sp.schema), "strict": true}}
	}
	return b
}

func messagesBody(sp spec) map[string]any {
	var msgs []any
	for _, e := range sp.earlier {
		msgs = append(msgs, map[string]any{"role": "user", "content": e}, map[string]any{"role": "assistant", "content": "ok"})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": sp.user}}})
	b := map[string]any{"model": model(sp), "stream": true, "messages": msgs, "system": "Be brief.", "max_tokens": 4096, "ignore_eos": sp.ignoreEOS}
	if sp.maxTokens > 0 {
		b["max_tokens"] = sp.maxTokens
	}
	if sp.tools != nil {
		var tools []any
		for _, tl := range sp.tools {
			tools = append(tools, map[string]any{"name": tl.name, "description": "a tool", "input_schema": rawJSON(tl.params)})
		}
		b["tools"] = tools
	}
	switch sp.choice {
	case "":
	case "none", "auto":
		b["tool_choice"] = map[string]any{"type": sp.choice}
	case "required":
		b["tool_choice"] = map[string]any{"type": "any"}
	default:
		b["tool_choice"] = map[string]any{"type": "tool", "name": sp.choice}
	}
	switch sp.schema {
	case "", "json_object": // the Messages API has no json_object
	default:
		b["output_config"] = map[string]any{"format": map[string]any{"type": "json_schema", "schema": rawJSON(sp.schema)}}
	}
	return b
}

// view is what a client read of one reply, in any API.
type view struct {
	reasoning, answer  string // texts as sent
	toolName, toolArgs string
	toolID             string
	// finish is normalized: stop, length or tool_calls.
	finish                                         string
	prompt, completion, reasoningTokens, cached    int
	hasUsage                                       bool
	timings                                        *simulator.Timings
	model, fingerprint                             string
	done                                           bool   // the stream's end arrived ([DONE], response.completed/incomplete, message_stop)
	failed                                         string // an in-stream error's message
	failedType                                     string
	malformed                                      int // events that are not valid JSON
	tokens                                         []token
	sequenceOK                                     bool // Responses: sequence numbers 0, 1, 2, ...
	reasoningEvents, answerEvents, toolArgsEvents  int
	messageStarted, pings, signatures, blockStarts int // Messages
}

// token is one event carrying generated text: 'r'easoning, 'a'nswer text,
// 't'ool-call arguments.
type token struct {
	kind byte
	at   time.Time
}

func (v *view) add(kind byte, at time.Time, text string) {
	v.tokens = append(v.tokens, token{kind, at})
	switch kind {
	case 'r':
		v.reasoning += text
		v.reasoningEvents++
	case 'a':
		v.answer += text
		v.answerEvents++
	case 't':
		v.toolArgs += text
		v.toolArgsEvents++
	}
}

// kinds returns the kinds of the token events in order, runs collapsed:
// "ra" is reasoning then answer.
func (v *view) kinds() string {
	var b []byte
	for _, tk := range v.tokens {
		if len(b) == 0 || b[len(b)-1] != tk.kind {
			b = append(b, tk.kind)
		}
	}
	return string(b)
}

// chatDelta is a chat chunk's delta, or a whole reply's message.
type chatDelta struct {
	Content          *string `json:"content"`
	ReasoningContent string  `json:"reasoning_content"`
	ToolCalls        []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func readChat(t *testing.T, r *result) *view {
	t.Helper()
	v := &view{}
	payloads := []event{{data: string(r.body)}}
	if r.body == nil {
		payloads = r.events
	}
	for _, e := range payloads {
		if e.data == "[DONE]" {
			v.done = true
			continue
		}
		var c struct {
			Model             string `json:"model"`
			SystemFingerprint string `json:"system_fingerprint"`
			Error             *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
			Choices []struct {
				Delta        chatDelta `json:"delta"`
				Message      chatDelta `json:"message"`
				Text         string    `json:"text"`
				FinishReason *string   `json:"finish_reason"`
			} `json:"choices"`
			Usage   *simulator.Usage   `json:"usage"`
			Timings *simulator.Timings `json:"timings"`
		}
		if json.Unmarshal([]byte(e.data), &c) != nil {
			v.malformed++
			continue
		}
		if c.Error != nil {
			v.failed, v.failedType = c.Error.Message, c.Error.Type
			continue
		}
		v.model, v.fingerprint = c.Model, c.SystemFingerprint
		for _, ch := range c.Choices {
			for _, d := range []chatDelta{ch.Delta, ch.Message} {
				if d.ReasoningContent != "" {
					v.add('r', e.at, d.ReasoningContent)
				}
				if d.Content != nil && *d.Content != "" {
					v.add('a', e.at, *d.Content)
				}
				for _, tc := range d.ToolCalls {
					if r.body == nil {
						require.NotNil(t, tc.Index, "every tool call delta has its index")
					}
					if tc.ID != "" {
						require.Equal(t, "function", tc.Type)
						v.toolID, v.toolName = tc.ID, tc.Function.Name
					}
					v.add('t', e.at, tc.Function.Arguments)
				}
			}
			if ch.Text != "" {
				v.add('a', e.at, ch.Text)
			}
			if ch.FinishReason != nil {
				v.finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			v.hasUsage = true
			v.prompt, v.completion, v.cached = c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.PromptTokensDetails.CachedTokens
			v.reasoningTokens = c.Usage.CompletionTokensDetails.ReasoningTokens
		}
		if c.Timings != nil {
			v.timings = c.Timings
		}
	}
	return v
}

func readResponses(t *testing.T, r *result) *view {
	t.Helper()
	v := &view{sequenceOK: true}
	seq := 0
	for _, e := range r.events {
		var ev struct {
			Type           string `json:"type"`
			SequenceNumber *int   `json:"sequence_number"`
			Delta          string `json:"delta"`
			Item           *struct {
				Type   string `json:"type"`
				Name   string `json:"name"`
				CallID string `json:"call_id"`
			} `json:"item"`
			Response *struct {
				Status string `json:"status"`
				Model  string `json:"model"`
				Error  *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
				IncompleteDetails *struct {
					Reason string `json:"reason"`
				} `json:"incomplete_details"`
				Output []struct {
					Type string `json:"type"`
				} `json:"output"`
				Usage *struct {
					InputTokens        int `json:"input_tokens"`
					InputTokensDetails struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"input_tokens_details"`
					OutputTokens        int `json:"output_tokens"`
					OutputTokensDetails struct {
						ReasoningTokens int `json:"reasoning_tokens"`
					} `json:"output_tokens_details"`
					TotalTokens int `json:"total_tokens"`
				} `json:"usage"`
			} `json:"response"`
			Timings *simulator.Timings `json:"timings"`
		}
		if json.Unmarshal([]byte(e.data), &ev) != nil {
			v.malformed++
			continue
		}
		if ev.SequenceNumber == nil || *ev.SequenceNumber != seq {
			v.sequenceOK = false
		}
		seq++
		switch ev.Type {
		case "response.reasoning_text.delta":
			v.add('r', e.at, ev.Delta)
		case "response.output_text.delta":
			v.add('a', e.at, ev.Delta)
		case "response.function_call_arguments.delta":
			v.add('t', e.at, ev.Delta)
		case "response.output_item.added":
			if ev.Item.Type == "function_call" {
				v.toolName, v.toolID = ev.Item.Name, ev.Item.CallID
			}
		case "response.completed", "response.incomplete":
			v.done, v.model, v.timings = true, ev.Response.Model, ev.Timings
			v.finish = "stop"
			for _, o := range ev.Response.Output {
				if o.Type == "function_call" {
					v.finish = "tool_calls"
				}
			}
			if ev.Response.Status == "incomplete" {
				require.Equal(t, "max_output_tokens", ev.Response.IncompleteDetails.Reason)
				v.finish = "length"
			}
			if u := ev.Response.Usage; u != nil {
				v.hasUsage = true
				v.prompt, v.completion, v.cached = u.InputTokens, u.OutputTokens, u.InputTokensDetails.CachedTokens
				v.reasoningTokens = u.OutputTokensDetails.ReasoningTokens
				require.Equal(t, u.InputTokens+u.OutputTokens, u.TotalTokens)
			}
		case "response.failed":
			v.failed, v.failedType = ev.Response.Error.Message, ev.Response.Error.Code
		}
	}
	return v
}

func readMessages(t *testing.T, r *result) *view {
	t.Helper()
	v := &view{}
	type usage struct {
		InputTokens              int `json:"input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		OutputTokens             int `json:"output_tokens"`
	}
	for _, e := range r.events {
		var ev struct {
			Type    string `json:"type"`
			Message *struct {
				Model string `json:"model"`
				Usage usage  `json:"usage"`
			} `json:"message"`
			ContentBlock *struct {
				Type string `json:"type"`
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"content_block"`
			Delta *struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage *usage `json:"usage"`
			Error *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
			Timings *simulator.Timings `json:"timings"`
		}
		if json.Unmarshal([]byte(e.data), &ev) != nil {
			v.malformed++
			continue
		}
		switch ev.Type {
		case "message_start":
			v.messageStarted++
			v.model = ev.Message.Model
			u := ev.Message.Usage
			v.prompt, v.cached = u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens, u.CacheReadInputTokens
		case "content_block_start":
			v.blockStarts++
			if ev.ContentBlock.Type == "tool_use" {
				v.toolName, v.toolID = ev.ContentBlock.Name, ev.ContentBlock.ID
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "thinking_delta":
				v.add('r', e.at, ev.Delta.Thinking)
			case "text_delta":
				v.add('a', e.at, ev.Delta.Text)
			case "input_json_delta":
				v.add('t', e.at, ev.Delta.PartialJSON)
			case "signature_delta":
				v.signatures++
			}
		case "message_delta":
			v.finish = map[string]string{"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}[ev.Delta.StopReason]
			v.hasUsage, v.completion, v.timings = true, ev.Usage.OutputTokens, ev.Timings
			require.Equal(t, v.prompt, ev.Usage.InputTokens+ev.Usage.CacheReadInputTokens+ev.Usage.CacheCreationInputTokens)
		case "message_stop":
			v.done = true
		case "ping":
			v.pings++
		case "error":
			v.failed, v.failedType = ev.Error.Message, ev.Error.Type
		}
	}
	// Anthropic does not count thinking apart: the test counts its deltas.
	v.reasoningTokens = v.reasoningEvents
	return v
}

// compiled holds the compiled schemas by their text: compiling is most of
// the cost of a validation.
var compiled sync.Map // string → *jsonschema.Schema

// validates reports whether doc satisfies schema, by a real JSON schema
// validator.
func validates(t *testing.T, schema, doc string) error {
	t.Helper()
	sch, ok := compiled.Load(schema)
	if !ok {
		s, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
		require.NoError(t, err)
		c := jsonschema.NewCompiler()
		require.NoError(t, c.AddResource("schema.json", s))
		cs, err := c.Compile("schema.json")
		require.NoError(t, err)
		sch, _ = compiled.LoadOrStore(schema, cs)
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return err
	}
	return sch.(*jsonschema.Schema).Validate(v)
}
