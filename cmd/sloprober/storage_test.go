package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/runstore"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// TestUnwritableStorage: a daemon whose --storage.path cannot be written
// starts all the same (the canary needs no storage), says so in its log
// and on its landing page, serves the stored runs it can read, and fails
// each test run with the storage's error, naming the path, counted;
// once the storage can be written the next test run stores again. Both
// failures stop root as they stop anyone: a path under a regular file,
// and a lock file that cannot be opened (a directory in its place). And
// storage another sloprober holds (a `test run`) is waited for the same
// way.
func TestUnwritableStorage(t *testing.T) {
	t.Run("under a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(file, nil, 0o600))
		storage := filepath.Join(file, "data")
		p := start(t, "--storage.path="+storage, "--web.enable-test-api")
		p.waitReady(t)
		require.Contains(t, p.logs(), `msg="The storage of test runs cannot be written: starting without it;`)
		require.Contains(t, p.logs(), "storage.path="+storage+" err=\"create the storage directory: mkdir "+file+": not a directory\"")
		_, page := p.get(t, "/")
		require.Contains(t, page, "Test runs cannot be stored: --storage.path "+storage+" cannot be written")

		code, body := p.get(t, "/api/v1/runs")
		require.Equal(t, http.StatusOK, code)
		require.JSONEq(t, "[]", body)
		code, body = p.post(t, "/api/v1/tests/knee/run")
		require.Equal(t, http.StatusInternalServerError, code)
		require.Contains(t, body, `test \"knee\": storing the run: begin: the storage `+storage+` cannot be written: create the storage directory: mkdir `+file+`: not a directory`)
		require.Equal(t, 1.0, p.metric(t, `sloprober_test_storage_failures_total{target="sim",test="knee"}`))
		require.Equal(t, 0.0, p.metric(t, `sloprober_test_running{target="sim",test="knee"}`))
		require.Equal(t, 0, p.stop(t))
	})

	t.Run("readable runs", func(t *testing.T) {
		storage := t.TempDir()
		s, id, _ := storePass(t, storage)
		require.NoError(t, s.Close())
		lock := filepath.Join(storage, "lock")
		require.NoError(t, os.Remove(lock))
		require.NoError(t, os.Mkdir(lock, 0o750))

		p := start(t, "--storage.path="+storage, "--web.enable-test-api")
		p.waitReady(t)
		require.Contains(t, p.logs(), "open the lock file: open "+lock+": is a directory")
		code, body := p.get(t, "/api/v1/runs/"+string(id))
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `"verdict": "pass"`)
		require.Equal(t, 12.5, p.metric(t, `sloprober_test_capacity_requests_per_second{target="sim",test="knee"}`), "restored from the readable run")
		code, body = p.post(t, "/api/v1/tests/knee/run")
		require.Equal(t, http.StatusInternalServerError, code)
		require.Contains(t, body, "the storage "+storage+" cannot be written: open the lock file: open "+lock+": is a directory")

		// Writable again: the next test run opens it and is stored.
		require.NoError(t, os.Remove(lock))
		storesAgain(t, p, storage, 2)
	})

	// A `test run` in the daemon's directory (here this test's store,
	// holding its lock) does not keep the canary from starting: the
	// daemon serves the finished runs, leaves the other process's running
	// run alone, and stores its own test runs once the lock is free.
	t.Run("locked by a test run", func(t *testing.T) {
		storage := t.TempDir()
		s, done, began := storePass(t, storage)
		running, err := s.Begin(&capacity.Run{Summary: capacity.Summary{Test: "knee", Kind: config.TestStep, Target: "sim", Start: began.Add(time.Hour)}})
		require.NoError(t, err)

		p := start(t, "--storage.path="+storage, "--web.enable-test-api")
		p.waitReady(t)
		require.Contains(t, p.logs(), `msg="The storage of test runs is in use by another sloprober (a test run?): starting without it;`)
		_, page := p.get(t, "/")
		require.Contains(t, page, "Test runs cannot be stored: --storage.path "+storage+" is in use by another sloprober")
		code, body := p.get(t, "/api/v1/runs")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, string(done))
		require.NotContains(t, body, string(running), "the other process's run, running, is not judged aborted here")
		code, body = p.post(t, "/api/v1/tests/knee/run")
		require.Equal(t, http.StatusInternalServerError, code)
		require.Contains(t, body, "the storage "+storage+" is in use by another sloprober until it ends")

		// The test run ends: the daemon's next test run is stored.
		require.NoError(t, s.Finish(running, &capacity.Run{Summary: capacity.Summary{Test: "knee", Kind: config.TestStep, Target: "sim",
			Start: began.Add(time.Hour), End: began.Add(2 * time.Hour), Verdict: capacity.VerdictPass}}))
		require.NoError(t, s.Close())
		storesAgain(t, p, storage, 3)
	})
}

