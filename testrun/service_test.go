package testrun_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/runstore"
	"github.com/sloprober/sloprober/testrun"
)

// No test here sends a request: the runner is replaced by one that takes
// a set time and finds a set capacity.
const testsConfig = `
targets: [{name: sim, url: "http://127.0.0.1:9/v1", model: m}, {name: other, url: "http://127.0.0.1:9/v1", model: m}]
scenarios: [{name: s}]
tests:
  - {name: a, kind: step, target: sim, scenario: s, schedule: {cron: "*/10 * * * *"}}
  - {name: b, kind: step, target: sim, scenario: s, schedule: {cron: "*/10 * * * *"}}
  - {name: c, kind: soak, target: other, scenario: s, rate: 1, duration: 1h}
`

type fixture struct {
	svc   *testrun.Service
	reg   *prometheus.Registry
	store *runstore.Store
}

// newService returns a service on cfg whose runs take d (or until
// aborted) and find a capacity of 10 req/s.
func newService(t *testing.T, dir string, cfg *config.Config, d time.Duration) fixture {
	t.Helper()
	store, err := runstore.Open(dir, runstore.Retention{}, promslog.NewNopLogger())
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	logger := promslog.NewNopLogger()
	rec := capacity.NewRecorder()
	svc := testrun.New(logger, prober.NewManager(logger, rec, "sloprober/test"), rec, store, testrun.NewMetrics(reg))
	svc.SetRunner(func(ctx context.Context, tc *config.TestConfig, _ config.LoadSpec, _ float64) *capacity.Run {
		r := &capacity.Run{Summary: capacity.Summary{Test: tc.Name, Kind: tc.Kind, Target: tc.Target, Start: time.Now()}}
		select {
		case <-time.After(d):
			r.Verdict, r.Reason = capacity.VerdictPass, "ok"
			r.Capacity = &capacity.Capacity{Concurrency: 8, Rate: 11, Goodput: 11, VerifiedRate: rate(10), VerifiedGoodput: 9.5}
		case <-ctx.Done():
			r.Verdict, r.Reason = capacity.VerdictAborted, "aborted: "+context.Cause(ctx).Error()
		}
		r.End = time.Now()
		return r
	})
	require.NoError(t, svc.ApplyConfig(cfg))
	return fixture{svc, reg, store}
}

func loadConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(testsConfig), false)
	require.NoError(t, err)
	return cfg
}

func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// TestSchedule: in fake time, two tests due every 10 minutes on one target
// take turns as the target allows: a run of 15 minutes holds the target
// through the next due time, and every run due while a test runs there is
// skipped and counted.
func TestSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newService(t, t.TempDir(), loadConfig(t), 15*time.Minute)
		start := time.Now() // 2000-01-01 00:00 UTC in the bubble
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.svc.Run(ctx)
		}()
		// A reload of the same schedules keeps their next run (0:10).
		time.Sleep(5 * time.Minute)
		require.NoError(t, f.svc.ApplyConfig(loadConfig(t)))
		// Due at 0:10, 0:20, 0:30: a runs 0:10-0:25 and from 0:30; b is
		// skipped three times, a once (at 0:20, while itself ran).
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		v := func(name string, labels ...string) float64 { return value(t, f.reg, name, labels...) }
		require.Equal(t, 1.0, v("sloprober_test_runs_total", "test", "a", "verdict", "pass"))
		require.Equal(t, 0.0, v("sloprober_test_runs_total", "test", "b", "verdict", "pass"))
		require.Equal(t, 1.0, v("sloprober_test_runs_skipped_total", "test", "a"))
		require.Equal(t, 3.0, v("sloprober_test_runs_skipped_total", "test", "b"))
		require.Equal(t, 1.0, v("sloprober_test_running", "test", "a"))
		require.Equal(t, 0.0, v("sloprober_test_running", "test", "b"))
		require.Equal(t, float64(start.Add(40*time.Minute).Unix()), v("sloprober_test_next_run_timestamp_seconds", "test", "a"))
		require.Equal(t, float64(start.Add(25*time.Minute).Unix()), v("sloprober_test_last_run_timestamp_seconds", "test", "a"))
		require.Equal(t, 10.0, v("sloprober_test_capacity_requests_per_second", "test", "a"))
		require.Equal(t, 1.0, v("sloprober_test_last_verdict", "test", "a", "verdict", "pass"))
		require.Equal(t, 1.0, v("sloprober_test_info", "test", "c", "kind", "soak"))
		require.Zero(t, testutil.CollectAndCount(f.reg, "sloprober_test_capacity_concurrency")-1, "only a has a capacity")

		cancel()
		<-done
		f.svc.Stop() // aborts the run of a started at 0:30, stored
		runs := f.svc.Runs("a")
		require.Len(t, runs, 2)
		require.Equal(t, capacity.VerdictAborted, runs[0].Verdict)
		require.Equal(t, "aborted: sloprober is stopping", runs[0].Reason)
		require.Equal(t, capacity.VerdictPass, runs[1].Verdict)
	})
}

