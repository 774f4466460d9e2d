package prober

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"
)

// splitReader returns at most n bytes a read, so frames split across reads
// at every position.
type splitReader struct {
	r io.Reader
	n int
}

func (s splitReader) Read(p []byte) (int, error) {
	if len(p) > s.n {
		p = p[:s.n]
	}
	return s.r.Read(p)
}

// readRecorded reads a recorded stream as a 200 response, with a clock that
// advances 1ms every time it is read.
func readRecorded(t *testing.T, data []byte, wrap func(io.Reader) io.Reader) *Result {
	t.Helper()
	return readRecordedAPI(t, &chatAPI, data, wrap, nil)
}

// readRecordedAPI reads a recorded stream of an API, keeping the reply's
// text in reply when it is not nil.
func readRecordedAPI(t *testing.T, api *wireAPI, data []byte, wrap func(io.Reader) io.Reader, reply *strings.Builder) *Result {
	t.Helper()
	r := &Result{StatusCode: 200}
	tick := time.Duration(0)
	readStream(api, io.NopCloser(wrap(bytes.NewReader(data))), r, func() time.Duration {
		tick += time.Millisecond
		return tick
	}, reply, LimitsFor(64))
	r.Outcome = Classify(r)
	return r
}

// TestReadStreamAPIs reads recorded streams of each API: generated text of
// every kind (reasoning, answer, tool calls) counts as chunks, the answer
// starts at the first content or tool-call delta, usage merges across
// events, each API's end event ends the stream and its error events are
// stream errors.
func TestReadStreamAPIs(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		file        string
		api         *wireAPI
		outcome     Outcome
		chunks      int
		firstAnswer int
		usage       *Usage
		finish      string
		model       string
		reply       string
		calls       []ToolCall
		errorHas    string
	}{
		{file: "reasoning.sse", api: &chatAPI, outcome: OutcomeOK, chunks: 3, firstAnswer: 2, reply: "Yes", finish: "stop", model: "m",
			usage: &Usage{PromptTokens: 12, CompletionTokens: 3, CachedTokens: n(4)}},
		{file: "chat_reasoning_tool_call.sse", api: &chatAPI, outcome: OutcomeOK, chunks: 5, firstAnswer: 2, finish: "tool_calls", model: "Qwen/Qwen3-8B",
			calls: []ToolCall{{"get_weather", `{"city": "Paris"}`}},
			usage: &Usage{PromptTokens: 12, CompletionTokens: 9, ReasoningTokens: n(5)}},
		{file: "responses_text.sse", api: &responsesAPI, outcome: OutcomeOK, chunks: 3, firstAnswer: 0, reply: "Hello there!", finish: "completed", model: "gpt-4.1-mini-2025-04-14",
			usage: &Usage{PromptTokens: 12, CompletionTokens: 3, CachedTokens: n(4), ReasoningTokens: n(0)}},
		{file: "responses_reasoning_function_call.sse", api: &responsesAPI, outcome: OutcomeOK, chunks: 5, firstAnswer: 2, finish: "completed", model: "openai/gpt-oss-20b",
			calls: []ToolCall{{"get_weather", `{"city":"Paris"}`}},
			usage: &Usage{PromptTokens: 12, CompletionTokens: 9, CachedTokens: n(4), ReasoningTokens: n(5)}},
		{file: "responses_incomplete.sse", api: &responsesAPI, outcome: OutcomeOK, chunks: 2, firstAnswer: 0, reply: "one two", finish: "max_output_tokens", model: "m",
			usage: &Usage{PromptTokens: 12, CompletionTokens: 2}},
		{file: "responses_failed.sse", api: &responsesAPI, outcome: OutcomeStreamError, chunks: 1, firstAnswer: 0, reply: "one", model: "m", errorHas: "error in stream: The model crashed."},
		{file: "responses_error_type.sse", api: &responsesAPI, outcome: OutcomeStreamError, chunks: 1, firstAnswer: 0, reply: "one", errorHas: "error in stream: Too many tokens in flight."},
		{file: "responses_error_nested.sse", api: &responsesAPI, outcome: OutcomeStreamError, chunks: 1, firstAnswer: 0, reply: "one", errorHas: "error in stream: The engine restarted."},
		{file: "responses_no_end.sse", api: &responsesAPI, outcome: OutcomeStreamError, chunks: 2, firstAnswer: 0, reply: "one two", errorHas: "stream ended without response.completed"},
		{file: "messages_text.sse", api: &messagesAPI, outcome: OutcomeOK, chunks: 3, firstAnswer: 0, reply: "Hello there!", finish: "end_turn", model: "claude-sonnet-4-5",
			usage: &Usage{PromptTokens: 12, CompletionTokens: 3, CachedTokens: n(4)}},
		{file: "messages_thinking_tool_use.sse", api: &messagesAPI, outcome: OutcomeOK, chunks: 5, firstAnswer: 2, finish: "tool_use", model: "claude-sonnet-4-5",
			calls: []ToolCall{{"get_weather", `{"city": "Paris"}`}},
			usage: &Usage{PromptTokens: 12, CompletionTokens: 9, CachedTokens: n(4)}},
		// message_delta sends input_tokens again, cumulative, without
		// the cache's parts (null or absent): they stay as message_start
		// sent them.
		{file: "messages_cache_usage.sse", api: &messagesAPI, outcome: OutcomeOK, chunks: 1, firstAnswer: 0, reply: "Hi", finish: "end_turn", model: "claude-sonnet-4-5",
			usage: &Usage{PromptTokens: 115, CompletionTokens: 2, CachedTokens: n(100)}},
		{file: "messages_overloaded.sse", api: &messagesAPI, outcome: OutcomeStreamError, chunks: 1, firstAnswer: 0, reply: "Hel", model: "claude-sonnet-4-5",
			usage: &Usage{PromptTokens: 12, CompletionTokens: 1}, errorHas: "error event in stream: Overloaded"},
		{file: "messages_no_stop.sse", api: &messagesAPI, outcome: OutcomeStreamError, chunks: 1, firstAnswer: 0, reply: "Hel", finish: "end_turn", model: "claude-sonnet-4-5",
			usage: &Usage{PromptTokens: 12, CompletionTokens: 1}, errorHas: "stream ended without message_stop"},
		// A stream of another API read as chat: nothing in it is text,
		// and it never ends.
		{file: "messages_text.sse", api: &chatAPI, outcome: OutcomeStreamError, firstAnswer: -1, usage: &Usage{CompletionTokens: 3},
			errorHas: "stream ended without [DONE]"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "streams", tc.file))
			require.NoError(t, err)
			var reply strings.Builder
			whole := readRecordedAPI(t, tc.api, data, func(r io.Reader) io.Reader { return r }, &reply)
			require.Equal(t, tc.outcome, whole.Outcome, whole.Error())
			require.Len(t, whole.Chunks, tc.chunks)
			require.Equal(t, tc.firstAnswer, whole.FirstAnswer)
			require.Equal(t, tc.usage, whole.Usage)
			require.Equal(t, tc.finish, whole.FinishReason)
			require.Equal(t, tc.model, whole.Model)
			require.Equal(t, tc.reply, reply.String())
			require.Equal(t, tc.calls, whole.ToolCalls)
			if tc.errorHas != "" {
				require.Contains(t, whole.Error(), tc.errorHas)
			} else {
				require.Empty(t, whole.Error())
			}
			var split strings.Builder
			require.Equal(t, whole, readRecordedAPI(t, tc.api, data, iotest.OneByteReader, &split), "split at every byte")
			require.Equal(t, reply.String(), split.String())
		})
	}
}

