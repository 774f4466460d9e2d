package prober

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCachedPromptTokens: usage first, else llama.cpp's cache_n of what
// its prompt held; a claim of more cached than prompt is not counted.
func TestCachedPromptTokens(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name           string
		r              Result
		cached, prompt int
		ok             bool
	}{
		{"nothing said", Result{}, 0, 0, false},
		{"usage", Result{Usage: &Usage{PromptTokens: 100, CachedTokens: n(64)}}, 64, 100, true},
		{"usage over the prompt", Result{Usage: &Usage{PromptTokens: 100, CachedTokens: n(101)}}, 0, 0, false},
		{"cache_n", Result{Timings: &ServerTimings{PromptN: 36, CacheN: n(64)}}, 64, 100, true},
		{"cache_n beside usage without cached", Result{Usage: &Usage{PromptTokens: 120}, Timings: &ServerTimings{PromptN: 36, CacheN: n(64)}}, 64, 120, true},
		{"usage before cache_n", Result{Usage: &Usage{PromptTokens: 100, CachedTokens: n(10)}, Timings: &ServerTimings{CacheN: n(64)}}, 10, 100, true},
		{"negative cache_n", Result{Timings: &ServerTimings{PromptN: 36, CacheN: n(-5)}}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached, prompt, ok := tc.r.CachedPromptTokens()
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.cached, cached)
			require.Equal(t, tc.prompt, prompt)
		})
	}
}