// TestRestoredAfterRestart: the capacity and last-run gauges come back
// from storage at start, so a restart does not drop them (or set them to
// 0, which would fire the capacity-regression alert); a run that was
// running when sloprober stopped is stored as aborted.
func TestRestoredAfterRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := loadConfig(t)
	f := newService(t, dir, cfg, 10*time.Millisecond)
	_, err := f.svc.Start("a", "test")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.svc.Runs("a")[0].Verdict == capacity.VerdictPass }, 5*time.Second, time.Millisecond)
	f.svc.Stop()
	require.NoError(t, f.store.Close())

	g := newService(t, dir, cfg, time.Hour)
	v := func(name string, labels ...string) float64 { return value(t, g.reg, name, labels...) }
	require.Equal(t, 10.0, v("sloprober_test_capacity_requests_per_second", "test", "a"))
	require.Equal(t, 8.0, v("sloprober_test_capacity_concurrency", "test", "a"))
	require.Equal(t, 9.5, v("sloprober_test_capacity_goodput_requests_per_second", "test", "a"))
	require.Equal(t, 1.0, v("sloprober_test_last_verdict", "test", "a", "verdict", "pass"))
	require.Zero(t, testutil.CollectAndCount(g.reg, "sloprober_test_last_run_timestamp_seconds")-1, "b never ran: absent")

	// An infeasible run (one request at a time already misses) is a
	// capacity of none: 0, and still 0 after the next restart, not the
	// older run's.
	g.svc.SetRunner(func(_ context.Context, tc *config.TestConfig, _ config.LoadSpec, _ float64) *capacity.Run {
		return &capacity.Run{Summary: capacity.Summary{Test: tc.Name, Kind: tc.Kind, Target: tc.Target, Start: time.Now(), End: time.Now(), Verdict: capacity.VerdictInfeasible, Reason: "one request at a time already misses the objective"}}
	})
	_, err = g.svc.Start("a", "test")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return g.svc.Runs("a")[0].Verdict == capacity.VerdictInfeasible }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return v("sloprober_test_capacity_requests_per_second", "test", "a") == 0 }, 5*time.Second, time.Millisecond)
	require.Zero(t, v("sloprober_test_capacity_concurrency", "test", "a"))
	g.svc.Stop()
	require.NoError(t, g.store.Close())
	h := newService(t, dir, cfg, time.Hour)
	require.Zero(t, value(t, h.reg, "sloprober_test_capacity_requests_per_second", "test", "a"))
	require.Equal(t, 1.0, value(t, h.reg, "sloprober_test_last_verdict", "test", "a", "verdict", "infeasible"))
}