// storesAgain checks that the daemon p, its storage free again, stores
// its next test run: started, the landing page's storage note gone,
// aborted, the daemon stopped, runs files in storage.
func storesAgain(t *testing.T, p *process, storage string, runs int) {
	t.Helper()
	code, body := p.post(t, "/api/v1/tests/knee/run")
	require.Equal(t, http.StatusAccepted, code, body)
	_, page := p.get(t, "/")
	require.NotContains(t, page, "Test runs cannot be stored")
	code, body = p.post(t, "/api/v1/tests/knee/abort")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 0, p.stop(t))
	files, err := os.ReadDir(filepath.Join(storage, "runs"))
	require.NoError(t, err)
	require.Len(t, files, runs)
}

// storePass opens a store in storage and stores a step run of knee that
// passed at 12.5 req/s, begun an hour ago: the store, the run's id and
// its start.
func storePass(t *testing.T, storage string) (*runstore.Store, runstore.ID, time.Time) {
	t.Helper()
	s, err := runstore.Open(storage, runstore.Retention{}, nil)
	require.NoError(t, err)
	began := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	run := &capacity.Run{Summary: capacity.Summary{Test: "knee", Kind: config.TestStep, Target: "sim", Start: began}}
	id, err := s.Begin(run)
	require.NoError(t, err)
	verified := 12.5
	run.End, run.Verdict, run.Reason = began.Add(time.Minute), capacity.VerdictPass, "ok"
	run.Capacity = &capacity.Capacity{Concurrency: 4, VerifiedRate: &verified, VerifiedGoodput: 12}
	require.NoError(t, s.Finish(id, run))
	return s, id, began
}

// blockRun is a standard error that, when a test run says it is running
// (its run begun in storage), replaces the run's file with a directory:
// every later write of the run fails, as on a full disk, for root too.
type blockRun struct {
	output
	runs    string
	blocked chan string
}

func (b *blockRun) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("Running ")) {
		files, _ := filepath.Glob(filepath.Join(b.runs, "*.json"))
		if len(files) == 1 && os.Remove(files[0]) == nil && os.Mkdir(files[0], 0o750) == nil {
			b.blocked <- files[0]
		}
	}
	return b.output.Write(p)
}

// TestTestRunUnwritableStorage: `sloprober test run` refuses storage it
// cannot open before it sends anything, and a run whose final write fails
// prints its results, exits 2 and says they are not stored.
func TestTestRunUnwritableStorage(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	code, _, stderr := runCLI(t, "test", "run", "knee", "--storage.path", filepath.Join(file, "data"))
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "sloprober: opening --storage.path "+filepath.Join(file, "data")+": create the storage directory: mkdir "+file+": not a directory")

	sim := simtest.Start(t, "slots: 4\nfixed: {ttft: 2ms, itl: 1ms}\n")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: short, input_tokens: 16, output_tokens: 4, ignore_eos: true, slo: {ttft: 1s}}]
