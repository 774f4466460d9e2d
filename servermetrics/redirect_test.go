package servermetrics

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/stretchr/testify/require"
)

// TestScrapeRedirectsStayOnTheEngine: a /metrics that redirects to
// another port never sends the section's credentials there (the bearer
// token reached another port). follow_redirects (the default) follows a
// redirect to the same host and port only; false follows none; either
// way what is not followed is an "http" failure.
func TestScrapeRedirectsStayOnTheEngine(t *testing.T) {
	var elsewhere atomic.Int32
	other := serve(t, func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("vllm:num_requests_waiting 1\n"))
	})
	var auth atomic.Value
	engine := serve(t, func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		switch r.URL.Path {
		case "/metrics":
			http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
		case "/same":
			http.Redirect(w, r, "/real", http.StatusTemporaryRedirect)
		case "/real":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("vllm:num_requests_waiting 2\n"))
		}
	})
	for _, tc := range []struct {
		name, path string
		follow     bool
		waiting    float64 // 0: the scrape fails
	}{
		{"follow_redirects, another port", "/metrics", true, 0},
		{"follow_redirects, the same port", "/same", true, 2},
		{"follow_redirects false, another port", "/metrics", false, 0},
		{"follow_redirects false, the same port", "/same", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smConfig(engine.URL+tc.path, 5*time.Second)
			cfg.HTTPClientConfig.FollowRedirects = tc.follow
			cfg.HTTPClientConfig.Authorization = &commoncfg.Authorization{Type: "Bearer", Credentials: "s3cr3t"}
			s, err := NewScraper("t", cfg)
			require.NoError(t, err)
			t.Cleanup(s.Close)
			snap, err := s.Scrape(t.Context())
			if tc.waiting == 0 {
				var se *ScrapeError
				require.True(t, errors.As(err, &se), "%v", err)
				require.Equal(t, ReasonHTTP, se.Reason)
				require.True(t, strings.HasPrefix(se.Err.Error(), "HTTP status 3"), se.Err.Error())
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.waiting, *snap.Waiting)
			}
			require.Equal(t, "Bearer s3cr3t", auth.Load(), "the engine itself gets the credentials")
		})
	}
	require.Zero(t, elsewhere.Load(), "another port never got a request, nor the token")
}
