package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/stretchr/testify/require"
)

// TestHealthcheck runs `sloprober healthcheck` in-process against real
// loopback servers: the exit code is what Docker's HEALTHCHECK reads (0
// healthy, 1 unhealthy; 2 is reserved there), and a failure says why on one
// line of stderr.
func TestHealthcheck(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("Healthy.\n")) })
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/stopping", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "sloprober is stopping\r\nsecond line", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/auth", func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); ok && u == "admin" && p == "s3cret" {
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})
	// /hang answers only when the client has gone: the check's own timeout
	// must end it. The release channel keeps a broken client from holding
	// the server's Close for ever.
	release := make(chan struct{})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	// /stall sends 200 and its headers, then no body: a server that hangs
	// is not healthy. Before, the check waited out its timeout and passed.
	mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	// A port nothing listens on: a listener's, closed.
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close()

	withAuth := func(user, pass, path string) string {
		u, err := url.Parse(srv.URL + path)
		require.NoError(t, err)
		u.User = url.UserPassword(user, pass)
		return u.String()
	}

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		reason []string // substrings of the one line on stderr
	}{
		{name: "200", args: []string{"--url", srv.URL + "/ok"}, code: 0},
		{name: "204", args: []string{"--url", srv.URL + "/empty"}, code: 0},
		{name: "basic auth from userinfo", args: []string{"--url", withAuth("admin", "s3cret", "/auth")}, code: 0},
		{name: "503", args: []string{"--url", srv.URL + "/stopping"}, code: 1,
			reason: []string{"503 Service Unavailable", "sloprober is stopping"}},
		{name: "redirect not followed", args: []string{"--url", srv.URL + "/moved"}, code: 1, reason: []string{"302 Found"}},
		{name: "wrong password redacted", args: []string{"--url", withAuth("admin", "wrong-pass", "/auth")}, code: 1,
			reason: []string{"401 Unauthorized", "admin:xxxxx@"}},
		{name: "connection refused", args: []string{"--url", refusedURL + "/-/healthy"}, code: 1, reason: []string{"connection refused"}},
		{name: "timeout", args: []string{"--url", srv.URL + "/hang", "--timeout", "200ms"}, code: 1, reason: []string{"no answer within 200ms"}},
		{name: "200 whose body never ends", args: []string{"--url", srv.URL + "/stall", "--timeout", "200ms"}, code: 1,
			reason: []string{"200 OK, but its body did not end within 200ms"}},
		{name: "scheme", args: []string{"--url", "ftp://127.0.0.1/"}, code: 1, reason: []string{"the scheme must be http or https"}},
		{name: "bad URL redacted", args: []string{"--url", "http://u:wrong-pass@127.0.0.1:bad/"}, code: 1, reason: []string{"--url"}},
		{name: "zero timeout", args: []string{"--url", srv.URL + "/ok", "--timeout", "0s"}, code: 1, reason: []string{"must be positive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			start := time.Now()
			code := runMain(t.Context(), append([]string{"healthcheck"}, tc.args...), &stdout, &stderr, func(int) { t.Error("exit") })
			elapsed := time.Since(start)
			require.Equal(t, tc.code, code, "stderr: %s", stderr.String())
			require.Less(t, elapsed, 3*time.Second, "a health check must end within its timeout")
			require.Empty(t, stdout.String())
			if tc.code == 0 {
				require.Empty(t, stderr.String())
				return
			}
			line := stderr.String()
			require.True(t, strings.HasPrefix(line, "sloprober healthcheck: "), line)
			require.Equal(t, 1, strings.Count(line, "\n"), "one line: %q", line)
			require.True(t, strings.HasSuffix(line, "\n"), line)
			for _, want := range tc.reason {
				require.Contains(t, line, want)
			}
			require.NotContains(t, line, "wrong-pass")
		})
	}
}

// TestHealthcheckDefaultURL: without --url the check asks this host's
// /-/healthy on sloprober's port over loopback, what a container's
// HEALTHCHECK needs with no arguments.
func TestHealthcheckDefaultURL(t *testing.T) {
	u, err := url.Parse(defaultHealthcheckURL)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname())
	require.Equal(t, strings.TrimPrefix(defaultListenAddress, ":"), u.Port())
	require.Equal(t, "/-/healthy", u.Path)

	app := kingpin.New("sloprober", "")
	c := newHealthcheckCommand(app)
	_, err = app.Parse([]string{"healthcheck"})
	require.NoError(t, err)
	require.Equal(t, defaultHealthcheckURL, *c.url)
	require.Equal(t, 5*time.Second, *c.timeout)
}
