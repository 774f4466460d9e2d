package prober_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/prober"
)

// TestAPIRequests sends one request to each API over real HTTP and checks
// what the server received (path, body fields, headers) and what was read
// from the recorded stream it answered with.
func TestAPIRequests(t *testing.T) {
	for _, tc := range []struct {
		api, path, stream string
		headers           *commoncfg.Headers
		wantKeys          []string
		wantHeader        map[string][]string
		firstAnswer       int
	}{
		{api: "chat", path: "/v1/chat/completions", stream: "chat_reasoning_tool_call.sse",
			wantKeys: []string{"max_tokens", "messages", "model", "stream", "stream_options"}, firstAnswer: 2},
		{api: "completions", path: "/v1/completions", stream: "completions.sse",
			wantKeys: []string{"max_tokens", "model", "prompt", "stream", "stream_options"}},
		{api: "responses", path: "/v1/responses", stream: "responses_reasoning_function_call.sse",
			wantKeys: []string{"input", "max_output_tokens", "model", "stream"}, firstAnswer: 2},
		{api: "messages", path: "/v1/messages", stream: "messages_thinking_tool_use.sse",
			wantKeys:   []string{"max_tokens", "messages", "model", "stream", "system"},
			wantHeader: map[string][]string{"Anthropic-Version": {prober.AnthropicVersion}}, firstAnswer: 2},
		{api: "messages", path: "/v1/messages", stream: "messages_text.sse",
			headers: &commoncfg.Headers{Headers: map[string]commoncfg.Header{
				"x-api-key":         {Secrets: []commoncfg.Secret{"sk-ant-test"}},
				"anthropic-version": {Values: []string{"2099-01-01"}},
			}},
			wantKeys:   []string{"max_tokens", "messages", "model", "stream", "system"},
			wantHeader: map[string][]string{"Anthropic-Version": {"2099-01-01"}, "X-Api-Key": {"sk-ant-test"}}},
	} {
		t.Run(tc.api+"/"+tc.stream, func(t *testing.T) {
			stream, err := os.ReadFile(filepath.Join("testdata", "streams", tc.stream))
			require.NoError(t, err)
			type got struct {
				path   string
				header http.Header
				body   map[string]any
			}
			received := make(chan got, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				var body map[string]any
				_ = json.Unmarshal(b, &body)
				received <- got{r.URL.Path, r.Header.Clone(), body}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write(stream)
			}))
			t.Cleanup(srv.Close)
			tg := target(srv.URL + "/v1")
			tg.API = tc.api
			tg.HTTPClientConfig.HTTPHeaders = tc.headers
			c := newClient(t, tg)
			req := &prober.Request{ID: "0123456789abcdef0123456789abcdef", InputTokens: 8, OutputTokens: 16,
				Messages: []prober.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Weather in Paris?"}}}
			if tc.api == "completions" {
				req.Messages, req.Prompt = nil, "Weather in Paris?"
			}
			r := &prober.Result{Scheduled: time.Now()}
			c.Do(context.Background(), req, r)
			require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
			require.Equal(t, tc.firstAnswer, r.FirstAnswer)

			g := <-received
			require.Equal(t, tc.path, g.path)
			keys := make([]string, 0, len(g.body))
			for k := range g.body {
				keys = append(keys, k)
			}
			require.ElementsMatch(t, tc.wantKeys, keys)
			require.Equal(t, true, g.body["stream"])
			require.Equal(t, "0123456789abcdef0123456789abcdef", g.header.Get(prober.RequestIDHeader))
			for k, v := range tc.wantHeader {
				require.Equal(t, v, g.header.Values(k), k)
			}
			switch tc.api {
			case "responses":
				require.EqualValues(t, 16, g.body["max_output_tokens"])
				require.Len(t, g.body["input"], 2, "the system message is an input item")
			case "messages":
				require.EqualValues(t, 16, g.body["max_tokens"])
				require.Equal(t, "Be brief.", g.body["system"], "system messages go in the system field")
				require.Equal(t, []any{map[string]any{"role": "user", "content": "Weather in Paris?"}}, g.body["messages"])
			}
		})
	}
}