// TestAPI: the test API lists tests and runs, starts and aborts runs only
// when enabled, and answers each refusal with its status.
func TestAPI(t *testing.T) {
	f := newService(t, t.TempDir(), loadConfig(t), time.Hour)
	defer f.svc.Stop()
	do := func(h http.Handler, method, path string) (int, string) {
		req := httptest.NewRequest(method, path, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	off := testrun.NewAPI(f.svc, false)
	code, body := do(off, "POST", "/api/v1/tests/a/run")
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "--web.enable-test-api")

	api := testrun.NewAPI(f.svc, true)
	code, body = do(api, "POST", "/api/v1/tests/a/run")
	require.Equal(t, http.StatusAccepted, code, body)
	var started struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &started))
	require.True(t, strings.HasPrefix(started.ID, "a-"), started.ID)

	for _, tc := range []struct {
		method, path string
		code         int
		contains     string
	}{
		{"POST", "/api/v1/tests/b/run", http.StatusConflict, "a test is running on the target: a runs on sim"},
		{"POST", "/api/v1/tests/nope/run", http.StatusNotFound, `no such test: \"nope\"`},
		{"GET", "/api/v1/tests/a/run", http.StatusMethodNotAllowed, ""},
		{"GET", "/api/v1/tests", http.StatusOK, `"running": "` + started.ID + `"`},
		{"GET", "/api/v1/runs?test=a", http.StatusOK, `"verdict": "running"`},
		{"GET", "/api/v1/runs/..%2f..%2fetc", http.StatusBadRequest, ""},
		{"GET", "/api/v1/runs/a-20000101T000000.000Z-00000000", http.StatusNotFound, "run not found"},
		{"POST", "/api/v1/tests/a/abort", http.StatusOK, `"aborted": "a"`},
		{"POST", "/api/v1/tests/a/abort", http.StatusNotFound, `test \"a\" is not running`},
		{"GET", "/api/v1/runs/" + started.ID, http.StatusOK, `"reason": "aborted: aborted through the API"`},
		{"GET", "/reports/" + started.ID, http.StatusOK, "<!DOCTYPE html>"},
		{"GET", "/reports/" + started.ID + "?format=md", http.StatusOK, "# Capacity report: a (step test): ABORTED"},
		{"GET", "/reports/" + started.ID + "?format=json", http.StatusOK, `"schema_version": 2`},
		{"GET", "/reports/" + started.ID + "?format=pdf", http.StatusBadRequest, `unknown report format \"pdf\"`},
		{"GET", "/reports/a-20000101T000000.000Z-00000000", http.StatusNotFound, "run not found"},
		{"GET", "/reports/compare?a=" + started.ID + "&b=" + started.ID, http.StatusOK, "# Comparison of a " + started.ID + " (A) and a " + started.ID + " (B)"},
		{"GET", "/reports/compare?a=" + started.ID + "&b=" + started.ID + "&format=json", http.StatusOK, `"changed": []`},
		{"GET", "/reports/compare?a=" + started.ID, http.StatusBadRequest, "b missing"},
		{"GET", "/reports/compare?a=" + started.ID + "&b=a-20000101T000000.000Z-00000000", http.StatusNotFound, "run not found"},
		{"GET", "/reports/compare?a=" + started.ID + "&b=" + started.ID + "&format=pdf", http.StatusBadRequest, `a comparison is md, json or html, not \"pdf\"`},
		{"GET", "/reports/compare?a=" + started.ID + "&b=" + started.ID + "&format=html", http.StatusOK, "<h2>Charts, A left and B right</h2>"},
		{"GET", "/reports/..%2f..%2fetc", http.StatusBadRequest, ""},
	} {
		code, body := do(api, tc.method, tc.path)
		require.Equal(t, tc.code, code, "%s %s: %s", tc.method, tc.path, body)
		require.Contains(t, body, tc.contains, "%s %s", tc.method, tc.path)
	}
}

// TestMovedTestStaysBusy: a test moved to another target by a reload while
// it runs cannot start again there until its run has ended.
func TestMovedTestStaysBusy(t *testing.T) {
	f := newService(t, t.TempDir(), loadConfig(t), time.Hour)
	defer f.svc.Stop()
	_, err := f.svc.Start("a", "test")
	require.NoError(t, err)
	moved, err := config.Load([]byte(strings.Replace(testsConfig, "{name: a, kind: step, target: sim", "{name: a, kind: step, target: other", 1)), false)
	require.NoError(t, err)
	require.NoError(t, f.svc.ApplyConfig(moved))
	_, err = f.svc.Start("a", "test")
	require.ErrorIs(t, err, testrun.ErrBusy)
	require.ErrorContains(t, err, "a still runs on sim")
}

// rate is a verified rate.
func rate(v float64) *float64 { return &v }

