package simulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/simulator"
)

// bubbleSim is a simulator started inside a testing/synctest bubble and
// called through its handler, without a network. Its engine's clock and
// timers are the bubble's fake clock, which moves only when every goroutine
// waits: a phase lasts exactly its modelled length, however busy the
// machine is. It is for tests of the engine's model (how long a step or a
// prefill is); the tests over loopback check the real clock's measurements,
// within tolerances.
type bubbleSim struct {
	*simulator.Simulator
	h   http.Handler
	ctx context.Context // the bubble's: a select on its Done blocks durably
}

// startBubbleSim starts a simulator configured by cfg (YAML, read over the
// defaults). It must be called inside synctest.Test, with its t; the
// engine stops in t's cleanup, inside the bubble. Its metrics are
// registered, so GET /metrics answers (send).
func startBubbleSim(t *testing.T, cfg string) *bubbleSim {
	t.Helper()
	c, err := simulator.Parse([]byte(cfg))
	require.NoError(t, err)
	sim, err := simulator.New(c, promslog.NewNopLogger(), prometheus.NewRegistry())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sim.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &bubbleSim{Simulator: sim, h: sim.Handler(), ctx: t.Context()}
}

// post serves one request and returns what a client would have read, each
// event stamped with the bubble's time when the handler wrote it (the time
// its token came to exist: nothing in a bubble takes time but the timers).
func (s *bubbleSim) post(t *testing.T, path string, body any) *result {
	t.Helper()
	return s.postHeaders(t, path, nil, body)
}

// postCtx is post with a context of the caller's (cancelled: the client
// left). ctx must be the bubble's or derived from it.
func (s *bubbleSim) postCtx(ctx context.Context, t *testing.T, path string, body any) *result {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return s.doCtx(ctx, t, http.MethodPost, path, nil, b)
}

// postHeaders is post with request headers.
func (s *bubbleSim) postHeaders(t *testing.T, path string, header map[string]string, body any) *result {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return s.do(t, http.MethodPost, path, header, b)
}

// send serves a request that is not a generation (PUT /sim/faults, GET
// /metrics) and returns its status and body.
func (s *bubbleSim) send(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	r := s.do(t, method, path, nil, []byte(body))
	return r.status, string(r.body)
}

func (s *bubbleSim) do(t *testing.T, method, path string, header map[string]string, body []byte) *result {
	t.Helper()
	return s.doCtx(s.ctx, t, method, path, header, body)
}

// errAborted is a result's readErr when the handler aborted the reply: a
// reset, which hijacks the connection to send a TCP RST over the network,
// aborts the handler here (as over HTTP/2, which has no connection to
// hijack).
var errAborted = errors.New("reply aborted by the handler (a reset)")

func (s *bubbleSim) doCtx(ctx context.Context, t *testing.T, method, path string, header map[string]string, body []byte) (r *result) {
	t.Helper()
	req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := &eventWriter{header: http.Header{}, r: &result{sent: time.Now()}}
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			w.r.readErr = errAborted
			w.r.ended = time.Now()
			r = w.r
		}
	}()
	s.h.ServeHTTP(w, req)
	w.r.ended = time.Now()
	if w.r.status == 0 {
		w.r.status = http.StatusOK
	}
	if !strings.HasPrefix(w.header.Get("Content-Type"), "text/event-stream") {
		w.r.body = w.pending
	}
	return w.r
}

// eventWriter is an http.ResponseWriter that splits a stream into its SSE
// data lines as the handler writes them.
type eventWriter struct {
	header  http.Header
	r       *result
	pending []byte // the part of the body not yet split into lines
}

func (w *eventWriter) Header() http.Header { return w.header }

func (w *eventWriter) WriteHeader(code int) {
	if w.r.status == 0 {
		w.r.status, w.r.header, w.r.headers = code, w.header.Clone(), time.Now()
	}
}

func (w *eventWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.pending = append(w.pending, b...)
	if !strings.HasPrefix(w.header.Get("Content-Type"), "text/event-stream") {
		return len(b), nil
	}
	for {
		line, rest, ok := bytes.Cut(w.pending, []byte("\n"))
		if !ok {
			return len(b), nil
		}
		if data, ok := strings.CutPrefix(strings.TrimRight(string(line), "\r"), "data: "); ok {
			w.r.events = append(w.r.events, event{at: time.Now(), data: data})
		}
		w.pending = rest
	}
}

func (w *eventWriter) Flush() {}
