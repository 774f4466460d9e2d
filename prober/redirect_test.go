package prober

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckRedirect: by default no redirect is followed; with
// follow_redirects only those that keep the method (307, 308: net/http keeps
// POST) to the same scheme, host and port, at most maxRedirects.
func TestCheckRedirect(t *testing.T) {
	req := func(method, u string) *http.Request {
		p, err := url.Parse(u)
		require.NoError(t, err)
		return &http.Request{Method: method, URL: p}
	}
	first := req(http.MethodPost, "http://127.0.0.1:8000/v1/chat/completions")
	for _, tc := range []struct {
		name   string
		follow bool
		next   *http.Request
		via    int
		ok     bool
	}{
		{"not followed by default", false, req(http.MethodPost, "http://127.0.0.1:8000/v2/chat/completions"), 1, false},
		{"same origin, method kept", true, req(http.MethodPost, "http://127.0.0.1:8000/v2/chat/completions"), 1, true},
		{"POST turned into GET (301, 302, 303)", true, req(http.MethodGet, "http://127.0.0.1:8000/v2/chat/completions"), 1, false},
		{"another port", true, req(http.MethodPost, "http://127.0.0.1:8001/v1/chat/completions"), 1, false},
		{"another scheme", true, req(http.MethodPost, "https://127.0.0.1:8000/v1/chat/completions"), 1, false},
		{"too many", true, req(http.MethodPost, "http://127.0.0.1:8000/v2/chat/completions"), maxRedirects + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			via := make([]*http.Request, tc.via)
			for i := range via {
				via[i] = first
			}
			err := checkRedirect(tc.follow)(tc.next, via)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, http.ErrUseLastResponse)
			}
		})
	}
}