// TestUnstoredResult: a run whose final write fails (here its file
// replaced by a directory, which stops root as it does anyone, as a full
// disk would) is not left running: the API lists and serves it finished,
// with its verdict and a storage_error, the failure is counted, and the
// next run's first write stores it once the storage can be written.
func TestUnstoredResult(t *testing.T) {
	dir := t.TempDir()
	f := newService(t, dir, loadConfig(t), 0)
	defer f.svc.Stop()
	blocked := make(chan string, 1)
	f.svc.SetRunner(func(_ context.Context, tc *config.TestConfig, _ config.LoadSpec, _ float64) *capacity.Run {
		if tc.Name == "a" {
			files, _ := filepath.Glob(filepath.Join(dir, "runs", "a-*.json"))
			if len(files) == 1 && os.Remove(files[0]) == nil && os.Mkdir(files[0], 0o750) == nil {
				blocked <- files[0]
			}
			close(blocked)
		}
		r := &capacity.Run{Summary: capacity.Summary{Test: tc.Name, Kind: tc.Kind, Target: tc.Target, Start: time.Now(), End: time.Now(),
			Verdict: capacity.VerdictPass, Reason: "ok"}}
		r.Capacity = &capacity.Capacity{Concurrency: 8, Rate: 11, Goodput: 11, VerifiedRate: rate(10), VerifiedGoodput: 9.5}
		return r
	})
	api := testrun.NewAPI(f.svc, true)
	get := func(path string) string {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return rec.Body.String()
	}
	id, err := f.svc.Start("a", "test")
	require.NoError(t, err)
	file, ok := <-blocked
	require.True(t, ok, "the run's file was replaced")
	require.Eventually(t, func() bool { return value(t, f.reg, "sloprober_test_running", "test", "a") == 0 }, 5*time.Second, time.Millisecond)

	storageErr := `"storage_error": "storing the result: rename `
	list := get("/api/v1/runs?test=a")
	require.Contains(t, list, `"verdict": "pass"`, "finished, not running")
	require.Contains(t, list, storageErr)
	require.Contains(t, list, file+`: file exists"`)
	run := get("/api/v1/runs/" + string(id))
	require.Contains(t, run, `"verdict": "pass"`)
	require.Contains(t, run, `"verified_rate": 10`, "the whole result, from memory")
	require.Contains(t, run, storageErr)
	require.Contains(t, get("/api/v1/tests"), storageErr)
	require.Equal(t, 1.0, value(t, f.reg, "sloprober_test_storage_failures_total", "test", "a"))
	require.Equal(t, 0.0, value(t, f.reg, "sloprober_test_storage_failures_total", "test", "b"))
	require.Equal(t, 1.0, value(t, f.reg, "sloprober_test_runs_total", "test", "a", "verdict", "pass"))

	// Writable again: the next run's start stores it.
	require.NoError(t, os.Remove(file))
	_, err = f.svc.Start("b", "test")
	require.NoError(t, err)
	require.NotContains(t, get("/api/v1/runs?test=a"), "storage_error")
	stored, err := runstore.Read(dir, id)
	require.NoError(t, err)
	require.Equal(t, capacity.VerdictPass, stored.Verdict)
	require.Equal(t, 10.0, *stored.Capacity.VerifiedRate)
}

// TestRunningProgress: a running test's status has the level under way
// and its estimate, its times moved on since the level started; a test
// that is not running has none.
func TestRunningProgress(t *testing.T) {
	f := newService(t, t.TempDir(), loadConfig(t), time.Hour)
	defer f.svc.Stop()
	reported := make(chan struct{})
	f.svc.SetExecute(func(ctx context.Context, env capacity.Env, tc *config.TestConfig, _ config.LoadSpec) *capacity.Run {
		env.Progress(capacity.Progress{Level: 3, Levels: 9, Stage: "sweep", Concurrency: 4, Elapsed: time.Minute, Remaining: 5 * time.Minute, RemainingMax: 20 * time.Minute})
		close(reported)
		<-ctx.Done()
		return &capacity.Run{Summary: capacity.Summary{Test: tc.Name, Kind: tc.Kind, Target: tc.Target, Start: time.Now(), End: time.Now(),
			Verdict: capacity.VerdictAborted, Reason: "aborted"}}
	})
	start := time.Now() // before the level began: the bound of its time since
	_, err := f.svc.Start("a", "test")
	require.NoError(t, err)
	<-reported
	var a, b *testrun.TestStatus
	for _, ts := range f.svc.Tests() {
		switch ts.Name {
		case "a":
			a = &ts
		case "b":
			b = &ts
		}
	}
	since := time.Since(start).Seconds()
	require.NotNil(t, a.Progress)
	p := *a.Progress
	require.Equal(t, testrun.Progress{Level: 3, Levels: 9, Stage: "sweep", Clients: 4}, testrun.Progress{Level: p.Level, Levels: p.Levels, Stage: p.Stage, Clients: p.Clients})
	require.GreaterOrEqual(t, p.ElapsedSeconds, 60.0)
	require.LessOrEqual(t, p.ElapsedSeconds, 60+since)
	require.LessOrEqual(t, p.RemainingSeconds, 300.0)
	require.GreaterOrEqual(t, p.RemainingSeconds, 300-since)
	require.LessOrEqual(t, p.RemainingMaxSeconds, 1200.0)
	require.GreaterOrEqual(t, p.RemainingMaxSeconds, 1200-since)
	require.Nil(t, b.Progress)
}

