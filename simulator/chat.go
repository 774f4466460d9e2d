package simulator

// The chat and completions replies: vLLM's and OpenAI's chunk forms, with
// reasoning in delta.reasoning_content (vLLM's and DeepSeek's field) and
// tool calls in delta.tool_calls.

import (
	"strconv"
)

// chatEncoder writes chat and completions streams. A token chunk is
// written by appending to a prefix built once per reply, without
// encoding/json: these streams are what `sloprober bench` drives by the
// thousand.
type chatEncoder struct {
	rp   *reply
	chat bool
	// prefix is `data: {"id":..,"object":..,"created":..,"model":..,"system_fingerprint":..`.
	prefix string
}

func newChatEncoder(rp *reply) *chatEncoder {
	e := &chatEncoder{rp: rp, chat: rp.api == apiChat}
	e.prefix = `data: {"id":"` + rp.chatID() + `","object":"` + e.object() + `","created":` +
		strconv.FormatInt(rp.created, 10) + `,"model":` + rp.ident.modelJSON +
		`,"system_fingerprint":` + rp.ident.fingerprintJSON
	return e
}

func (rp *reply) chatID() string {
	if rp.api == apiChat {
		return "chatcmpl-sim-" + strconv.FormatUint(rp.id, 10)
	}
	return "cmpl-sim-" + strconv.FormatUint(rp.id, 10)
}

// callID is the id of a reply's tool call, in every API's form of it.
func (rp *reply) callID() string { return "call_sim_" + strconv.FormatUint(rp.id, 10) }

