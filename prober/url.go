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
	return editPath(base, func(p string) string { return strings.TrimSuffix(p, "/") + path })
}

// serverRoot is the target's base URL without its /v1 suffix, its query
// kept: where /tokenize, /apply-template and /props are (vLLM, SGLang,
// llama.cpp).
func serverRoot(base string) string {
	return editPath(base, func(p string) string { return strings.TrimSuffix(strings.TrimSuffix(p, "/"), "/v1") })
}

// editPath returns base with edit applied to its path (raw and decoded
// alike), its query kept and its fragment dropped. A base that does not
// parse (a validated configuration's always does) is edited as a string,
// sent as written and fails where it is used, with its error.
func editPath(base string, edit func(string) string) string {
	u, err := url.Parse(base)
	if err != nil {
		return edit(base)
	}
	u.Path = edit(u.Path)
	if u.RawPath != "" {
		u.RawPath = edit(u.RawPath)
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}
