package prober

import (
	"net/url"
	"strings"
)

// joinPath returns base with path appended to its path, its query kept:
// http://h/v1?api-version=2 and /chat/completions give
// http://h/v1/chat/completions?api-version=2. Appending to the string
// sent POST /v1?api-version=2/chat/completions: the query swallowed the
// API's path. A fragment is never sent (config refuses one).
func joinPath(base, path string) string {
	u, err := url.Parse(base)
	if err != nil {
		// A validated configuration's URL parses; this one is sent
		// as written and fails where it is used, with its error.
		return strings.TrimSuffix(base, "/") + path
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	if u.RawPath != "" {
		u.RawPath = strings.TrimSuffix(u.RawPath, "/") + path
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// serverRoot is the target's base URL without its /v1 suffix, its query
// kept: where /tokenize, /apply-template and /props are (vLLM, SGLang,
// llama.cpp).
func serverRoot(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimSuffix(strings.TrimSuffix(base, "/"), "/v1")
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	if u.RawPath != "" {
		u.RawPath = strings.TrimSuffix(strings.TrimSuffix(u.RawPath, "/"), "/v1")
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}
