package simulator_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/simulator"
)

// quickSim answers at once, with fixed-length replies and reasoning.
const quickSim = fastSim + `
output_tokens: {distribution: fixed, value: 7}
`

// TestReasoningThenAnswer: reasoning tokens come first, each in its own
// event, then the answer; usage counts both, reasoning apart; the limit
// covers both, so a small one leaves no room for the answer.
func TestReasoningThenAnswer(t *testing.T) {
	s := startSim(t, quickSim+"reasoning_tokens: {distribution: fixed, value: 5}\n")
	for _, a := range streamingAPIs {
		for _, tc := range []struct {
			name                       string
			limit                      int
			reasoning, answer          int
			finish, kinds              string
			completedAnswer, unlimited bool
		}{
			{name: "no limit", reasoning: 5, answer: 7, finish: "stop", kinds: "ra"},
			{name: "limit cuts the answer", limit: 9, reasoning: 5, answer: 4, finish: "length", kinds: "ra"},
			{name: "reasoning takes the limit", limit: 3, reasoning: 3, answer: 0, finish: "length", kinds: "r"},
		} {
			t.Run(a.name+"/"+tc.name, func(t *testing.T) {
				v := a.do(t, s, spec{user: "Why is the sky blue?", maxTokens: tc.limit})
				require.Equal(t, tc.kinds, v.kinds(), "reasoning first, then the answer")
				require.Equal(t, tc.reasoning, v.reasoningEvents, "one event per reasoning token")
				require.Equal(t, tc.answer, v.answerEvents, "one event per answer token")
				require.Len(t, v.reasoning, 4*tc.reasoning, "every token is chars_per_token characters")
				require.Equal(t, tc.finish, v.finish)
				require.True(t, v.done)
				require.True(t, v.hasUsage)
				require.Equal(t, tc.reasoning+tc.answer, v.completion, "reasoning counts as output")
				require.Equal(t, tc.reasoning, v.reasoningTokens)
				require.Equal(t, map[string]int{"chat": 5, "responses": 5 + 3, "messages": 5 + 3}[a.name], v.prompt,
					"with the instructions or system prompt, 3 tokens")
				require.Equal(t, tc.reasoning+tc.answer, v.timings.PredictedN)
				if a.name == "responses" {
					require.True(t, v.sequenceOK)
				}
				if a.name == "messages" {
					require.Equal(t, 1, v.messageStarted)
					require.Equal(t, 1, v.pings, "a ping after the first content_block_start")
					require.Equal(t, 1, v.signatures, "a thinking block ends with its signature")
				}
			})
		}
	}
	// Chat replies carry reasoning whole too; completions have no field for it.
	v := chatAPI.do(t, s, spec{user: "hi", whole: true})
	require.Len(t, v.reasoning, 5*4)
	require.Len(t, v.answer, 7*4)
	require.Equal(t, 5, v.reasoningTokens)
	v = completionsAPI.do(t, s, spec{user: "hi"})
	require.Empty(t, v.reasoning)
	require.Equal(t, 7, v.completion)
	require.Zero(t, v.reasoningTokens)

	st := s.Stats().Quality
	for _, a := range streamingAPIs {
		replies := int64(3 + b2i(a.name == "chat")) // and the whole one
		require.Equal(t, replies, st[a.name].Reasoning, a.name)
		require.Equal(t, 5+5+3+5*(replies-3), st[a.name].ReasoningTokens, a.name)
	}
	require.Zero(t, st["completions"].Reasoning)
}

