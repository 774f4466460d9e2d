package validity

import (
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a test clock the window and the monitor read.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestWindow(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	w := NewWindow(60, 10*time.Millisecond, c.now)
	require.Equal(t, Stats{}, w.Stats())
	for range 990 {
		w.Observe(time.Millisecond)
	}
	for range 10 {
		w.Observe(30 * time.Millisecond)
	}
	st := w.Stats()
	require.Equal(t, int64(1000), st.N)
	require.Equal(t, int64(10), st.Over)
	require.InDelta(t, 0.01, st.OverShare(), 1e-12, "1% over: the P99 is not above the threshold")
	require.Equal(t, 1024*time.Microsecond, st.P99, "the bucket of the 990th of 1,000")
	w.Observe(30 * time.Millisecond)
	require.Greater(t, w.Stats().OverShare(), 0.01)
	require.Equal(t, 32768*time.Microsecond, w.Stats().P99)

	// Thirty seconds on, in another slot; a minute after the first, the
	// first slot is out of the window.
	c.advance(30 * time.Second)
	w.Observe(2 * time.Millisecond)
	require.Equal(t, int64(1002), w.Stats().N)
	c.advance(30 * time.Second)
	st = w.Stats()
	require.Equal(t, int64(1), st.N)
	require.Equal(t, 2048*time.Microsecond, st.P99)
	c.advance(time.Minute)
	require.Equal(t, Stats{}, w.Stats())

	// Beyond the last bucket.
	w.Observe(time.Hour)
	require.Equal(t, time.Duration(math.MaxInt64), w.Stats().P99)
}

func TestDeltaP99(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0, 0.001, 0.002, 0.004, math.Inf(1)}
	require.Equal(t, time.Duration(0), deltaP99(buckets, []uint64{0, 5, 5, 0, 0}, []uint64{0, 5, 5, 0, 0}), "nothing new")
	require.Equal(t, 2*time.Millisecond, deltaP99(buckets, []uint64{0, 0, 0, 0, 0}, []uint64{0, 0, 99, 1, 0}))
	require.Equal(t, 4*time.Millisecond, deltaP99(buckets, []uint64{0, 0, 100, 0, 0}, []uint64{0, 0, 198, 2, 0}), "98 and 2 new")
	require.Equal(t, time.Duration(math.MaxInt64), deltaP99(buckets, []uint64{0, 0, 0, 0, 0}, []uint64{0, 0, 0, 0, 1}))
}

// testMonitor is a monitor on a test clock whose process CPU time is what
// cpu says; the runtime's signals get thresholds no test process reaches.
func testMonitor(t *testing.T, c *clock, cpu *time.Duration) (*Monitor, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig
	cfg.SchedulerP99, cfg.GCPauseP99 = time.Hour, time.Hour
	reg := prometheus.NewRegistry()
	return newMonitor(cfg, c.now, func() time.Duration { return *cpu }, reg), reg
}

// run ticks the monitor every second for d, the process using share of
// GOMAXPROCS, and calls each second (if not nil) first.
func run(mo *Monitor, c *clock, cpu *time.Duration, d time.Duration, share float64, each func()) {
	for range int(d / time.Second) {
		c.advance(time.Second)
		*cpu += time.Duration(share * float64(time.Second) * float64(procs()))
		if each != nil {
			each()
		}
		mo.Tick()
	}
}

func TestMonitorCPU(t *testing.T) {
	c, cpu := &clock{t: time.Unix(1_800_000_000, 0)}, new(time.Duration)
	mo, reg := testMonitor(t, c, cpu)
	mo.Tick()
	run(mo, c, cpu, 5*time.Minute, 0.5, nil)
	require.True(t, mo.Valid())

	// Saturated: the window's share (over a minute that began at 50%) is
	// above 90% after 52 s, and the condition fires 2 minutes later.
	run(mo, c, cpu, 170*time.Second, 0.97, nil)
	require.True(t, mo.Valid(), "not for long enough yet")
	pending := mo.Status().Pending
	require.Len(t, pending, 1, "over the threshold, not yet for the sustain time: pending")
	require.Equal(t, Pending{Reason: ReasonCPU, For: 118 * time.Second}, pending[0])
	require.Equal(t, 2*time.Minute, mo.Status().Sustain)
	run(mo, c, cpu, 3*time.Second, 0.97, nil)
	require.Empty(t, mo.Status().Pending, "firing, no longer pending")
	require.False(t, mo.Valid())
	require.Equal(t, []string{ReasonCPU}, mo.Reasons(""))
	st := mo.Status()
	require.False(t, st.Valid)
	require.Equal(t, []string{ReasonCPU}, st.Reasons)
	require.InDelta(t, 0.97, st.CPUShare, 0.001)
	require.Equal(t, 0.0, testutil.ToFloat64(mo.m.valid))
	require.Equal(t, 1.0, testutil.ToFloat64(mo.m.reason.WithLabelValues(ReasonCPU)))
	require.InDelta(t, 0.97, testutil.ToFloat64(mo.m.cpu), 0.001)

	// Starvation ends: valid once the window's share is under 90%.
	run(mo, c, cpu, time.Minute, 0.3, nil)
	require.True(t, mo.Valid())
	require.Empty(t, mo.Reasons(""))
	require.Equal(t, 1.0, testutil.ToFloat64(mo.m.valid))

	// A burst shorter than the sustain time never counts.
	run(mo, c, cpu, 100*time.Second, 1, nil)
	run(mo, c, cpu, time.Minute, 0.1, nil)
	require.True(t, mo.Valid())
	_ = reg
}

