package simulator_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/streams from the simulator")

const streamsDir = "testdata/streams"

// recordTool is a small tool, so that recorded calls stay short.
var recordTool = toolSpec{name: "get_weather", params: `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7},"unit":{"enum":["celsius","fahrenheit"]}},"required":["city","days"]}`}

// recording is one recorded exchange: the configuration of a fresh
// simulator, and the requests sent to it in order (the last one's reply is
// recorded; the ones before it move the simulator's alternating faults on).
type recording struct {
	name     string
	api      api
	cfg      string
	requests []spec
}

// recordings are the example streams of every API and case, for parsers
// of the prober's to be tested on. Names end in .sse (a stream) or .json
// (an error answered before one).
func recordings() []recording {
	const (
		base      = "slots: 0\nfixed: {ttft: 0s, itl: 0s}\noutput_tokens: {distribution: fixed, value: 6}\nseed: 1\n"
		reasoning = base + "reasoning_tokens: {distribution: fixed, value: 4}\n"
	)
	question := spec{user: "Some filler. What is 1234 * 5678?"}
	var out []recording
	for _, a := range []api{chatAPI, responsesAPI, messagesAPI} {
		call := "tool-call"
		if a.name == "messages" {
			call = "tool-use"
		}
		tool := spec{user: "What is the weather in Paris?", tools: []toolSpec{recordTool}}
		structured := spec{user: "Describe someone.", schema: personSchema}
		out = append(out,
			recording{"text", a, base, []spec{{user: "Tell me a story."}}},
			recording{"reasoning-text", a, reasoning, []spec{{user: "Tell me a story."}}},
			recording{"reasoning-length", a, reasoning, []spec{{user: "Tell me a story.", maxTokens: 3}}},
			recording{call, a, base, []spec{tool}},
			recording{"reasoning-" + call, a, reasoning, []spec{tool}},
			recording{"wrong-tool-name", a, base + "faults: {wrong_tool_rate: 1}\n", []spec{tool}},
			recording{"missing-argument", a, base + "faults: {wrong_tool_rate: 1}\n", []spec{tool, tool}},
			recording{"json-schema", a, base, []spec{structured}},
			recording{"json-truncated", a, base + "faults: {invalid_json_rate: 1}\n", []spec{structured}},
			recording{"json-missing-field", a, base + "faults: {invalid_json_rate: 1}\n", []spec{structured, structured}},
			recording{"known-answer", a, base, []spec{question}},
			recording{"reasoning-known-answer", a, reasoning, []spec{question}},
			recording{"wrong-answer", a, base + "faults: {wrong_answer_rate: 1}\n", []spec{question}},
			recording{"known-answer-ignore-eos", a, base, []spec{{user: question.user, maxTokens: 8, ignoreEOS: true}}},
			recording{"malformed", a, base + "faults: {malformed_rate: 1}\n", []spec{{user: "Tell me a story."}}},
			recording{"missing-done", a, base + "faults: {missing_done_rate: 1}\n", []spec{{user: "Tell me a story."}}},
			recording{"stream-error", a, reasoning + "faults: {stream_error_rate: 1}\n", []spec{{user: "Tell me a story."}}},
		)
		if a.name != "messages" {
			out = append(out, recording{"json-object", a, base, []spec{{user: "JSON, please.", schema: "json_object"}}})
		}
		status := map[string]string{"chat": "503", "responses": "503", "messages": "529"}[a.name]
		out = append(out, recording{"error-" + status, a, base + "faults: {error_rate: {\"503\": 1}}\n", []spec{{user: "Tell me a story."}}})
	}
	out = append(out,
		recording{"text", completionsAPI, base, []spec{{user: "Tell me a story."}}},
		recording{"known-answer", completionsAPI, base, []spec{question}},
		recording{"text-whole", chatAPI, base, []spec{{user: "Tell me a story.", whole: true}}},
		recording{"reasoning-tool-call-whole", chatAPI, reasoning, []spec{{user: "What is the weather in Paris?", tools: []toolSpec{recordTool}, whole: true}}},
	)
	return out
}

func (rc recording) file() string {
	ext := ".sse"
	if rc.name[:min(len(rc.name), 6)] == "error-" || slices.ContainsFunc(rc.requests, func(sp spec) bool { return sp.whole }) {
		ext = ".json"
	}
	return filepath.Join(streamsDir, rc.api.name+"-"+rc.name+ext)
}