// TestToolCalls: with tools and a tool choice that allows one, the reply is
// a tool call whose arguments arrive in token-sized pieces and satisfy the
// tool's schema; the choice picks the tool, "none" turns them off.
func TestToolCalls(t *testing.T) {
	s := startSim(t, quickSim+"reasoning_tokens: {distribution: fixed, value: 2}\n")
	tools := []toolSpec{weatherTool, lookupTool}
	for _, a := range streamingAPIs {
		for _, tc := range []struct {
			choice, want string
		}{
			{"", weatherTool.name}, {"auto", weatherTool.name}, {"required", weatherTool.name},
			{lookupTool.name, lookupTool.name}, {"none", ""},
		} {
			t.Run(fmt.Sprint(a.name, "/", tc.choice), func(t *testing.T) {
				v := a.do(t, s, spec{user: "What is the weather in Paris?", tools: tools, choice: tc.choice})
				if tc.want == "" {
					require.Equal(t, "ra", v.kinds())
					require.Empty(t, v.toolName)
					require.Equal(t, "stop", v.finish)
					return
				}
				require.Equal(t, "rt", v.kinds(), "reasoning, then only the call")
				require.Equal(t, tc.want, v.toolName)
				require.NotEmpty(t, v.toolID)
				require.Equal(t, "tool_calls", v.finish)
				params := weatherTool.params
				if tc.want == lookupTool.name {
					params = lookupTool.params
				}
				require.NoError(t, validates(t, params, v.toolArgs), "arguments %s", v.toolArgs)
				require.Equal(t, (len(v.toolArgs)+3)/4, v.toolArgsEvents, "the arguments come in pieces of chars_per_token")
				require.Equal(t, v.toolArgsEvents+2, v.completion, "a piece is a token")
				require.True(t, v.done)
			})
		}
	}
	// A whole chat reply: tool_calls, content null.
	r := chatAPI.post(t, s, spec{user: "x", tools: tools, whole: true})
	require.Equal(t, `null`, field(t, string(r.body), "choices", 0, "message", "content"))
	require.Equal(t, `"tool_calls"`, field(t, string(r.body), "choices", 0, "finish_reason"))
	v := chatAPI.read(t, r)
	require.Equal(t, weatherTool.name, v.toolName)
	require.NoError(t, validates(t, weatherTool.params, v.toolArgs))

	// A limit that cuts the arguments leaves them invalid and counts them cut.
	v = chatAPI.do(t, s, spec{user: "x", tools: tools, maxTokens: 6})
	require.Equal(t, "length", v.finish)
	require.False(t, json.Valid([]byte(v.toolArgs)))
	q := s.Stats().Quality["chat"]
	require.Equal(t, int64(6), q.ToolCalls)
	require.Equal(t, int64(1), q.ToolCallsCut)
	require.Equal(t, int64(1), q.ToolCallsWrong)
}

// TestStructuredOutput: a json_schema format gives a document that
// satisfies the schema, json_object an object; with invalid_json_rate 1,
// replies alternate between truncated JSON and JSON without a required
// property, and the stats count each kind.
func TestStructuredOutput(t *testing.T) {
	s := startSim(t, quickSim)
	for _, a := range streamingAPIs {
		t.Run(a.name, func(t *testing.T) {
			v := a.do(t, s, spec{user: "Describe someone.", schema: personSchema})
			require.NoError(t, validates(t, personSchema, v.answer), "document %s", v.answer)
			require.Greater(t, v.answerEvents, 5, "the document comes in several pieces")
			require.Equal(t, v.answerEvents, v.completion)
			require.Equal(t, "stop", v.finish)
			if a.name != "messages" {
				v = a.do(t, s, spec{user: "json please", schema: "json_object"})
				var obj map[string]any
				require.NoError(t, json.Unmarshal([]byte(v.answer), &obj), v.answer)
			}
		})
	}
	v := chatAPI.do(t, s, spec{user: "whole", schema: personSchema, whole: true})
	require.NoError(t, validates(t, personSchema, v.answer))

	s = startSim(t, quickSim+"faults: {invalid_json_rate: 1}\n")
	for _, a := range streamingAPIs {
		t.Run(a.name+"/invalid", func(t *testing.T) {
			for i, kind := range []string{"truncated", "missing field", "truncated", "missing field"} {
				v := a.do(t, s, spec{user: "Describe someone.", schema: personSchema})
				require.Equal(t, "stop", v.finish, "an invalid document still ends as if whole")
				switch kind {
				case "truncated":
					require.False(t, json.Valid([]byte(v.answer)), "%d: %s", i, v.answer)
				default:
					require.True(t, json.Valid([]byte(v.answer)), "%d: %s", i, v.answer)
					require.ErrorContains(t, validates(t, personSchema, v.answer), "missing property", "%d", i)
				}
			}
		})
	}
	q := s.Stats().Quality
	for _, a := range streamingAPIs {
		require.Equal(t, simulator.QualityStats{Replies: 4, Structured: 4, StructuredInvalid: 4, JSONTruncated: 2, JSONMissingField: 2},
			q[a.name], a.name)
	}
}

