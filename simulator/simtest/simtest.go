// Package simtest starts a simulator on a loopback port for tests.
package simtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"

	"github.com/sloprober/sloprober/simulator"
)

// Server is a simulator served over HTTP on 127.0.0.1.
type Server struct {
	*simulator.Simulator
	// URL is the server's root, e.g. http://127.0.0.1:41234; the OpenAI
	// base URL is URL + "/v1".
	URL string
}

// Start serves a simulator configured by cfg (YAML, read over the defaults)
// and stops it, engine and server, when the test ends.
func Start(t testing.TB, cfg string) *Server {
	t.Helper()
	return StartWith(t, cfg, nil)
}

// StartWith is Start with the handler wrapped, to look at requests.
func StartWith(t testing.TB, cfg string, wrap func(http.Handler) http.Handler) *Server {
	t.Helper()
	c, err := simulator.Parse([]byte(cfg))
	if err != nil {
		t.Fatalf("simulator config: %v", err)
	}
	sim, err := simulator.New(c, promslog.NewNopLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("simulator: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sim.Run(ctx)
	}()
	h := sim.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	return &Server{Simulator: sim, URL: srv.URL}
}