// TestAbortAnswersAtOnce: an abort through the API of a run whose end
// waits on a fault step's undo answers 202 within its wait, not after the
// undo's whole timeout, and the run is stored, aborted, when the undo
// ends. Before, the call answered only after the undo's timeout (60 s).
func TestAbortAnswersAtOnce(t *testing.T) {
	f := newService(t, t.TempDir(), loadConfig(t), time.Hour)
	undone := make(chan struct{})
	var once sync.Once
	undo := func() { once.Do(func() { close(undone) }) }
	t.Cleanup(undo)
	defer f.svc.Stop()
	f.svc.SetRunner(func(ctx context.Context, tc *config.TestConfig, _ config.LoadSpec, _ float64) *capacity.Run {
		r := &capacity.Run{Summary: capacity.Summary{Test: tc.Name, Kind: tc.Kind, Target: tc.Target, Start: time.Now()}}
		<-ctx.Done()
		<-undone // the undo of the step in force
		r.Verdict, r.Reason, r.End = capacity.VerdictAborted, "aborted: "+context.Cause(ctx).Error(), time.Now()
		return r
	})
	api := testrun.NewAPI(f.svc, true)
	do := func(method, path string) (int, string) {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code, rec.Body.String()
	}
	code, body := do("POST", "/api/v1/tests/a/run")
	require.Equal(t, http.StatusAccepted, code, body)
	var started struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &started))

	code, body = do("POST", "/api/v1/tests/a/abort")
	require.Equal(t, http.StatusAccepted, code, body)
	require.Contains(t, body, `"aborting": "a"`)
	require.Contains(t, body, "it is stored when it has ended")
	code, body = do("GET", "/api/v1/runs/"+started.ID)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"verdict": "running"`, "not stored before the undo ends")

	undo()
	require.Eventually(t, func() bool {
		_, body := do("GET", "/api/v1/runs/"+started.ID)
		return strings.Contains(body, `"reason": "aborted: aborted through the API"`)
	}, 10*time.Second, 5*time.Millisecond)
}

// TestCapsShared: a step test started while another runs on another
// target is refused at once (409, with the reason) when their max_rates
// cannot both fit the global caps; a soak takes its rate, and tests with
// max_rates that fit run side by side. Before, the API answered 202 and
// the run was stored aborted a moment later ("over the global caps").
func TestCapsShared(t *testing.T) {
	cfg, err := config.Load([]byte(`
global: {max_rate: 100}
targets: [{name: sim, url: "http://127.0.0.1:9/v1", model: m}, {name: other, url: "http://127.0.0.1:9/v1", model: m}, {name: third, url: "http://127.0.0.1:9/v1", model: m}]
scenarios: [{name: s}]
tests:
  - {name: a, kind: step, target: sim, scenario: s}
  - {name: b, kind: step, target: other, scenario: s}
  - {name: c, kind: soak, target: third, scenario: s, rate: 5, duration: 1h}
  - {name: d, kind: step, target: other, scenario: s, max_rate: 40}
  - {name: e, kind: step, target: sim, scenario: s, max_rate: 50}
`), false)
	require.NoError(t, err)
	f := newService(t, t.TempDir(), cfg, time.Hour)
	defer f.svc.Stop()
	api := testrun.NewAPI(f.svc, true)
	do := func(method, path string) (int, string) {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code, rec.Body.String()
	}
	code, body := do("POST", "/api/v1/tests/a/run") // the whole 100 req/s
	require.Equal(t, http.StatusAccepted, code, body)
	code, body = do("POST", "/api/v1/tests/b/run")
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "over the global caps: b up to 100 req/s beside a on sim up to 100 req/s is above the 100 req/s global.max_rate leaves beside the canary")
	code, body = do("POST", "/api/v1/tests/c/run") // a soak at 5 req/s: still over a's 100
	require.Equal(t, http.StatusConflict, code, body)
	code, body = do("POST", "/api/v1/tests/a/abort")
	require.Equal(t, http.StatusOK, code, body)

	code, body = do("POST", "/api/v1/tests/e/run") // 50
	require.Equal(t, http.StatusAccepted, code, body)
	code, body = do("POST", "/api/v1/tests/d/run") // 40 beside 50
	require.Equal(t, http.StatusAccepted, code, body)
	code, body = do("POST", "/api/v1/tests/c/run") // 5 beside 90
	require.Equal(t, http.StatusAccepted, code, body)
}
