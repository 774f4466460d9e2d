package runstore_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/runstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is a start with no sub-millisecond part, in UTC: it survives the JSON
// round trip and the ID exactly.
var t0 = time.Date(2025, 3, 14, 2, 0, 0, 0, time.UTC)

func open(t *testing.T, dir string, r runstore.Retention) *runstore.Store {
	t.Helper()
	s, err := runstore.Open(dir, r, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// logBuffer is a logger into a buffer.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func stepRun(test string, start time.Time) *capacity.Run {
	return &capacity.Run{Summary: capacity.Summary{Test: test, Kind: config.TestStep, Target: "sim", Start: start}}
}

// finished runs a whole run through the store.
func finished(t *testing.T, s *runstore.Store, test string, start, end time.Time, verdict string) runstore.ID {
	t.Helper()
	run := stepRun(test, start)
	id, err := s.Begin(run)
	require.NoError(t, err)
	run.End, run.Verdict, run.Reason = end, verdict, "done"
	require.NoError(t, s.Finish(id, run))
	return id
}

// files lists the names in the runs directory.
func files(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, "runs"))
	require.NoError(t, err)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// stored is run as the store keeps it: with its id, the schema version
// and its header's concluded rate.
func stored(run *capacity.Run, id runstore.ID) *capacity.Run {
	r := *run
	r.ID = string(id)
	r.Seal()
	return &r
}

func ids(list []runstore.Summary) []runstore.ID {
	var out []runstore.ID
	for _, s := range list {
		out = append(out, runstore.ID(s.ID))
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, runstore.Retention{})
	run := stepRun("nightly", t0)
	id, err := s.Begin(run)
	require.NoError(t, err)
	require.Regexp(t, `^nightly-20250314T020000\.000Z-[0-9a-f]{8}$`, string(id))
	require.Empty(t, run.Verdict, "Begin changed the caller's run")
	require.FileExists(t, filepath.Join(dir, "runs", string(id)+".json"))
	require.FileExists(t, filepath.Join(dir, "lock"))

	got, err := s.Get(id)
	require.NoError(t, err)
	require.Equal(t, runstore.VerdictRunning, got.Verdict)
	require.Equal(t, []runstore.Summary{{Summary: capacity.Summary{ID: string(id), Test: "nightly", Kind: "step", Target: "sim", Start: t0, Verdict: "running"}}}, s.List(""))
	_, ok := s.Last("nightly", true)
	require.False(t, ok, "a running run is not finished")
	last, ok := s.Last("nightly", false)
	require.True(t, ok)
	require.Equal(t, runstore.VerdictRunning, last.Verdict)

	// Update: partial results, still running whatever the verdict says.
	run.Baseline = &capacity.Level{Stage: "baseline", Concurrency: 1, Start: t0, Met: true, Counted: 50}
	run.Verdict = capacity.VerdictPass
	require.NoError(t, s.Update(id, run))
	got, err = s.Get(id)
	require.NoError(t, err)
	require.Equal(t, runstore.VerdictRunning, got.Verdict)
	require.Equal(t, run.Baseline, got.Baseline)

	// Finish.
	run.Sweep = []capacity.Level{{Stage: "sweep", Concurrency: 4, Start: t0.Add(time.Minute), Goodput: 12.5, Met: true}}
	run.Capacity = &capacity.Capacity{Concurrency: 4, Rate: 12.5, Goodput: 12.5, VerifiedRate: rate(10), VerifiedGoodput: 10}
	run.End, run.Verdict, run.Reason = t0.Add(time.Hour), capacity.VerdictPass, "10 req/s verified"
	require.NoError(t, s.Finish(id, run))
	got, err = s.Get(id)
	require.NoError(t, err)
	require.Equal(t, stored(run, id), got)
	rate := 10.0
	want := runstore.Summary{Summary: capacity.Summary{ID: string(id), Test: "nightly", Kind: "step", Target: "sim", Start: t0, End: t0.Add(time.Hour),
		Verdict: "pass", Reason: "10 req/s verified", VerifiedRate: &rate}}
	require.Equal(t, []runstore.Summary{want}, s.List(""))
	require.Equal(t, []runstore.Summary{want}, s.List("nightly"))
	require.Empty(t, s.List("other"))
	last, ok = s.Last("nightly", true)
	require.True(t, ok)
	require.Equal(t, stored(run, id), last)
	withCap, ok := s.LastWithCapacity("nightly")
	require.True(t, ok)
	require.Equal(t, stored(run, id), withCap)

	// The file is the run, as JSON.
	data, err := os.ReadFile(filepath.Join(dir, "runs", string(id)+".json"))
	require.NoError(t, err)
	var onDisk capacity.Run
	require.NoError(t, json.Unmarshal(data, &onDisk))
	require.Equal(t, *stored(run, id), onDisk, "the file holds its id, schema version and concluded rate too")

	// A restart keeps it as it was.
	require.NoError(t, s.Close())
	s2 := open(t, dir, runstore.Retention{})
	require.Equal(t, []runstore.Summary{want}, s2.List(""))
	got, err = s2.Get(id)
	require.NoError(t, err)
	require.Equal(t, stored(run, id), got)
	for _, name := range files(t, dir) {
		require.NotContains(t, name, "tmp", "no temporary file is left")
	}
}

