package safetext

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		max            int
	}{
		{"plain", "HTTP 200 OK: done", "HTTP 200 OK: done", 100},
		{"escape sequences", "ok\x1b]0;PWNED\x07\x1b[2J", "ok ]0;PWNED [2J", 100},
		{"lines and tabs", "healed\n\toops\r\n", "healed oops", 100},
		{"bidi override and NUL", "a\u202ebc\x00d", "a bc d", 100},
		{"C1 and DEL", "a\u0085b\x7fc", "a b c", 100},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb", 100},
		{"bounded", strings.Repeat("x", 50), strings.Repeat("x", 7) + "...", 10},
		{"cut on a rune", "ééééé", "é...", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Line(tc.in, tc.max))
		})
	}
}

func TestText(t *testing.T) {
	require.Equal(t, "kind: step\nsweep:\n\tconcurrency: [1, 2]", Text("kind: step\nsweep:\n\tconcurrency: [1, 2]", 100), "lines kept")
	require.Equal(t, "ok ]0;PWNED  [2J a bc", Text("ok\x1b]0;PWNED\x07\x1b[2J a\u202ebc", 100))
	require.Equal(t, "abcdefg...", Text(strings.Repeat("abcdefghij", 1000), 10))
}

func FuzzLine(f *testing.F) {
	f.Add("ok\x1b]0;PWNED\x07", 64)
	f.Fuzz(func(t *testing.T, s string, max int) {
		max = 4 + max%1000
		if max < 4 {
			max = 4
		}
		got := Line(s, max)
		require.LessOrEqual(t, len(got), max)
		require.NotContains(t, got, "\n")
		require.NotContains(t, got, "\x1b")
		require.NotContains(t, got, "\u202e")
	})
}
