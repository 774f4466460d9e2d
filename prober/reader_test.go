package prober_test

import (
	"bufio"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// TestFastReaderTLS: over TLS the fast reader serves HTTP/1.1 streams
// itself (enable_http2: false) and measures them as it does over plain
// TCP, reusing its connections; with HTTP/2 enabled the target stays on
// net/http, which may speak HTTP/2, and says why.
func TestFastReaderTLS(t *testing.T) {
	if !prober.FastReaderSupported {
		t.Skip("the fast reader needs Linux")
	}
	var handler http.Handler
	simtest.StartWith(t, "slots: 4\nfixed: {ttft: 5ms, itl: 2ms}\nstamp_chunks: true\n", func(h http.Handler) http.Handler {
		handler = h
		return h
	})
	srv := httptest.NewUnstartedServer(handler)
	srv.EnableHTTP2 = true // the server offers both; the client picks
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	for _, tc := range []struct {
		name  string
		http2 bool
	}{
		{name: "HTTP/1.1"},
		{name: "HTTP/2 enabled", http2: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgt := target(srv.URL + "/v1")
			tgt.HTTPClientConfig.TLSConfig.CAFile = ca
			tgt.HTTPClientConfig.EnableHTTP2 = tc.http2
			c, err := prober.NewClient(tgt, "sloprober/test", 8, prober.WithReader(prober.ReaderFast))
			require.NoError(t, err)
			t.Cleanup(c.Close)
			if tc.http2 {
				require.Contains(t, c.FastOff, "HTTP/2")
			} else {
				require.Empty(t, c.FastOff)
			}
			for round := range 3 {
				results := make([]*prober.Result, 6)
				var wg sync.WaitGroup
				for i := range results {
					wg.Go(func() { results[i] = do(c, uint64(round*10+i), 64, 20) })
				}
				wg.Wait()
				for _, r := range results {
					require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
					require.Len(t, r.Chunks, 20)
					require.Len(t, r.Stamps, 20)
					if round == 0 {
						require.Positive(t, r.Trace.TLSDone, "a new connection shakes hands")
					}
					if round == 2 && !tc.http2 {
						require.True(t, r.Trace.Reused, "the connections are kept")
					}
				}
			}
		})
	}
}

// rawServer serves every connection with serve on loopback until the test
// ends.
func rawServer(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	return "http://" + ln.Addr().String() + "/v1"
}

// TestEndlessResponseHead: a response head that never ends is cut at
// net/http's 10 MiB, by either reader, long before the request's timeout.
func TestEndlessResponseHead(t *testing.T) {
	url := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Endless: ")
		line := bytes.Repeat([]byte("a"), 64<<10)
		for {
			if _, err := c.Write(line); err != nil {
				return
			}
		}
	})
	tgt := target(url)
	tgt.Timeout = model.Duration(time.Minute)
	r := do(newClient(t, tgt), 1, 8, 4)
	require.Equal(t, prober.OutcomeProtocolError, r.Outcome, r.Error())
	require.Contains(t, r.Error(), "exceeded 10485760 bytes")
	require.Less(t, r.Ended, 30*time.Second)
}

// TestNothingAfterTheResponse: the fast reader does not reuse a connection
// on which a server sent bytes after its response (a second, unasked-for
// response): the next request goes on a new one and reads its own answer.
// (net/http closes such a connection too when its reader sees the bytes
// first, but may hand the connection to the next request before it does.)
func TestNothingAfterTheResponse(t *testing.T) {
	if testReader != prober.ReaderFast {
		t.Skip("the fast reader's property; net/http races its reader here")
	}
	body := `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" + "data: [DONE]\n\n"
	response := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	var conns atomic.Int64
	stray := make(chan struct{}, 8)
	url := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, response); err != nil {
				return
			}
			// A stray response once the client has read its own.
			time.Sleep(10 * time.Millisecond)
			_, err = io.WriteString(c, "HTTP/1.1 500 Stray\r\nContent-Length: 0\r\n\r\n")
			stray <- struct{}{}
			if err != nil {
				return
			}
		}
	})
	c := newClient(t, target(url))
	for i := range 4 {
		r := do(c, uint64(i), 8, 1)
		require.Equal(t, prober.OutcomeOK, r.Outcome, "request %d: %s", i, r.Error())
		select {
		case <-stray:
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not send its stray response")
		}
	}
	require.Equal(t, int64(4), conns.Load(), "no connection carried a second request")
}
