package prober

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

const typicalChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"logprobs":null,"finish_reason":null}]}`

func TestParseChunk(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       chunk
		err        bool
	}{
		{name: "content", data: typicalChunk, want: chunk{text: true, answer: true, object: []byte("chat.completion.chunk"), model: []byte("m")}},
		{name: "identity", data: `{"model":"Qwen\/Qwen3-8B","system_fingerprint":"fp_44709d6fcb","choices":[]}`,
			want: chunk{model: []byte(`Qwen\/Qwen3-8B`), fingerprint: []byte("fp_44709d6fcb")}},
		{name: "identity not strings", data: `{"model":7,"system_fingerprint":null,"choices":[]}`, want: chunk{}},
		{name: "identity repeated", data: `{"model":"a","model":7,"system_fingerprint":"x","system_fingerprint":"y"}`, want: chunk{fingerprint: []byte("y")}},
		{name: "role only", data: `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, want: chunk{}},
		{name: "null content", data: `{"choices":[{"delta":{"content":null,"tool_calls":[{"id":"x"}]}}]}`, want: chunk{}},
		{name: "tool call name", data: `{"choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
			want: chunk{text: true, answer: true}},
		{name: "tool call arguments", data: `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]}}]}`, want: chunk{text: true, answer: true}},
		{name: "tool call empty", data: `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}},7,{"function":null}]}}]}`, want: chunk{}},
		{name: "reasoning", data: `{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, want: chunk{text: true}},
		{name: "reasoning (alt)", data: `{"choices":[{"delta":{"reasoning":"hm"}}]}`, want: chunk{text: true}},
		{name: "completions text", data: `{"choices":[{"text":"a\"b","finish_reason":"length"}]}`, want: chunk{text: true, answer: true, finish: []byte("length")}},
		{name: "escaped text", data: `{"choices":[{"delta":{"content":"\u00e9\n"}}]}`, want: chunk{text: true, answer: true}},
		{name: "usage only", data: `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4}}}`,
			want: chunk{prompt: 12, complete: 3, cached: 4, hasPrompt: true, hasComplete: true, hasCached: true}},
		{name: "usage reasoning", data: `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":300,"completion_tokens_details":{"reasoning_tokens":250}}}`,
			want: chunk{prompt: 12, complete: 300, reasoning: 250, hasPrompt: true, hasComplete: true, hasReasoning: true}},
		{name: "usage nulls", data: `{"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":"3","prompt_tokens_details":null}}`, want: chunk{}},
		{name: "usage null", data: `{"choices":[{"delta":{"content":"x"}}],"usage":null}`, want: chunk{text: true, answer: true}},
		{name: "timings", data: `{"choices":[],"timings":{"prompt_ms":1.5e0,"predicted_n":3}}`, want: chunk{timings: []byte(`{"prompt_ms":1.5e0,"predicted_n":3}`)}},
		{name: "error", data: `{"error":{"message":"boom","code":503}}`, want: chunk{errRaw: []byte(`{"message":"boom","code":503}`)}},
		{name: "error null", data: `{"error":null,"choices":[{"delta":{"content":"x"}}]}`, want: chunk{text: true, answer: true}},
		{name: "stamp", data: `{"sim_ts":1795994575123456789,"choices":[{"delta":{"content":"x"}}]}`, want: chunk{text: true, answer: true, simTS: 1795994575123456789}},
		{name: "whitespace", data: " {\n \"choices\" : [ { \"delta\" : { \"content\" : \"x\" } } ] } \n", want: chunk{text: true, answer: true}},
		{name: "deep unknown", data: `{"x":[1,-2.5e-3,true,false,null,{"a":[[]]},"s"],"choices":[]}`, want: chunk{}},
		{name: "truncated", data: `{"choices":[{"delta":{"content":"`, err: true},
		{name: "trailing garbage", data: typicalChunk + `x`, err: true},
		{name: "not an object", data: `[1]`, err: true},
		{name: "bad escape", data: `{"a":"\x"}`, err: true},
		{name: "control character", data: "{\"a\":\"\x01\"}", err: true},
		{name: "bad number", data: `{"a":01}`, err: true},
		{name: "missing comma", data: `{"a":1 "b":2}`, err: true},
		{name: "bare word", data: `{"a":nul}`, err: true},
		{name: "empty", data: ``, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c chunk
			err := parseChunk([]byte(tc.data), &c, false)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			c.contents = nil
			require.Equal(t, tc.want, c)
		})
	}
}

func TestParseChunkContents(t *testing.T) {
	var c chunk
	require.NoError(t, parseChunk([]byte(`{"choices":[{"delta":{"content":"caf\u00e9 \"x\"\n"}},{"text":"!"}]}`), &c, true))
	var got strings.Builder
	for _, s := range c.contents {
		got.WriteString(unquote(s))
	}
	require.Equal(t, "café \"x\"\n!", got.String())
}

// TestParseChunkAllocs: a common chunk is parsed without allocating.
func TestParseChunkAllocs(t *testing.T) {
	data := []byte(typicalChunk)
	var c chunk
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if err := parseChunk(data, &c, false); err != nil {
			t.Fatal(err)
		}
	}))
}

// referenceChunk is what encoding/json reads of a chunk.
type referenceChunk struct {
	valid, text, answer        bool
	finish, model, fingerprint string
	simTS                      int64
}

// reference decodes a chunk with encoding/json, keys matched exactly.
func reference(data []byte) referenceChunk {
	valid, text, answer, finish, simTS := referenceFields(data)
	r := referenceChunk{valid: valid, text: text, answer: answer, finish: finish, simTS: simTS}
	var m map[string]any
	if valid && json.Unmarshal(data, &m) == nil {
		r.model, _ = m["model"].(string)
		r.fingerprint, _ = m["system_fingerprint"].(string)
	}
	return r
}

