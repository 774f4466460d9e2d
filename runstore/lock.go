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
	if pid := readPID(f); pid > 0 {
		return "process " + strconv.Itoa(pid)
	}
	return "another process"
}

// readPID reads the process ID writePID wrote, 0 if there is none.
func readPID(r io.Reader) int {
	b, err := io.ReadAll(io.LimitReader(r, 32))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
