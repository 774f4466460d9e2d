//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package runstore

import (
	"fmt"
	"io"
	"os"
)

// acquireLock creates the lock file, with this process's ID in it, and
// locks nothing: this system has no flock(2).
func acquireLock(path string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open the lock file: %w", err)
	}
	writePID(f)
	return f, nil
}

// flockNB takes nothing: this system has no flock(2). Every lock is
// free: a run found running at Open is marked aborted, as before there
// were guests (and there are none: acquireLock never finds the directory
// locked).
func flockNB(*os.File, bool) (bool, error) { return true, nil }

// syncDir makes a rename in dir durable where the system can sync a
// directory (Windows cannot; its renames are durable without it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	_ = d.Sync()
	_ = d.Close()
	return nil
}