func TestOrderAndLast(t *testing.T) {
	s := open(t, t.TempDir(), runstore.Retention{})
	// Begun out of order; listed newest first.
	a2 := finished(t, s, "a", t0.Add(2*time.Hour), t0.Add(3*time.Hour), capacity.VerdictFail)
	a1 := finished(t, s, "a", t0, t0.Add(time.Hour), capacity.VerdictPass)
	b1 := finished(t, s, "b", t0.Add(time.Hour), t0.Add(2*time.Hour), capacity.VerdictPass)
	require.Less(t, string(a1), string(a2), "the IDs of a test sort by start")
	require.Equal(t, []runstore.ID{a2, b1, a1}, ids(s.List("")))
	require.Equal(t, []runstore.ID{a2, a1}, ids(s.List("a")))

	last, ok := s.Last("", true)
	require.True(t, ok)
	require.Equal(t, capacity.VerdictFail, last.Verdict)
	require.Equal(t, t0.Add(2*time.Hour), last.Start)

	// Every finished step run concluded on a capacity, one it found or
	// none (a fail at every level): the newest one counts, not a running
	// one, an aborted one or a soak.
	got, ok := s.LastWithCapacity("a")
	require.True(t, ok)
	require.Equal(t, a2, runID(t, s, got))
	newer := stepRun("a", t0.Add(4*time.Hour))
	newer.Capacity = &capacity.Capacity{Concurrency: 8}
	id, err := s.Begin(newer)
	require.NoError(t, err)
	got, _ = s.LastWithCapacity("a")
	require.Nil(t, got.Capacity, "the newer one is running")
	newer.End, newer.Verdict = t0.Add(5*time.Hour), capacity.VerdictAborted
	require.NoError(t, s.Finish(id, newer))
	got, _ = s.LastWithCapacity("a")
	require.Nil(t, got.Capacity, "an aborted run's capacity is unverified")
	soak := &capacity.Run{Summary: capacity.Summary{Test: "a", Kind: config.TestSoak, Start: t0.Add(5 * time.Hour), End: t0.Add(6 * time.Hour), Verdict: capacity.VerdictPass}, Stages: capacity.Stages{Capacity: &capacity.Capacity{Concurrency: 99}}}
	sid, err := s.Begin(soak)
	require.NoError(t, err)
	require.NoError(t, s.Finish(sid, soak))
	withCap := stepRun("a", t0.Add(7*time.Hour))
	withCap.Capacity = &capacity.Capacity{Concurrency: 8, VerifiedRate: rate(5)}
	id, err = s.Begin(withCap)
	require.NoError(t, err)
	withCap.End, withCap.Verdict = t0.Add(8*time.Hour), capacity.VerdictPass
	require.NoError(t, s.Finish(id, withCap))
	got, ok = s.LastWithCapacity("a")
	require.True(t, ok)
	require.Equal(t, stored(withCap, id), got)
	got, ok = s.LastWithCapacity("b")
	require.True(t, ok)
	require.Equal(t, b1, runID(t, s, got))

	// The summaries state the rate a run concluded on: none while running
	// or aborted, 0 for a fail without one.
	for _, sum := range s.List("a") {
		switch sum.Verdict {
		case capacity.VerdictAborted:
			require.Nil(t, sum.VerifiedRate, sum.ID)
		case capacity.VerdictPass:
			if runstore.ID(sum.ID) == id {
				require.Equal(t, 5.0, *sum.VerifiedRate)
			}
		}
		if sum.Kind == config.TestSoak {
			require.Nil(t, sum.VerifiedRate)
		}
	}
}

