//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package runstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/runstore"
)

// openGuest opens dir as a guest: its Open fails, locked by another.
func openGuest(t *testing.T, dir string) *runstore.Store {
	t.Helper()
	_, err := runstore.Open(dir, runstore.Retention{}, nil)
	require.ErrorIs(t, err, runstore.ErrLocked)
	g, err := runstore.OpenGuest(dir, nil)
	require.NoError(t, err)
	require.True(t, g.Guest())
	require.NoError(t, g.Unwritable())
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	return g
}

// finish ends a run that began at start with verdict pass, an hour later.
func finish(t *testing.T, s *runstore.Store, id runstore.ID, test string, start time.Time) {
	t.Helper()
	run := stepRun(test, start)
	run.End, run.Verdict, run.Reason = start.Add(time.Hour), capacity.VerdictPass, "done"
	require.NoError(t, s.Finish(id, run))
}

// summary is a run's entry in a store's list.
func summary(t *testing.T, s *runstore.Store, id runstore.ID) runstore.Summary {
	t.Helper()
	for _, sum := range s.List("") {
		if sum.ID == string(id) {
			return sum
		}
	}
	t.Fatalf("run %s is not listed", id)
	return runstore.Summary{}
}

// lockFiles lists the runs' lock files and temporary files left in dir.
func lockFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range files(t, dir) {
		if strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	return out
}

// TestGuestBesideOwner: a guest stores its runs in a directory another
// store holds, both writing at once; each lists its own runs as they go,
// the guest the owner's finished runs from before it opened too; the
// owner's next Open lists them all, finished, none aborted, and no lock
// or temporary file is left.
func TestGuestBesideOwner(t *testing.T) {
	dir := t.TempDir()
	owner := open(t, dir, runstore.Retention{MaxRuns: 100})
	before := finished(t, owner, "a", t0, t0.Add(time.Hour), capacity.VerdictPass)
	guest := openGuest(t, dir)
	require.Equal(t, []runstore.ID{before}, ids(guest.List("")))
	last, ok := guest.LastWithCapacity("a")
	require.True(t, ok, "a guest reads the owner's runs (a test run's last capacity)")
	require.Equal(t, string(before), last.ID)

	const runs = 8
	var wg sync.WaitGroup
	written := func(s *runstore.Store, offset time.Duration) []runstore.ID {
		out := make([]runstore.ID, runs)
		for i := range runs {
			wg.Go(func() {
				start := t0.Add(offset + time.Duration(i+1)*time.Hour)
				run := stepRun("a", start)
				id, err := s.Begin(run)
				if !assert.NoError(t, err) {
					return
				}
				run.Baseline = &capacity.Level{Stage: "baseline"}
				assert.NoError(t, s.Update(id, run))
				run.End, run.Verdict = start.Add(time.Minute), capacity.VerdictPass
				assert.NoError(t, s.Finish(id, run))
				out[i] = id
			})
		}
		return out
	}
	mine := written(owner, 0)
	theirs := written(guest, 30*time.Minute)
	wg.Wait()

	require.Len(t, owner.List(""), runs+1, "the owner lists its own runs (the guest's from its next Open)")
	require.Len(t, guest.List(""), runs+1, "the guest lists its own runs and the owner's from before")
	for _, id := range theirs {
		require.Equal(t, capacity.VerdictPass, summary(t, guest, id).Verdict)
		_, err := owner.Get(id)
		require.ErrorIs(t, err, runstore.ErrNotFound)
		got, err := runstore.Read(dir, id)
		require.NoError(t, err, "the guest's run is stored in the directory")
		require.Equal(t, capacity.VerdictPass, got.Verdict)
	}
	require.Empty(t, lockFiles(t, dir))
	require.NoError(t, owner.Close())

	logs := &logBuffer{}
	again, err := runstore.Open(dir, runstore.Retention{MaxRuns: 100}, logs.logger())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, again.Close()) })
	require.Len(t, again.List(""), 2*runs+1)
	for _, id := range append(mine, theirs...) {
		require.Equal(t, capacity.VerdictPass, summary(t, again, id).Verdict)
	}
	require.Contains(t, logs.String(), "aborted=0")
}

