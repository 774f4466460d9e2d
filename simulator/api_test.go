package simulator_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

const fastSim = `
slots: 0
fixed: {ttft: 0s, itl: 0s}
`

// TestExactLengths: max_tokens (or max_completion_tokens) with ignore_eos
// gives exactly that many tokens, on both APIs, streaming or not.
func TestExactLengths(t *testing.T) {
	s := startSim(t, fastSim)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		for _, stream := range []bool{true, false} {
			for _, field := range []string{"max_tokens", "max_completion_tokens"} {
				t.Run(fmt.Sprint(path, stream, field), func(t *testing.T) {
					body := map[string]any{"model": "sim-model", "ignore_eos": true, field: 37, "stream": stream,
						"stream_options": map[string]any{"include_usage": true}}
					if path == "/v1/completions" {
						body["prompt"] = "twelve chars"
					} else {
						body["messages"] = []map[string]any{{"role": "user", "content": "twelve chars"}}
					}
					r := s.post(t, path, body, nil)
					require.Equal(t, http.StatusOK, r.status, string(r.body))
					f := r.summary(t)
					require.Equal(t, 37, f.Usage.CompletionTokens)
					require.Equal(t, 3, f.Usage.PromptTokens)
					require.Equal(t, 40, f.Usage.TotalTokens)
					require.Equal(t, 37, f.Timings.PredictedN)
					require.Len(t, f.Choices, 1)
					require.Equal(t, "length", *f.Choices[0].FinishReason)
					if stream {
						require.Len(t, r.tokens(t), 37)
						require.True(t, r.done())
					} else {
						out := f.Choices[0].Message.Content + f.Choices[0].Text
						require.Len(t, out, 37*4, "every output token is chars_per_token characters")
					}
				})
			}
		}
	}
}

// TestChatStreamShape: a role-only first chunk, one chunk per token, a finish
// chunk, a usage-only chunk with empty choices, [DONE]; without
// include_usage, no usage chunk and timings on the finish chunk.
func TestChatStreamShape(t *testing.T) {
	s := startSim(t, fastSim)
	r := s.post(t, "/v1/chat/completions", chat("hi", 3, true), nil)
	require.Len(t, r.events, 1+3+1+1+1)
	require.JSONEq(t, `{"role":"assistant","content":""}`, field(t, r.events[0].data, "choices", 0, "delta"))
	require.Contains(t, r.events[4].data, `"finish_reason":"length"`)
	require.Equal(t, "[]", field(t, r.events[5].data, "choices"))
	require.Contains(t, r.events[5].data, `"usage"`)
	require.Contains(t, r.events[5].data, `"timings"`)
	require.Equal(t, "[DONE]", r.events[6].data)

	body := chat("hi", 3, true)
	delete(body, "stream_options")
	r = s.post(t, "/v1/chat/completions", body, nil)
	require.Len(t, r.events, 1+3+1+1)
	require.NotContains(t, r.events[4].data, `"usage"`)
	require.Contains(t, r.events[4].data, `"timings"`)
}