func (e *chatEncoder) object() string {
	if e.chat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

// The closing of a token chunk, by what the delta holds.
const (
	chunkOpen      = `,"choices":[{"index":0,`
	chunkClose     = `,"logprobs":null,"finish_reason":null}]}` + "\n\n"
	textClose      = `"}` + chunkClose
	toolCallsClose = `"}}]}` + chunkClose
)

func (e *chatEncoder) start(b []byte) []byte {
	if !e.chat {
		return b
	}
	return append(append(b, e.prefix...), chunkOpen+`"delta":{"role":"assistant","content":""}`+chunkClose...)
}

// token writes one chunk per token. A tool call's first chunk carries its
// index, id, type and name with the first piece of its arguments; the
// others carry the index and a piece of the arguments.
func (e *chatEncoder) token(b []byte, i int) []byte {
	rp := e.rp
	b = rp.appendStamp(append(b, e.prefix...))
	seg, text := rp.piece(i)
	switch {
	case !e.chat:
		b = append(b, chunkOpen+`"text":"`...)
		b = appendEscaped(b, text)
		return append(b, `"`+chunkClose...)
	case seg == segReasoning:
		b = append(b, chunkOpen+`"delta":{"reasoning_content":"`...)
	case seg == segText:
		b = append(b, chunkOpen+`"delta":{"content":"`...)
	case i == rp.out.reasoning+1:
		b = append(b, chunkOpen+`"delta":{"tool_calls":[{"index":0,"id":"`...)
		b = append(b, rp.callID()...)
		b = append(b, `","type":"function","function":{"name":`...)
		b = appendJSONString(b, rp.out.call)
		b = append(b, `,"arguments":"`...)
		b = appendEscaped(b, text)
		return append(b, toolCallsClose...)
	default:
		b = append(b, chunkOpen+`"delta":{"tool_calls":[{"index":0,"function":{"arguments":"`...)
		b = appendEscaped(b, text)
		return append(b, toolCallsClose...)
	}
	b = appendEscaped(b, text)
	return append(b, textClose...)
}

// malformed is a chunk cut off inside a string: not valid JSON.
func (e *chatEncoder) malformed(b []byte) []byte {
	return append(b, `data: {"id":"`+e.rp.chatID()+`","choices":[{"index":0,"delta":{"content":"`+"\n\n"...)
}

// fail is vLLM's in-stream error: a chunk holding only an error object,
// then [DONE] (unless the stream also lost its [DONE]).
func (e *chatEncoder) fail(b []byte) []byte {
	b = append(b, `data: {"error":{"message":"injected fault: stream error","type":"server_error","param":null,"code":500}}`+"\n\n"...)
	if !e.rp.plan.noDone {
		b = append(b, "data: [DONE]\n\n"...)
	}
	return b
}

// end writes a chunk with an empty delta and the finish reason, a
// usage-only chunk (empty choices) when stream_options.include_usage asks,
// then [DONE]. The last chunk before [DONE] carries the timings.
func (e *chatEncoder) end(b []byte, ph phases, t *Timings, done bool) []byte {
	rp := e.rp
	reason := chatFinish(rp.out.finish)
	fin := e.chunk()
	fin.Choices = []choice{{FinishReason: &reason}}
	if e.chat {
		fin.Choices[0].Delta = &delta{}
	} else {
		fin.Choices[0].Text = new(string)
	}
	if rp.req.usage {
		b = appendData(b, fin)
		u := e.chunk()
		u.Choices, u.Usage, u.Timings = []choice{}, newUsage(rp.prompt.tokens, rp.out.n, ph.cached, rp.out.reasoning), t
		b = appendData(b, u)
	} else {
		fin.Timings = t
		b = appendData(b, fin)
	}
	if done {
		b = append(b, "data: [DONE]\n\n"...)
	}
	return b
}

func (e *chatEncoder) chunk() *chunk {
	rp := e.rp
	return &chunk{ID: rp.chatID(), Object: e.object(), Created: rp.created, Model: rp.ident.Model,
		SystemFingerprint: rp.ident.Fingerprint}
}

// whole is a non-streaming reply: the message (reasoning_content, content,
// or tool_calls with content null) or the text, usage and timings.
func (e *chatEncoder) whole(ph phases, t *Timings) *chunk {
	rp := e.rp
	reasoning, answer := rp.texts()
	reason := chatFinish(rp.out.finish)
	c := choice{FinishReason: &reason}
	switch {
	case !e.chat:
		c.Text = &answer
	case rp.out.kind == kindToolCall:
		c.Message = &message{Role: "assistant", ReasoningContent: reasoning, ToolCalls: []toolCallJSON{{
			ID: rp.callID(), Type: "function", Function: functionJSON{Name: rp.out.call, Arguments: answer},
		}}}
	default:
		c.Message = &message{Role: "assistant", Content: &answer, ReasoningContent: reasoning}
	}
	w := e.chunk()
	w.Object = "text_completion"
	if e.chat {
		w.Object = "chat.completion"
	}
	w.Choices, w.Timings = []choice{c}, t
	w.Usage = newUsage(rp.prompt.tokens, rp.out.n, ph.cached, rp.out.reasoning)
	return w
}

func chatFinish(f finish) string {
	switch f {
	case finishLength:
		return "length"
	case finishToolCalls:
		return "tool_calls"
	}
	return "stop"
}

// chunk is a completion object, streamed or whole.
type chunk struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []choice `json:"choices"`
	Usage             *Usage   `json:"usage,omitempty"`
	Timings           *Timings `json:"timings,omitempty"`
}

type choice struct {
	Index        int      `json:"index"`
	Delta        *delta   `json:"delta,omitempty"`
	Message      *message `json:"message,omitempty"`
	Text         *string  `json:"text,omitempty"`
	Logprobs     any      `json:"logprobs"`
	FinishReason *string  `json:"finish_reason"`
}

type delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// message is a whole reply's message; content is null when it is a tool call.
type message struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
}

type toolCallJSON struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionJSON `json:"function"`
}

type functionJSON struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage is the OpenAI usage object of chat and completions. Reasoning
// tokens are part of the completion tokens, as OpenAI counts them.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func newUsage(prompt, completion, cached, reasoning int) *Usage {
	u := &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	u.PromptTokensDetails.CachedTokens = cached
	u.CompletionTokensDetails.ReasoningTokens = reasoning
	return u
}
