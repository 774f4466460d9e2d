//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package runstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// acquireLock takes an exclusive flock(2) on path, which it creates. The
// lock is on the open file description: a second Open in the same process
// conflicts as one in another process does. The kernel releases it when
// the process ends, however it ends: a lock file left behind by a crash
// holds nothing.
func acquireLock(path string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open the lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := lockHolder(f)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by %s: is another sloprober running with this --storage.path?", ErrLocked, path, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	writePID(f)
	return f, nil
}

// flockNB takes a flock(2) on f, exclusive or shared, without waiting:
// false if another open file holds a conflicting one.
func flockNB(f *os.File, exclusive bool) (bool, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		return false, nil
	}
	return false, err
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
