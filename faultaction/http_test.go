package faultaction

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// seen is one request a test server received.
type seen struct {
	method, path, auth, contentType, body string
}

func recorder(t *testing.T, status int, answer string) (*httptest.Server, chan seen) {
	t.Helper()
	ch := make(chan seen, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- seen{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(b)}
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

func TestHTTPDoAndUndo(t *testing.T) {
	srv, ch := recorder(t, http.StatusOK, "replica 1 drained\n")
	a := &Action{HTTP: &HTTPAction{
		HTTPRequest: HTTPRequest{
			URL:     srv.URL + "/admin/backends/1/down",
			Headers: map[string]commoncfg.Secret{"Authorization": "Bearer tok-123", "Content-Type": "application/json"},
			Body:    `{"reason":"soak"}`,
		},
		Undo: &HTTPRequest{Method: http.MethodDelete, URL: srv.URL + "/admin/backends/1/down"},
	}}
	var r Runner
	e := r.Do(context.Background(), a)
	require.Empty(t, e.Error)
	require.Equal(t, "HTTP 200 OK: replica 1 drained", e.Result)
	require.Equal(t, ActionDo, e.Action)
	require.Equal(t, KindHTTP, e.Kind)
	require.Equal(t, a.Describe(), e.Description)
	require.Equal(t, seen{"POST", "/admin/backends/1/down", "Bearer tok-123", "application/json", `{"reason":"soak"}`}, <-ch)

	e = r.Undo(context.Background(), a)
	require.Empty(t, e.Error)
	require.Equal(t, ActionUndo, e.Action)
	require.Equal(t, "http DELETE "+srv.URL+"/admin/backends/1/down", e.Description)
	require.Equal(t, seen{"DELETE", "/admin/backends/1/down", "", "", ""}, <-ch)

	// The event says nothing secret.
	j, err := json.Marshal(e)
	require.NoError(t, err)
	require.NotContains(t, string(j), "tok-123")
}

func TestHTTPNothingToUndo(t *testing.T) {
	srv, ch := recorder(t, http.StatusOK, "")
	var r Runner
	e := r.Undo(context.Background(), &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: srv.URL}}})
	require.Empty(t, e.Error)
	require.Equal(t, "nothing to undo", e.Result)
	require.Empty(t, ch, "nothing is sent")
}

func TestHTTPNon2xx(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		srv, _ := recorder(t, status, "no such replica")
		var r Runner
		e := r.Do(context.Background(), &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: srv.URL + "/x"}}})
		require.Equal(t, fmt.Sprintf("POST %s/x: %d %s, want 2xx", srv.URL, status, http.StatusText(status)), e.Error)
		require.Equal(t, fmt.Sprintf("HTTP %d %s: no such replica", status, http.StatusText(status)), e.Result)
	}
}

// An endpoint's answer reaches the run as one printable line: "ok" then
// an OSC that would set the operator's window title and a CSI that would
// clear the screen, a bidi override, a NUL.
func TestHTTPResultCleaned(t *testing.T) {
	srv, _ := recorder(t, http.StatusOK, "ok\x1b]0;PWNED\x07\x1b[2J\x00done\u202e!")
	var r Runner
	e := r.Do(context.Background(), &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: srv.URL + "/x"}}})
	require.Empty(t, e.Error)
	require.Equal(t, "HTTP 200 OK: ok ]0;PWNED [2J done !", e.Result)
}

// A redirect is a failure naming its Location, and its target receives
// nothing, whichever client the Runner was given.
func TestHTTPRedirectRefused(t *testing.T) {
	var hit atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit.Add(1) }))
	defer target.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	a := &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{
		URL:     redirector.URL + "/down",
		Headers: map[string]commoncfg.Secret{"Authorization": "Bearer tok"},
	}}}
	for name, r := range map[string]*Runner{
		"default":          {},
		"following client": {HTTPClient: &http.Client{}},
	} {
		e := r.Do(context.Background(), a)
		require.Equal(t, "POST "+redirector.URL+"/down: redirect 307 Temporary Redirect to "+target.URL+"/elsewhere not followed: a fault action sends nothing where its configuration does not say", e.Error, name)
	}
	require.Zero(t, hit.Load(), "the redirect's target received a request")
}

// The timeout cuts a call to a server that never answers, and says so.
func TestHTTPTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	var r Runner
	a := &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: srv.URL}, Timeout: model.Duration(100 * time.Millisecond)}}
	e := r.Do(context.Background(), a)
	require.Equal(t, `Post "`+srv.URL+`": timed out after 100ms`, e.Error)
	require.Less(t, e.Seconds, 5.0)

	// The caller's context is honoured too.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	a.HTTP.Timeout = 0 // default 10s
	e = r.Do(ctx, a)
	require.Contains(t, e.Error, "context canceled")
	require.Less(t, e.Seconds, 5.0)
}

// An answer that never ends is read up to 64 KiB, and 512 bytes of it kept.
func TestHTTPGiantBodyBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("é", 1000)) // 2 bytes a rune: cuts fall mid-rune
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	var r Runner
	e := r.Do(context.Background(), &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{Method: http.MethodGet, URL: srv.URL}}})
	require.Empty(t, e.Error)
	prefix := "HTTP 200 OK: "
	require.True(t, strings.HasPrefix(e.Result, prefix))
	require.Equal(t, strings.Repeat("é", maxHTTPKept/2)+"…", e.Result[len(prefix):])
}

func TestKeep(t *testing.T) {
	require.Equal(t, "ok", keep([]byte(" ok\n")))
	require.Equal(t, strings.Repeat("a", 511)+"…", keep([]byte(strings.Repeat("a", 511)+"€€")), "a rune cut in two is dropped")
	require.Equal(t, "\uFFFD", keep([]byte{0xff}))
}

// TestPending: a call under way is pending until its timeout, for a
// stopping daemon to wait on; nothing is once it ended.
func TestPending(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the server's close: a failed check must not wait out the minute
	var r Runner
	a := &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: srv.URL + "/down"}, Undo: &HTTPRequest{URL: srv.URL + "/up"}, Timeout: model.Duration(time.Minute)}}
	until, _ := r.Pending()
	require.True(t, until.IsZero())
	done := make(chan Event)
	before := time.Now()
	go func() { done <- r.Undo(context.Background(), a) }()
	require.Eventually(t, func() bool { u, _ := r.Pending(); return !u.IsZero() }, 5*time.Second, time.Millisecond)
	until, what := r.Pending()
	require.Equal(t, "undo http POST "+srv.URL+"/up", what)
	require.WithinDuration(t, before.Add(time.Minute), until, 5*time.Second)
	free()
	require.Empty(t, (<-done).Error)
	until, _ = r.Pending()
	require.True(t, until.IsZero(), "nothing under way once the undo ended")
}
