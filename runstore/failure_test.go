package runstore_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/runstore"
)

// block makes the next write of a run's file fail, for root too: a
// directory where the file goes (the rename over it fails). unblock
// removes it.
func block(t *testing.T, dir string, id runstore.ID) (unblock func()) {
	t.Helper()
	path := filepath.Join(dir, "runs", string(id)+".json")
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Mkdir(path, 0o750))
	return func() { require.NoError(t, os.Remove(path)) }
}

// onDisk reads a run's file as the next start would.
func onDisk(t *testing.T, dir string, id runstore.ID) *capacity.Run {
	t.Helper()
	run, err := runstore.Read(dir, id)
	require.NoError(t, err)
	return run
}

// TestFailedFinishIsKept: a run whose final write fails is finished all
// the same: listed with its verdict and the storage error, served whole
// from memory, and written by the next write of a run (or at Close) once
// the storage can be written; a run still unwritable at Close is logged as
// lost.
func TestFailedFinishIsKept(t *testing.T) {
	dir := t.TempDir()
	logs := &logBuffer{}
	s, err := runstore.Open(dir, runstore.Retention{}, logs.logger())
	require.NoError(t, err)
	run := stepRun("a", t0)
	id, err := s.Begin(run)
	require.NoError(t, err)
	unblock := block(t, dir, id)

	run.End, run.Verdict, run.Reason = t0.Add(time.Hour), capacity.VerdictPass, "10 req/s verified"
	run.Capacity = &capacity.Capacity{Concurrency: 4, VerifiedRate: rate(10)}
	err = s.Finish(id, run)
	require.ErrorIs(t, err, runstore.ErrNotStored)
	require.ErrorContains(t, err, filepath.Join(dir, "runs", string(id)+".json"))

	list := s.List("a")
	require.Len(t, list, 1)
	require.Equal(t, capacity.VerdictPass, list[0].Verdict, "finished, not running")
	require.Equal(t, t0.Add(time.Hour), list[0].End)
	require.Regexp(t, `^storing the result: rename .*`+string(id)+`\.json: file exists$`, list[0].StorageError)
	got, storageErr, err := s.Lookup(id)
	require.NoError(t, err)
	require.Equal(t, stored(run, id), got, "served from memory")
	require.Equal(t, list[0].StorageError, storageErr)
	last, ok := s.Last("a", true)
	require.True(t, ok)
	require.Equal(t, capacity.VerdictPass, last.Verdict)
	require.Contains(t, logs.String(), `msg="Could not store a run's result: held in memory`)
	require.ErrorIs(t, s.Finish(id, run), runstore.ErrFinished)

	// Another run's write retries it, and fails again while the storage
	// cannot be written; once it can, the next write stores it.
	other, err := s.Begin(stepRun("b", t0.Add(time.Minute)))
	require.NoError(t, err)
	require.NotEmpty(t, s.List("a")[0].StorageError)
	unblock()
	require.NoError(t, s.Update(other, stepRun("b", t0.Add(time.Minute))))
	require.Empty(t, s.List("a")[0].StorageError)
	require.Equal(t, stored(run, id), onDisk(t, dir, id))

	// At Close: c and d are written, e cannot be and is logged as lost.
	var late []runstore.ID
	var unblockLate []func()
	for i, test := range []string{"c", "d", "e"} {
		id, err := s.Begin(stepRun(test, t0.Add(time.Duration(2+i)*time.Minute)))
		require.NoError(t, err)
		late, unblockLate = append(late, id), append(unblockLate, block(t, dir, id))
		r := stepRun(test, t0)
		r.Verdict, r.End = capacity.VerdictFail, t0.Add(time.Hour)
		require.ErrorIs(t, s.Finish(id, r), runstore.ErrNotStored)
	}
	c, d, e := late[0], late[1], late[2]
	unblockLate[0]()
	unblockLate[1]()
	require.NoError(t, s.Close())
	require.Equal(t, capacity.VerdictFail, onDisk(t, dir, c).Verdict)
	require.Equal(t, capacity.VerdictFail, onDisk(t, dir, d).Verdict)
	require.Contains(t, logs.String(), `msg="A run could not be stored and is lost with this stop" id=`+string(e))
	require.NotContains(t, logs.String(), `msg="A run could not be stored and is lost with this stop" id=`+string(d))
	got, err = s.Get(e)
	require.NoError(t, err, "a closed store still serves it")
	require.Equal(t, capacity.VerdictFail, got.Verdict)
}

// TestFailedUpdateIsKept: a checkpoint that cannot be written is served
// from memory, and the run's next write replaces it.
func TestFailedUpdateIsKept(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, runstore.Retention{})
	run := stepRun("a", t0)
	id, err := s.Begin(run)
	require.NoError(t, err)
	unblock := block(t, dir, id)
	run.Baseline = &capacity.Level{Stage: "baseline", Concurrency: 1, Met: true}
	require.ErrorIs(t, s.Update(id, run), runstore.ErrNotStored)
	got, storageErr, err := s.Lookup(id)
	require.NoError(t, err)
	require.Equal(t, run.Baseline, got.Baseline)
	require.Equal(t, runstore.VerdictRunning, got.Verdict)
	require.Regexp(t, `^storing the partial results: `, storageErr)
	unblock()
	run.Verdict, run.End = capacity.VerdictPass, t0.Add(time.Hour)
	require.NoError(t, s.Finish(id, run))
	require.Empty(t, s.List("")[0].StorageError)
	require.Equal(t, stored(run, id), onDisk(t, dir, id))
}