func TestReadStream(t *testing.T) {
	four := 4
	usage := &Usage{PromptTokens: 12, CompletionTokens: 3, CachedTokens: &four}
	for _, tc := range []struct {
		file     string
		outcome  Outcome
		chunks   int
		usage    *Usage
		finish   string
		timings  bool
		errorHas string
	}{
		{file: "vllm_chat.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "length", timings: true},
		{file: "crlf.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "length", timings: true},
		{file: "comments_and_fields.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "stop", timings: true},
		{file: "multiline_data.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "stop", timings: true},
		{file: "usage_on_finish.sse", outcome: OutcomeOK, chunks: 3, usage: &Usage{PromptTokens: 12, CompletionTokens: 3}, finish: "stop"},
		{file: "no_usage.sse", outcome: OutcomeOK, chunks: 2, finish: "stop"},
		{file: "error_in_stream.sse", outcome: OutcomeStreamError, chunks: 1, errorHas: "error in stream: engine overloaded"},
		{file: "error_event.sse", outcome: OutcomeStreamError, chunks: 1, errorHas: `error event in stream: upstream went away`},
		{file: "no_done.sse", outcome: OutcomeStreamError, chunks: 3, usage: usage, finish: "stop", timings: true, errorHas: "stream ended without [DONE]"},
		{file: "truncated_frame.sse", outcome: OutcomeStreamError, chunks: 2, errorHas: "stream ended without [DONE]"},
		{file: "done_without_blank_line.sse", outcome: OutcomeStreamError, chunks: 2, finish: "stop", errorHas: "stream ended without [DONE]"},
		{file: "html.sse", outcome: OutcomeProtocolError, errorHas: `response body is not an SSE stream: it starts with "<!DOCTYPE html>"`},
		{file: "json_error.sse", outcome: OutcomeProtocolError, errorHas: `response body is not an SSE stream: it starts with "{\"error\":{\"message\":\"model not loaded\",\"..."`},
		{file: "malformed_chunk.sse", outcome: OutcomeProtocolError, chunks: 2, finish: "stop", errorHas: "chunk is not valid JSON"},
		{file: "long_line.sse", outcome: OutcomeOK, chunks: 2, usage: usage, finish: "stop", timings: true},
		{file: "reasoning.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "stop", timings: true},
		{file: "completions.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "length", timings: true},
		{file: "empty_chunks.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "stop", timings: true},
		{file: "data_no_space.sse", outcome: OutcomeOK, chunks: 2},
		{file: "empty.sse", outcome: OutcomeStreamError, errorHas: "stream ended without [DONE]"},
		{file: "bare_json_no_newline.sse", outcome: OutcomeProtocolError, errorHas: `response body is not an SSE stream: it starts with "{\"error\":{\"message\":\"model not loaded\"}}"`},
		{file: "cr_only.sse", outcome: OutcomeOK, chunks: 2, finish: "stop"},
		{file: "llamacpp_error.sse", outcome: OutcomeStreamError, errorHas: "error event in stream: the request exceeds the available context size, try increasing it"},
		{file: "llamacpp_error_after_text.sse", outcome: OutcomeStreamError, chunks: 1, errorHas: "error event in stream: the request exceeds the available context size"},
		{file: "error_long_message.sse", outcome: OutcomeStreamError, errorHas: "error in stream: engine overloaded: xxxxxxxx"},
		{file: "data_null.sse", outcome: OutcomeProtocolError, errorHas: "chunk is not valid JSON"},
		{file: "absurd_usage.sse", outcome: OutcomeOK, chunks: 1, usage: &Usage{}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "streams", tc.file))
			require.NoError(t, err)
			whole := readRecorded(t, data, func(r io.Reader) io.Reader { return r })
			require.Equal(t, tc.outcome, whole.Outcome, whole.Error())
			require.Len(t, whole.Chunks, tc.chunks)
			require.Equal(t, tc.usage, whole.Usage)
			require.Equal(t, tc.finish, whole.FinishReason)
			require.Equal(t, tc.timings, whole.Timings != nil)
			if tc.errorHas != "" {
				require.Contains(t, whole.Error(), tc.errorHas)
				require.LessOrEqual(t, len(whole.StreamErr), len("error event in stream: ")+MaxServerMessageBytes, "a server's message is bounded")
			} else {
				require.Empty(t, whole.Error())
			}
			for i := 1; i < len(whole.Chunks); i++ {
				require.Greater(t, whole.Chunks[i], whole.Chunks[i-1], "offsets increase")
			}
			// The same stream split at every byte, and in 7-byte reads,
			// gives the same result.
			for name, wrap := range map[string]func(io.Reader) io.Reader{
				"one byte": iotest.OneByteReader,
				"7 bytes":  func(r io.Reader) io.Reader { return splitReader{r, 7} },
			} {
				split := readRecorded(t, data, wrap)
				require.Equal(t, whole, split, name)
			}
		})
	}
}

func TestReadStreamTimings(t *testing.T) {
	data, err := os.ReadFile("testdata/streams/vllm_chat.sse")
	require.NoError(t, err)
	r := readRecorded(t, data, func(r io.Reader) io.Reader { return r })
	q, cached := 1.5, 4
	require.Equal(t, &ServerTimings{QueueMS: &q, PromptN: 8, PromptMS: 5.25, PredictedN: 3, PredictedMS: 20, CacheN: &cached}, r.Timings)
	// The role chunk is read at 1ms and is no token: t1 is the second event.
	require.Equal(t, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}, r.Chunks)
}

// TestSSEParserSteadyStateAllocs: parsing events reuses the parser's
// buffers, whole lines and lines split across pieces alike.
func TestSSEParserSteadyStateAllocs(t *testing.T) {
	event := []byte(`data: {"choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}` + "\n\n")
	var sink countSink
	p := newSSEParser()
	_, err := p.feed(event[:20], &sink) // warm up: a split line grows long
	require.NoError(t, err)
	_, err = p.feed(event[20:], &sink)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := p.feed(event, &sink); err != nil {
			t.Fatal(err)
		}
		if _, err := p.feed(event[:30], &sink); err != nil {
			t.Fatal(err)
		}
		if _, err := p.feed(event[30:], &sink); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, 1+2*1001, sink.n) // AllocsPerRun runs once more to warm up
}

// countSink counts the events it is given.
type countSink struct{ n int }

func (c *countSink) event(sseEvent) bool { c.n++; return true }

// endless repeats a frame for ever.
type endless struct {
	frame []byte
	off   int
}

func (e *endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], e.frame[e.off:])
		n += c
		e.off = (e.off + c) % len(e.frame)
	}
	return n, nil
}

