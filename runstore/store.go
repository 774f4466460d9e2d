// Package runstore keeps the results of test runs (capacity.Run: step and
// soak tests) on disk, so that a restart of sloprober neither loses a
// finished run nor leaves one "running" for ever. It is the store behind
// --storage.path: the scheduler writes each run as it starts, as it goes
// and as it ends; the HTTP API lists and reads them; and at start the
// daemon restores its capacity gauges from the last step run that found a
// capacity.
//
// Layout of the directory:
//
//	<dir>/lock                  exclusive lock (flock) of the running sloprober; holds its PID
//	<dir>/runs/<id>.json        one run, a capacity.Run as JSON; <id> is <test>-<start>-<random>
//	<dir>/runs/<id>.json.corrupt  a run file that could not be read, set aside at start
//	<dir>/runs/.<id>.json.tmp-* a write under way (removed at start if a crash left it)
//	<dir>/runs/.<id>.running    lock (flock) of a running run, held by the process writing it
//
// A run file is written whole or not at all: to a temporary file in the
// same directory, synced, renamed over the old one, and the directory
// synced. It is written at the start of a run with verdict "running", so
// that a run that never ended leaves evidence: the next Open rewrites it
// as aborted (see ReasonInterrupted). Retention keeps, per test, the newest
// runs and the runs of a maximum age, at Open and after each Finish; it
// never removes a running run.
//
// One process holds the directory (Open); others may store their runs
// in it beside it (OpenGuest: a `test run` beside the daemon). Every
// running run, the holder's or a guest's, is held live by its writer's
// lock on its lock file, from before its first write to after its last:
// Open marks a run found running aborted only when no one holds it (its
// writer stopped), indexes a live one as running (another process's,
// not written, not removed) and settles it once its writer lets go of it
// (at its next write: finished as its file says, or aborted). Open
// removes the temporary and lock files that no live writer holds.
//
// A write that fails (a full disk, a file system remounted read-only)
// loses nothing the process still holds: the run's index entry takes the
// new state all the same (a finished run is no longer "running"), its
// encoded file is kept in memory, Get serves it from there and List names
// the failure (Summary.StorageError), and the write is retried before
// every later write of a run and at Close. Only a stop before a retry
// succeeds loses it (Close logs each such run).
//
// A daemon whose storage cannot be opened for writing (Open fails with
// ErrUnwritable) still starts: OpenReadOnly indexes the runs it can read,
// and each Begin tries Open again, failing with the directory's error
// until the directory can be written.
package runstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/regularfile"
)

const (
	// VerdictRunning is the verdict of a run that has begun and not
	// finished; in a file found at Open, of a run that never ended.
	VerdictRunning = "running"
	// ReasonInterrupted is the reason of a run found running at Open: the
	// process stopped (crashed, was killed, lost power) during it. Its
	// verdict becomes capacity.VerdictAborted, its end the last time its
	// file was written (its start, or its last Update).
	ReasonInterrupted = "interrupted: sloprober stopped while the run was running"
)

const (
	// MaxRunBytes bounds a run file that Open and Get read, and that a
	// write may produce. A level is at most 2.7 KiB of indented JSON with
	// one scenario (every field at its widest) and 0.45 KiB more per
	// scenario: 9.5 KiB with 16 scenarios. The largest step run the
	// configuration allows has 140 levels (a baseline, 64 sweep levels,
	// 10 refinements, 64 verification rates, a burst): 1.3 MiB with 16
	// scenarios (TestRunSizeBound measures it), 0.6 MiB for 64 levels.
	// 64 MiB is 49 times that, and room for a soak of a week in 5-minute
	// windows (2,016 levels, 19 MiB); yet a file of a broken writer, or
	// of someone else, cannot exhaust the memory at start.
	MaxRunBytes = 64 << 20
	// MaxIndexedRuns bounds the runs the store keeps: the index holds a
	// summary of each in memory (about 300 bytes: 30 MB for 100,000), and
	// Open reads every file. Beyond it the oldest finished runs are
	// removed, as by retention. With the default retention (100 runs per
	// test) it takes 1,000 tests to reach.
	MaxIndexedRuns = 100_000
)

const (
	lockName      = "lock"
	runsDir       = "runs"
	runExt        = ".json"
	corruptSuffix = ".corrupt"
	tmpPrefix     = "."
	tmpInfix      = ".tmp-"
)

var (
	// ErrNotFound: no run of that ID is stored (never was, or retention
	// removed it).
	ErrNotFound = errors.New("run not found")
	// ErrFinished: Update or Finish of a run that has finished.
	ErrFinished = errors.New("run already finished")
	// ErrClosed: a write to a closed store.
	ErrClosed = errors.New("run store closed")
	// ErrNotStored: Update or Finish could not write the run's file. The
	// run is kept in memory (Get serves it; List names the error in its
	// StorageError) and written at the next write of a run or at Close.
	ErrNotStored = errors.New("not stored")
	// ErrUnwritable is matched (errors.Is) by an error of Open that the
	// directory could not be created, locked, read or written: a
	// read-only or full file system, missing permissions. Its message is
	// the failure's own. ErrLocked (another sloprober holds it) and a bad
	// argument are not.
	ErrUnwritable = errors.New("storage cannot be written")

	errTooLarge = errors.New("run file too large")
)