func TestMonitorTargets(t *testing.T) {
	c, cpu := &clock{t: time.Unix(1_800_000_000, 0)}, new(time.Duration)
	mo, reg := testMonitor(t, c, cpu)
	load := func(target, test string) prober.LoadInfo {
		return prober.LoadInfo{Key: config.Key{Target: target, Scenario: "s", Test: test}}
	}
	slow, fine, other := mo.Observe(load("slow", "canary")), mo.Observe(load("fine", "canary")), mo.Observe(load("slow", "knee"))
	mo.Tick()
	// 100 sends a second on each; on "slow", 2 in 100 late by 20 ms, and
	// then every reused connection waited 3 ms.
	sends := func(lateEvery int) func() {
		return func() {
			for i := range 100 {
				lag := 200 * time.Microsecond
				if lateEvery > 0 && i%lateEvery == 0 {
					lag = 20 * time.Millisecond
				}
				slow.Sent(time.Now(), lag)
				fine.Sent(time.Now(), 200*time.Microsecond)
			}
		}
	}
	run(mo, c, cpu, 3*time.Minute, 0.2, sends(50))
	require.False(t, mo.Valid(), "a target's send lag makes the process's measurements invalid")
	require.Equal(t, []string{ReasonSendLag}, mo.Reasons(""))
	require.Equal(t, []string{ReasonSendLag}, mo.Reasons("slow"))
	require.Empty(t, mo.Reasons("fine"))
	expect := func(slowValid, fineValid float64, slowReasons string) {
		t.Helper()
		require.Equal(t, slowValid, testutil.ToFloat64(mo.m.targetValid.WithLabelValues("slow")))
		require.Equal(t, fineValid, testutil.ToFloat64(mo.m.targetValid.WithLabelValues("fine")))
		for _, r := range targetReasons {
			require.Equal(t, b2f(strings.Contains(slowReasons, r)), testutil.ToFloat64(mo.m.targetReason.WithLabelValues("slow", r)), r)
		}
	}
	expect(0, 1, ReasonSendLag)
	st := mo.Status()
	require.False(t, st.Valid)
	require.Empty(t, st.Reasons, "no process reason")
	require.Equal(t, TargetStatus{Valid: false, Reasons: []string{ReasonSendLag}, SendLagP99: 32768 * time.Microsecond}, st.Targets["slow"])
	require.True(t, st.Targets["fine"].Valid)
	require.Equal(t, 0.032768, testutil.ToFloat64(mo.m.lag.WithLabelValues("slow")), "P99 in the 16-33 ms bucket")

	// 1 in 100 late is the P99 at the threshold, not above it: valid
	// again once the window holds only that.
	run(mo, c, cpu, 61*time.Second, 0.2, sends(100))
	expect(1, 1, "")
	require.True(t, mo.Valid())

	// Connection waits: a new connection's time is dialing, never a wait;
	// a reused one's is.
	run(mo, c, cpu, 3*time.Minute, 0.2, func() {
		sends(0)()
		other.Finished(&prober.Result{Trace: prober.Trace{GotConn: 50 * time.Millisecond}}, &prober.Measurement{})
		other.Finished(&prober.Result{Trace: prober.Trace{GotConn: 3 * time.Millisecond, Reused: true}}, &prober.Measurement{})
	})
	expect(0, 1, ReasonPoolWait)
	require.Equal(t, []string{ReasonPoolWait}, mo.Reasons(""))

	// The target's series go with its last load.
	mo.Forget(load("slow", "canary"))
	require.Equal(t, 0.0, testutil.ToFloat64(mo.m.targetValid.WithLabelValues("slow")), "still there: the knee load is")
	mo.Forget(load("slow", "knee"))
	n, err := testutil.GatherAndCount(reg, "sloprober_target_measurement_valid")
	require.NoError(t, err)
	require.Equal(t, 1, n, "only fine's")
}

func TestJudge(t *testing.T) {
	c := DefaultConfig
	require.Empty(t, c.Judge(0.5, time.Millisecond, 0, 2*time.Millisecond, 100*time.Microsecond))
	require.Equal(t, []string{ReasonSchedulerLatency, ReasonSendLag}, c.Judge(0, 8*time.Millisecond, 0, 20*time.Millisecond, 0))
	require.Equal(t, []string{ReasonCPU, ReasonGCPause, ReasonPoolWait}, c.Judge(0.95, 0, 6*time.Millisecond, 0, 2*time.Millisecond))
	s, g := SinceStart()
	require.GreaterOrEqual(t, s, time.Duration(0))
	require.GreaterOrEqual(t, g, time.Duration(0))

	// A snapshot's P99s count only what came after it: goroutines that
	// wait to run while the CPUs are busy. The runtime times one in 8 of
	// a goroutine's turns (gTrackingPeriod), so they yield: goroutines
	// that only spin are preempted a few times in 50 ms, and no turn of
	// theirs may be timed at all.
	snap := TakeRuntimeSnapshot()
	done := make(chan struct{})
	for range 4 * procs() {
		go func() {
			for {
				select {
				case <-done:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond) // load for the scheduler to measure, not synchronisation
	close(done)
	s2, _ := snap.P99s()
	require.Positive(t, s2, "the scheduler measured its latency under load")
}

// TestRuntimeSnapshotSpan: the P99s of a span between two snapshots are
// of what happened in it: a GC's pauses between them, none after.
func TestRuntimeSnapshotSpan(t *testing.T) {
	before := TakeRuntimeSnapshot()
	runtime.GC()
	after := TakeRuntimeSnapshot()
	_, gc := before.P99sTo(after)
	require.Positive(t, gc, "a GC's stop-the-world pauses")
	_, none := after.P99sTo(after)
	require.Zero(t, none, "nothing between a snapshot and itself")
}