// TestReadStreamBounds: streams that never end are cut at their bounds,
// with a stream_error naming the bound, after a bounded amount of reading.
func TestReadStreamBounds(t *testing.T) {
	limits := LimitsFor(64)
	require.Equal(t, StreamLimits{TextChunks: 320, Events: 1664, Bytes: 4<<20 + 320*4<<10}, limits)
	for _, tc := range []struct {
		name     string
		frame    string
		chunks   int
		errorHas string
	}{
		{"tokens forever", `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n", 320, "stream cut: more than 320 text chunks for 64 requested tokens"},
		{"empty deltas forever", `data: {"choices":[{"delta":{"content":""}}]}` + "\n\n", 0, "stream cut: more than 1664 SSE events"},
		{"one endless line", "data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 0, "stream cut: an SSE line longer than 4194304 bytes"},
		{"comments forever", ": keep-alive\n", 0, "stream cut: more than 5505024 bytes"},
		{"one endless event", "data: " + strings.Repeat("x", 1000) + "\n", 0, "stream cut: an SSE event longer than 4194304 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &limitedBody{r: &endless{frame: []byte(tc.frame)}, limit: limits.Bytes}
			r := &Result{StatusCode: 200, OutputTokens: 64}
			readStream(&chatAPI, io.NopCloser(body), r, func() time.Duration { return time.Millisecond }, nil, limits)
			r.Outcome = Classify(r)
			require.Equal(t, OutcomeStreamError, r.Outcome, r.Error())
			require.Contains(t, r.Error(), tc.errorHas)
			require.Len(t, r.Chunks, tc.chunks)
			require.LessOrEqual(t, body.read, limits.Bytes+1, "one byte beyond the bound is the cut")
		})
	}
}

// TestReadStreamReplyBound: the reply's text and a tool call's arguments
// kept for a check or the next turn end at the first piece beyond their
// bound (16 bytes a requested token plus 4 KiB): a later, smaller piece is
// not kept, so no text is made that the server never sent (here a JSON
// reply, or arguments, without their middle, which would pass a check).
func TestReadStreamReplyBound(t *testing.T) {
	big := strings.Repeat("x", maxReplyBytes(1))
	for _, tc := range []struct {
		name, stream string
		reply        string
		calls        []ToolCall
	}{
		{name: "content", reply: `{"a":`, stream: `data: {"choices":[{"delta":{"content":"{\"a\":"}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"content":"` + big + `"}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"content":"1}"}}]}` + "\n\n"},
		{name: "tool call", calls: []ToolCall{{Name: "f", Arguments: `{"a":`}}, stream: `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":"}}]}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` + big + `"}}]}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"name":"g","arguments":"{}"}}]}}]}` + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Result{StatusCode: 200, OutputTokens: 1}
			var reply strings.Builder
			readStream(&chatAPI, io.NopCloser(strings.NewReader(tc.stream+"data: [DONE]\n\n")), r,
				func() time.Duration { return time.Millisecond }, &reply, LimitsFor(1))
			require.True(t, r.Done)
			require.Equal(t, tc.reply, reply.String())
			require.Equal(t, tc.calls, r.ToolCalls)
		})
	}
}

