// Package regularfile opens the files sloprober reads by a name it was
// given (a configuration, a stored run, a trace) only when they are
// regular files: a FIFO named like one would block the open itself, until
// some writer comes (start-up hung before its signal handlers existed,
// and each GET of such a run leaked a goroutine), and a device such as
// /dev/zero would never end.
package regularfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Open opens path for reading and returns it with its FileInfo, or an
// error naming what it is if it is not a regular file. The open does not
// block: O_NONBLOCK makes opening a FIFO return at once (on a regular file
// it changes nothing), and the check is on the file opened (fstat), so a
// FIFO put in place of a checked file is refused too.
func Open(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file (%s)", path, kind(fi.Mode()))
	}
	return f, fi, nil
}

// kind names a file's type.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	default:
		return m.Type().String()
	}
}

// Create opens path for writing, creating it, or truncating it when
// overwrite is set (else an existing file is fs.ErrExist), only when it is
// a regular file: `init -o fifo --force` blocked in the open until a reader
// came. The open does not block (O_NONBLOCK: a FIFO without a reader is
// ENXIO at once), and what was opened is checked (fstat).
func Create(path string, overwrite bool) (*os.File, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL | syscall.O_NONBLOCK
	if overwrite {
		flags = os.O_WRONLY | os.O_CREATE | syscall.O_NONBLOCK
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, syscall.ENXIO) {
		return nil, fmt.Errorf("%s: not a regular file (a named pipe)", path)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, kind(fi.Mode()))
	}
	// Truncated only once known to be a regular file.
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
