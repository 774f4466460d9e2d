package prober_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/prober"
)

// TestTargetURLQuery: a target URL with a query (http://h/v1?key=X, an
// API version or a key some gateways take in the query) keeps its query
// on every request, after the API's path: POST /v1/chat/completions?key=X,
// GET /v1/models?key=X, POST /tokenize?key=X. Appended to the string, the
// path went into the query: POST /v1?key=X/chat/completions.
func TestTargetURLQuery(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" ?"+r.URL.RawQuery)
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
		case "/v1/models":
			fmt.Fprint(w, `{"data": [{"id": "sim-model", "max_model_len": 4096}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	for _, tc := range []struct{ suffix, query string }{
		{"/v1?key=X", "key=X"},
		{"/v1/?api-version=2024-06-01&key=a%2Fb", "api-version=2024-06-01&key=a%2Fb"},
		{"/v1", ""},
	} {
		t.Run(tc.suffix, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			c := newClient(t, target(srv.URL+tc.suffix))
			r := do(c, 1, 10, 1)
			require.Equal(t, prober.OutcomeOK, r.Outcome, r.Error())
			models, err := c.Models(context.Background())
			require.NoError(t, err)
			require.Equal(t, "sim-model", models[0].ID)
			c.Tokenize(context.Background(), prober.NewCalibrator())

			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, "POST /v1/chat/completions ?"+tc.query, seen[0])
			require.Equal(t, "GET /v1/models ?"+tc.query, seen[1])
			var tokenize bool
			for _, s := range seen {
				require.True(t, strings.HasSuffix(s, " ?"+tc.query), "every request keeps the query: %q", s)
				tokenize = tokenize || strings.HasPrefix(s, "POST /tokenize ")
			}
			require.True(t, tokenize, "the server's root, the query kept: %q", seen)
		})
	}
}