// runID finds the id of a stored run by its start.
func runID(t *testing.T, s *runstore.Store, r *capacity.Run) runstore.ID {
	t.Helper()
	for _, sum := range s.List(r.Test) {
		if sum.Start.Equal(r.Start) {
			return runstore.ID(sum.ID)
		}
	}
	t.Fatalf("no stored run of %s started at %s", r.Test, r.Start)
	return ""
}

func TestRestartAbortsInterruptedRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		update bool
	}{
		{"begun", false},
		{"updated", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := runstore.Open(dir, runstore.Retention{MaxRuns: 1}, nil)
			require.NoError(t, err)
			run := stepRun("nightly", t0)
			id, err := s.Begin(run)
			require.NoError(t, err)
			done := finished(t, s, "other", t0, t0.Add(time.Hour), capacity.VerdictPass)
			if tc.update {
				run.Baseline = &capacity.Level{Stage: "baseline", Concurrency: 1, Met: true}
				require.NoError(t, s.Update(id, run))
			}
			// The process dies here: no Finish. The file was last written
			// at mtime.
			mtime := t0.Add(42 * time.Minute)
			require.NoError(t, os.Chtimes(filepath.Join(dir, "runs", string(id)+".json"), mtime, mtime))
			require.NoError(t, s.Close())

			logs := &logBuffer{}
			s2, err := runstore.Open(dir, runstore.Retention{MaxRuns: 1}, logs.logger())
			require.NoError(t, err)
			want := capacity.Summary{ID: string(id), Test: "nightly", Kind: "step", Target: "sim", Start: t0, End: mtime,
				Verdict: capacity.VerdictAborted, Reason: runstore.ReasonInterrupted}
			require.Equal(t, want, s2.List("nightly")[0].Summary)
			require.Equal(t, "interrupted: sloprober stopped while the run was running", want.Reason)
			require.Len(t, s2.List(""), 2, "the finished run is kept")
			require.Equal(t, string(done), s2.List("other")[0].ID)
			got, err := s2.Get(id)
			require.NoError(t, err)
			require.Equal(t, capacity.VerdictAborted, got.Verdict)
			require.True(t, got.End.Equal(mtime), "end %s, want %s", got.End, mtime)
			if tc.update {
				require.Equal(t, run.Baseline, got.Baseline, "the partial results are kept")
			}
			require.Contains(t, logs.String(), string(id))
			require.NoError(t, s2.Close())

			// Marked once: the next start finds it aborted, its end the same.
			s3 := open(t, dir, runstore.Retention{})
			require.Equal(t, want, s3.List("nightly")[0].Summary)
		})
	}
}

