// Package doccheck checks the repository's Markdown documents: every
// relative link names a file that exists and, with a #fragment, a heading
// that file has (as GitHub renders its anchors). A broken link in the
// README or docs/ fails the tests instead of a newcomer.
package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// links are Markdown inline links and images: [text](target), the
// target without a title. Links inside code spans and fenced code blocks
// are not links and are skipped.
var links = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

var (
	codeSpan    = regexp.MustCompile("`[^`]*`")
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// headings are ATX headings.
var headings = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)

// Anchors returns the anchors of a Markdown document's headings, as
// GitHub makes them: lower case, punctuation other than '-' and '_'
// dropped, spaces as '-', a repeated anchor suffixed -1, -2, ...
func Anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headings.FindAllStringSubmatch(stripCode(md, false), -1) {
		a := Slug(m[1])
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Slug is a heading's GitHub anchor.
func Slug(heading string) string {
	// Inline code and emphasis marks are dropped with the punctuation;
	// a link keeps its text.
	heading = headingLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// stripCode blanks fenced code blocks, and code spans if spans, which
// hold text that looks like headings and links but is neither. A
// heading's code span is part of its anchor: "The simulator: `sloprober
// sim`" is #the-simulator-sloprober-sim.
func stripCode(md string, spans bool) string {
	var out []string
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			out = append(out, "")
			continue
		}
		if fenced {
			out = append(out, "")
			continue
		}
		if spans {
			l = codeSpan.ReplaceAllString(l, "")
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// Check returns the broken relative links of the Markdown file at path:
// "README.md: docs/x.md: no such file", "README.md: #nope: no such
// heading". Absolute URLs (http:, https:, mailto:) are not followed:
// nothing outside the repository is fetched.
func Check(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, m := range links.FindAllStringSubmatch(stripCode(string(b), true), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		dest := path
		if file != "" {
			dest = filepath.Join(filepath.Dir(path), file)
			if _, err := os.Stat(dest); err != nil {
				bad = append(bad, fmt.Sprintf("%s: %s: no such file", path, target))
				continue
			}
		}
		if frag == "" || !strings.HasSuffix(dest, ".md") {
			continue
		}
		md, err := os.ReadFile(dest)
		if err != nil {
			return nil, err
		}
		if !Anchors(string(md))[frag] {
			bad = append(bad, fmt.Sprintf("%s: %s: no such heading in %s", path, target, dest))
		}
	}
	return bad, nil
}