// TestOwnerLeavesAGuestsRunRunning: an Open while a guest's run is
// running indexes it running (not aborted, its file untouched, not
// written by the owner, not removed by retention, however old); once the
// guest has finished it the owner's next write lists it finished (and
// retention applies to it), and so does the next Open.
func TestOwnerLeavesAGuestsRunRunning(t *testing.T) {
	dir := t.TempDir()
	old := t0.Add(-365 * 24 * time.Hour) // older than retention keeps
	retention := runstore.Retention{MaxRuns: 1, MaxAge: 24 * time.Hour}
	owner, err := runstore.Open(dir, retention, nil)
	require.NoError(t, err)
	guest := openGuest(t, dir)
	run := stepRun("a", old)
	id, err := guest.Begin(run)
	require.NoError(t, err)
	run.Baseline = &capacity.Level{Stage: "baseline", Concurrency: 1, Met: true}
	require.NoError(t, guest.Update(id, run))
	require.NoError(t, owner.Close()) // the daemon restarts

	logs := &logBuffer{}
	owner, err = runstore.Open(dir, retention, logs.logger())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, owner.Close()) })
	require.Equal(t, runstore.VerdictRunning, summary(t, owner, id).Verdict)
	require.Equal(t, runstore.VerdictRunning, onDisk(t, dir, id).Verdict, "not rewritten")
	require.Contains(t, logs.String(), "aborted=0")
	require.Contains(t, logs.String(), "running_elsewhere=1")
	require.Contains(t, lockFiles(t, dir), "."+string(id)+".running", "the live writer's lock file is kept")
	require.ErrorContains(t, owner.Update(id, run), "the run is another process's")

	// Retention (one run of a, none older than a day) at the owner's
	// Finish: the guest's running run is neither counted nor removed.
	now := time.Now().UTC().Truncate(time.Millisecond)
	recent := finished(t, owner, "a", now.Add(-time.Hour), now, capacity.VerdictPass)
	require.Equal(t, []runstore.ID{recent, id}, ids(owner.List("a")))
	require.FileExists(t, filepath.Join(dir, "runs", string(id)+".json"))

	// The guest finishes: the owner's next write settles it, finished as
	// its file says; then retention applies (it ended a year ago).
	finish(t, guest, id, "a", old)
	require.Equal(t, runstore.VerdictRunning, summary(t, owner, id).Verdict, "listed running until the owner's next write")
	got, err := owner.Get(id)
	require.NoError(t, err)
	require.Equal(t, capacity.VerdictPass, got.Verdict, "Get reads its file")
	other := finished(t, owner, "b", now.Add(-time.Hour), now, capacity.VerdictPass)
	require.Equal(t, []runstore.ID{other, recent}, ids(owner.List("")), "settled, then past retention")
	require.NoFileExists(t, filepath.Join(dir, "runs", string(id)+".json"))
	require.Empty(t, lockFiles(t, dir))
}

// TestOwnerOpenIndexesAFinishedGuestRun: a guest's run that was running
// at the owner's Open, finished since, is indexed finished by the next
// Open.
func TestOwnerOpenIndexesAFinishedGuestRun(t *testing.T) {
	dir := t.TempDir()
	owner, err := runstore.Open(dir, runstore.Retention{}, nil)
	require.NoError(t, err)
	guest := openGuest(t, dir)
	id, err := guest.Begin(stepRun("a", t0))
	require.NoError(t, err)
	require.NoError(t, owner.Close())
	owner, err = runstore.Open(dir, runstore.Retention{}, nil)
	require.NoError(t, err)
	require.Equal(t, runstore.VerdictRunning, summary(t, owner, id).Verdict)

	finish(t, guest, id, "a", t0)
	require.NoError(t, owner.Close())
	owner = open(t, dir, runstore.Retention{})
	sum := summary(t, owner, id)
	require.Equal(t, capacity.VerdictPass, sum.Verdict)
	require.Equal(t, "done", sum.Reason)
	require.Equal(t, t0.Add(time.Hour), sum.End)
	require.Empty(t, lockFiles(t, dir))
}

