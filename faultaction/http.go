package faultaction

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of an HTTP action's answer: at most 64 KiB of it is read (an
// admin endpoint answering a 1 GiB body must not fill the prober's
// memory), its first 512 bytes are kept in the Event (a report shows what
// the endpoint said, not pages of it).
const (
	maxHTTPRead = 64 << 10
	maxHTTPKept = 512
)

// defaultHTTPClient sends requests to the URL named and nowhere else: no
// proxy from the environment (an admin token must not go through a proxy
// the configuration did not name), no redirects.
var defaultHTTPClient = &http.Client{
	Transport: func() http.RoundTripper {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		return t
	}(),
	CheckRedirect: noRedirects,
}

// noRedirects makes the client return a redirect as the answer, which
// doHTTP then fails naming its Location: a redirect would send the
// request (its headers, an Authorization among them, and its body) where
// the configuration did not say.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func (r *Runner) httpClient() *http.Client {
	if r.HTTPClient == nil {
		return defaultHTTPClient
	}
	c := *r.HTTPClient
	c.CheckRedirect = noRedirects
	return &c
}

func (r *Runner) doHTTP(ctx context.Context, hr *HTTPRequest, d time.Duration) (result, error) {
	ctx, cancel := bounded(ctx, d)
	defer cancel()
	shown := hr.method() + " " + redactURL(hr.URL)
	var body io.Reader
	if hr.Body != "" {
		body = strings.NewReader(hr.Body)
	}
	req, err := http.NewRequestWithContext(ctx, hr.method(), hr.URL, body)
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", shown, err)
	}
	for _, name := range sortedKeys(hr.Headers) {
		v := string(hr.Headers[name])
		if http.CanonicalHeaderKey(name) == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(name, v)
	}
	resp, err := r.httpClient().Do(req)
	if err != nil {
		return result{}, withCause(ctx, err) // url.Error names method and URL (password stripped)
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxHTTPRead))
	res := result{text: "HTTP " + resp.Status}
	if s := keep(b); s != "" {
		res.text += ": " + s
	}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		loc := resp.Header.Get("Location")
		if loc == "" {
			loc = "(none)"
		}
		return res, fmt.Errorf("%s: redirect %s to %s not followed: a fault action sends nothing where its configuration does not say", shown, resp.Status, redactURL(loc))
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return res, fmt.Errorf("%s: %s, want 2xx", shown, resp.Status)
	case rerr != nil:
		return res, fmt.Errorf("%s: reading the answer: %w", shown, withCause(ctx, rerr))
	}
	return res, nil
}

// keep is the part of an answer an Event keeps: at most maxHTTPKept
// bytes, cut on a rune's boundary, marked "…" when cut.
func keep(b []byte) string {
	cut := len(b) > maxHTTPKept
	if cut {
		b = b[:maxHTTPKept]
		for len(b) > 0 && !utf8.Valid(b) && len(b) > maxHTTPKept-utf8.UTFMax {
			b = b[:len(b)-1]
		}
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if cut {
		s += "…"
	}
	return s
}

// withCause adds ctx's cause (e.g. "timed out after 10s") to err when ctx
// is done and err does not say it already.
func withCause(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(err, cause) || strings.Contains(err.Error(), cause.Error()) {
		return err
	}
	return fmt.Errorf("%w (%v)", err, cause)
}