// TestKnownAnswers: a question in the last user message gets its decimal
// answer; wrong_answer_rate 1 makes it off by 1 to 10; with ignore_eos the
// answer comes first and filler follows; questions in earlier messages do
// not count.
func TestKnownAnswers(t *testing.T) {
	s := startSim(t, quickSim)
	apis := append([]api{completionsAPI}, streamingAPIs...)
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			v := a.do(t, s, spec{user: "Some filler first. What is 123456 * -789?"})
			require.Equal(t, "-97406784", v.answer)
			require.Equal(t, "stop", v.finish)
			require.Equal(t, 3, v.completion, "-974 0678 4: three tokens")

			v = a.do(t, s, spec{user: "What is 999999999 + 1?", maxTokens: 10, ignoreEOS: true})
			require.True(t, strings.HasPrefix(v.answer, "1000000000 "), v.answer)
			require.Len(t, v.answer, len("1000000000 ")+7*4, "1000 0000 \"00 \", then filler up to the limit")
			require.Equal(t, 10, v.completion)
			require.Equal(t, "length", v.finish)

			v = a.do(t, s, spec{user: "What is 999999999 + 1?", maxTokens: 2})
			require.Equal(t, "10000000", v.answer, "cut by the limit")
			require.Equal(t, "length", v.finish)

			if a.name != "completions" {
				v = a.do(t, s, spec{earlier: []string{"What is 1 + 1?"}, user: "Now: What is 6 - 8?"})
				require.Equal(t, "-2", v.answer, "only the last user message counts")
				v = a.do(t, s, spec{earlier: []string{"What is 1 + 1?"}, user: "Tell me a story."})
				require.Len(t, v.answer, 7*4, "no question in the last message: filler")
			}
		})
	}
	q := s.Stats().Quality
	for _, a := range apis {
		want := simulator.QualityStats{Replies: 5, Questions: 4, AnswersWrong: 1, AnswersCut: 1}
		if a.name == "completions" {
			want = simulator.QualityStats{Replies: 3, Questions: 3, AnswersWrong: 1, AnswersCut: 1}
		}
		require.Equal(t, want, q[a.name], a.name)
	}

	s = startSim(t, quickSim+"faults: {wrong_answer_rate: 1}\n")
	for _, a := range apis {
		for i := range 10 {
			v := a.do(t, s, spec{user: fmt.Sprintf("What is %d + 100?", i)})
			got, err := strconv.Atoi(v.answer)
			require.NoError(t, err, v.answer)
			off := got - (i + 100)
			require.NotZero(t, off)
			require.LessOrEqual(t, max(off, -off), 10)
		}
		require.Equal(t, simulator.QualityStats{Replies: 10, Questions: 10, AnswersWrong: 10, WrongAnswer: 10}, s.Stats().Quality[a.name])
	}
}

// TestWrongTools: with wrong_tool_rate 1, tool calls alternate between a
// name not among the tools and arguments without a required property.
func TestWrongTools(t *testing.T) {
	s := startSim(t, quickSim+"faults: {wrong_tool_rate: 1}\n")
	tools := []toolSpec{weatherTool, lookupTool}
	for _, a := range streamingAPIs {
		t.Run(a.name, func(t *testing.T) {
			for i := range 4 {
				v := a.do(t, s, spec{user: "weather?", tools: tools})
				require.Equal(t, "tool_calls", v.finish)
				if i%2 == 0 {
					require.NotContains(t, []string{weatherTool.name, lookupTool.name}, v.toolName, "%d", i)
					require.NoError(t, validates(t, weatherTool.params, v.toolArgs), "the arguments are right")
				} else {
					require.Equal(t, weatherTool.name, v.toolName, "%d", i)
					require.ErrorContains(t, validates(t, weatherTool.params, v.toolArgs), "missing property", "%d", i)
				}
			}
		})
	}
	for _, a := range streamingAPIs {
		require.Equal(t, simulator.QualityStats{Replies: 4, ToolCalls: 4, ToolCallsWrong: 4, WrongToolName: 2, MissingArgument: 2},
			s.Stats().Quality[a.name], a.name)
	}
}

// TestContentFaultRates: over a few hundred replies of every API each
// content fault happens at its rate, and the simulator counts exactly what
// clients saw.
func TestContentFaultRates(t *testing.T) {
	const rate = 0.25
	s := startSim(t, quickSim+fmt.Sprintf("faults: {wrong_tool_rate: %g, invalid_json_rate: %g, wrong_answer_rate: %g}\n", rate, rate, rate))
	const perKind = 150
	var mu sync.Mutex
	wrong := map[string]int{}
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				a := streamingAPIs[i%3]
				var bad bool
				var kind string
				switch i % 9 / 3 {
				case 0:
					kind = "answer"
					v := a.do(t, s, spec{user: fmt.Sprintf("What is %d * 3?", i)})
					bad = v.answer != strconv.Itoa(3*i)
				case 1:
					kind = "json"
					v := a.do(t, s, spec{user: "someone", schema: personSchema})
					bad = validates(t, personSchema, v.answer) != nil
				default:
					kind = "tool"
					v := a.do(t, s, spec{user: "weather", tools: []toolSpec{weatherTool}})
					bad = v.toolName != weatherTool.name || validates(t, weatherTool.params, v.toolArgs) != nil
				}
				mu.Lock()
				wrong[kind] += int(b2i(bad))
				mu.Unlock()
			}
		})
	}
	for i := range 3 * perKind {
		work <- i
	}
	close(work)
	wg.Wait()
	requireBinomial(t, "wrong answers", wrong["answer"], perKind, rate)
	requireBinomial(t, "invalid documents", wrong["json"], perKind, rate)
	requireBinomial(t, "wrong tool calls", wrong["tool"], perKind, rate)
	var answers, docs, calls int64
	for _, q := range s.Stats().Quality {
		answers += q.AnswersWrong
		docs += q.StructuredInvalid
		calls += q.ToolCallsWrong
	}
	require.Equal(t, int64(wrong["answer"]), answers)
	require.Equal(t, int64(wrong["json"]), docs)
	require.Equal(t, int64(wrong["tool"]), calls)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestGenerationBadRequests: each API refuses what it cannot do in its own
