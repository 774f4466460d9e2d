package rrproxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backends starts n servers answering their own index.
func backends(t *testing.T, n int) []*httptest.Server {
	t.Helper()
	srvs := make([]*httptest.Server, n)
	for i := range srvs {
		srvs[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "backend %d %s", i, r.URL.Path)
		}))
		t.Cleanup(srvs[i].Close)
	}
	return srvs
}

func start(t *testing.T, urls ...string) (*Proxy, *httptest.Server) {
	t.Helper()
	p := New(urls...)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() {
		srv.Close()
		p.Close()
	})
	return p, srv
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestRoundRobin(t *testing.T) {
	srvs := backends(t, 3)
	_, srv := start(t, srvs[0].URL, srvs[1].URL, srvs[2].URL)
	var got []string
	for range 6 {
		code, body := get(t, srv.URL+"/v1/models")
		require.Equal(t, http.StatusOK, code)
		got = append(got, body)
	}
	want := []string{"backend 0 /v1/models", "backend 1 /v1/models", "backend 2 /v1/models"}
	require.Equal(t, append(want, want...), got)
}

// A dead backend fails its turn with 502 (no retry, as a gateway without
// one); marked down through the admin API it is skipped; up again, it
// has its turn again.
func TestDeadBackendAndAdmin(t *testing.T) {
	srvs := backends(t, 3)
	dead := srvs[1].URL
	srvs[1].Close() // connection refused from now on
	p, srv := start(t, srvs[0].URL, dead, srvs[2].URL)

	codes := make([]int, 3)
	for i := range codes {
		codes[i], _ = get(t, srv.URL+"/x")
	}
	require.Equal(t, []int{200, http.StatusBadGateway, 200}, codes)
	require.EqualValues(t, 1, p.Backends()[1].Failed)

	require.Equal(t, http.StatusOK, post(t, srv.URL+"/admin/backends/1/down"))
	for range 4 {
		code, body := get(t, srv.URL+"/x")
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, "backend 1")
	}
	require.EqualValues(t, 1, p.Backends()[1].Served, "a down backend gets nothing")

	// The replica restarts on another port and is put back in rotation.
	restarted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "backend 1 again")
	}))
	defer restarted.Close()
	require.NoError(t, p.SetURL(1, restarted.URL))
	require.True(t, p.Backends()[1].Down, "SetURL keeps the down mark")
	require.Equal(t, http.StatusOK, post(t, srv.URL+"/admin/backends/1/up"))
	var bodies []string
	for range 3 {
		code, body := get(t, srv.URL+"/x")
		require.Equal(t, http.StatusOK, code)
		bodies = append(bodies, body)
	}
	require.Contains(t, bodies, "backend 1 again")

	code, body := get(t, srv.URL+"/admin/backends")
	require.Equal(t, http.StatusOK, code)
	var states []BackendState
	require.NoError(t, json.Unmarshal([]byte(body), &states))
	require.Len(t, states, 3)
	require.False(t, states[1].Down)
	require.Equal(t, restarted.URL, states[1].URL)

	require.Equal(t, http.StatusNotFound, post(t, srv.URL+"/admin/backends/7/down"))
	require.Equal(t, http.StatusNotFound, post(t, srv.URL+"/admin/backends/x/down"))
	require.Equal(t, http.StatusMethodNotAllowed, func() int {
		c, _ := get(t, srv.URL+"/admin/backends/0/down")
		return c
	}())
}

func TestAllDown(t *testing.T) {
	srvs := backends(t, 2)
	p, srv := start(t, srvs[0].URL, srvs[1].URL)
	require.NoError(t, p.SetDown(0, true))
	require.NoError(t, p.SetDown(1, true))
	code, _ := get(t, srv.URL+"/x")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Error(t, p.SetDown(2, true))
}

// Each SSE chunk reaches the client before the backend writes the next:
// the backend waits for the client to have read a chunk before sending
// the next, so a proxy that buffered would time the test out.
func TestSSEStreamsUnbuffered(t *testing.T) {
	read := make(chan struct{})
	sse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: chunk %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-read:
			case <-time.After(5 * time.Second):
				return // the client never saw it: the test fails below
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer sse.Close()
	_, srv := start(t, sse.URL)

	resp, err := http.Get(srv.URL + "/v1/chat/completions")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("data: chunk %d\n", i), line)
		_, err = br.ReadString('\n') // the blank line ending the event
		require.NoError(t, err)
		read <- struct{}{}
	}
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	require.Equal(t, "data: [DONE]", strings.TrimSpace(string(rest)))
}

func TestNewPanicsOnBadURL(t *testing.T) {
	require.PanicsWithValue(t, `rrproxy: backend 0: backend URL "localhost:80": want http(s)://host:port`, func() { New("localhost:80") })
}