// Volatile values: the replies' Unix times and the measured phases.
var (
	unixTimes = regexp.MustCompile(`"(created|created_at)":[0-9]+`)
	phaseTime = regexp.MustCompile(`"(queue_ms|prompt_ms|prompt_per_token_ms|prompt_per_second|predicted_ms|predicted_per_token_ms|predicted_per_second)":[-+.0-9eE]+`)
)

// record runs rc against a fresh simulator and returns the last reply's
// body, times normalized, with a comment saying what was asked.
func (rc recording) record(t *testing.T) []byte {
	t.Helper()
	s := startSim(t, rc.cfg)
	var body []byte
	var reqBody []byte
	for _, sp := range rc.requests {
		b := rc.api.body(sp)
		reqBody, _ = json.Marshal(b)
		req, err := http.NewRequest(http.MethodPost, s.url+rc.api.path, bytes.NewReader(reqBody))
		require.NoError(t, err)
		for k, v := range rc.api.header {
			req.Header.Set(k, v)
		}
		resp, err := s.client.Do(req)
		require.NoError(t, err)
		body, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	body = unixTimes.ReplaceAll(body, []byte(`"$1":1700000000`))
	body = phaseTime.ReplaceAll(body, []byte(`"$1":0`))
	if filepath.Ext(rc.file()) == ".json" {
		return body
	}
	// SSE comments (lines starting with ':') are ignored by every reader.
	head := fmt.Sprintf(": sloprober sim, %s: POST %s %s\n: recorded by TestRecordedStreams; rewrite with: go test ./simulator -run TestRecordedStreams -update\n: \"created\", \"created_at\" and the times in \"timings\" are normalized\n\n",
		rc.name, rc.api.path, reqBody)
	return append([]byte(head), body...)
}

// TestRecordedStreams: the example streams in testdata/streams are what the
// simulator sends today (-update rewrites them), and every file there is
// one of them.
func TestRecordedStreams(t *testing.T) {
	want := map[string]bool{}
	for _, rc := range recordings() {
		file := rc.file()
		require.False(t, want[file], "two recordings write %s", file)
		want[file] = true
		t.Run(filepath.Base(file), func(t *testing.T) {
			got := rc.record(t)
			if *update {
				require.NoError(t, os.MkdirAll(streamsDir, 0o755))
				require.NoError(t, os.WriteFile(file, got, 0o644))
				return
			}
			b, err := os.ReadFile(file)
			require.NoError(t, err, "run go test ./simulator -run TestRecordedStreams -update")
			require.Equal(t, string(b), string(got), "the simulator's %s stream changed: if that is intended, rewrite the recordings with -update", file)
		})
	}
	files, err := filepath.Glob(filepath.Join(streamsDir, "*"))
	require.NoError(t, err)
	for _, f := range files {
		require.True(t, want[f], "%s is no recording's: remove it", f)
	}
}

// TestRecordedStreamsRead: the recordings read back as what their names
// say, through the tests' readers.
func TestRecordedStreamsRead(t *testing.T) {
	for _, rc := range recordings() {
		if filepath.Ext(rc.file()) != ".sse" {
			continue
		}
		b, err := os.ReadFile(rc.file())
		require.NoError(t, err)
		r := &result{status: 200}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				r.events = append(r.events, event{data: string(d)})
			}
		}
		v := rc.api.read(t, r)
		name := rc.name
		switch {
		case name == "malformed":
			require.Equal(t, 1, v.malformed, name)
		case name == "missing-done" || name == "stream-error":
			require.False(t, v.done && rc.api.name != "chat", name)
		default:
			require.True(t, v.done, "%s %s", rc.api.name, name)
		}
		switch name {
		case "known-answer", "reasoning-known-answer":
			require.Equal(t, "7006652", v.answer, "%s %s", rc.api.name, name)
		case "tool-call", "tool-use", "reasoning-tool-call", "reasoning-tool-use", "missing-argument", "wrong-tool-name":
			require.Equal(t, "tool_calls", v.finish, "%s %s", rc.api.name, name)
			err := validates(t, recordTool.params, v.toolArgs)
			require.Equal(t, name == "missing-argument", err != nil, "%s %s: %v", rc.api.name, name, err)
			require.Equal(t, name == "wrong-tool-name", v.toolName != recordTool.name, "%s %s", rc.api.name, name)
		case "json-schema", "json-missing-field":
			require.Equal(t, name == "json-missing-field", validates(t, personSchema, v.answer) != nil, "%s %s", rc.api.name, name)
		case "json-truncated":
			require.False(t, json.Valid([]byte(v.answer)), "%s %s", rc.api.name, name)
		}
	}
}