func referenceFields(data []byte) (valid, text, answer bool, finish string, simTS int64) {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	// A chunk is a JSON object: "null" decodes into a map without error,
	// but `data: null` is no chunk (protocol_error), as for any other
	// non-object.
	if !json.Valid(data) || d.Decode(&m) != nil || m == nil {
		return false, false, false, "", 0
	}
	choices, _ := m["choices"].([]any)
	for _, ch := range choices {
		obj, _ := ch.(map[string]any)
		delta, _ := obj["delta"].(map[string]any)
		for _, k := range []string{"content", "reasoning_content", "reasoning"} {
			if s, _ := delta[k].(string); s != "" {
				text = true
				answer = answer || k == "content"
			}
		}
		calls, _ := delta["tool_calls"].([]any)
		for _, call := range calls {
			call, _ := call.(map[string]any)
			fn, _ := call["function"].(map[string]any)
			for _, k := range []string{"name", "arguments"} {
				if s, _ := fn[k].(string); s != "" {
					text, answer = true, true
				}
			}
		}
		if s, _ := obj["text"].(string); s != "" {
			text, answer = true, true
		}
		if s, _ := obj["finish_reason"].(string); s != "" {
			finish = s
		}
	}
	if n, ok := m["sim_ts"].(json.Number); ok {
		simTS, _ = n.Int64()
	}
	return true, text, answer, finish, simTS
}

// FuzzParseChunk compares parseChunk with encoding/json: the same inputs
// are valid, and valid ones carry the same text, finish reason and stamp.
// The seed corpus, every event of the recorded streams, runs with go test.
func FuzzParseChunk(f *testing.F) {
	files, _ := filepath.Glob("testdata/streams/*.sse")
	for _, file := range files {
		b, _ := os.ReadFile(file)
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "data:"); ok {
				f.Add([]byte(strings.TrimSpace(d)))
			}
		}
	}
	f.Add([]byte(typicalChunk))
	f.Add([]byte(`{"sim_ts":12,"choices":[{"text":"\ud83d\ude00","finish_reason":"stop"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c chunk
		err := parseChunk(data, &c, false)
		ref := reference(data)
		valid, text, answer, finish, simTS := ref.valid, ref.text, ref.answer, ref.finish, ref.simTS
		if !valid {
			if err == nil && json.Valid(data) {
				t.Fatalf("accepted a top level that is not an object: %q", data)
			}
			if err == nil {
				t.Fatalf("accepted invalid JSON %q", data)
			}
			return
		}
		if err != nil {
			t.Fatalf("rejected valid JSON %q: %v", data, err)
		}
		if c.text != text || c.answer != answer || decodeString(c.finish) != finish || (simTS != 0 && c.simTS != simTS) {
			t.Fatalf("%q: got text %v answer %v finish %q sim_ts %d, encoding/json says %v %v %q %d",
				data, c.text, c.answer, c.finish, c.simTS, text, answer, finish, simTS)
		}
		if decodeString(c.model) != ref.model || decodeString(c.fingerprint) != ref.fingerprint {
			t.Fatalf("%q: got model %q fingerprint %q, encoding/json says %q %q", data, c.model, c.fingerprint, ref.model, ref.fingerprint)
		}
	})
}

// FuzzParseEvents checks the Responses and Messages API parsers against
// encoding/json: the same inputs are valid JSON objects, answer text is
// generated text, and the text they keep for a reply is what encoding/json
// reads of the answer's delta.
func FuzzParseEvents(f *testing.F) {
	files, _ := filepath.Glob("testdata/streams/*.sse")
	for _, file := range files {
		b, _ := os.ReadFile(file)
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "data:"); ok {
				f.Add([]byte(strings.TrimSpace(d)))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		valid := json.Valid(data) && json.Unmarshal(data, &m) == nil && m != nil
		for name, parse := range map[string]func([]byte, []byte, *chunk, bool) error{
			"responses": parseResponsesEvent, "messages": parseMessagesEvent,
		} {
			var c chunk
			err := parse(nil, data, &c, true)
			if valid != (err == nil) {
				t.Fatalf("%s: %q: valid JSON object %v, parse error %v", name, data, valid, err)
			}
			if err != nil {
				continue
			}
			if c.answer && !c.text {
				t.Fatalf("%s: %q: answer text that is not generated text", name, data)
			}
			var kept strings.Builder
			for _, s := range c.contents {
				kept.WriteString(unquote(s))
			}
			var want string
			switch typ, _ := m["type"].(string); {
			case name == "responses" && (typ == "response.output_text.delta" || typ == "response.refusal.delta"):
				want, _ = m["delta"].(string)
			case name == "messages" && typ == "content_block_delta":
				if d, _ := m["delta"].(map[string]any); d["type"] == "text_delta" {
					want, _ = d["text"].(string)
				}
			}
			if !utf8.ValidString(want) || strings.Contains(want, "\ufffd") {
				continue // encoding/json replaces invalid UTF-8; the reply keeps the server's bytes
			}
			if kept.String() != want {
				t.Fatalf("%s: %q: kept %q, encoding/json reads %q", name, data, kept.String(), want)
			}
		}
	})
}

// BenchmarkParseChunk is the JSON part of reading one chunk.
func BenchmarkParseChunk(b *testing.B) {
	data := []byte(typicalChunk)
	var c chunk
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := parseChunk(data, &c, false); err != nil {
			b.Fatal(err)
		}
	}
}
