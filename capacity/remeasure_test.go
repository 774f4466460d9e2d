package capacity

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"
	"github.com/sloprober/sloprober/validity"
)

// TestDiagnose: a busy host (sloprober's goroutines waited while it used
// little CPU: other processes held the CPUs) is told from a saturated
// prober (its CPUs busy), each with its advice.
func TestDiagnose(t *testing.T) {
	v := validity.DefaultConfig
	for _, tc := range []struct {
		name string
		h    ProberHealth
		want string
	}{
		{"busy host", ProberHealth{CPUShare: 0.02, GOMAXPROCS: 2, SchedulerP99: 0.08, LagP99: 0.8,
			Invalid: []string{validity.ReasonSchedulerLatency, validity.ReasonSendLag}},
			"busy host: sloprober used 2% of its 2 CPUs while it was late to run (scheduler latency P99 80 ms, send lag P99 800 ms): other processes hold the CPUs; run it on a quieter host or give it dedicated CPUs"},
		{"saturated", ProberHealth{CPUShare: 0.97, GOMAXPROCS: 2, SchedulerP99: 0.02, LagP99: 0.05,
			Invalid: []string{validity.ReasonCPU, validity.ReasonSchedulerLatency, validity.ReasonSendLag}},
			"saturated prober: sloprober used 97% of its 2 CPUs: add shards or CPU"},
		{"GC", ProberHealth{CPUShare: 0.3, GOMAXPROCS: 2, GCPauseP99: 0.02, Invalid: []string{validity.ReasonGCPause}},
			"GC pauses: GC pause P99 20 ms (sloprober used 30% of its 2 CPUs): give sloprober more memory headroom or CPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, diagnose(&tc.h, tc.h.Invalid, &v))
		})
	}
}

// TestRemeasure: a level measured while the prober was the limit is
// measured again once the prober is valid, and the second measurement is
// the level's, with the first one's diagnosis recorded; without retries
// the level stays prober-bound.
func TestRemeasure(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 5ms, itl: 2ms}\n")
	for _, tc := range []struct {
		retries int
		bound   bool
	}{{2, false}, {0, true}} {
		t.Run(fmt.Sprint("retries ", tc.retries), func(t *testing.T) {
			s, v := remeasureStep(t, sim.URL, tc.retries, "{rates: [0.5], max_levels: 1, burst: {factor: 1}}")
			// The sweep level's first measurement finds a busy host.
			sweeps := 0
			s.judgeLevel = func(l *Level) {
				if l.Stage == "sweep" {
					if sweeps++; sweeps == 1 {
						busyHost(l)
						return
					}
				}
				judgeProber(l, v, notUsed)
			}
			run := s.Run(t.Context())
			require.Len(t, run.Sweep, 1, run.Reason)
			l := run.Sweep[0]
			require.Equal(t, tc.bound, l.ProberBound(), "%+v", l.Prober)
			if tc.bound {
				require.Empty(t, l.Remeasured)
				require.Equal(t, VerdictInconclusive, run.Verdict, run.Reason)
				require.Contains(t, run.Reason, "not concluded: busy host: no level measured the target validly: prober-bound at 2 clients (scheduler_latency): busy host")
				return
			}
			require.Equal(t, 2, sweeps, "measured twice")
			require.Len(t, l.Remeasured, 1)
			require.Contains(t, l.Remeasured[0], "busy host: sloprober used 2% of its")
			require.Equal(t, DecisionMet, l.Decision, "the second measurement is the level's")
			require.NotNil(t, run.Capacity, run.Reason)
			require.Equal(t, 2, run.Capacity.Concurrency)
		})
	}
}

// TestRemeasureWithinMaxDuration: a level of the search measured while
// the prober was the limit is measured again while verify.max_duration
// holds a level, and not past its end, so that the search ends by it
// (longest): the level stays prober-bound and says why.
func TestRemeasureWithinMaxDuration(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 5ms, itl: 2ms}\n")
	for _, tc := range []struct {
		name  string
		spent bool // the prober-bound measurement ends past max_duration
	}{{"within", false}, {"past its end", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, v := remeasureStep(t, sim.URL, 2, "{rates: [0.5], max_levels: 1, max_duration: 1m, burst: {factor: 1}}")
			var shift atomic.Int64 // the search's clock, moved past max_duration
			s.now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
			verifies := 0
			s.judgeLevel = func(l *Level) {
				if l.Stage == "verify" {
					if verifies++; verifies == 1 {
						busyHost(l)
						if tc.spent {
							shift.Store(int64(2 * time.Minute))
						}
						return
					}
				}
				judgeProber(l, v, notUsed)
			}
			run := s.Run(t.Context())
			require.Len(t, run.Verify, 1, run.Reason)
			l := run.Verify[0]
			if !tc.spent {
				require.Equal(t, 2, verifies, "measured again")
				require.False(t, l.ProberBound(), "%+v", l.Prober)
				require.Len(t, l.Remeasured, 1)
				return
			}
			require.Equal(t, 1, verifies, "not measured again")
			require.True(t, l.ProberBound())
			require.Empty(t, l.Remeasured)
			require.Contains(t, l.Note, "not measured again: verify.max_duration's end")
		})
	}
}

// remeasureStep is a step test against the simulator at url, measured
// again up to retries times, its verify section verify, judged by a
// validity config nothing fails (v) unless a test's judgeLevel says.
func remeasureStep(t *testing.T, url string, retries int, verify string) (*Step, *validity.Config) {
	t.Helper()
	cfg, err := config.Load([]byte(fmt.Sprintf(`
global: {max_rate: 100, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s}]
scenarios: [{name: s, input_tokens: 16, output_tokens: 4, ignore_eos: true, objective: 0.8, slo: {ttft: 1s}}]
tests:
  - {name: r, kind: step, target: sim, scenario: s, baseline: {requests: 10}, sweep: {concurrency: [2], refine: 0}, retries: %d,
     window: {warmup: 0s, steady: 1s, min_requests: 1, max_steady: 1s}, verify: %s}
`, url, retries, verify)), false)
	require.NoError(t, err)
	rec := NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	t.Cleanup(func() { m.Stop(time.Second) })
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: 100, MaxInFlight: 100}))
	v := &validity.Config{Window: time.Minute, CPU: 1, SchedulerP99: time.Hour, GCPauseP99: time.Hour, SendLagP99: time.Hour, PoolWaitP99: time.Hour}
	return &Step{Manager: m, Recorder: rec, Test: cfg.Tests[0], Load: cfg.TestLoad(cfg.Tests[0]), MaxRate: 100,
		Logger: promslog.NewNopLogger(), Validity: v}, v
}

// busyHost judges l as a measurement that found the goroutines waiting
// 80 ms to run while sloprober used 2% of its CPUs, and nothing else:
// what the host did to the level's own GC pauses and send lag (beside a
// CPU burner, GC pauses over the default's limit) is not this
// measurement's.
func busyHost(l *Level) {
	l.Prober.CPUShare, l.Prober.SchedulerP99 = 0.02, 0.08
	l.Prober.GCPauseP99, l.Prober.LagP99 = 0, 0
	judgeProber(l, &validity.DefaultConfig, notUsed)
}