// error form, naming what failed.
func TestGenerationBadRequests(t *testing.T) {
	s := startSim(t, quickSim+"max_model_len: 100\n")
	unsupported := toolSpec{name: "f", params: `{"type":"object","properties":{"d":{"type":"string","format":"date"}}}`}
	for _, tc := range []struct {
		api    api
		sp     spec
		edit   func(b map[string]any)
		header map[string]string
		status int
		msg    string
	}{
		{api: chatAPI, sp: spec{user: "x", tools: []toolSpec{weatherTool}, choice: "nope"}, status: 400, msg: `tool_choice names the tool "nope", which is not among the request's tools`},
		{api: chatAPI, sp: spec{user: "x", choice: "required"}, status: 400, msg: `tool_choice is "required" but the request has no tools`},
		{api: chatAPI, sp: spec{user: "x", tools: []toolSpec{unsupported}}, status: 400, msg: `tools[0].function.parameters: $.properties.d: the keyword "format" is not supported`},
		{api: chatAPI, sp: spec{user: "x", schema: `{"type":"array","items":{"type":"string"}}`}, status: 400, msg: "response_format.json_schema.schema: $: the root of the schema must be an object"},
		{api: chatAPI, sp: spec{user: "x"}, edit: func(b map[string]any) { b["response_format"] = map[string]any{"type": "yaml"} }, status: 400, msg: `response_format.type must be text, json_object or json_schema, got "yaml"`},
		{api: chatAPI, sp: spec{user: "x"}, edit: func(b map[string]any) { b["tools"] = []any{map[string]any{"type": "web_search"}} }, status: 400, msg: `tools[0].type must be "function", got "web_search"`},
		{api: responsesAPI, sp: spec{user: "x"}, edit: func(b map[string]any) { b["stream"] = false }, status: 400, msg: `the simulator's /v1/responses only streams: set "stream": true`},
		{api: responsesAPI, sp: spec{user: "x"}, edit: func(b map[string]any) { delete(b, "input") }, status: 400, msg: "'input' is a required property"},
		{api: responsesAPI, sp: spec{user: "x"}, edit: func(b map[string]any) { b["input"] = []any{map[string]any{"type": "image"}} }, status: 400, msg: `input[0].type "image" is not supported`},
		{api: responsesAPI, sp: spec{user: "x", tools: []toolSpec{unsupported}}, status: 400, msg: `tools[0].parameters: $.properties.d: the keyword "format" is not supported`},
		{api: responsesAPI, sp: spec{user: "x", maxTokens: 101}, status: 400, msg: "maximum context length is 100 tokens"},
		{api: responsesAPI, sp: spec{user: "x", model: "gpt-9"}, status: 404, msg: "The model `gpt-9` does not exist."},
		{api: messagesAPI, sp: spec{user: "x"}, header: map[string]string{}, status: 400, msg: "anthropic-version: header is required"},
		{api: messagesAPI, sp: spec{user: "x"}, edit: func(b map[string]any) { delete(b, "max_tokens") }, status: 400, msg: "max_tokens: Field required"},
		{api: messagesAPI, sp: spec{user: "x"}, edit: func(b map[string]any) { b["stream"] = false }, status: 400, msg: `the simulator's /v1/messages only streams: set "stream": true`},
		{api: messagesAPI, sp: spec{user: "x"}, edit: func(b map[string]any) { b["messages"] = []any{map[string]any{"role": "system", "content": "x"}} }, status: 400, msg: "messages.0.role: Input should be 'user' or 'assistant'"},
		{api: messagesAPI, sp: spec{user: "x", tools: []toolSpec{unsupported}}, status: 400, msg: `tools.0.input_schema: $.properties.d: the keyword "format" is not supported`},
		{api: messagesAPI, sp: spec{user: "x", maxTokens: 200}, status: 400, msg: "prompt is too long"},
		{api: messagesAPI, sp: spec{user: "x", model: "claude-9"}, status: 404, msg: "model: claude-9"},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			b := tc.api.body(tc.sp)
			if tc.edit != nil {
				tc.edit(b)
			}
			header := tc.api.header
			if tc.header != nil {
				header = tc.header
			}
			r := s.postHeaders(t.Context(), t, tc.api.path, header, b, nil)
			require.Equal(t, tc.status, r.status, string(r.body))
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(r.body, &e), string(r.body))
			require.Contains(t, e.Error.Message, tc.msg)
			if tc.api.name == "messages" {
				require.Equal(t, "error", e.Type, "Anthropic's error object")
				want := map[int]string{400: "invalid_request_error", 404: "not_found_error"}[tc.status]
				require.Equal(t, want, e.Error.Type)
			} else {
				require.Equal(t, tc.status, e.Error.Code, "OpenAI's error object")
			}
		})
	}
}