// FuzzReadStream: whatever a body holds, reading it ends without a panic,
// with an outcome, and within its bounds.
func FuzzReadStream(f *testing.F) {
	files, _ := filepath.Glob("testdata/streams/*.sse")
	for _, file := range files {
		b, _ := os.ReadFile(file)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		limits := LimitsFor(4)
		r := &Result{StatusCode: 200, OutputTokens: 4}
		body := &limitedBody{r: bytes.NewReader(data), limit: limits.Bytes}
		readStream(&chatAPI, io.NopCloser(body), r, func() time.Duration { return time.Millisecond }, &strings.Builder{}, limits)
		r.Outcome = Classify(r)
		if len(r.Chunks) > limits.TextChunks {
			t.Fatalf("%d chunks above the bound %d", len(r.Chunks), limits.TextChunks)
		}
		if r.Outcome != OutcomeOK && r.Error() == "" {
			t.Fatalf("outcome %s without an error", r.Outcome)
		}
		if len(r.StreamErr) > 1024 || len(r.ProtocolErr) > 1024 {
			t.Fatalf("unbounded message: %q %q", r.StreamErr, r.ProtocolErr)
		}
	})
}

// TestSimulatorRecordings reads the simulator's recorded streams of every
// API and case (simulator/testdata/streams, written by the simulator
// itself): each ends as its case says, generated text of every kind is
// counted, reasoning comes before the answer, and tool calls are kept.
func TestSimulatorRecordings(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "simulator", "testdata", "streams", "*.sse"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 40)
	apis := map[string]*wireAPI{"chat": &chatAPI, "completions": &completionsAPI, "responses": &responsesAPI, "messages": &messagesAPI}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".sse")
		t.Run(name, func(t *testing.T) {
			apiName, kind, _ := strings.Cut(name, "-")
			api := apis[apiName]
			require.NotNil(t, api, "an API prefix")
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			var reply strings.Builder
			r := readRecordedAPI(t, api, data, func(r io.Reader) io.Reader { return r }, &reply)
			switch {
			case kind == "malformed":
				require.Equal(t, OutcomeProtocolError, r.Outcome, r.Error())
				return
			case kind == "stream-error" || kind == "missing-done":
				require.Equal(t, OutcomeStreamError, r.Outcome, r.Error())
				return
			}
			require.Equal(t, OutcomeOK, r.Outcome, r.Error())
			require.NotEmpty(t, r.Chunks)
			require.NotNil(t, r.Usage, "usage")
			require.Positive(t, r.Usage.CompletionTokens)
			// A chunk carries a token at least; a tool call's start event
			// (the Responses API's output_item.added, the Messages API's
			// content_block_start) carries its name, generated too.
			require.LessOrEqual(t, len(r.Chunks), r.Usage.CompletionTokens+len(r.ToolCalls))
			reasoning := strings.HasPrefix(kind, "reasoning")
			switch {
			case kind == "reasoning-length":
				require.Equal(t, -1, r.FirstAnswer, "cut while reasoning: no answer")
			case reasoning:
				require.Positive(t, r.FirstAnswer, "the answer after the reasoning")
			default:
				require.Zero(t, r.FirstAnswer, "no reasoning: the first token is the answer's")
			}
			if reasoning && apiName != "messages" { // the Messages API reports no reasoning tokens
				require.NotNil(t, r.Usage.ReasoningTokens)
				require.Positive(t, *r.Usage.ReasoningTokens)
			}
			if strings.Contains(kind, "tool") || kind == "missing-argument" {
				require.Len(t, r.ToolCalls, 1)
				require.NotEmpty(t, r.ToolCalls[0].Name)
				require.Empty(t, reply.String(), "a tool call is not reply text")
			} else {
				require.Empty(t, r.ToolCalls)
				require.Equal(t, r.FirstAnswer >= 0, reply.Len() > 0, "reply text when there is an answer")
			}
		})
	}
}
