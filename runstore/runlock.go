package runstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A running run is live while its writer holds an exclusive flock on its
// lock file, runs/.<id>.running: taken (the file created) before the
// run's first write, held through every write of the run, the file
// removed and the lock released after its final write. The kernel
// releases the lock of a writer that dies however it dies: a run file
// that says running, its lock free, is a run whose writer stopped, and
// the owner (Open) marks it aborted. The owner's runs are marked so too,
// for a read-only store to tell them from the runs of a sloprober that
// stopped.

// runningSuffix ends the name of a run's lock file.
const runningSuffix = ".running"

// errRunLockTaken: the lock file of a new run's ID exists, or could not
// be kept: Begin takes another ID.
var errRunLockTaken = errors.New("run lock taken")

// lockPath is the path of a run's lock file.
func (s *Store) lockPath(id ID) string {
	return filepath.Join(s.runs, tmpPrefix+string(id)+runningSuffix)
}

// lockedRunID is the run ID of a lock file's name.
func lockedRunID(name string) (ID, bool) {
	if !strings.HasPrefix(name, tmpPrefix) || !strings.HasSuffix(name, runningSuffix) {
		return "", false
	}
	id, err := ParseID(strings.TrimSuffix(strings.TrimPrefix(name, tmpPrefix), runningSuffix))
	return id, err == nil
}

// tmpRunID is the run ID of a temporary file's name (.<id>.json.tmp-*).
func tmpRunID(name string) (ID, bool) {
	before, _, ok := strings.Cut(strings.TrimPrefix(name, tmpPrefix), runExt+tmpInfix)
	if !ok {
		return "", false
	}
	id, err := ParseID(before)
	return id, err == nil
}

// lockNewRun creates a new run's lock file and locks it. errRunLockTaken:
// the file exists (another writer's run of the same ID), or an owner's
// cleanup (Open) holds or removed it between its creation and the lock.
func lockNewRun(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if errors.Is(err, fs.ErrExist) {
		return nil, errRunLockTaken
	}
	if err != nil {
		return nil, err
	}
	ok, err := flockNB(f, true)
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	if !ok || !samePath(f, path) {
		// The cleanup that holds it removes it.
		_ = f.Close()
		return nil, errRunLockTaken
	}
	return f, nil
}

// samePath reports whether path still names f's file.
func samePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// claimRun takes a run's lock, for the owner to settle the run: held
// reports that a live writer holds it; f is nil when there is no lock
// file (the writer finished, or stopped before there were lock files).
func claimRun(path string) (f *os.File, held bool, err error) {
	f, err = os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	ok, err := flockNB(f, true)
	if err != nil || !ok {
		_ = f.Close()
		return nil, err == nil, err
	}
	return f, false, nil
}

// runLive reports whether a writer holds a run's lock (a shared lock
// taken and released at once: it does not keep another reader out).
func runLive(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	ok, err := flockNB(f, false)
	return err == nil && !ok
}

// releaseRun removes a run's lock file, while its lock is held, and
// releases the lock.
func (s *Store) releaseRun(id ID, f *os.File) {
	if err := os.Remove(s.lockPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.logger.Warn("Could not remove a run's lock file", "id", id, "file", s.lockPath(id), "err", err)
	}
	_ = f.Close()
}

// releaseLive releases the lock of one of this store's runs, if it holds
// it; wmu is held.
func (s *Store) releaseLive(id ID) {
	if f, ok := s.live[id]; ok {
		delete(s.live, id)
		s.releaseRun(id, f)
	}
}

// LockHolder is the process ID written in the lock file of the storage in
// dir (that of the sloprober holding it, or of the last one that did), or
// 0 if there is none to read.
func LockHolder(dir string) int {
	f, err := os.Open(filepath.Join(dir, lockName))
	if err != nil {
		return 0
	}
	defer f.Close()
	return readPID(f)
}
