package doccheck

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRepositoryLinks: every relative link and anchor of the README and
// docs/ resolves.
func TestRepositoryLinks(t *testing.T) {
	files := []string{"../../README.md", "../../BENCHMARKS.md"}
	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	files = append(files, docs...)
	for _, f := range files {
		bad, err := Check(f)
		require.NoError(t, err)
		require.Empty(t, bad, f)
	}
}

// TestCheckFindsBrokenLinks: a missing file, a missing heading in
// another file and in the same one are reported; code is not a link.
func TestCheckFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.md"), []byte("# Other\n\n## A `code` heading (page)\n## Twice\n## Twice\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "doc.md"), []byte(
		"# Doc\n\n[ok](other.md) [ok](other.md#a-code-heading-page) [ok](other.md#twice-1) [ok](#doc)\n"+
			"[gone](missing.md) [no heading](other.md#nope) [no here](#nope) [web](https://example.com/x#y)\n"+
			"`[code](nothing.md)`\n```\n[fenced](nothing.md)\n```\n"), 0o600))
	bad, err := Check(filepath.Join(dir, "doc.md"))
	require.NoError(t, err)
	doc, other := filepath.Join(dir, "doc.md"), filepath.Join(dir, "other.md")
	require.Equal(t, []string{
		doc + ": missing.md: no such file",
		doc + ": other.md#nope: no such heading in " + other,
		doc + ": #nope: no such heading in " + doc,
	}, bad)
}
