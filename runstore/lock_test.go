//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package runstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/runstore"
)

// TestLock: a second Open of a directory fails while the first holds it,
// in the same process too (flock locks an open file description, not a
// process), and names the lock file and its holder.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	s, err := runstore.Open(dir, runstore.Retention{}, nil)
	require.NoError(t, err)
	lock := filepath.Join(dir, "lock")

	_, err = runstore.Open(dir, runstore.Retention{}, nil)
	require.ErrorIs(t, err, runstore.ErrLocked)
	require.ErrorContains(t, err, lock)
	require.ErrorContains(t, err, fmt.Sprintf("held by process %d", os.Getpid()))
	// The failed Open changed nothing: the holder still writes.
	_, err = s.Begin(stepRun("a", t0))
	require.NoError(t, err)

	require.NoError(t, s.Close())
	s, err = runstore.Open(dir, runstore.Retention{}, nil)
	require.NoError(t, err, "the lock is released by Close")
	require.Len(t, s.List(""), 1)
	require.NoError(t, s.Close())
	require.FileExists(t, lock, "the lock file stays: it holds nothing once released")
}
