package simulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/simulator"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReplyTimingsLogged: at debug level, every streamed reply's timings
// are logged with the client's request id, exactly as the reply reported
// them: the ground truth beside a prober's trace of the same request.
func TestReplyTimingsLogged(t *testing.T) {
	cfg, err := simulator.Parse([]byte("slots: 2\n"))
	require.NoError(t, err)
	var logs syncBuffer
	sim, err := simulator.New(cfg, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sim.Run(ctx) }()
	srv := httptest.NewServer(sim.Handler())
	defer func() { srv.Close(); cancel(); <-done }()

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-model","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"one two three"}]}`))
	require.NoError(t, err)
	req.Header.Set("X-Request-Id", "0af7651916cd43dd8448eb211c80319c")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	var reported simulator.Timings
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.Contains(line, `"timings"`) {
			var c struct{ Timings simulator.Timings }
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &c))
			reported = c.Timings
		}
	}
	require.Positive(t, reported.PromptMS)

	var logged struct {
		Msg         string
		RequestID   string  `json:"request_id"`
		QueueMS     float64 `json:"queue_ms"`
		PromptMS    float64 `json:"prompt_ms"`
		PredictedMS float64 `json:"predicted_ms"`
	}
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, "Reply timings") {
			require.NoError(t, json.Unmarshal([]byte(line), &logged))
		}
	}
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", logged.RequestID)
	require.Equal(t, reported.QueueMS, logged.QueueMS)
	require.Equal(t, reported.PromptMS, logged.PromptMS)
	require.Equal(t, reported.PredictedMS, logged.PredictedMS)
}