// field returns the JSON at a path of object keys and array indexes.
func field(t *testing.T, data string, path ...any) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(data), &v))
	for _, p := range path {
		switch k := p.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestOutputLengthDistribution: without ignore_eos, lengths follow the
// configured distribution, the same for the same seed; max_tokens still caps.
func TestOutputLengthDistribution(t *testing.T) {
	cfg := fastSim + `
output_tokens: {distribution: lognormal, median: 200, p90: 800, min: 5, max: 3000}
seed: 7
`
	draw := func(s *testSim, n, maxTokens int) (lengths []float64, finishes []string) {
		for range n {
			body := map[string]any{"model": "sim-model", "prompt": "x"}
			if maxTokens > 0 {
				body["max_tokens"] = maxTokens
			}
			r := s.post(t, "/v1/completions", body, nil)
			require.Equal(t, http.StatusOK, r.status)
			f := r.summary(t)
			lengths = append(lengths, float64(f.Usage.CompletionTokens))
			finishes = append(finishes, *f.Choices[0].FinishReason)
		}
		return lengths, finishes
	}
	s := startSim(t, cfg)
	lengths, finishes := draw(s, 400, 0)
	// 400 draws of a lognormal with sigma = ln(4)/1.2816 = 1.08: the sample
	// median's standard error is about 7%, the sample p90's about 9%.
	require.InEpsilon(t, 200, median(lengths), 0.2, "median")
	require.InEpsilon(t, 800, quantile(lengths, 0.9), 0.3, "p90")
	for i, l := range lengths {
		require.GreaterOrEqual(t, l, 5.0)
		require.LessOrEqual(t, l, 3000.0)
		require.Equal(t, "stop", finishes[i])
	}

	again, _ := draw(startSim(t, cfg), 50, 0)
	require.Equal(t, lengths[:50], again, "the same seed must give the same lengths")
	other, _ := draw(startSim(t, strings.Replace(cfg, "seed: 7", "seed: 8", 1)), 50, 0)
	require.NotEqual(t, lengths[:50], other)

	capped, finishes := draw(startSim(t, cfg), 50, 150)
	for i, l := range capped {
		require.LessOrEqual(t, l, 150.0)
		want := "stop"
		if l == 150 || again[i] >= 150 {
			want = "length"
		}
		require.Equal(t, want, finishes[i], "draw %d: %v tokens (uncapped %v)", i, l, again[i])
	}
}

// TestUsageAndTimingsMatchWallClock: usage counts what was sent, and timings
// agree with what a client on the same clock sees.
func TestUsageAndTimingsMatchWallClock(t *testing.T) {
	s := startSim(t, `
slots: 4
prefill: {base: 5ms, per_token: 20us}
decode: {base: 8ms, per_sequence: 1ms}
`)
	results := make([]*result, 8)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i] = s.post(t, "/v1/chat/completions", chat(text(fmt.Sprint(i), 200*(i+1)), 5+3*i, true), nil)
		})
	}
	wg.Wait()
	var ttftSlack, e2eSlack []float64
	for i, r := range results {
		require.Equal(t, http.StatusOK, r.status)
		f := r.summary(t)
		toks := r.tokens(t)
		require.Equal(t, 200*(i+1), f.Usage.PromptTokens)
		require.Equal(t, f.Usage.PromptTokens, f.Timings.PromptN+f.Timings.CacheN)
		require.Equal(t, len(toks), f.Usage.CompletionTokens)
		require.Equal(t, 5+3*i, f.Timings.PredictedN)

		// The client sends before the server queues and reads a token after
		// it exists: the server's phases are lower bounds of what it sees.
		// The role chunk is written once the request is queued, so timing
		// from it leaves out the client's own HTTP overhead.
		serverTTFT := f.Timings.QueueMS + f.Timings.PromptMS
		serverE2E := serverTTFT + f.Timings.PredictedMS
		require.GreaterOrEqual(t, msSince(r.sent, toks[0]), serverTTFT)
		require.GreaterOrEqual(t, msSince(r.sent, toks[len(toks)-1]), serverE2E)
		accepted := r.events[0].at
		ttft, e2e := msSince(accepted, toks[0]), msSince(accepted, toks[len(toks)-1])
		require.LessOrEqual(t, ttft, serverTTFT+wakeSlackMS)
		require.LessOrEqual(t, e2e, serverE2E+wakeSlackMS)
		require.InDelta(t, f.Timings.PredictedMS, msSince(toks[0], toks[len(toks)-1]), wakeSlackMS)
		ttftSlack = append(ttftSlack, math.Abs(ttft-serverTTFT))
		e2eSlack = append(e2eSlack, math.Abs(e2e-serverE2E))
	}
	require.Less(t, median(ttftSlack), clientSlack, "median |client TTFT - server TTFT|: %v", ttftSlack)
	require.Less(t, median(e2eSlack), clientSlack, "median |client E2E - server E2E|: %v", e2eSlack)
}

