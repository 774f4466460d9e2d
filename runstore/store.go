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
//
// A run file is written whole or not at all: to a temporary file in the
// same directory, synced, renamed over the old one, and the directory
// synced. It is written at the start of a run with verdict "running", so
// that a run that never ended leaves evidence: the next Open rewrites it
// as aborted (see ReasonInterrupted). Retention keeps, per test, the newest
// runs and the runs of a maximum age, at Open and after each Finish.
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

	errTooLarge = errors.New("run file too large")
)

// Retention is how long runs are kept, per test: the newest MaxRuns runs
// of each test, none that ended more than MaxAge ago; 0 is no limit.
// Running runs are neither counted nor removed.
type Retention struct {
	MaxRuns int
	MaxAge  time.Duration
}

// entry is a run in the index.
type entry struct {
	capacity.Summary
	// at is the start in the ID: the order of the index.
	at time.Time
}

// id is the entry's run ID.
func (e *entry) id() ID { return ID(e.ID) }

func (e *entry) running() bool { return e.Verdict == VerdictRunning }

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
	lock   io.Closer
	closed bool

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
		return nil, fmt.Errorf("create the storage directory: %w", err)
	}
	lock, err := acquireLock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:       dir,
		runs:      filepath.Join(dir, runsDir),
		retention: retention,
		logger:    logger,
		lock:      lock,
		byID:      map[ID]*entry{},
	}
	if err := s.load(); err != nil {
		_ = lock.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the lock. The store can still be read; writes fail with
// ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.lock.Close()
}

// Dir is the storage directory.
func (s *Store) Dir() string { return s.dir }