// TestRetentionKeepsUnstoredRuns: retention never removes a run held in
// memory only; once written, it is one run among the others.
func TestRetentionKeepsUnstoredRuns(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, runstore.Retention{MaxRuns: 1})
	run := stepRun("a", t0)
	old, err := s.Begin(run)
	require.NoError(t, err)
	unblock := block(t, dir, old)
	run.Verdict = capacity.VerdictPass
	require.ErrorIs(t, s.Finish(old, run), runstore.ErrNotStored)
	newer := finished(t, s, "a", t0.Add(time.Hour), t0.Add(2*time.Hour), capacity.VerdictPass)
	require.Equal(t, []runstore.ID{newer, old}, ids(s.List("a")), "the unstored run is kept")
	latest, ok := s.Latest("a")
	require.True(t, ok)
	require.Equal(t, newer, runstore.ID(latest.ID), "the newest of the test's runs")
	_, ok = s.Latest("none")
	require.False(t, ok)
	unblock()
	finished(t, s, "b", t0, t0.Add(time.Hour), capacity.VerdictPass)
	require.Equal(t, []runstore.ID{newer}, ids(s.List("a")), "stored, then past retention")
}

// TestReadOnly: storage that cannot be written (here a lock file that
// cannot be opened, as on a read-only file system; a directory under a
// regular file) fails Open with ErrUnwritable; OpenReadOnly serves the runs
// it can read, changing nothing on disk, and its Begin fails naming the
// directory until the storage can be written, then stores runs again.
func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	s, err := runstore.Open(dir, runstore.Retention{}, nil)
	require.NoError(t, err)
	done := finished(t, s, "a", t0, t0.Add(time.Hour), capacity.VerdictPass)
	interrupted, err := s.Begin(stepRun("a", t0.Add(2*time.Hour)))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	mtime := t0.Add(3 * time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(dir, "runs", string(interrupted)+".json"), mtime, mtime))
	lock := filepath.Join(dir, "lock")
	require.NoError(t, os.Remove(lock))
	require.NoError(t, os.Mkdir(lock, 0o750))

	_, err = runstore.Open(dir, runstore.Retention{}, nil)
	require.ErrorIs(t, err, runstore.ErrUnwritable)
	require.NotErrorIs(t, err, runstore.ErrLocked)
	require.ErrorContains(t, err, lock)
	ro := runstore.OpenReadOnly(dir, runstore.Retention{}, err, nil)
	t.Cleanup(func() { ro.Close() })
	require.ErrorIs(t, ro.Unwritable(), runstore.ErrUnwritable)
	require.Equal(t, []runstore.ID{interrupted, done}, ids(ro.List("")))
	require.Equal(t, capacity.VerdictAborted, ro.List("")[0].Verdict)
	got, err := ro.Get(interrupted)
	require.NoError(t, err)
	require.Equal(t, capacity.VerdictAborted, got.Verdict)
	require.Equal(t, runstore.ReasonInterrupted, got.Reason)
	require.Equal(t, mtime, got.End)
	require.Equal(t, runstore.VerdictRunning, onDisk(t, dir, interrupted).Verdict, "the file is not rewritten")
	got, err = ro.Get(done)
	require.NoError(t, err)
	require.Equal(t, capacity.VerdictPass, got.Verdict)

	_, err = ro.Begin(stepRun("a", t0.Add(4*time.Hour)))
	require.ErrorContains(t, err, "the storage "+dir+" cannot be written: open the lock file: open "+lock+": is a directory")
	require.Len(t, ro.List(""), 2)

	// Writable again: the next Begin opens it.
	require.NoError(t, os.Remove(lock))
	id, err := ro.Begin(stepRun("a", t0.Add(4*time.Hour)))
	require.NoError(t, err)
	require.NoError(t, ro.Unwritable())
	require.Equal(t, []runstore.ID{id, interrupted, done}, ids(ro.List("")))
	require.Equal(t, capacity.VerdictAborted, onDisk(t, dir, interrupted).Verdict, "marked aborted by the Open")
	_, err = runstore.Open(dir, runstore.Retention{}, nil)
	require.ErrorIs(t, err, runstore.ErrLocked, "it holds the lock now")

	// A directory under a regular file: nothing to read, nothing written.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = runstore.Open(filepath.Join(file, "data"), runstore.Retention{}, nil)
	require.ErrorIs(t, err, runstore.ErrUnwritable)
	under := runstore.OpenReadOnly(filepath.Join(file, "data"), runstore.Retention{}, err, nil)
	require.Empty(t, under.List(""))
	_, err = under.Begin(stepRun("a", t0))
	require.ErrorContains(t, err, "the storage "+filepath.Join(file, "data")+" cannot be written: create the storage directory: mkdir "+file+": not a directory")
	require.NoError(t, under.Close())
}
