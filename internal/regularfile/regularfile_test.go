//go:build unix

package regularfile_test

import (
	"io/fs"
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

// TestCreate: a file is created, kept or overwritten as asked; a named
// pipe or a directory is refused at once, never blocked on.
func TestCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.yml")
	f, err := regularfile.Create(path, false)
	require.NoError(t, err)
	_, err = f.WriteString("first, longer")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = regularfile.Create(path, false)
	require.ErrorIs(t, err, fs.ErrExist)
	f, err = regularfile.Create(path, true)
	require.NoError(t, err)
	_, err = f.WriteString("second")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "second", string(b), "truncated")

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	_, err = regularfile.Create(fifo, true)
	require.EqualError(t, err, fifo+": not a regular file (a named pipe)")
	_, err = regularfile.Create(dir, true)
	require.Error(t, err)
}
