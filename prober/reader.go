package prober

import (
	"fmt"
	"net/http"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sloprober/sloprober/config"
)

// Reader names how probe responses are read (--prober.reader).
type Reader string

const (
	// ReaderStd reads through net/http: a goroutine a stream, woken for
	// every chunk.
	ReaderStd Reader = "std"
	// ReaderFast reads HTTP/1.1 streams from their sockets on a poller
	// (reader_linux.go); Linux only. A target it cannot serve (a proxy,
	// OAuth 2.0, HTTP/2 over TLS) keeps the standard reader.
	ReaderFast Reader = "fast"
)

// Readers lists the readers, for flags.
var Readers = []string{string(ReaderStd), string(ReaderFast)}

// ParseReader parses a --prober.reader value.
func ParseReader(s string) (Reader, error) {
	switch Reader(s) {
	case ReaderStd:
		return ReaderStd, nil
	case ReaderFast:
		if !FastReaderSupported {
			return "", fmt.Errorf("reader %q needs Linux (epoll); use %q", s, ReaderStd)
		}
		return ReaderFast, nil
	}
	return "", fmt.Errorf("unknown reader %q: one of %q or %q", s, ReaderStd, ReaderFast)
}

// ClientOption configures a Client.
type ClientOption func(*clientOptions)

type clientOptions struct{ reader Reader }

// WithReader sets how the client reads its responses (DefaultReader by
// default).
func WithReader(r Reader) ClientOption { return func(o *clientOptions) { o.reader = r } }

// fastUnsupported returns why the fast reader cannot serve a target's
// HTTP client configuration, "" when it can. It serves what it can apply
// itself with prometheus/common's round trippers (fastChain); the rest
// stays on net/http.
func fastUnsupported(t *config.TargetConfig) string {
	h := &t.HTTPClientConfig
	switch {
	case h.ProxyURL.URL != nil || h.ProxyFromEnvironment:
		return "a proxy is configured"
	case h.OAuth2 != nil:
		return "OAuth 2.0 is configured"
	case h.EnableHTTP2 && isHTTPS(t.URL):
		return "HTTP/2 is enabled over TLS (enable_http2: false lets the fast reader serve it over HTTP/1.1)"
	case h.FollowRedirects && h.HTTPHeaders != nil:
		return "http_headers are configured with follow_redirects"
	case h.BasicAuth != nil && (h.BasicAuth.UsernameRef != "" || h.BasicAuth.PasswordRef != ""),
		h.Authorization != nil && h.Authorization.CredentialsRef != "":
		return "a secret is referenced (*_ref)"
	}
	return ""
}

func isHTTPS(url string) bool { return len(url) >= 8 && url[:8] == "https://" }

// fastChain wraps the fast reader's transport in what prometheus/common
// adds to net/http's for a configuration fastUnsupported accepts, in the
// same order (NewRoundTripperFromConfig): credentials, basic auth,
// headers, then the User-Agent.
func fastChain(h *commoncfg.HTTPClientConfig, rt http.RoundTripper, userAgent string) http.RoundTripper {
	secret := func(text commoncfg.Secret, file string) commoncfg.SecretReader {
		if text != "" {
			return commoncfg.NewInlineSecret(string(text))
		}
		if file != "" {
			return commoncfg.NewFileSecret(file)
		}
		return nil
	}
	if a := h.Authorization; a != nil {
		rt = commoncfg.NewAuthorizationCredentialsRoundTripper(a.Type, secret(a.Credentials, a.CredentialsFile), rt)
	}
	if len(h.BearerToken) > 0 || len(h.BearerTokenFile) > 0 {
		rt = commoncfg.NewAuthorizationCredentialsRoundTripper("Bearer", secret(h.BearerToken, h.BearerTokenFile), rt)
	}
	if b := h.BasicAuth; b != nil {
		rt = commoncfg.NewBasicAuthRoundTripper(secret(commoncfg.Secret(b.Username), b.UsernameFile), secret(b.Password, b.PasswordFile), rt)
	}
	if h.HTTPHeaders != nil {
		rt = commoncfg.NewHeadersRoundTripper(h.HTTPHeaders, rt)
	}
	return commoncfg.NewUserAgentRoundTripper(userAgent, rt)
}