// TestCrashedGuestRunIsAborted: a guest that stops without finishing its
// run (its lock released, its lock file left) has its run marked aborted,
// interrupted, at the owner's next Open, or, when the owner had indexed
// it running, at the owner's next write; its lock file is removed. A
// read-only store serves it aborted too, and leaves a live one out.
func TestCrashedGuestRunIsAborted(t *testing.T) {
	t.Run("at open", func(t *testing.T) {
		dir := t.TempDir()
		owner, err := runstore.Open(dir, runstore.Retention{}, nil)
		require.NoError(t, err)
		guest := openGuest(t, dir)
		crashed, err := guest.Begin(stepRun("a", t0))
		require.NoError(t, err)
		live, err := guest.Begin(stepRun("a", t0.Add(time.Hour)))
		require.NoError(t, err)
		mtime := t0.Add(42 * time.Minute)
		require.NoError(t, os.Chtimes(filepath.Join(dir, "runs", string(crashed)+".json"), mtime, mtime))
		runstore.Crash(guest, crashed)
		require.Contains(t, lockFiles(t, dir), "."+string(crashed)+".running")

		// A daemon started while the owner holds the directory: the
		// live run left out, the crashed one served aborted.
		_, why := runstore.Open(dir, runstore.Retention{}, nil)
		require.ErrorIs(t, why, runstore.ErrLocked)
		ro := runstore.OpenReadOnly(dir, runstore.Retention{}, why, nil)
		require.Equal(t, []runstore.ID{crashed}, ids(ro.List("")))
		require.Equal(t, capacity.VerdictAborted, summary(t, ro, crashed).Verdict)
		require.NoError(t, ro.Close())

		require.NoError(t, owner.Close())
		logs := &logBuffer{}
		owner, err = runstore.Open(dir, runstore.Retention{}, logs.logger())
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, owner.Close()) })
		want := capacity.Summary{ID: string(crashed), Test: "a", Kind: "step", Target: "sim", Start: t0, End: mtime,
			Verdict: capacity.VerdictAborted, Reason: runstore.ReasonInterrupted}
		require.Equal(t, want, summary(t, owner, crashed).Summary)
		require.Equal(t, capacity.VerdictAborted, onDisk(t, dir, crashed).Verdict)
		require.Equal(t, runstore.VerdictRunning, summary(t, owner, live).Verdict)
		require.Equal(t, []string{"." + string(live) + ".running"}, lockFiles(t, dir), "the crashed run's lock file is removed")
		require.Contains(t, logs.String(), "aborted=1")
	})

	t.Run("indexed running", func(t *testing.T) {
		dir := t.TempDir()
		owner, err := runstore.Open(dir, runstore.Retention{}, nil)
		require.NoError(t, err)
		guest := openGuest(t, dir)
		crashed, err := guest.Begin(stepRun("a", t0))
		require.NoError(t, err)
		require.NoError(t, owner.Close())
		owner = open(t, dir, runstore.Retention{})
		require.Equal(t, runstore.VerdictRunning, summary(t, owner, crashed).Verdict)

		runstore.Crash(guest, crashed)
		finished(t, owner, "b", t0, t0.Add(time.Hour), capacity.VerdictPass)
		sum := summary(t, owner, crashed)
		require.Equal(t, capacity.VerdictAborted, sum.Verdict)
		require.Equal(t, runstore.ReasonInterrupted, sum.Reason)
		require.Equal(t, capacity.VerdictAborted, onDisk(t, dir, crashed).Verdict)
		require.Empty(t, lockFiles(t, dir))
	})
}

// TestOpenKeepsALiveGuestsFiles: Open removes the temporary and lock
// files that no live writer holds (a stopped one's), and keeps those of a
// guest's run under way.
func TestOpenKeepsALiveGuestsFiles(t *testing.T) {
	dir := t.TempDir()
	owner, err := runstore.Open(dir, runstore.Retention{}, nil)
	require.NoError(t, err)
	guest := openGuest(t, dir)
	live, err := guest.Begin(stepRun("a", t0))
	require.NoError(t, err)
	runs := filepath.Join(dir, "runs")
	stale := fmt.Sprintf(".a-20250314T030000.000Z-0000000%d.running", 1)
	for _, name := range []string{
		"." + string(live) + ".json.tmp-123", // the guest's write under way
		".a-20250314T030000.000Z-00000002.json.tmp-456",
		stale, // a stopped writer's, its run never written
	} {
		require.NoError(t, os.WriteFile(filepath.Join(runs, name), nil, 0o640))
	}
	require.NoError(t, owner.Close())
	owner = open(t, dir, runstore.Retention{})
	require.ElementsMatch(t, []string{"." + string(live) + ".running", "." + string(live) + ".json.tmp-123"}, lockFiles(t, dir))
	require.Equal(t, runstore.VerdictRunning, summary(t, owner, live).Verdict)
}

// TestGuestWritesOnlyItsRuns: a guest applies no retention and rewrites
// no run of another process: it lists a stopped writer's run aborted
// without rewriting it, and cannot write the owner's runs.
func TestGuestWritesOnlyItsRuns(t *testing.T) {
	dir := t.TempDir()
	owner := open(t, dir, runstore.Retention{})
	running, err := owner.Begin(stepRun("a", t0))
	require.NoError(t, err)
	for i := range 3 {
		finished(t, owner, "b", t0.Add(time.Duration(i)*time.Hour), t0.Add(time.Duration(i)*time.Hour+time.Minute), capacity.VerdictPass)
	}
	guest := openGuest(t, dir)
	require.Len(t, guest.List(""), 3, "the owner's running run is left out")
	require.ErrorIs(t, guest.Update(running, stepRun("a", t0)), runstore.ErrNotFound)
	for i := range 3 {
		id, err := guest.Begin(stepRun("b", t0.Add(time.Duration(10+i)*time.Hour)))
		require.NoError(t, err)
		finish(t, guest, id, "b", t0.Add(time.Duration(10+i)*time.Hour))
	}
	require.Len(t, guest.List("b"), 6)
	require.Len(t, files(t, dir), 6+2, "no retention: every run file stays; the owner's running run and its lock file")
	require.Equal(t, runstore.VerdictRunning, onDisk(t, dir, running).Verdict)
}