tests: [{name: soak, kind: soak, target: sim, scenario: short, rate: 5, duration: 1s, window: 1s, drift: {p99_growth: 10, goodput_drop: 0.99}}]
`, sim.URL)), 0o600))
	storage := filepath.Join(dir, "data")
	stderrW := &blockRun{runs: filepath.Join(storage, "runs"), blocked: make(chan string, 1)}
	var stdout output
	code = runMain(t.Context(), append([]string{"test", "run", "soak", "--config.file", cfg, "--storage.path", storage,
		"--json", filepath.Join(dir, "run.json")}, testValidity...), &stdout, stderrW, func(int) { t.Error("exit called") })
	var blocked string
	select {
	case blocked = <-stderrW.blocked:
	default:
		t.Fatalf("the run's file was not replaced: %s", stderrW.String())
	}
	require.Equal(t, exitError, code, stderrW.String())
	require.Contains(t, stdout.String(), "test soak (soak) on sim:")
	require.NotContains(t, stderrW.String(), " stored in ")
	require.Regexp(t, `sloprober: test "soak": storing the run soak-\S+: finish soak-\S+: not stored: rename \S+ `+regexp.QuoteMeta(blocked)+
		`: file exists; the run's results are only in the output above and `+regexp.QuoteMeta(filepath.Join(dir, "run.json")), stderrW.String())
	require.Contains(t, stderrW.String(), `msg="A run could not be stored and is lost with this stop"`)
	require.FileExists(t, filepath.Join(dir, "run.json"))
}

// TestTestRunBesideDaemon: a `test run` on the directory a daemon holds
// (here a store this test opened as the daemon opens it, running a test
// run of its own) runs all the same, says once that it stores its run
// beside the daemon's, naming the directory and the daemon's process, and
// stores it there under the id it prints: `report show` reads it, and the
// daemon's next start lists it finished, beside its own, none aborted.
func TestTestRunBesideDaemon(t *testing.T) {
	sim := simtest.Start(t, "slots: 4\nprefill: {base: 4ms, per_token: 0s}\ndecode: {base: 8ms, per_sequence: 2ms}\n")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s, simulator: true}]
scenarios: [{name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, objective: 0.5, slo: {ttft: 1s}}]
tests: [{name: soak, kind: soak, target: sim, scenario: short, rate: 5, duration: 2s, window: 1s, drift: {p99_growth: 10, goodput_drop: 0.99}}]
`, sim.URL)), 0o600))
	storage := filepath.Join(dir, "data")
	daemon, done, began := storePass(t, storage)
	daemonRun := &capacity.Run{Summary: capacity.Summary{Test: "knee", Kind: config.TestStep, Target: "sim", Start: began.Add(30 * time.Minute)}}
	running, err := daemon.Begin(daemonRun)
	require.NoError(t, err)

	code, stdout, stderr := runCLI(t, append([]string{"test", "run", "soak", "--config.file", cfg, "--storage.path", storage}, testValidity...)...)
	require.Equal(t, exitPass, code, "%s\n%s", stdout, stderr)
	require.Contains(t, stdout, "test soak (soak) on sim: PASS")
	msg := fmt.Sprintf(`msg="The storage is in use by another sloprober (process %d): this run is stored beside its runs, which it lists from its next start" storage.path=%s`,
		os.Getpid(), storage)
	require.Equal(t, 1, strings.Count(stderr, msg), stderr)
	m := regexp.MustCompile(`Run (soak-\S+) stored in ` + regexp.QuoteMeta(storage) + `: sloprober report show soak-\S+ --storage.path=`).FindStringSubmatch(stderr)
	require.NotNil(t, m, stderr)
	id := runstore.ID(m[1])

	code, stdout, stderr = runCLI(t, "report", "show", string(id), "--storage.path", storage)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "# Capacity report: soak (soak test): PASS")
	require.Contains(t, stdout, string(id))

	// The daemon ends its run and restarts: it lists the test run's.
	daemonRun.End, daemonRun.Verdict, daemonRun.Reason = began.Add(40*time.Minute), capacity.VerdictPass, "ok"
	require.NoError(t, daemon.Finish(running, daemonRun))
	require.NoError(t, daemon.Close())
	daemon, err = runstore.Open(storage, runstore.Retention{MaxRuns: 100}, nil)
	require.NoError(t, err)
	defer daemon.Close()
	verdicts := map[string]string{}
	for _, s := range daemon.List("") {
		verdicts[s.ID] = s.Verdict
	}
	require.Equal(t, map[string]string{string(done): capacity.VerdictPass, string(running): capacity.VerdictPass, string(id): capacity.VerdictPass}, verdicts)
	files, err := os.ReadDir(filepath.Join(storage, "runs"))
	require.NoError(t, err)
	require.Len(t, files, 3, "the runs' files, no lock or temporary file left")
}