func TestRetention(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	day := 24 * time.Hour
	// The runs: of test a, ended 1, 2, 3 and 100 days ago (each started an
	// hour before); of test b, ended 200 days ago.
	type run struct {
		test string
		ago  time.Duration
	}
	runs := []run{{"a", 100 * day}, {"a", 3 * day}, {"a", 2 * day}, {"a", day}, {"b", 200 * day}}
	for _, tc := range []struct {
		name      string
		retention runstore.Retention
		kept      []run // newest first
	}{
		{"unlimited", runstore.Retention{}, []run{{"a", day}, {"a", 2 * day}, {"a", 3 * day}, {"a", 100 * day}, {"b", 200 * day}}},
		{"count", runstore.Retention{MaxRuns: 2}, []run{{"a", day}, {"a", 2 * day}, {"b", 200 * day}}},
		{"age", runstore.Retention{MaxAge: 90 * day}, []run{{"a", day}, {"a", 2 * day}, {"a", 3 * day}}},
		{"count and age", runstore.Retention{MaxRuns: 1, MaxAge: 90 * day}, []run{{"a", day}}},
		{"age, just inside", runstore.Retention{MaxAge: 100*day + time.Hour}, []run{{"a", day}, {"a", 2 * day}, {"a", 3 * day}, {"a", 100 * day}}},
	} {
		summaries := func(s *runstore.Store) []run {
			var out []run
			for _, sum := range s.List("") {
				out = append(out, run{sum.Test, now.Sub(sum.End).Round(time.Hour)})
			}
			return out
		}
		t.Run(tc.name+"/at open", func(t *testing.T) {
			dir := t.TempDir()
			s, err := runstore.Open(dir, runstore.Retention{}, nil)
			require.NoError(t, err)
			for _, r := range runs {
				finished(t, s, r.test, now.Add(-r.ago-time.Hour), now.Add(-r.ago), capacity.VerdictPass)
			}
			require.Len(t, s.List(""), len(runs))
			require.NoError(t, s.Close())
			s = open(t, dir, tc.retention)
			require.Equal(t, tc.kept, summaries(s))
			require.Len(t, files(t, dir), len(tc.kept), "the files of the runs dropped are removed")
		})
		t.Run(tc.name+"/after finish", func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, tc.retention)
			// A run that began long ago and is still running is neither
			// counted nor removed.
			running, err := s.Begin(stepRun("a", now.Add(-365*day)))
			require.NoError(t, err)
			for _, r := range runs {
				finished(t, s, r.test, now.Add(-r.ago-time.Hour), now.Add(-r.ago), capacity.VerdictPass)
			}
			list := s.List("")
			require.Equal(t, string(running), list[len(list)-1].ID)
			require.Equal(t, tc.kept, summaries(s)[:len(list)-1])
			require.Len(t, files(t, dir), len(tc.kept)+2, "the running run's file and its lock file")
			require.Contains(t, files(t, dir), "."+string(running)+".running")
		})
	}
}

// TestRetentionAppliesPerFinish: the newest MaxRuns runs are kept after
// each Finish, those of other tests untouched.
func TestRetentionAppliesPerFinish(t *testing.T) {
	s := open(t, t.TempDir(), runstore.Retention{MaxRuns: 3})
	other := finished(t, s, "b", t0, t0.Add(time.Minute), capacity.VerdictPass)
	var all []runstore.ID
	for i := range 10 {
		start := t0.Add(time.Duration(i) * time.Hour)
		all = append(all, finished(t, s, "a", start, start.Add(time.Minute), capacity.VerdictPass))
		n := min(i+1, 3)
		got := ids(s.List("a"))
		require.Len(t, got, n)
		require.Equal(t, all[len(all)-1], got[0])
	}
	require.Equal(t, []runstore.ID{other}, ids(s.List("b")))
	_, err := s.Get(all[0])
	require.ErrorIs(t, err, runstore.ErrNotFound)
}

