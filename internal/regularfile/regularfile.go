// Package regularfile opens the files sloprober reads by a name it was
// given (a configuration, a stored run, a trace) only when they are
// regular files: a FIFO named like one would block the open itself, until
// some writer comes (start-up hung before its signal handlers existed,
// and each GET of such a run leaked a goroutine), and a device such as
// /dev/zero would never end.
package regularfile

import (
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