// Retention is how long runs are kept, per test: the newest MaxRuns runs
// of each test, none that ended more than MaxAge ago; 0 is no limit.
// Running runs are neither counted nor removed.
type Retention struct {
	MaxRuns int
	MaxAge  time.Duration
}

// unwritableError is an error of Open that matches ErrUnwritable, with
// the failure's own message.
type unwritableError struct{ err error }

func (e unwritableError) Error() string   { return e.err.Error() }
func (e unwritableError) Unwrap() []error { return []error{e.err, ErrUnwritable} }

// Summary is a run as List lists it: its header and, while its file does
// not hold its latest state, why.
type Summary struct {
	capacity.Summary
	// StorageError is set while the run's last write has failed: its
	// latest state (for a finished run, its result) is held in memory
	// only and served from there, and the write is retried at the next
	// write of a run and at Close; a stop before then loses it. Empty
	// when its file is up to date.
	StorageError string `json:"storage_error,omitempty"`
}

// entry is a run in the index.
type entry struct {
	capacity.Summary
	// at is the start in the ID: the order of the index.
	at time.Time
	// pending is the run's file as it should be, when its last write
	// failed (storageErr says why); nil when the file is up to date. A
	// run that could not even be encoded has a storageErr and no
	// pending.
	pending    []byte
	storageErr string
	storing    string // what failed: "storing the result", "storing the partial results"
	// abortedAt is set in a read-only store (OpenReadOnly) for a run
	// whose file says running: it is served as aborted, ended then, as
	// Open would have rewritten it.
	abortedAt time.Time
	// foreign is set in a store that Open opened for a run that another
	// process (a guest) was writing, running, when it was indexed: this
	// store neither writes it nor judges it until its writer lets go of
	// it (see settleForeign).
	foreign bool
}

// id is the entry's run ID.
func (e *entry) id() ID { return ID(e.ID) }

func (e *entry) running() bool { return e.Verdict == VerdictRunning }

// unstored reports whether the entry's file lacks its latest state.
func (e *entry) unstored() bool { return e.storageErr != "" }

// age is how long ago the run ended (or started, if it has no end).
func (e *entry) age(now time.Time) time.Duration {
	if !e.End.IsZero() {
		return now.Sub(e.End)
	}
	return now.Sub(e.Start)
}

// compareEntries orders entries by start, then ID.
func compareEntries(a, b *entry) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(string(a.ID), string(b.ID))
}

// Store is the runs of a storage directory. It is safe for concurrent use.
type Store struct {
	dir       string
	runs      string
	retention Retention
	logger    *slog.Logger

	// wmu serialises the writes: run files, removals and the index's
	// changes. Runs begin and end minutes apart; nothing waits on it but
	// another write.
	wmu    sync.Mutex
	lock   io.Closer // nil in a read-only or guest store
	closed bool
	// guest is set by OpenGuest: no directory lock, no retention, and
	// no run written but this store's own.
	guest bool
	// live holds the locks of this store's running runs (see lockPath),
	// and of its finished runs whose final write has not succeeded yet.
	// Guarded by wmu.
	live map[ID]*os.File
	// foreign are the entries whose foreign is set. Guarded by wmu.
	foreign []*entry

	// unwritable is why a read-only store cannot write (nil once Begin's
	// Open has succeeded, and in a store that Open opened). Set with wmu
	// and mu held.
	unwritable error

	// mu guards the index; the readers (List, Get, Last) only take it.
	// The index changes only with wmu held too: a writer may read it
	// under wmu alone.
	mu    sync.RWMutex
	byID  map[ID]*entry
	order []*entry // by start, oldest first
}

// Open opens the store in dir, creating it (0750) if missing. It locks the
// directory for this process, indexes the runs in it, marks the runs that
// were running when sloprober last stopped aborted, and applies
// retention. A run file it cannot read is logged and renamed to
// <file>.corrupt, never fatal. logger may be nil.
func Open(dir string, retention Retention, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if dir == "" {
		return nil, errors.New("storage path is empty")
	}
	if retention.MaxRuns < 0 || retention.MaxAge < 0 {
		return nil, fmt.Errorf("retention of %d runs and %s: must not be negative", retention.MaxRuns, retention.MaxAge)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, unwritableError{fmt.Errorf("create the storage directory: %w", err)}
	}
	lock, err := acquireLock(filepath.Join(dir, lockName))
	if err != nil {
		if !errors.Is(err, ErrLocked) {
			err = unwritableError{err}
		}
		return nil, err
	}
	s := &Store{
		dir:       dir,
		runs:      filepath.Join(dir, runsDir),
		retention: retention,
		logger:    logger,
		lock:      lock,
		byID:      map[ID]*entry{},
		live:      map[ID]*os.File{},
	}
	if err := s.load(); err != nil {
		_ = lock.Close()
		return nil, unwritableError{err}
	}
	return s, nil
}

// OpenReadOnly opens the store in dir for a process that Open failed for
// with why (ErrUnwritable, or ErrLocked: another sloprober, a `test run`,
// holds it): it indexes the run files it can read, and changes nothing on
// disk (no file is set aside, no retention applied). A run found running
// whose writer still holds it (the lock holder's, or a guest's: see
// OpenGuest) is another process's, running, and left out; one whose
// writer stopped is served as aborted, as Open would rewrite it. Each
// Begin tries Open again: until it succeeds, Begin fails with Open's
// error, naming the directory; once it does, the store is as Open
// returns it. logger may be nil.
func OpenReadOnly(dir string, retention Retention, why error, logger *slog.Logger) *Store {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		dir:        dir,
		runs:       filepath.Join(dir, runsDir),
		retention:  retention,
		logger:     logger,
		byID:       map[ID]*entry{},
		live:       map[ID]*os.File{},
		unwritable: why,
	}
	s.loadReadOnly()
	return s
}