func TestCorruptFilesAreSetAside(t *testing.T) {
	const badID = "nightly-20250101T000000.000Z-0badf11e"
	for _, tc := range []struct {
		name  string
		file  string
		write func(t *testing.T, path string)
	}{
		{"not JSON", badID + ".json", content("not json")},
		{"empty", badID + ".json", content("")},
		{"truncated", badID + ".json", content(`{"test": "nightly", "kind": "step", "start": "2025-01-01T00:00:00Z", "verdict": "pa`)},
		{"wrong type", badID + ".json", content(`{"test": 5}`)},
		{"another test", badID + ".json", content(`{"test": "other", "start": "2025-01-01T00:00:00Z", "verdict": "pass"}`)},
		{"no verdict", badID + ".json", content(`{"test": "nightly", "start": "2025-01-01T00:00:00Z"}`)},
		{"no start", badID + ".json", content(`{"test": "nightly", "verdict": "pass"}`)},
		{"running, levels of the wrong type", badID + ".json",
			content(`{"test": "nightly", "start": "2025-01-01T00:00:00Z", "verdict": "running", "sweep": 5}`)},
		{"not a run name", "notes.json", content(`{}`)},
		{"upper-case hex in the name", "nightly-20250101T000000.000Z-0BADF11E.json", content(`{}`)},
		// Opening a FIFO blocks until a writer comes: start-up hung.
		{"a named pipe", badID + ".json", func(t *testing.T, path string) {
			require.NoError(t, syscall.Mkfifo(path, 0o600))
		}},
		{"too large", badID + ".json", func(t *testing.T, path string) {
			f, err := os.Create(path)
			require.NoError(t, err)
			require.NoError(t, f.Truncate(runstore.MaxRunBytes+1)) // sparse: no 64 MiB written
			require.NoError(t, f.Close())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := runstore.Open(dir, runstore.Retention{}, nil)
			require.NoError(t, err)
			good := finished(t, s, "nightly", t0, t0.Add(time.Hour), capacity.VerdictPass)
			require.NoError(t, s.Close())
			path := filepath.Join(dir, "runs", tc.file)
			tc.write(t, path)
			// A write a crash interrupted, and a file of someone else.
			leftover := filepath.Join(dir, "runs", "."+string(good)+".json.tmp-123")
			require.NoError(t, os.WriteFile(leftover, []byte("{"), 0o600))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "runs", "README"), []byte("hi"), 0o600))

			logs := &logBuffer{}
			s, err = runstore.Open(dir, runstore.Retention{MaxRuns: 1}, logs.logger())
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			require.Equal(t, []runstore.ID{good}, ids(s.List("")), "the good run is kept, the bad one skipped")
			require.NoFileExists(t, path)
			require.FileExists(t, path+".corrupt")
			require.NoFileExists(t, leftover)
			require.FileExists(t, filepath.Join(dir, "runs", "README"))
			require.Contains(t, logs.String(), path)
			require.Contains(t, logs.String(), "set_aside=1")

			// The next start ignores what was set aside.
			require.NoError(t, s.Close())
			logs = &logBuffer{}
			s, err = runstore.Open(dir, runstore.Retention{}, logs.logger())
			require.NoError(t, err)
			require.Len(t, s.List(""), 1)
			require.Contains(t, logs.String(), "set_aside=0")
		})
	}
}