// load indexes the run files, newest first up to MaxIndexedRuns, then
// applies retention.
func (s *Store) load() error {
	if err := os.MkdirAll(s.runs, 0o750); err != nil {
		return fmt.Errorf("create the runs directory: %w", err)
	}
	des, err := os.ReadDir(s.runs)
	if err != nil {
		return fmt.Errorf("read the runs directory: %w", err)
	}
	var found []*entry
	setAside := 0
	for _, de := range des {
		name := de.Name()
		switch {
		case strings.HasPrefix(name, tmpPrefix) && strings.Contains(name, tmpInfix):
			// A write that a crash interrupted: its run file is intact.
			if err := os.Remove(filepath.Join(s.runs, name)); err != nil {
				s.logger.Warn("Could not remove an unfinished write", "file", filepath.Join(s.runs, name), "err", err)
			}
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
			if m, err = s.abortInterrupted(e.id(), modTime); err != nil {
				if errors.Is(err, errUnreadable) {
					s.setAside(name, err)
					setAside++
					continue
				}
				return err
			}
			aborted++
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
	s.logger.Info("Loaded the stored runs", "dir", s.runs, "runs", len(s.order), "aborted", aborted, "set_aside", setAside, "newer", skipped)
	s.expire("", MaxIndexedRuns, time.Now())
	return nil
}

// errUnreadable: a run file that a restart cannot mark aborted.
var errUnreadable = errors.New("unreadable run")

// abortInterrupted rewrites a run found running as aborted, its end the
// file's modification time.
func (s *Store) abortInterrupted(id ID, modTime time.Time) (capacity.Summary, error) {
	run, err := readRun(s.path(id))
	if err != nil {
		return capacity.Summary{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	// The file was last written at the run's start or its last
	// checkpoint; never before its start (the clocks of the two may
	// differ by the write's microseconds).
	run.Verdict, run.Reason, run.End = capacity.VerdictAborted, ReasonInterrupted, modTime.UTC()
	if run.End.Before(run.Start) {
		run.End = run.Start
	}
	if err := s.write(id, run); err != nil {
		return capacity.Summary{}, fmt.Errorf("mark the interrupted run %s aborted: %w", id, err)
	}
	s.logger.Warn("A run was interrupted by the last stop of sloprober: marked aborted", "id", id, "end", modTime)
	return run.Header(), nil
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
	var id ID
	for {
		var err error
		if id, err = newID(r.Test, r.Start); err != nil {
			return "", fmt.Errorf("begin: %w", err)
		}
		s.mu.RLock()
		_, taken := s.byID[id]
		s.mu.RUnlock()
		if !taken {
			break
		}
	}
	_, at, _ := parseID(string(id))
	if len(s.order) >= MaxIndexedRuns {
		s.expire("", MaxIndexedRuns-1, time.Now())
		if len(s.order) >= MaxIndexedRuns {
			return "", fmt.Errorf("begin: the store holds %d runs, all running", len(s.order))
		}
	}
	if err := s.write(id, &r); err != nil {
		return "", fmt.Errorf("begin: %w", err)
	}
	e := &entry{at: at}
	e.set(id, &r)
	s.mu.Lock()
	s.byID[id] = e
	i, _ := slices.BinarySearchFunc(s.order, e, compareEntries)
	s.order = slices.Insert(s.order, i, e)
	s.mu.Unlock()
	return id, nil
}

// set fills an entry's summary from a run.
func (e *entry) set(id ID, run *capacity.Run) {
	e.Summary = run.Header()
	e.ID = string(id)
}

// Update stores the partial results of a running run; its verdict stays
// "running" whatever run's is.
func (s *Store) Update(id ID, run *capacity.Run) error {
	return s.put(id, run, false)
}

// Finish stores the final results of a run: run needs a verdict, and has
// its end (a zero End is the time now). Retention is applied to the run's
// test after.
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
	running := false
	if e != nil {
		test, start, running = e.Test, e.Start, e.running()
	}
	s.mu.RUnlock()
	switch {
	case e == nil:
		return fmt.Errorf("%s %s: %w", op, id, ErrNotFound)
	case !running:
		return fmt.Errorf("%s %s: %w", op, id, ErrFinished)
	case r.Test != test:
		return fmt.Errorf("%s %s: the run is of test %q, not %q", op, id, test, r.Test)
	}
	if r.Start.IsZero() {
		r.Start = start
	}
	if err := s.write(id, &r); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	s.mu.Lock()
	e.set(id, &r)
	s.mu.Unlock()
	if finish {
		s.expire(r.Test, MaxIndexedRuns, time.Now())
	}
	return nil
}

// expire applies retention to the runs of test ("": every test), and keeps
// at most limit runs in all; it removes the files of the runs it drops.
// The caller holds wmu.
func (s *Store) expire(test string, limit int, now time.Time) {
	maxRuns, maxAge := s.retention.MaxRuns, s.retention.MaxAge
	drop := map[*entry]bool{}
	s.mu.Lock()
	if maxRuns > 0 || maxAge > 0 {
		kept := map[string]int{}
		for _, e := range slices.Backward(s.order) {
			if (test != "" && e.Test != test) || e.running() {
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
		if !e.running() {
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
func (s *Store) List(test string) []capacity.Summary {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []capacity.Summary{}
	for _, e := range slices.Backward(s.order) {
		if test == "" || e.Test == test {
			out = append(out, e.Summary)
		}
	}
	return out
}

// Get reads a run. An id that is not a run ID is ErrInvalidID; one not
// stored ErrNotFound.
func (s *Store) Get(id ID) (*capacity.Run, error) {
	if _, _, err := parseID(string(id)); err != nil {
		return nil, err
	}
	s.mu.RLock()
	_, ok := s.byID[id]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	run, err := readRun(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		// Removed by retention since.
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	run.ID = string(id) // the file's name is its id, whatever it holds
	return run, nil
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
	r := *run
	r.ID = string(id)
	r.Seal()
	data, err := json.MarshalIndent(&r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode run %s: %w", id, err)
	}
	if len(data) >= MaxRunBytes {
		return fmt.Errorf("run %s: %w: %d bytes, the limit is %d", id, errTooLarge, len(data), MaxRunBytes)
	}
	return writeFileAtomic(s.runs, string(id)+runExt, append(data, '\n'))
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
