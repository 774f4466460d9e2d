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
	"testing/synctest"
	"time"

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

// TestUsageAndTimingsMatchWallClock: usage counts what was sent, and the
// timings are the time each phase took, as a client on the same clock
// sees it: exactly, on testing/synctest's fake clock, where queueing,
// prefill and decode take their modelled time; and on the real clock,
// where a busy machine stretches them, against the simulator's own stamp
// of each token chunk (stamp_chunks), written as the token came to exist.
// The client's reading of the role chunk is no such truth for the TTFT:
// the phases start when the request arrives, before it is read and
// parsed, and beside a CPU burner a client's TTFT from the role chunk
// differed from the server's by a median 15 to 37ms.
func TestUsageAndTimingsMatchWallClock(t *testing.T) {
	const cfg = `
slots: 4
prefill: {base: 5ms, per_token: 20us}
decode: {base: 8ms, per_sequence: 1ms}
`
	// Eight requests at once on four slots, of different prompt and
	// output lengths: all but the first wait, for the prefills before
	// theirs (one at a time) and four of them for a slot.
	const n = 8
	body := func(i int) map[string]any { return chat(text(fmt.Sprint(i), 200*(i+1)), 3+i, true) }
	requireUsage := func(i int, r *result) final {
		t.Helper()
		require.Equal(t, http.StatusOK, r.status, "%d: %s", i, r.body)
		f := r.summary(t)
		require.Equal(t, 200*(i+1), f.Usage.PromptTokens)
		require.Equal(t, f.Usage.PromptTokens, f.Timings.PromptN+f.Timings.CacheN)
		require.Len(t, r.tokens(t), f.Usage.CompletionTokens)
		require.Equal(t, 3+i, f.Usage.CompletionTokens)
		require.Equal(t, 3+i, f.Timings.PredictedN)
		return f
	}

	t.Run("fake clock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startBubbleSim(t, cfg)
			results := make([]*result, n)
			var wg sync.WaitGroup
			for i := range results {
				wg.Go(func() { results[i] = s.post(t, "/v1/chat/completions", body(i)) })
			}
			wg.Wait()
			queued := 0
			for i, r := range results {
				tm := requireUsage(i, r).Timings
				toks := r.tokens(t)
				require.InDelta(t, msSince(r.sent, toks[0]), tm.QueueMS+tm.PromptMS, 1e-6, "%d: TTFT", i)
				require.InDelta(t, msSince(toks[0], toks[len(toks)-1]), tm.PredictedMS, 1e-6, "%d: decode", i)
				require.InDelta(t, 5+0.02*float64(200*(i+1)), tm.PromptMS, 1e-6, "%d: prefill", i)
				if tm.QueueMS > 0 {
					queued++
				}
			}
			require.Equal(t, n-1, queued, "requests that waited for a prefill or a slot")
		})
	})

	t.Run("real clock", func(t *testing.T) {
		// Shorter phases than the model's test: the stamps, not the
		// model, are the truth here.
		s := startSim(t, `
slots: 4
prefill: {base: 2ms, per_token: 5us}
decode: {base: 3ms, per_sequence: 1ms}
stamp_chunks: true
`)
		results := make([]*result, n)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i] = s.post(t, "/v1/chat/completions", body(i), nil) })
		}
		wg.Wait()
		var ttftExcess, decodeSlack, readLag []float64
		for i, r := range results {
			tm := requireUsage(i, r).Timings
			toks, stamps := r.tokens(t), chunkStamps(t, r)
			require.Len(t, stamps, len(toks))
			for k := range toks {
				require.False(t, toks[k].Before(stamps[k]), "%d: token %d read before it was written", i, k+1)
				readLag = append(readLag, msSince(stamps[k], toks[k]))
			}
			// The client sends before the request arrives, and the
			// simulator writes a token after it exists: the server's
			// phases are lower bounds of what its stamps show from the
			// send. The role chunk is written once the request arrived,
			// so from the client's reading of it to the first token's
			// stamp is at most the server's TTFT, but for the wait
			// between a token's existence and its write.
			serverTTFT := tm.QueueMS + tm.PromptMS
			first, last := stamps[0], stamps[len(stamps)-1]
			require.GreaterOrEqual(t, msSince(r.sent, first), serverTTFT, "%d: TTFT", i)
			require.GreaterOrEqual(t, msSince(r.sent, last), serverTTFT+tm.PredictedMS, "%d: E2E", i)
			ttftExcess = append(ttftExcess, max(msSince(r.events[0].at, first)-serverTTFT, 0))
			decodeSlack = append(decodeSlack, math.Abs(msSince(first, last)-tm.PredictedMS))
		}
		t.Logf("client read a chunk a median %.1fms after it was written, at most %.1fms", median(readLag), quantile(readLag, 1))
		require.Less(t, median(ttftExcess), clientSlack, "median excess of role chunk read to first token's stamp over the server's TTFT: %v", ttftExcess)
		require.Less(t, median(decodeSlack), clientSlack, "median |first to last token's stamp - server's decode|: %v", decodeSlack)
	})
}

// chunkStamps returns the sim_ts of r's chunks that carry generated text
// (stamp_chunks), as times.
func chunkStamps(t *testing.T, r *result) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range r.events {
		var c struct {
			SimTS   int64 `json:"sim_ts"`
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if e.data == "[DONE]" || json.Unmarshal([]byte(e.data), &c) != nil {
			continue
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			require.NotZero(t, c.SimTS, "a token chunk without sim_ts: %s", e.data)
			out = append(out, time.Unix(0, c.SimTS))
		}
	}
	return out
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
		{"unknown fault", "/sim/faults", "PUT", `{"resets": 1}`, 400, "line 1: resets: no such key"},
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