// TestGetRefusesNamedPipe: a stored run's file replaced by a FIFO is
// an error at once for Get (each GET of it hung, and leaked a goroutine).
func TestGetRefusesNamedPipe(t *testing.T) {
	dir := t.TempDir()
	s, err := runstore.Open(dir, runstore.Retention{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	id := finished(t, s, "nightly", t0, t0.Add(time.Hour), capacity.VerdictPass)
	path := filepath.Join(dir, "runs", string(id)+".json")
	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, err = s.Get(id)
	require.EqualError(t, err, "run "+string(id)+": "+path+": not a regular file (a named pipe)")
}

func content(s string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
	}
}

func TestGetRefusesBadIDs(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, runstore.Retention{})
	good := finished(t, s, "nightly", t0, t0.Add(time.Hour), capacity.VerdictPass)
	// A file outside the runs directory that a traversal would reach.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret.json"), []byte(`{"test": "x", "verdict": "pass"}`), 0o600))
	for _, tc := range []struct {
		id      string
		invalid bool
	}{
		{"", true},
		{".", true},
		{"..", true},
		{"../secret", true},
		{"../../etc/passwd", true},
		{"/etc/passwd", true},
		{`..\secret`, true},
		{string(good) + "/../../secret", true},
		{"nightly/../../secret-20250314T020000.000Z-00000000", true},
		{string(good) + ".json", true},
		{"nightly-20250314T020000.000Z-0BADF11E", true}, // upper-case hex
		{"nightly-20251314T020000.000Z-00000000", true}, // month 13
		{"nightly-20250314T020000.000Z-0000000", true},
		{strings.Repeat("a", 65) + "-20250314T020000.000Z-00000000", true},
		{"nightly-20250314T020000.000Z-00000000", false}, // well formed, not stored
		{"secret-20250314T020000.000Z-00000000", false},
	} {
		t.Run(tc.id, func(t *testing.T) {
			want := runstore.ErrNotFound
			if tc.invalid {
				want = runstore.ErrInvalidID
			}
			_, err := s.Get(runstore.ID(tc.id))
			require.ErrorIs(t, err, want)
			_, err = runstore.ParseID(tc.id)
			require.Equal(t, tc.invalid, err != nil)
			done := stepRun("nightly", t0)
			done.Verdict = capacity.VerdictPass
			require.ErrorIs(t, s.Finish(runstore.ID(tc.id), done), want)
			require.ErrorIs(t, s.Update(runstore.ID(tc.id), done), want)
		})
	}
	id, err := runstore.ParseID(string(good))
	require.NoError(t, err)
	_, err = s.Get(id)
	require.NoError(t, err)
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"nightly-20250314T020000.000Z-9f86d081", "a-b-20250314T020000.000Z-9f86d081", "../x", "", "..",
		"a/b-20250314T020000.000Z-9f86d081", "a-20250230T020000.000Z-9f86d081"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := runstore.ParseID(s)
		if err != nil {
			require.ErrorIs(t, err, runstore.ErrInvalidID)
			require.Empty(t, id)
			return
		}
		require.Equal(t, s, string(id))
		name := string(id) + ".json"
		require.Equal(t, name, filepath.Base(name))
		require.Equal(t, filepath.Join("runs", name), filepath.Clean(filepath.Join("runs", name)))
		require.NotContains(t, s, "..")
		require.NotContains(t, s, "/")
		require.NotContains(t, s, `\`)
		require.Less(t, len(name), 255)
	})
}

func TestBeginChecksTheRun(t *testing.T) {
	s := open(t, t.TempDir(), runstore.Retention{})
	for _, test := range []string{"", "a/b", "..", "a.b", "a b", "ü", strings.Repeat("a", config.MaxNameBytes+1)} {
		_, err := s.Begin(stepRun(test, t0))
		require.Error(t, err, "%q", test)
	}
	_, err := s.Begin(nil)
	require.Error(t, err)
	_, err = s.Begin(stepRun("a", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.ErrorContains(t, err, "out of range")

	// The longest name is fine; a zero start is now.
	before := time.Now()
	id, err := s.Begin(&capacity.Run{Summary: capacity.Summary{Test: strings.Repeat("a", config.MaxNameBytes)}})
	require.NoError(t, err)
	got, err := s.Get(id)
	require.NoError(t, err)
	require.False(t, got.Start.Before(before.Truncate(time.Millisecond)))
}

func TestFinishChecksTheRun(t *testing.T) {
	s := open(t, t.TempDir(), runstore.Retention{})
	run := stepRun("a", t0)
	id, err := s.Begin(run)
	require.NoError(t, err)

	for _, verdict := range []string{"", runstore.VerdictRunning} {
		run.Verdict = verdict
		require.ErrorContains(t, s.Finish(id, run), "no final verdict")
	}
	other := stepRun("b", t0)
	other.Verdict = capacity.VerdictPass
	require.ErrorContains(t, s.Finish(id, other), `of test "a"`)
	require.ErrorContains(t, s.Update(id, other), `of test "a"`)
	require.Error(t, s.Finish(id, nil))

	// A zero start is the begun one, a zero end now.
	run.Verdict, run.Start = capacity.VerdictAborted, time.Time{}
	require.NoError(t, s.Finish(id, run))
	got, err := s.Get(id)
	require.NoError(t, err)
	require.Equal(t, t0, got.Start)
	require.False(t, got.End.IsZero())
	require.True(t, run.End.IsZero(), "Finish changed the caller's run")

	require.ErrorIs(t, s.Finish(id, got), runstore.ErrFinished)
	require.ErrorIs(t, s.Update(id, got), runstore.ErrFinished)

	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.Begin(stepRun("a", t0))
	require.ErrorIs(t, err, runstore.ErrClosed)
	require.ErrorIs(t, s.Finish(id, got), runstore.ErrClosed)
	_, err = s.Get(id)
	require.NoError(t, err, "a closed store can still be read")
}

func TestOpenErrors(t *testing.T) {
	_, err := runstore.Open("", runstore.Retention{}, nil)
	require.Error(t, err)
	_, err = runstore.Open(t.TempDir(), runstore.Retention{MaxRuns: -1}, nil)
	require.Error(t, err)
	_, err = runstore.Open(t.TempDir(), runstore.Retention{MaxAge: -time.Hour}, nil)
	require.Error(t, err)

	// A file where the directory should be.
	file := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = runstore.Open(file, runstore.Retention{}, nil)
	require.ErrorContains(t, err, file)

	// Created, nested, 0750.
	dir := filepath.Join(t.TempDir(), "a", "data")
	s := open(t, dir, runstore.Retention{})
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
	require.Zero(t, fi.Mode().Perm()&^0o750)
	require.Equal(t, dir, s.Dir())
}

func TestConcurrentRuns(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, runstore.Retention{MaxRuns: 3})
	const tests, runs = 4, 6
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// Readers, as the HTTP API.
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, sum := range s.List("") {
					if _, err := s.Get(runstore.ID(sum.ID)); err != nil {
						assert.ErrorIs(t, err, runstore.ErrNotFound) // removed by retention since
					}
				}
				s.Last("", true)
				s.LastWithCapacity("t0")
			}
		})
	}
	var writers sync.WaitGroup
	for i := range tests {
		for j := range runs {
			writers.Go(func() {
				test := fmt.Sprintf("t%d", i)
				start := t0.Add(time.Duration(j) * time.Hour)
				run := stepRun(test, start)
				id, err := s.Begin(run)
				if !assert.NoError(t, err) {
					return
				}
				run.Baseline = &capacity.Level{Stage: "baseline"}
				assert.NoError(t, s.Update(id, run))
				run.End, run.Verdict = start.Add(time.Minute), capacity.VerdictPass
				run.Capacity = &capacity.Capacity{Concurrency: j}
				assert.NoError(t, s.Finish(id, run))
			})
		}
	}
	writers.Wait()
	close(stop)
	wg.Wait()

	list := s.List("")
	require.Len(t, list, tests*3)
	for i := range tests {
		test := fmt.Sprintf("t%d", i)
		var starts []time.Time
		for _, sum := range s.List(test) {
			starts = append(starts, sum.Start)
		}
		// The newest three, whatever order they finished in: a run
		// dropped as not among the newest three finished then is not
		// among the newest three of all.
		require.Equal(t, []time.Time{t0.Add(5 * time.Hour), t0.Add(4 * time.Hour), t0.Add(3 * time.Hour)}, starts)
		last, ok := s.LastWithCapacity(test)
		require.True(t, ok)
		require.Equal(t, runs-1, last.Capacity.Concurrency)
	}
	names := files(t, dir)
	require.Len(t, names, tests*3)
	for _, n := range names {
		require.Regexp(t, regexp.MustCompile(`^t\d-.*\.json$`), n)
	}
}

// TestOpenRunsBeforeSchemaVersion: run files stored before runs had a
// schema version (capacity's testdata, written by sloprober 0.x) are
// indexed with their concluded rate and read whole; a run file of a newer
// schema (a downgrade) is left where it is, neither indexed nor misread.
func TestOpenRunsBeforeSchemaVersion(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	require.NoError(t, os.MkdirAll(runs, 0o750))
	step := "knee-20261130T172029.435Z-0a1b2c3d"
	soak := "soak-outage-20261130T172308.838Z-0a1b2c3d"
	newer := "knee-20261201T000000.000Z-0a1b2c3d"
	for id, src := range map[string]string{step: "v1-step-run.json", soak: "v1-soak-run.json"} {
		data, err := os.ReadFile(filepath.Join("..", "capacity", "testdata", src))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(runs, id+".json"), data, 0o640))
	}
	require.NoError(t, os.WriteFile(filepath.Join(runs, newer+".json"),
		[]byte(`{"schema_version": 99, "test": "knee", "kind": "step", "start": "2026-12-01T00:00:00Z", "verdict": "pass"}`), 0o640))
	var logs bytes.Buffer
	s, err := runstore.Open(dir, runstore.Retention{}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	list := s.List("")
	require.Len(t, list, 2)
	require.Equal(t, step, list[1].ID)
	require.Equal(t, capacity.VerdictPass, list[1].Verdict)
	require.NotNil(t, list[1].VerifiedRate)
	require.InDelta(t, 8.8795, *list[1].VerifiedRate, 1e-3)
	require.Nil(t, list[0].VerifiedRate, "a soak concludes no rate")
	run, err := s.Get(runstore.ID(step))
	require.NoError(t, err)
	require.Equal(t, 1, run.SchemaVersion)
	require.NotNil(t, run.Capacity)
	require.FileExists(t, filepath.Join(runs, newer+".json"))
	require.Contains(t, logs.String(), "schema_version 99")
}

// rate is a verified rate.
func rate(v float64) *float64 { return &v }

// TestLastVerified: the newest finished step run on a target that
// verified a rate and that the caller accepts: not a soak, not one that
// verified nothing, not one of another target.
func TestLastVerified(t *testing.T) {
	s := open(t, t.TempDir(), runstore.Retention{})
	put := func(test, kind, target, cache string, start time.Time, rate float64) runstore.ID {
		run := &capacity.Run{Summary: capacity.Summary{Test: test, Kind: kind, Target: target, Start: start}, Cache: cache}
		id, err := s.Begin(run)
		require.NoError(t, err)
		run.End, run.Verdict, run.Reason = start.Add(time.Minute), capacity.VerdictPass, "done"
		if rate > 0 {
			run.Capacity = &capacity.Capacity{VerifiedRate: &rate}
		}
		require.NoError(t, s.Finish(id, run))
		return id
	}
	prod := put("knee", config.TestStep, "sim", config.CacheProduction, t0, 9)
	put("cold", config.TestStep, "sim", config.CacheCold, t0.Add(time.Hour), 4)
	put("soak", config.TestSoak, "sim", config.CacheProduction, t0.Add(2*time.Hour), 0)
	put("none", config.TestStep, "sim", config.CacheProduction, t0.Add(3*time.Hour), 0)
	put("other", config.TestStep, "other", config.CacheProduction, t0.Add(4*time.Hour), 20)

	run, ok := s.LastVerified("sim", nil)
	require.True(t, ok)
	require.Equal(t, "cold", run.Test, "the newest that verified a rate")
	run, ok = s.LastVerified("sim", func(r *capacity.Run) bool { return r.Cache != config.CacheCold })
	require.True(t, ok)
	require.Equal(t, string(prod), run.ID)
	require.InDelta(t, 9, *run.Header().VerifiedRate, 1e-9)
	_, ok = s.LastVerified("nowhere", nil)
	require.False(t, ok)
}
