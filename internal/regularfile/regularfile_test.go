//go:build unix

package regularfile_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/regularfile"
)

// TestOpen: a regular file opens; a FIFO (no writer: a plain open would
// block forever) and a directory are refused at once, naming what they
// are.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "run.json")
	require.NoError(t, os.WriteFile(file, []byte("{}"), 0o644))
	f, fi, err := regularfile.Open(file)
	require.NoError(t, err)
	require.Equal(t, int64(2), fi.Size())
	require.NoError(t, f.Close())

	fifo := filepath.Join(dir, "fifo.json")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, _, err = regularfile.Open(fifo)
	require.EqualError(t, err, fifo+": not a regular file (a named pipe)")

	_, _, err = regularfile.Open(dir)
	require.EqualError(t, err, dir+": not a regular file (a directory)")

	_, _, err = regularfile.Open(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
