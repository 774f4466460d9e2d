package capacity_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// faultEndpoint answers /ok at once, /slow after 3 s (or when the request
// ends), /fail with 500.
func faultEndpoint(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
		case "/fail":
			http.Error(w, "no such replica", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "done")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// runPlanSoak runs a 6 s soak (windows of 2 s) of a healthy simulator with
// the fault plan given.
func runPlanSoak(t *testing.T, faults string) *capacity.Run {
	t.Helper()
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 5ms, itl: 1ms}\n")
	cfg, err := config.Load(fmt.Appendf(nil, `
global: {max_rate: 100, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 5s}]
scenarios:
  - {name: short, input_tokens: 16, output_tokens: 5, ignore_eos: true, objective: 0.9, slo: {ttft: 1s}}
tests:
  - name: soak
    kind: soak
    target: sim
    scenario: short
    rate: 20
    duration: 6s
    window: 2s
    drift: {p99_growth: 10, goodput_drop: 0.5}
    faults:
%s`, sim.URL, faults), false)
	require.NoError(t, err)
	rec, m := newManager(t, cfg)
	tc := cfg.Tests[0]
	s := &capacity.Soak{Manager: m, Recorder: rec, Test: tc, Load: cfg.TestLoad(tc), Logger: promslog.NewNopLogger(), Faults: &faultaction.Runner{}}
	return s.Run(t.Context())
}

// eventOf finds a step's do or undo.
func eventOf(t *testing.T, run *capacity.Run, step int, action string) capacity.FaultEvent {
	t.Helper()
	for _, e := range run.Soak.Faults {
		if e.Step == step && e.Action == action {
			return e
		}
	}
	require.Failf(t, "no such event", "step %d %s in %+v", step, action, run.Soak.Faults)
	return capacity.FaultEvent{}
}

// TestFaultStepsOnTheirOwnTimers: a step's undo that hangs 3 s does not
// push the next step back. Before, steps ran in sequence: an undo that
// hung 10 s pushed the next step (at 12 s, for 3 s) to 19 s, and its undo
// ran 3 ms after its start. The truth is the run's own events: the second
// step's do began before the first step's undo ended. The plan then did
// not run as configured (two replicas out where it had one, or the first
// back in the middle of the second), and the run says so: the soak is
// not concluded. Events are in the order they began.
func TestFaultStepsOnTheirOwnTimers(t *testing.T) {
	srv := faultEndpoint(t)
	run := runPlanSoak(t, fmt.Sprintf(`      - {at: 500ms, for: 1s, http: {url: "%[1]s/ok", undo: {url: "%[1]s/slow"}, timeout: 5s}}
      - {at: 3s, for: 2s, http: {url: "%[1]s/ok", undo: {url: "%[1]s/ok"}}}
`, srv.URL))
	require.NotEqual(t, capacity.VerdictAborted, run.Verdict, run.Reason)
	undo0, do1 := eventOf(t, run, 0, faultaction.ActionUndo), eventOf(t, run, 1, faultaction.ActionDo)
	require.Empty(t, undo0.Error)
	undoEnd := undo0.At.Add(time.Duration(undo0.Seconds * float64(time.Second)))
	require.True(t, do1.At.Before(undoEnd), "step 1 began at %s, step 0's undo ended at %s", do1.At, undoEnd)
	// Step 0's undo runs from 1.5 s to 4.5 s, step 1 begins at 3 s
	// (a loaded machine may add that it began late).
	require.Len(t, run.Soak.PlanNotRun, 1, "%q", run.Soak.PlanNotRun)
	require.Contains(t, run.Soak.PlanNotRun[0], "step 1 (http at 3s): began while step 0's undo was still under way")
	require.Equal(t, capacity.VerdictInconclusive, run.Verdict, run.Reason)
	require.True(t, slices.IsSortedFunc(run.Soak.Faults, func(a, b capacity.FaultEvent) int { return a.At.Compare(b.At) }), "events in the order they began")
}

// TestFaultPlanNotRun: a soak whose fault action failed does not pass: the
// outage it was to recover from never happened. Before, it passed ("no
// drift over 3 windows") with the failure only in the report's risks. A
// step whose do took longer than the step itself says it was in place
// for less than its for.
func TestFaultPlanNotRun(t *testing.T) {
	srv := faultEndpoint(t)
	run := runPlanSoak(t, fmt.Sprintf(`      - {at: 500ms, for: 1s, http: {url: "%[1]s/fail"}}
      - {at: 2s, for: 2s, http: {url: "%[1]s/slow", undo: {url: "%[1]s/ok"}, timeout: 5s}}
`, srv.URL))
	require.Equal(t, capacity.VerdictInconclusive, run.Verdict, run.Reason)
	require.Len(t, run.Soak.PlanNotRun, 2, "%q", run.Soak.PlanNotRun)
	require.Contains(t, run.Soak.PlanNotRun[0], "step 0 (http at 500ms): its do failed: POST "+srv.URL+"/fail: 500 Internal Server Error")
	require.Regexp(t, `^step 1 \(http at 2s\): in place [0-9.]+m?s instead of 2s \(its do took [0-9.]+s\)$`, run.Soak.PlanNotRun[1])
	require.Contains(t, run.Reason, "not concluded: the fault plan did not run as configured: step 0")
	require.Contains(t, run.Reason, "(the soak itself: no drift over 3 windows")
}