// OpenGuest opens the store in dir for a process that Open failed for
// with ErrLocked (another sloprober holds it: the daemon, when a `test
// run` is started beside it), to store its own runs there all the same.
// It takes no directory lock; it indexes the run files it can read as
// OpenReadOnly does (a running run of a live writer left out, one whose
// writer stopped served as aborted), and it changes nothing on disk but
// its own runs: Begin, Update and Finish write them as in a store that
// Open opened, each held live by its lock for as long as it runs (so
// that the owner, at its next Open, indexes it running and does not mark
// it aborted). It applies no retention, sets no file aside and removes
// nothing; the owner does, at its next Open. A store that Open opened
// lists a guest's runs from its next Open on (it does not watch the
// directory). It fails (ErrUnwritable) only when the runs directory
// cannot be created. logger may be nil.
func OpenGuest(dir string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if dir == "" {
		return nil, errors.New("storage path is empty")
	}
	s := &Store{
		dir:    dir,
		runs:   filepath.Join(dir, runsDir),
		logger: logger,
		byID:   map[ID]*entry{},
		live:   map[ID]*os.File{},
		guest:  true,
	}
	if err := os.MkdirAll(s.runs, 0o750); err != nil {
		return nil, unwritableError{fmt.Errorf("create the runs directory: %w", err)}
	}
	s.loadReadOnly()
	return s, nil
}

// Guest reports whether OpenGuest opened the store.
func (s *Store) Guest() bool { return s.guest }

// Unwritable is why the store cannot write: the last error of Open in a
// store that OpenReadOnly opened, until a Begin has opened it; else nil.
func (s *Store) Unwritable() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.unwritable
}

// loadReadOnly indexes the run files that can be read, newest first up to
// MaxIndexedRuns, writing nothing.
func (s *Store) loadReadOnly() {
	des, err := os.ReadDir(s.runs)
	if err != nil {
		s.logger.Warn("Cannot read the stored runs", "dir", s.runs, "err", err)
		return
	}
	var found []*entry
	for _, de := range des {
		name := de.Name()
		if !strings.HasSuffix(name, runExt) || strings.HasPrefix(name, tmpPrefix) {
			continue
		}
		test, at, err := parseID(strings.TrimSuffix(name, runExt))
		if err != nil {
			continue
		}
		found = append(found, &entry{Summary: capacity.Summary{ID: strings.TrimSuffix(name, runExt), Test: test}, at: at})
	}
	slices.SortFunc(found, func(a, b *entry) int { return compareEntries(b, a) })
	skipped := 0
	for _, e := range found {
		if len(s.order) >= MaxIndexedRuns {
			break
		}
		path := filepath.Join(s.runs, e.ID+runExt)
		m, modTime, err := readSummary(path, e.Test)
		if err != nil {
			s.logger.Warn("Skipping a run file that cannot be read", "file", path, "err", err)
			skipped++
			continue
		}
		if m.Verdict == VerdictRunning {
			if runLive(s.lockPath(e.id())) {
				continue // another process's run, running: not this one's to judge
			}
			// Its writer may have finished it since it was read.
			if m2, mt2, err := readSummary(path, e.Test); err == nil {
				m, modTime = m2, mt2
			}
		}
		if m.Verdict == VerdictRunning {
			end := modTime.UTC()
			if end.Before(m.Start) {
				end = m.Start
			}
			m.Verdict, m.Reason, m.End = capacity.VerdictAborted, ReasonInterrupted, end
			e.abortedAt = end
		}
		m.ID = e.ID
		e.Summary = m
		s.byID[e.id()] = e
		s.order = append(s.order, e)
	}
	slices.Reverse(s.order)
	if s.guest {
		// Debug: the guest's caller says where its runs go.
		s.logger.Debug("Loaded the stored runs that can be read; only this process's runs are written", "dir", s.runs, "runs", len(s.order), "skipped", skipped)
		return
	}
	s.logger.Info("Loaded the stored runs that can be read; the storage is not written", "dir", s.runs, "runs", len(s.order), "skipped", skipped)
}

// reopen opens a read-only store with Open, taking its lock and index;
// wmu is held.
func (s *Store) reopen() error {
	n, err := Open(s.dir, s.retention, s.logger)
	if err != nil {
		s.mu.Lock()
		s.unwritable = err
		s.mu.Unlock()
		if errors.Is(err, ErrLocked) {
			return fmt.Errorf("the storage %s is in use by another sloprober until it ends: %w", s.dir, err)
		}
		return fmt.Errorf("the storage %s cannot be written: %w", s.dir, err)
	}
	s.lock = n.lock
	s.foreign = n.foreign
	s.mu.Lock()
	s.byID, s.order, s.unwritable = n.byID, n.order, nil
	s.mu.Unlock()
	s.logger.Info("The storage can be written: runs are stored again", "dir", s.dir)
	return nil
}

