// Package safetext makes text from outside (a server's message, a fault
// action's output, a string read back from a stored run) safe to keep,
// show in a terminal and write into a report: valid UTF-8, one line, no
// control or format characters, bounded. A fault endpoint that answers
// "ok\x1b]0;PWNED\x07\x1b[2J" would otherwise set the operator's window
// title and clear the screen when `report show` prints it.
package safetext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line makes s one line of valid UTF-8 of at most max bytes: white space,
// control characters (C0, DEL, C1), line and paragraph separators and
// format characters (bidi overrides such as U+202E, zero-width ones)
// each become one space, runs of them one; a longer line is cut, with
// "...". Only the first 4*max bytes of s are read.
func Line(s string, max int) string {
	if len(s) > 4*max {
		s = s[:4*max]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r) || unicode.Is(unicode.Cf, r)
	}), " ")
	return Truncate(s, max)
}

// Text makes s valid UTF-8 of at most max bytes that keeps its lines
// (newlines and tabs) but no other control or format character: each
// becomes a space. For text of many lines kept as written (a test's
// configuration as YAML) that a terminal or a report will show.
func Text(s string, max int) string {
	if len(s) > 4*max {
		s = s[:4*max]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.ContainsFunc(s, unsafe) {
		s = strings.Map(func(r rune) rune {
			if unsafe(r) {
				return ' '
			}
			return r
		}, s)
	}
	return Truncate(s, max)
}

// unsafe: a control character but a newline or a tab, or a format one.
func unsafe(r rune) bool {
	return r != '\n' && r != '\t' && unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// Truncate cuts s to at most n bytes on a rune boundary, ending in "..."
// when cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len("..."), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
