package runstore

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
)

// ErrLocked: another sloprober (or another Open in this process) holds the
// store's lock file.
var ErrLocked = errors.New("storage is locked")

// writePID writes this process's ID into the lock file, for whoever finds
// it held: nothing reads it but the error of a second Open.
func writePID(f *os.File) {
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
}

// lockHolder names the process whose ID is in the lock file.
func lockHolder(f *os.File) string {
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return "another process"
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
		return "process " + strconv.Itoa(pid)
	}
	return "another process"
}