// Close writes the runs whose last write failed, logs those it still
// cannot (lost with this stop: their files keep an older state, a run
// found running by the next Open is marked aborted), and releases the
// locks: of its runs (a run still running is marked aborted by the next
// Open) and of the directory. The store can still be read; writes fail
// with ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.lock == nil && !s.guest {
		return nil
	}
	s.retryPending("")
	for _, e := range s.order {
		if e.unstored() {
			s.logger.Error("A run could not be stored and is lost with this stop", "id", e.ID, "test", e.Test, "verdict", e.Verdict,
				"file", s.path(e.id()), "err", e.storageErr)
		}
	}
	for id := range s.live {
		s.releaseLive(id)
	}
	if s.lock == nil {
		return nil
	}
	return s.lock.Close()
}

// Dir is the storage directory.
func (s *Store) Dir() string { return s.dir }

// load indexes the run files, newest first up to MaxIndexedRuns, then
// applies retention. A run found running is marked aborted unless its
// writer (a guest) still holds it: that one is indexed running, foreign,
// until it lets go (settleForeign). The files a stopped writer left (a
// write under way, a run's lock file) are removed, a live writer's kept.
func (s *Store) load() error {
	if err := os.MkdirAll(s.runs, 0o750); err != nil {
		return fmt.Errorf("create the runs directory: %w", err)
	}
	des, err := os.ReadDir(s.runs)
	if err != nil {
		return fmt.Errorf("read the runs directory: %w", err)
	}
	var found []*entry
	var tmps, locks []string
	setAside := 0
	for _, de := range des {
		name := de.Name()
		switch {
		case strings.HasPrefix(name, tmpPrefix) && strings.Contains(name, tmpInfix):
			// A write under way, or one that a crash interrupted (its run
			// file is intact): removed below unless its writer is live.
			tmps = append(tmps, name)
			continue
		case strings.HasPrefix(name, tmpPrefix) && strings.HasSuffix(name, runningSuffix):
			locks = append(locks, name)
			continue
		case strings.HasSuffix(name, corruptSuffix):
			continue
		case !strings.HasSuffix(name, runExt):
			s.logger.Debug("Ignoring a file that is not a run", "file", filepath.Join(s.runs, name))
			continue
		}
		test, at, err := parseID(strings.TrimSuffix(name, runExt))
		if err != nil {
			s.setAside(name, fmt.Errorf("not the name of a run file: %w", err))
			setAside++
			continue
		}
		found = append(found, &entry{Summary: capacity.Summary{ID: strings.TrimSuffix(name, runExt), Test: test}, at: at})
	}
	// Newest first: beyond MaxIndexedRuns the oldest go.
	slices.SortFunc(found, func(a, b *entry) int { return compareEntries(b, a) })
	aborted, dropped, skipped := 0, 0, 0
	for _, e := range found {
		if len(s.order) >= MaxIndexedRuns {
			s.remove(e.id())
			dropped++
			continue
		}
		name := e.ID + runExt
		m, modTime, err := readSummary(filepath.Join(s.runs, name), e.Test)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if errors.Is(err, capacity.ErrNewerSchema) {
			// A downgrade: the run is intact, for the sloprober that
			// wrote it. Left where it is, not indexed.
			s.logger.Warn("Skipping a run of a newer sloprober", "file", filepath.Join(s.runs, name), "err", err)
			skipped++
			continue
		}
		if err != nil {
			s.setAside(name, err)
			setAside++
			continue
		}
		if m.Verdict == VerdictRunning {
			m2, foreign, wasAborted, err := s.settle(e.id(), modTime)
			if err != nil {
				if errors.Is(err, errUnreadable) {
					s.setAside(name, err)
					setAside++
					continue
				}
				return err
			}
			e.foreign = foreign
			if foreign {
				s.foreign = append(s.foreign, e)
			} else {
				m = m2
			}
			if wasAborted {
				aborted++
			}
		}
		m.ID = e.ID
		e.Summary = m
		s.byID[e.id()] = e
		s.order = append(s.order, e)
	}
	slices.Reverse(s.order)
	if dropped > 0 {
		s.logger.Warn("Removed the oldest runs beyond the store's limit", "limit", MaxIndexedRuns, "removed", dropped)
	}
	s.removeLeftovers(tmps, locks)
	s.logger.Info("Loaded the stored runs", "dir", s.runs, "runs", len(s.order), "aborted", aborted, "set_aside", setAside, "newer", skipped,
		"running_elsewhere", len(s.foreign))
	s.expire("", MaxIndexedRuns, time.Now())
	return nil
}

