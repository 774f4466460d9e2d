package simulator_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/simulator"
	"github.com/sloprober/sloprober/simulator/simtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testSim is a simulator served over loopback for one test.
type testSim struct {
	*simulator.Simulator
	url    string
	client *http.Client
}

// startSim starts a simulator with the configuration cfg (YAML, read over
// the defaults) on a loopback port, and stops it when the test ends.
func startSim(t *testing.T, cfg string) *testSim {
	t.Helper()
	s := simtest.Start(t, cfg)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(client.CloseIdleConnections) // runs before the server stops
	return &testSim{Simulator: s.Simulator, url: s.URL, client: client}
}

// event is one SSE data payload and when the test read it.
type event struct {
	at   time.Time
	data string
}

// result is what a test client saw of one request.
type result struct {
	status  int
	header  http.Header
	sent    time.Time // just before the request was issued
	headers time.Time // response headers read
	events  []event
	body    []byte // non-streaming replies
	readErr error  // the body ended with an error (reset)
	ended   time.Time
}

// tokens returns the arrival times of the chunks that carry generated text.
func (r *result) tokens(t *testing.T) []time.Time {
	var out []time.Time
	for _, e := range r.events {
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
				Text  string                   `json:"text"`
			} `json:"choices"`
		}
		if e.data == "[DONE]" || json.Unmarshal([]byte(e.data), &c) != nil {
			continue
		}
		if len(c.Choices) > 0 && (c.Choices[0].Delta.Content != "" || c.Choices[0].Text != "") {
			out = append(out, e.at)
		}
	}
	return out
}

// final holds what the last chunks of a stream (or a whole reply) report.
type final struct {
	Usage   *simulator.Usage   `json:"usage"`
	Timings *simulator.Timings `json:"timings"`
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
		Message      struct {
			Content string `json:"content"`
		} `json:"message"`
		Text string `json:"text"`
	} `json:"choices"`
}

// summary merges usage, timings and finish reason over all chunks.
func (r *result) summary(t *testing.T) final {
	t.Helper()
	var f final
	payloads := []string{string(r.body)}
	if r.body == nil {
		payloads = payloads[:0]
		for _, e := range r.events {
			payloads = append(payloads, e.data)
		}
	}
	for _, p := range payloads {
		var c final
		if p == "[DONE]" || json.Unmarshal([]byte(p), &c) != nil {
			continue
		}
		if c.Usage != nil {
			f.Usage = c.Usage
		}
		if c.Timings != nil {
			f.Timings = c.Timings
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				f.Choices = append(f.Choices, ch)
			}
		}
	}
	return f
}

func (r *result) done() bool {
	return len(r.events) > 0 && r.events[len(r.events)-1].data == "[DONE]"
}

// post sends body to path and reads the whole reply, recording when each SSE
// data line arrived. onEvent, if set, is called after each event.
func (s *testSim) post(t *testing.T, path string, body any, onEvent func(event)) *result {
	t.Helper()
	return s.postCtx(context.Background(), t, path, body, onEvent)
}

func (s *testSim) postCtx(ctx context.Context, t *testing.T, path string, body any, onEvent func(event)) *result {
	t.Helper()
	return s.postHeaders(ctx, t, path, nil, body, onEvent)
}

// postHeaders is postCtx with request headers.
func (s *testSim) postHeaders(ctx context.Context, t *testing.T, path string, header map[string]string, body any, onEvent func(event)) *result {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	r := &result{sent: time.Now()}
	resp, err := s.client.Do(req)
	if err != nil {
		r.readErr = err
		return r
	}
	defer resp.Body.Close()
	r.headers = time.Now()
	r.status, r.header = resp.StatusCode, resp.Header
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		r.body, r.readErr = io.ReadAll(resp.Body)
		return r
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			e := event{at: time.Now(), data: data}
			r.events = append(r.events, e)
			if onEvent != nil {
				onEvent(e)
			}
		}
		if err != nil {
			r.ended = time.Now()
			if !errors.Is(err, io.EOF) {
				r.readErr = err
			}
			return r
		}
	}
}

// chat is a chat completion request body.
func chat(content string, maxTokens int, stream bool) map[string]any {
	b := map[string]any{
		"model":          "sim-model",
		"messages":       []map[string]any{{"role": "user", "content": content}},
		"stream":         stream,
		"stream_options": map[string]any{"include_usage": true},
	}
	if maxTokens > 0 {
		b["max_tokens"] = maxTokens
		b["ignore_eos"] = true
	}
	return b
}

// text returns n tokens of distinct text for a chars_per_token: 4 tokenizer:
// each token is 4 characters and the text starts with seed's words.
func text(seed string, n int) string {
	var b strings.Builder
	b.WriteString(seed)
	for i := 0; b.Len() < n*4; i++ {
		b.WriteString(" w")
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), 1+i%5))
	}
	return b.String()[:n*4]
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func quantile(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[int(q*float64(len(s)-1))]
}

func msSince(a, b time.Time) float64 { return float64(b.Sub(a)) / float64(time.Millisecond) }
