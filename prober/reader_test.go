package prober_test

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

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