// removeLeftovers removes the temporary files and the runs' lock files
// that no live writer holds: a stopped writer's.
func (s *Store) removeLeftovers(tmps, locks []string) {
	for _, name := range tmps {
		if id, ok := tmpRunID(name); ok && runLive(s.lockPath(id)) {
			continue // a guest's write under way
		}
		if err := os.Remove(filepath.Join(s.runs, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.logger.Warn("Could not remove an unfinished write", "file", filepath.Join(s.runs, name), "err", err)
		}
	}
	for _, name := range locks {
		path := filepath.Join(s.runs, name)
		id, ok := lockedRunID(name)
		if !ok {
			s.logger.Debug("Ignoring a file that is not a run", "file", path)
			continue
		}
		f, held, err := claimRun(path)
		switch {
		case err != nil:
			s.logger.Warn("Could not check a run's lock file", "file", path, "err", err)
		case f != nil:
			s.releaseRun(id, f)
		}
		_ = held // a live writer's (a guest beginning a run): kept
	}
}

// errUnreadable: a run file that a restart cannot mark aborted.
var errUnreadable = errors.New("unreadable run")

// settle judges a run found running, its file last written at modTime,
// in a store that Open opened (wmu held, or in load): its writer still
// holds it (foreign: left as it is), or it finished since (its file's
// header), or its writer stopped (the file rewritten as aborted, and its
// lock file removed). A foreign run's summary is left to the caller.
func (s *Store) settle(id ID, modTime time.Time) (m capacity.Summary, foreign, aborted bool, err error) {
	f, held, err := claimRun(s.lockPath(id))
	if err != nil {
		// Judged as before runs had locks: the process that wrote it is
		// taken to have stopped.
		s.logger.Warn("Could not check whether a running run's writer is live: taken to have stopped", "id", id,
			"file", s.lockPath(id), "err", err)
	}
	if held {
		s.logger.Info("A run is running in another process (a test run beside this one): left as it is", "id", id)
		return capacity.Summary{}, true, false, nil
	}
	if f != nil {
		defer s.releaseRun(id, f)
	}
	m, aborted, err = s.abortInterrupted(id, modTime)
	return m, false, aborted, err
}

// abortInterrupted rewrites a run found running, its writer gone, as
// aborted, its end the file's modification time. A run found finished
// when read again (its writer finished it since) is left as it is.
func (s *Store) abortInterrupted(id ID, modTime time.Time) (capacity.Summary, bool, error) {
	run, err := readRun(s.path(id))
	if err != nil {
		return capacity.Summary{}, false, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if run.Verdict != VerdictRunning {
		return run.Header(), false, nil
	}
	// The file was last written at the run's start or its last
	// checkpoint; never before its start (the clocks of the two may
	// differ by the write's microseconds).
	run.Verdict, run.Reason, run.End = capacity.VerdictAborted, ReasonInterrupted, modTime.UTC()
	if run.End.Before(run.Start) {
		run.End = run.Start
	}
	if err := s.write(id, run); err != nil {
		return capacity.Summary{}, false, fmt.Errorf("mark the interrupted run %s aborted: %w", id, err)
	}
	s.logger.Warn("A run was interrupted by the last stop of sloprober: marked aborted", "id", id, "end", modTime)
	return run.Header(), true, nil
}

// settleForeign settles the foreign runs whose writers have let go of
// them since: finished (indexed as their files say, and retention
// applied) or stopped (marked aborted). wmu is held.
func (s *Store) settleForeign() {
	if len(s.foreign) == 0 {
		return
	}
	kept := s.foreign[:0]
	settled := false
	for _, e := range s.foreign {
		id := e.id()
		if runLive(s.lockPath(id)) {
			kept = append(kept, e)
			continue
		}
		m, modTime, err := readSummary(s.path(id), e.Test)
		foreign, gone := false, errors.Is(err, fs.ErrNotExist)
		if err == nil && m.Verdict == VerdictRunning {
			m, foreign, _, err = s.settle(id, modTime)
		}
		switch {
		case foreign:
			kept = append(kept, e)
			continue
		case gone:
			s.mu.Lock()
			s.order = slices.DeleteFunc(s.order, func(o *entry) bool { return o == e })
			delete(s.byID, id)
			s.mu.Unlock()
			continue
		case err != nil:
			// Listed running until the next Open sets it aside.
			s.logger.Warn("Could not read a run another process wrote", "id", id, "file", s.path(id), "err", err)
			e.foreign = false
			continue
		}
		m.ID = e.ID
		s.mu.Lock()
		e.Summary, e.foreign = m, false
		s.mu.Unlock()
		settled = true
	}
	clear(s.foreign[len(kept):])
	s.foreign = kept
	if settled {
		s.expire("", MaxIndexedRuns, time.Now())
	}
}

// setAside renames a run file that cannot be read to <name>.corrupt.
func (s *Store) setAside(name string, why error) {
	path := filepath.Join(s.runs, name)
	if err := os.Rename(path, path+corruptSuffix); err != nil {
		s.logger.Error("Skipping a run file that cannot be read, and could not set it aside", "file", path, "reason", why, "err", err)
		return
	}
	s.logger.Error("Skipping a run file that cannot be read: set aside", "file", path, "renamed_to", path+corruptSuffix, "reason", why)
}

// Begin stores a run as it starts, with verdict "running", and returns its
// ID. The run needs its Test; a zero Start is the time now. The caller's
// run is not changed.
func (s *Store) Begin(run *capacity.Run) (ID, error) {
	if run == nil {
		return "", errors.New("begin: no run")
	}
	if err := checkTest(run.Test); err != nil {
		return "", fmt.Errorf("begin: %w", err)
	}
	r := *run
	if r.Start.IsZero() {
		r.Start = time.Now()
	}
	r.Verdict = VerdictRunning

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	if s.lock == nil && !s.guest {
		if err := s.reopen(); err != nil {
			return "", fmt.Errorf("begin: %w", err)
		}
	}
	s.settleForeign()
	s.retryPending("")
	if !s.guest && len(s.order) >= MaxIndexedRuns {
		s.expire("", MaxIndexedRuns-1, time.Now())
		if len(s.order) >= MaxIndexedRuns {
			return "", fmt.Errorf("begin: the store holds %d runs, all running", len(s.order))
		}
	}
	id, lock, err := s.newRun(r.Test, r.Start)
	if err != nil {
		return "", fmt.Errorf("begin: %w", err)
	}
	_, at, _ := parseID(string(id))
	data, err := encode(id, &r)
	if err == nil {
		err = s.writeData(id, data)
	}
	if err != nil {
		s.releaseRun(id, lock)
		return "", fmt.Errorf("begin: %w", err)
	}
	s.live[id] = lock
	e := &entry{at: at}
	e.set(id, &r)
	s.mu.Lock()
	s.byID[id] = e
	i, _ := slices.BinarySearchFunc(s.order, e, compareEntries)
	s.order = slices.Insert(s.order, i, e)
	s.mu.Unlock()
	return id, nil
}

// newRun picks a new run's ID, one that no run in the directory has, and
// takes its lock (see lockPath); wmu is held.
func (s *Store) newRun(test string, start time.Time) (ID, *os.File, error) {
	for tries := 0; ; tries++ {
		id, err := newID(test, start)
		if err != nil {
			return "", nil, err
		}
		s.mu.RLock()
		_, taken := s.byID[id]
		s.mu.RUnlock()
		if taken {
			continue
		}
		lock, err := lockNewRun(s.lockPath(id))
		if errors.Is(err, errRunLockTaken) && tries < 100 {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("mark the run running: %w", err)
		}
		// Another process's run of the same ID, finished: not this one's.
		if _, err := os.Lstat(s.path(id)); !errors.Is(err, fs.ErrNotExist) {
			s.releaseRun(id, lock)
			if tries < 100 {
				continue
			}
			return "", nil, fmt.Errorf("mark the run running: no free run ID: %s exists", s.path(id))
		}
		return id, lock, nil
	}
}

// set fills an entry's summary from a run.
func (e *entry) set(id ID, run *capacity.Run) {
	e.Summary = run.Header()
	e.ID = string(id)
}

// Update stores the partial results of a running run; its verdict stays
// "running" whatever run's is. A failed write is ErrNotStored: the
// partial results are held in memory (see Summary.StorageError).
func (s *Store) Update(id ID, run *capacity.Run) error {
	return s.put(id, run, false)
}

// Finish stores the final results of a run: run needs a verdict, and has
// its end (a zero End is the time now). Retention is applied to the run's
// test after. A failed write is ErrNotStored: the run is finished all
// the same, its result held in memory and served by Get, its write
// retried at the next write of a run and at Close (see
// Summary.StorageError).
func (s *Store) Finish(id ID, run *capacity.Run) error {
	return s.put(id, run, true)
}

func (s *Store) put(id ID, run *capacity.Run, finish bool) error {
	op := "update"
	if finish {
		op = "finish"
	}
	if run == nil {
		return fmt.Errorf("%s %s: no run", op, id)
	}
	if _, _, err := parseID(string(id)); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	r := *run
	switch {
	case !finish:
		r.Verdict = VerdictRunning
	case r.Verdict == "" || r.Verdict == VerdictRunning:
		return fmt.Errorf("%s %s: the run has no final verdict (%q)", op, id, r.Verdict)
	case r.End.IsZero():
		r.End = time.Now()
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.mu.RLock()
	e := s.byID[id]
	var test string
	var start time.Time
	running, foreign := false, false
	if e != nil {
		test, start, running, foreign = e.Test, e.Start, e.running(), e.foreign
	}
	s.mu.RUnlock()
	switch {
	case e == nil:
		return fmt.Errorf("%s %s: %w", op, id, ErrNotFound)
	case foreign:
		return fmt.Errorf("%s %s: the run is another process's", op, id)
	case !running:
		return fmt.Errorf("%s %s: %w", op, id, ErrFinished)
	case r.Test != test:
		return fmt.Errorf("%s %s: the run is of test %q, not %q", op, id, test, r.Test)
	}
	if r.Start.IsZero() {
		r.Start = start
	}
	s.settleForeign()
	// The older failed writes first: this one may fail the same way.
	s.retryPending(id)
	data, err := encode(id, &r)
	if err == nil {
		err = s.writeData(id, data)
	}
	what := "storing the partial results"
	if finish {
		what = "storing the result"
	}
	// The index takes the run's new state whether or not its file does:
	// a finished run whose write failed is finished, not running.
	s.mu.Lock()
	e.set(id, &r)
	e.pending, e.storageErr, e.storing = nil, "", ""
	if err != nil {
		e.pending, e.storageErr, e.storing = data, what+": "+err.Error(), what
	}
	s.mu.Unlock()
	if err != nil {
		msg := "Could not store a run's partial results: held in memory, written with its next write"
		switch {
		case data == nil:
			msg = "Could not encode a run: not stored"
		case finish:
			msg = "Could not store a run's result: held in memory and served from there; the write is retried at the next write of a run and at shutdown, and lost if sloprober stops first"
		}
		s.logger.Error(msg, "id", id, "test", r.Test, "verdict", r.Verdict, "file", s.path(id), "err", err)
		return fmt.Errorf("%s %s: %w: %w", op, id, ErrNotStored, err)
	}
	if finish {
		s.releaseLive(id)
		s.expire(r.Test, MaxIndexedRuns, time.Now())
	}
	return nil
}

// retryPending writes the runs whose last write failed, but for except's
// (whose new state the caller writes); wmu is held.
func (s *Store) retryPending(except ID) {
	// Listed first: expire changes s.order (but never drops these).
	var todo []*entry
	for _, e := range s.order {
		// A run that could not be encoded has nothing to write.
		if e.unstored() && e.pending != nil && e.id() != except {
			todo = append(todo, e)
		}
	}
	for _, e := range todo {
		if err := s.writeData(e.id(), e.pending); err != nil {
			s.mu.Lock()
			e.storageErr = e.storing + ": " + err.Error()
			s.mu.Unlock()
			s.logger.Warn("Still cannot store a run", "id", e.ID, "file", s.path(e.id()), "err", err)
			continue
		}
		s.mu.Lock()
		e.pending, e.storageErr = nil, ""
		running := e.running()
		s.mu.Unlock()
		s.logger.Info("Stored a run whose earlier write had failed", "id", e.ID, "verdict", e.Verdict, "file", s.path(e.id()))
		if !running {
			s.releaseLive(e.id())
			s.expire(e.Test, MaxIndexedRuns, time.Now())
		}
	}
}

// expire applies retention to the runs of test ("": every test), and keeps
// at most limit runs in all; it removes the files of the runs it drops,
// never a running one (this process's, or another's). A guest store
// applies none. The caller holds wmu.
func (s *Store) expire(test string, limit int, now time.Time) {
	if s.guest {
		return
	}
	maxRuns, maxAge := s.retention.MaxRuns, s.retention.MaxAge
	drop := map[*entry]bool{}
	s.mu.Lock()
	if maxRuns > 0 || maxAge > 0 {
		kept := map[string]int{}
		for _, e := range slices.Backward(s.order) {
			if (test != "" && e.Test != test) || e.running() || e.unstored() {
				continue
			}
			if (maxRuns > 0 && kept[e.Test] >= maxRuns) || (maxAge > 0 && e.age(now) > maxAge) {
				drop[e] = true
				continue
			}
			kept[e.Test]++
		}
	}
	for _, e := range s.order {
		if len(s.order)-len(drop) <= limit {
			break
		}
		if !e.running() && !e.unstored() {
			drop[e] = true
		}
	}
	if len(drop) == 0 {
		s.mu.Unlock()
		return
	}
	s.order = slices.DeleteFunc(s.order, func(e *entry) bool { return drop[e] })
	for e := range drop {
		delete(s.byID, e.id())
	}
	s.mu.Unlock()
	for e := range drop {
		s.remove(e.id())
	}
	s.logger.Info("Removed runs past retention", "test", test, "removed", len(drop), "max_runs", maxRuns, "max_age", maxAge)
}

// remove deletes a run's file.
func (s *Store) remove(id ID) {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.logger.Warn("Could not remove a run past retention", "id", id, "err", err)
	}
}

// List returns the summaries of the runs of test ("": of every test),
// newest first.
func (s *Store) List(test string) []Summary {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []Summary{}
	for _, e := range slices.Backward(s.order) {
		if test == "" || e.Test == test {
			out = append(out, Summary{Summary: e.Summary, StorageError: e.storageErr})
		}
	}
	return out
}

// Latest returns a test's newest stored run, without copying the others
// (the landing page asks for every test's on each view).
func (s *Store) Latest(test string) (Summary, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range slices.Backward(s.order) {
		if e.Test == test {
			return Summary{Summary: e.Summary, StorageError: e.storageErr}, true
		}
	}
	return Summary{}, false
}

// Get reads a run. An id that is not a run ID is ErrInvalidID; one not
// stored ErrNotFound.
func (s *Store) Get(id ID) (*capacity.Run, error) {
	run, _, err := s.Lookup(id)
	return run, err
}

// Lookup is Get, and the run's StorageError: a run whose last write failed
// is served from memory, in the state its file should have.
func (s *Store) Lookup(id ID) (*capacity.Run, string, error) {
	if _, _, err := parseID(string(id)); err != nil {
		return nil, "", err
	}
	s.mu.RLock()
	e, ok := s.byID[id]
	var pending []byte
	var storageErr string
	var abortedAt time.Time
	if ok {
		pending, storageErr, abortedAt = e.pending, e.storageErr, e.abortedAt
	}
	s.mu.RUnlock()
	var run *capacity.Run
	var err error
	switch {
	case !ok:
		return nil, "", fmt.Errorf("run %s: %w", id, ErrNotFound)
	case pending != nil:
		run, err = capacity.DecodeRun(pending)
	case storageErr != "":
		return nil, storageErr, fmt.Errorf("run %s: %s", id, storageErr)
	default:
		run, err = readRun(s.path(id))
	}
	if errors.Is(err, fs.ErrNotExist) {
		// Removed by retention since.
		return nil, "", fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("run %s: %w", id, err)
	}
	if !abortedAt.IsZero() && run.Verdict == VerdictRunning {
		run.Verdict, run.Reason, run.End = capacity.VerdictAborted, ReasonInterrupted, abortedAt
	}
	run.ID = string(id) // the file's name is its id, whatever it holds
	return run, storageErr, nil
}

// Last returns the newest run of test ("": of any test), the newest
// finished one if finishedOnly.
func (s *Store) Last(test string, finishedOnly bool) (*capacity.Run, bool) {
	return s.last(func(e *entry) bool {
		return (test == "" || e.Test == test) && (!finishedOnly || !e.running())
	})
}

// LastWithCapacity returns the newest finished step run of test ("": of
// any test), not aborted: every such run concluded on a capacity, one it
// found (its Capacity is set: the closed loop met the objectives at some
// level; its VerifiedRate is 0 if no open-loop rate did) or none
// (infeasible, or a fail at every level). The daemon restores its
// capacity gauges from it at start.
func (s *Store) LastWithCapacity(test string) (*capacity.Run, bool) {
	return s.last(func(e *entry) bool {
		// An aborted run's capacity is unverified; every other
		// finished step run concluded on one (none: infeasible, or a
		// fail with no level that met the objectives).
		return (test == "" || e.Test == test) && !e.running() && e.Kind == config.TestStep &&
			e.Verdict != capacity.VerdictAborted
	})
}

// LastVerified returns the newest finished step run on target that
// verified an open-loop rate (its VerifiedRate is set) and that accept
// takes (nil: any): a soak's computed remaining capacity after one
// replica is lost starts from it.
func (s *Store) LastVerified(target string, accept func(*capacity.Run) bool) (*capacity.Run, bool) {
	var ids []ID
	s.mu.RLock()
	for _, e := range slices.Backward(s.order) {
		if e.Target == target && e.Kind == config.TestStep && !e.running() && e.VerifiedRate != nil && *e.VerifiedRate > 0 {
			ids = append(ids, e.id())
		}
	}
	s.mu.RUnlock()
	for _, id := range ids {
		run, err := s.Get(id)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				s.logger.Warn("Could not read a stored run", "id", id, "err", err)
			}
			continue
		}
		if accept == nil || accept(run) {
			return run, true
		}
	}
	return nil, false
}