// TestIdentity: chat chunks carry a system_fingerprint derived from the
// model; PUT /sim/identity changes the model name, fingerprint and header
// replies carry, one key at a time, while requests naming the configured
// model are still served.
func TestIdentity(t *testing.T) {
	s := startSim(t, quickSim+"identity_header: {name: x-model-version, value: \"1\"}\n")
	r := chatAPI.post(t, s, spec{user: "hi"})
	v := chatAPI.read(t, r)
	require.Regexp(t, `^fp_[0-9a-f]{10}$`, v.fingerprint)
	require.Equal(t, "sim-model", v.model)
	require.Equal(t, "1", r.header.Get("x-model-version"))
	def := v.fingerprint
	require.Equal(t, def, chatAPI.do(t, startSim(t, quickSim), spec{user: "hi"}).fingerprint, "the same for the same model")
	require.Equal(t, "fp_custom", chatAPI.do(t, startSim(t, quickSim+"fingerprint: fp_custom\n"), spec{user: "hi"}).fingerprint)

	put := func(body string) (int, string) {
		req, err := http.NewRequest(http.MethodPut, s.url+"/sim/identity", strings.NewReader(body))
		require.NoError(t, err)
		resp, err := s.client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, _ := put(`{"model": "sim-model-2025-06", "header": {"name": "x-model-version", "value": "2"}}`)
	require.Equal(t, http.StatusOK, code)
	for _, a := range []api{chatAPI, completionsAPI, responsesAPI, messagesAPI} {
		r := a.post(t, s, spec{user: "hi"})
		require.Equal(t, http.StatusOK, r.status, "%s: the configured name is still served", a.name)
		require.Equal(t, "sim-model-2025-06", a.read(t, r).model, a.name)
		require.Equal(t, "2", r.header.Get("x-model-version"), a.name)
		require.Equal(t, http.StatusOK, a.post(t, s, spec{user: "hi", model: "sim-model-2025-06"}).status, "%s: so is the new one", a.name)
	}
	require.Equal(t, def, chatAPI.do(t, s, spec{user: "hi"}).fingerprint, "keys not given are kept")

	code, _ = put("fingerprint: fp_drifted\n")
	require.Equal(t, http.StatusOK, code)
	v = chatAPI.do(t, s, spec{user: "hi"})
	require.Equal(t, "fp_drifted", v.fingerprint)
	require.Equal(t, "sim-model-2025-06", v.model)
	require.Equal(t, simulator.Identity{Model: "sim-model-2025-06", Fingerprint: "fp_drifted",
		Header: &simulator.HeaderConfig{Name: "x-model-version", Value: "2"}}, s.Identity())

	for _, bad := range []string{`{"model": ""}`, `{"header": {"name": "bad name", "value": "x"}}`, `{"modle": "x"}`} {
		code, _ = put(bad)
		require.Equal(t, http.StatusBadRequest, code, bad)
	}
	require.Equal(t, "fp_drifted", s.Identity().Fingerprint, "a rejected change changes nothing")

	code, _ = put(`{"header": {}}`)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, chatAPI.post(t, s, spec{user: "hi"}).header.Get("x-model-version"), "header {} removes it")

	resp, err := s.client.Get(s.url + "/v1/models")
	require.NoError(t, err)
	defer resp.Body.Close()
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&models))
	require.Len(t, models.Data, 2)
	require.Equal(t, "sim-model-2025-06", models.Data[0].ID, "the served name first")
	require.Equal(t, "sim-model", models.Data[1].ID)
}