// TestBadRequests: bad input gets an OpenAI error object, never a crash.
func TestBadRequests(t *testing.T) {
	s := startSim(t, `max_model_len: 100`)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, path, method, body string
		status                   int
		msg                      string
	}{
		{"not JSON", "/v1/chat/completions", "POST", `{"model":`, 400, "invalid JSON body"},
		{"wrong type", "/v1/chat/completions", "POST", `{"model":"sim-model",` + msgs + `,"max_tokens":"ten"}`, 400, "invalid JSON body"},
		{"no messages", "/v1/chat/completions", "POST", `{"model":"sim-model"}`, 400, "'messages' is a required property"},
		{"empty messages", "/v1/chat/completions", "POST", `{"model":"sim-model","messages":[]}`, 400, "'messages' is a required property"},
		{"bad role", "/v1/chat/completions", "POST", `{"model":"sim-model","messages":[{"role":"robot","content":"x"}]}`, 400, `messages[0].role: unknown role "robot"`},
		{"bad content", "/v1/chat/completions", "POST", `{"model":"sim-model","messages":[{"role":"user","content":7}]}`, 400, "messages[0].content: must be a string"},
		{"image part", "/v1/chat/completions", "POST", `{"model":"sim-model","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, `content part type "image_url"`},
		{"zero max_tokens", "/v1/chat/completions", "POST", `{"model":"sim-model",` + msgs + `,"max_tokens":0}`, 400, "max_tokens must be at least 1, got 0"},
		{"negative max_completion_tokens", "/v1/chat/completions", "POST", `{"model":"sim-model",` + msgs + `,"max_completion_tokens":-3}`, 400, "max_completion_tokens must be at least 1, got -3"},
		{"n", "/v1/chat/completions", "POST", `{"model":"sim-model",` + msgs + `,"n":2}`, 400, "n must be 1"},
		{"context overflow", "/v1/chat/completions", "POST", `{"model":"sim-model",` + msgs + `,"max_tokens":100}`, 400, "maximum context length is 100 tokens"},
		{"no prompt", "/v1/completions", "POST", `{"model":"sim-model"}`, 400, "'prompt' is a required property"},
		{"prompt batch", "/v1/completions", "POST", `{"model":"sim-model","prompt":["a","b"]}`, 400, "list of one string"},
		{"unknown model", "/v1/chat/completions", "POST", `{"model":"gpt-9",` + msgs + `}`, 404, "The model `gpt-9` does not exist."},
		{"GET", "/v1/chat/completions", "GET", ``, 405, "use POST"},
		{"tokenize nothing", "/tokenize", "POST", `{}`, 400, "send either 'prompt' or 'messages'"},
		{"bad faults", "/sim/faults", "PUT", `reset_rate: 2`, 400, "faults.reset_rate: must be between 0 and 1, got 2"},
		{"unknown fault", "/sim/faults", "PUT", `{"resets": 1}`, 400, "field resets not found"},
		{"no such path", "/v2/chat", "GET", ``, 404, "no such endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, s.url+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			resp, err := s.client.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode, string(b))
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(b, &e), string(b))
			require.Contains(t, e.Error.Message, tc.msg)
			require.Equal(t, tc.status, e.Error.Code)
			require.NotEmpty(t, e.Error.Type)
		})
	}
	r := s.post(t, "/v1/chat/completions", chat("still serving", 2, true), nil)
	require.Equal(t, http.StatusOK, r.status)
}

// TestInfoEndpoints: /v1/models, /tokenize, /sim/config, /sim/stats, /metrics.
func TestInfoEndpoints(t *testing.T) {
	s := startSim(t, `
model: my-sim
tokenizer: {words: true}
prefix_cache: {block_tokens: 16}
`)
	get := func(path string) string {
		resp, err := s.client.Get(s.url + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	require.Equal(t, `"my-sim"`, field(t, get("/v1/models"), "data", 0, "id"))

	tok := s.post(t, "/tokenize", map[string]any{"model": "my-sim", "prompt": "one two  three\nfour"}, nil)
	require.Equal(t, "4", field(t, string(tok.body), "count"))
	require.Equal(t, "32768", field(t, string(tok.body), "max_model_len"))
	tok = s.post(t, "/tokenize", map[string]any{"messages": []map[string]any{
		{"role": "system", "content": "be brief"}, {"role": "user", "content": []map[string]any{{"type": "text", "text": "why is the sky blue"}}},
	}}, nil)
	require.Equal(t, "7", field(t, string(tok.body), "count"))

	cfg := get("/sim/config")
	require.Equal(t, `"my-sim"`, field(t, cfg, "model"))
	require.Equal(t, `"50µs"`, field(t, cfg, "prefill", "per_token"))
	require.Equal(t, "16", field(t, cfg, "prefix_cache", "block_tokens"))

	r := s.post(t, "/v1/chat/completions", map[string]any{"model": "my-sim", "max_tokens": 4, "ignore_eos": true,
		"messages": []map[string]any{{"role": "user", "content": "count these five words"}}}, nil)
	require.Equal(t, http.StatusOK, r.status)
	st := get("/sim/stats")
	require.Equal(t, "1", field(t, st, "responses", "200"))
	require.Equal(t, "4", field(t, st, "prompt_tokens_total"))
	require.Equal(t, "4", field(t, st, "generation_tokens_total"))

	m := get("/metrics")
	for _, want := range []string{
		`vllm:num_requests_running{model_name="my-sim"} 0`,
		`vllm:num_requests_waiting{model_name="my-sim"} 0`,
		`vllm:prompt_tokens_total{model_name="my-sim"} 4`,
		`vllm:generation_tokens_total{model_name="my-sim"} 4`,
		`sloprober_sim_responses_total{code="200",model_name="my-sim"} 1`,
		`sloprober_sim_faults_injected_total{fault="reset",model_name="my-sim"} 0`,
	} {
		require.Contains(t, m, want)
	}
}