// last reads the newest run that match accepts; a file that cannot be read
// is logged and the next older run tried.
func (s *Store) last(match func(*entry) bool) (*capacity.Run, bool) {
	var ids []ID
	s.mu.RLock()
	for _, e := range slices.Backward(s.order) {
		if match(e) {
			ids = append(ids, e.id())
		}
	}
	s.mu.RUnlock()
	for _, id := range ids {
		run, err := s.Get(id)
		if err == nil {
			return run, true
		}
		if !errors.Is(err, ErrNotFound) {
			s.logger.Warn("Could not read a stored run", "id", id, "err", err)
		}
	}
	return nil, false
}

func (s *Store) path(id ID) string { return filepath.Join(s.runs, string(id)+runExt) }

// write writes a run's file atomically.
func (s *Store) write(id ID, run *capacity.Run) error {
	data, err := encode(id, run)
	if err != nil {
		return err
	}
	return s.writeData(id, data)
}

// encode is a run's file.
func encode(id ID, run *capacity.Run) ([]byte, error) {
	r := *run
	r.ID = string(id)
	r.Seal()
	data, err := json.MarshalIndent(&r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode run %s: %w", id, err)
	}
	return append(data, '\n'), nil
}

// writeData writes a run's file, as encode made it, atomically.
func (s *Store) writeData(id ID, data []byte) error {
	if len(data) > MaxRunBytes {
		return fmt.Errorf("run %s: %w: %d bytes, the limit is %d", id, errTooLarge, len(data)-1, MaxRunBytes)
	}
	return writeFileAtomic(s.runs, string(id)+runExt, data)
}

// writeFileAtomic writes dir/name whole or not at all: a temporary file in
// dir, synced, renamed over name, then dir synced so that the rename
// survives a crash.
func writeFileAtomic(dir, name string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, tmpPrefix+name+tmpInfix+"*")
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				_ = f.Close()
			}
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(0o640); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	closed = true
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// readFile reads a run file of at most MaxRunBytes.
func readFile(path string) ([]byte, os.FileInfo, error) {
	f, fi, err := regularfile.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if fi.Size() > MaxRunBytes {
		return nil, nil, fmt.Errorf("%w: %d bytes, the limit is %d", errTooLarge, fi.Size(), MaxRunBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxRunBytes+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > MaxRunBytes {
		return nil, nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, MaxRunBytes)
	}
	return data, fi, nil
}

// readSummary reads the summary of a run file, which must be of test,
// and its modification time.
func readSummary(path, test string) (capacity.Summary, time.Time, error) {
	data, fi, err := readFile(path)
	if err != nil {
		return capacity.Summary{}, time.Time{}, err
	}
	m, err := capacity.DecodeSummary(data)
	if err != nil {
		return capacity.Summary{}, time.Time{}, err
	}
	switch {
	case m.Test != test:
		return capacity.Summary{}, time.Time{}, fmt.Errorf("the run is of test %q, its file name of %q", m.Test, test)
	case m.Verdict == "":
		return capacity.Summary{}, time.Time{}, errors.New("the run has no verdict")
	case m.Start.IsZero():
		return capacity.Summary{}, time.Time{}, errors.New("the run has no start")
	}
	return m, fi.ModTime(), nil
}

// readRun reads a run file.
func readRun(path string) (*capacity.Run, error) {
	data, _, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return capacity.DecodeRun(data)
}

// Read reads one stored run from a storage directory without opening the
// store: no lock is taken, so a CLI can read the runs of a running daemon
// (each file is written atomically). The id is checked first: a path that
// would leave the directory is no run.
func Read(dir string, id ID) (*capacity.Run, error) {
	if _, err := ParseID(string(id)); err != nil {
		return nil, err
	}
	run, err := readRun(filepath.Join(dir, runsDir, string(id)+runExt))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s in %s", ErrNotFound, id, dir)
	}
	if err != nil {
		return nil, err
	}
	run.ID = string(id)
	return run, nil
}

// ReadFile reads a run from a file of its own, as `sloprober test run
// --json` writes it, within the store's size bound.
func ReadFile(path string) (*capacity.Run, error) { return readRun(path) }
