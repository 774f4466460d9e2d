// Package validity decides whether sloprober's own measurements can be
// trusted. A prober that is starved of CPU, behind its schedule or waiting
// for a connection adds its own delay to every TTFT it reports (measured:
// at 1,000 streams on a 2-core machine shared with the server, its TTFT
// error grows from under 1 ms to 7-27 ms), and would page someone for a
// server problem that does not exist. The Monitor measures the process
// (its CPU use against GOMAXPROCS, the Go scheduler's latency, GC pauses)
// and each target's requests (send lag, waits for a free connection) over
// a sliding window, and says, per process and per target, whether the
// measurements are valid and, when not, why.
package validity

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sloprober/sloprober/prober"
)

// Reasons a measurement is invalid: process-wide ones, then per target.
const (
	ReasonCPU              = "cpu"
	ReasonSchedulerLatency = "scheduler_latency"
	ReasonGCPause          = "gc_pause"
	ReasonSendLag          = "send_lag"
	ReasonPoolWait         = "pool_wait"
)

// processReasons and targetReasons are the reasons of each kind, in the
// order they are reported.
var (
	processReasons = []string{ReasonCPU, ReasonSchedulerLatency, ReasonGCPause}
	targetReasons  = []string{ReasonSendLag, ReasonPoolWait}
)

// Config is the rule: each signal is measured over Window, and a signal
// over its threshold for Sustain makes the measurements invalid until it
// is back under it.
type Config struct {
	Window  time.Duration
	Sustain time.Duration
	// CPU is the process's CPU use over the window as a share of
	// GOMAXPROCS.
	CPU float64
	// SchedulerP99 bounds the P99 of the Go scheduler's latency (a
	// runnable goroutine waiting to run: a chunk read late).
	SchedulerP99 time.Duration
	// GCPauseP99 bounds the P99 of stop-the-world GC pauses.
	GCPauseP99 time.Duration
	// SendLagP99 bounds the P99 of a target's send lag (scheduled time to
	// sending).
	SendLagP99 time.Duration
	// PoolWaitP99 bounds the P99 of a target's waits for a free
	// connection (a reused one: dialing and TLS are the server's side of
	// TTFT and never count).
	PoolWaitP99 time.Duration
}

// DefaultConfig is the documented rule: over the last minute, CPU above
// 90% of GOMAXPROCS, scheduler latency P99 above 5 ms, GC pause P99 above
// 5 ms, send lag P99 above 10 ms or connection-wait P99 above 1 ms, for 2
// minutes.
var DefaultConfig = Config{
	Window:       time.Minute,
	Sustain:      2 * time.Minute,
	CPU:          0.9,
	SchedulerP99: 5 * time.Millisecond,
	GCPauseP99:   5 * time.Millisecond,
	SendLagP99:   10 * time.Millisecond,
	PoolWaitP99:  time.Millisecond,
}

// condition is one signal's state: over its threshold since when, and
// whether that has lasted the sustain time.
type condition struct {
	since  time.Time // zero while under the threshold
	firing bool
}

func (c *condition) update(now time.Time, over bool, sustain time.Duration) {
	switch {
	case !over:
		c.since, c.firing = time.Time{}, false
	case c.since.IsZero():
		c.since = now
		c.firing = sustain <= 0
	default:
		c.firing = now.Sub(c.since) >= sustain
	}
}

// targetState is one target's signals and the loads that report them.
type targetState struct {
	loads      int
	lag, wait  *Window
	conditions map[string]*condition
}

// Monitor measures the process and its targets and exports whether their
// measurements are valid. It is a prober.ObserverFactory (every load
// reports its sends and finished requests to it); Run samples the process
// once a second.
type Monitor struct {
	cfg Config
	now func() time.Time
	cpu func() time.Duration // the process's CPU time so far
	m   *monitorMetrics

	mu         sync.Mutex
	targets    map[string]*targetState
	conditions map[string]*condition
	cpuSamples []cpuSample
	sched, gc  *runtimeHistogram
	valid      bool
	status     Status
}

// Status is the monitor's last evaluation, for the landing page and
// `probe`: whether the measurements are valid, why not, and the
// self-measurements behind it.
type Status struct {
	Valid bool
	// Reasons of the process (cpu, scheduler_latency, gc_pause) in force.
	Reasons []string
	// Pending are the signals over their threshold that have not yet
	// lasted the sustain time (valid still, but maybe not for long): the
	// process's and each target's, in the order of Reasons, with how long
	// each has been over.
	Pending      []Pending
	Sustain      time.Duration
	CPUShare     float64
	SchedulerP99 time.Duration
	GCPauseP99   time.Duration
	Targets      map[string]TargetStatus
}

// AllReasons are the reasons in force: the process's, then any target's.
func (s Status) AllReasons() []string {
	out := slices.Clone(s.Reasons)
	for _, r := range targetReasons {
		for _, t := range s.Targets {
			if slices.Contains(t.Reasons, r) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// Pending is a signal over its threshold, not yet for the sustain time.
type Pending struct {
	Reason string
	Target string // "" for the process's signals
	For    time.Duration
}

// TargetStatus is a target's part of a Status.
type TargetStatus struct {
	Valid       bool
	Reasons     []string // send_lag, pool_wait in force
	SendLagP99  time.Duration
	PoolWaitP99 time.Duration
}

type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

var _ prober.ObserverFactory = (*Monitor)(nil)

// New creates a monitor with the rule cfg, reading the process's CPU time
// with cpu, and registers its metrics with reg.
func New(cfg Config, cpu func() time.Duration, reg prometheus.Registerer) *Monitor {
	return newMonitor(cfg, time.Now, cpu, reg)
}

func newMonitor(cfg Config, now func() time.Time, cpu func() time.Duration, reg prometheus.Registerer) *Monitor {
	mo := &Monitor{
		cfg: cfg, now: now, cpu: cpu, m: newMonitorMetrics(reg),
		targets:    map[string]*targetState{},
		conditions: map[string]*condition{},
		sched:      newRuntimeHistogram("/sched/latencies:seconds"),
		gc:         newRuntimeHistogram("/sched/pauses/total/gc:seconds"),
		valid:      true,
	}
	for _, r := range processReasons {
		mo.conditions[r] = &condition{}
		mo.m.reason.WithLabelValues(r).Set(0)
	}
	for _, r := range targetReasons {
		mo.m.reason.WithLabelValues(r).Set(0)
	}
	mo.m.valid.Set(1)
	return mo
}

// Run samples the process once a second until ctx ends.
func (mo *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			mo.Tick()
		}
	}
}

// Valid reports whether the process's measurements are valid.
func (mo *Monitor) Valid() bool {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	return mo.valid
}

// Reasons returns why the process's measurements, or a target's, are
// invalid (target "": the process's own reasons, and those of any target).
func (mo *Monitor) Reasons(target string) []string {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	var out []string
	for _, r := range processReasons {
		if mo.conditions[r].firing {
			out = append(out, r)
		}
	}
	for _, r := range targetReasons {
		for name, t := range mo.targets {
			if (target == "" || name == target) && t.conditions[r].firing {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// Tick samples the process and evaluates the rule, now.
func (mo *Monitor) Tick() {
	now := mo.now()
	mo.mu.Lock()
	defer mo.mu.Unlock()

	mo.cpuSamples = append(mo.cpuSamples, cpuSample{at: now, cpu: mo.cpu()})
	for len(mo.cpuSamples) > 2 && now.Sub(mo.cpuSamples[1].at) >= mo.cfg.Window {
		mo.cpuSamples = mo.cpuSamples[1:]
	}
	cpuShare := 0.0
	if first, last := mo.cpuSamples[0], mo.cpuSamples[len(mo.cpuSamples)-1]; last.at.After(first.at) {
		cpuShare = (last.cpu - first.cpu).Seconds() / last.at.Sub(first.at).Seconds() / float64(procs())
	}
	schedP99 := mo.sched.sample(now, mo.cfg.Window)
	gcP99 := mo.gc.sample(now, mo.cfg.Window)
	mo.m.cpu.Set(cpuShare)
	mo.m.sched.Set(schedP99.Seconds())
	mo.m.gc.Set(gcP99.Seconds())
	mo.conditions[ReasonCPU].update(now, cpuShare > mo.cfg.CPU, mo.cfg.Sustain)
	mo.conditions[ReasonSchedulerLatency].update(now, schedP99 > mo.cfg.SchedulerP99, mo.cfg.Sustain)
	mo.conditions[ReasonGCPause].update(now, gcP99 > mo.cfg.GCPauseP99, mo.cfg.Sustain)

	processValid := true
	st := Status{CPUShare: cpuShare, SchedulerP99: schedP99, GCPauseP99: gcP99, Targets: map[string]TargetStatus{}, Sustain: mo.cfg.Sustain}
	pending := func(c *condition, reason, target string) {
		if !c.since.IsZero() && !c.firing {
			st.Pending = append(st.Pending, Pending{Reason: reason, Target: target, For: now.Sub(c.since)})
		}
	}
	for _, r := range processReasons {
		pending(mo.conditions[r], r, "")
		firing := mo.conditions[r].firing
		processValid = processValid && !firing
		mo.m.reason.WithLabelValues(r).Set(b2f(firing))
		if firing {
			st.Reasons = append(st.Reasons, r)
		}
	}
	anyTarget := map[string]bool{}
	for name, t := range mo.targets {
		lag, wait := t.lag.Stats(), t.wait.Stats()
		mo.m.lag.WithLabelValues(name).Set(p99Seconds(lag))
		mo.m.wait.WithLabelValues(name).Set(p99Seconds(wait))
		// Above 1% over the threshold is exactly "P99 above it".
		t.conditions[ReasonSendLag].update(now, lag.OverShare() > 0.01, mo.cfg.Sustain)
		t.conditions[ReasonPoolWait].update(now, wait.OverShare() > 0.01, mo.cfg.Sustain)
		valid := processValid
		ts := TargetStatus{SendLagP99: lag.P99, PoolWaitP99: wait.P99}
		for _, r := range targetReasons {
			pending(t.conditions[r], r, name)
			firing := t.conditions[r].firing
			valid = valid && !firing
			anyTarget[r] = anyTarget[r] || firing
			mo.m.targetReason.WithLabelValues(name, r).Set(b2f(firing))
			if firing {
				ts.Reasons = append(ts.Reasons, r)
			}
		}
		ts.Valid = valid
		st.Targets[name] = ts
		mo.m.targetValid.WithLabelValues(name).Set(b2f(valid))
	}
	// The process's first, then the targets' by name (map order is not).
	slices.SortStableFunc(st.Pending, func(a, b Pending) int { return cmp.Compare(a.Target, b.Target) })
	mo.valid = processValid
	for _, r := range targetReasons {
		mo.m.reason.WithLabelValues(r).Set(b2f(anyTarget[r]))
		mo.valid = mo.valid && !anyTarget[r]
	}
	mo.m.valid.Set(b2f(mo.valid))
	st.Valid = mo.valid
	mo.status = st
}

// Status returns the last evaluation (Tick); before the first, valid with
// nothing measured.
func (mo *Monitor) Status() Status {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	if mo.status.Targets == nil {
		return Status{Valid: mo.valid}
	}
	return mo.status
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// p99Seconds is a window's P99 in seconds for a gauge; +Inf above the last
// bucket, 0 without observations.
func p99Seconds(s Stats) float64 {
	if s.P99 == math.MaxInt64 {
		return math.Inf(1)
	}
	return s.P99.Seconds()
}

// Observe implements prober.ObserverFactory: a load of a target reports
// its sends and requests.
func (mo *Monitor) Observe(info prober.LoadInfo) prober.Observer {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	t := mo.targets[info.Target]
	if t == nil {
		seconds := int(max(mo.cfg.Window/time.Second, 1))
		t = &targetState{
			lag:        NewWindow(seconds, mo.cfg.SendLagP99, mo.now),
			wait:       NewWindow(seconds, mo.cfg.PoolWaitP99, mo.now),
			conditions: map[string]*condition{ReasonSendLag: {}, ReasonPoolWait: {}},
		}
		mo.targets[info.Target] = t
		mo.m.targetValid.WithLabelValues(info.Target).Set(1)
		for _, r := range targetReasons {
			mo.m.targetReason.WithLabelValues(info.Target, r).Set(0)
		}
	}
	t.loads++
	return observer{t: t}
}

// Update implements prober.ObserverFactory.
func (mo *Monitor) Update(prober.LoadInfo) {}

// Forget implements prober.ObserverFactory: a target's series go with its
// last load.
func (mo *Monitor) Forget(info prober.LoadInfo) {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	t := mo.targets[info.Target]
	if t == nil {
		return
	}
	if t.loads--; t.loads > 0 {
		return
	}
	delete(mo.targets, info.Target)
	match := prometheus.Labels{"target": info.Target}
	mo.m.targetValid.DeletePartialMatch(match)
	mo.m.targetReason.DeletePartialMatch(match)
	mo.m.lag.DeletePartialMatch(match)
	mo.m.wait.DeletePartialMatch(match)
}

type observer struct{ t *targetState }

func (observer) Scheduled()                {}
func (observer) Dropped(prober.DropReason) {}

// Sent counts a request's send lag.
func (o observer) Sent(_ time.Time, lag time.Duration) { o.t.lag.Observe(lag) }

// Finished counts a request's wait for a free connection: the time to a
// reused connection (a new one's time is dialing and TLS, the server's
// side of TTFT).
func (o observer) Finished(r *prober.Result, _ *prober.Measurement) {
	if r.Trace.Reused && r.Trace.GotConn > 0 {
		o.t.wait.Observe(r.Trace.GotConn)
	}
}

// runtimeHistogram follows a cumulative runtime/metrics histogram: its
// snapshots a second apart, for the P99 of what it counted in a window.
type runtimeHistogram struct {
	read      []metrics.Sample
	snapshots []histogramSnapshot
}

type histogramSnapshot struct {
	at     time.Time
	counts []uint64
}

func newRuntimeHistogram(name string) *runtimeHistogram {
	return &runtimeHistogram{read: []metrics.Sample{{Name: name}}}
}

// sample reads the histogram and returns the upper bound of the bucket of
// the P99 of what it counted over the window (0 without observations).
func (h *runtimeHistogram) sample(now time.Time, window time.Duration) time.Duration {
	metrics.Read(h.read)
	if h.read[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	hist := h.read[0].Value.Float64Histogram()
	h.snapshots = append(h.snapshots, histogramSnapshot{at: now, counts: append([]uint64(nil), hist.Counts...)})
	for len(h.snapshots) > 2 && now.Sub(h.snapshots[1].at) >= window {
		h.snapshots = h.snapshots[1:]
	}
	first, last := h.snapshots[0].counts, h.snapshots[len(h.snapshots)-1].counts
	if len(h.snapshots) == 1 {
		first = make([]uint64, len(last))
	}
	return deltaP99(hist.Buckets, first, last)
}

// deltaP99 is the upper bound of the bucket holding the P99 of last -
// first (cumulative counts over buckets).
func deltaP99(buckets []float64, first, last []uint64) time.Duration {
	var n uint64
	for i := range last {
		n += last[i] - first[i]
	}
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(0.99 * float64(n)))
	var seen uint64
	for i := range last {
		if seen += last[i] - first[i]; seen >= rank {
			upper := buckets[i+1]
			if math.IsInf(upper, 1) {
				return math.MaxInt64
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return 0
}

// procs is GOMAXPROCS, as the CPU share divides by it.
func procs() int { return runtime.GOMAXPROCS(0) }

// Validate checks a rule: a window of at least a second, thresholds that
// are positive, a CPU share in (0, 1].
func (c Config) Validate() error {
	switch {
	case c.Window < time.Second:
		return fmt.Errorf("validity window %s: must be at least 1s", c.Window)
	case c.Sustain < 0:
		return fmt.Errorf("validity sustain %s: must not be negative", c.Sustain)
	case !(c.CPU > 0 && c.CPU <= 1):
		return fmt.Errorf("validity cpu %g: must be a share of GOMAXPROCS in (0, 1]", c.CPU)
	case c.SchedulerP99 <= 0, c.GCPauseP99 <= 0, c.SendLagP99 <= 0, c.PoolWaitP99 <= 0:
		return fmt.Errorf("validity thresholds must be positive: scheduler latency %s, GC pause %s, send lag %s, pool wait %s",
			c.SchedulerP99, c.GCPauseP99, c.SendLagP99, c.PoolWaitP99)
	}
	return nil
}

// SinceStart returns the P99s (bucket upper bounds) of the Go scheduler's
// latency and of GC pauses since the process started: the self-measurement
// of a short-lived command (`sloprober probe`), which has no window.
func SinceStart() (schedulerP99, gcPauseP99 time.Duration) {
	return (&RuntimeSnapshot{}).P99s()
}

// RuntimeSnapshot is the runtime's scheduler-latency and GC-pause
// histograms at a moment, for their P99s over a span of time that is not
// the monitor's window (a benchmark's level, a test's level).
type RuntimeSnapshot struct {
	sched, gc []uint64 // nil: since the process started
	// schedBuckets and gcBuckets are the histograms' bucket boundaries
	// (the runtime's, the same at every read).
	schedBuckets, gcBuckets []float64
}

// TakeRuntimeSnapshot reads the histograms now.
func TakeRuntimeSnapshot() *RuntimeSnapshot {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	counts := func(v metrics.Value) ([]uint64, []float64) {
		if v.Kind() != metrics.KindFloat64Histogram {
			return nil, nil
		}
		h := v.Float64Histogram()
		return append([]uint64(nil), h.Counts...), h.Buckets
	}
	r := &RuntimeSnapshot{}
	r.sched, r.schedBuckets = counts(s[0].Value)
	r.gc, r.gcBuckets = counts(s[1].Value)
	return r
}

// P99sTo returns the P99s of what the histograms counted from the
// snapshot to a later one: a span made of several windows is judged at
// its own P99, not at the worst of theirs.
func (r *RuntimeSnapshot) P99sTo(end *RuntimeSnapshot) (schedulerP99, gcPauseP99 time.Duration) {
	p99 := func(buckets []float64, before, after []uint64) time.Duration {
		if len(after) == 0 || len(buckets) != len(after)+1 {
			return 0
		}
		if len(before) != len(after) {
			before = make([]uint64, len(after))
		}
		return deltaP99(buckets, before, after)
	}
	return p99(end.schedBuckets, r.sched, end.sched), p99(end.gcBuckets, r.gc, end.gc)
}

// P99s returns the P99s of what the histograms counted since the snapshot.
func (r *RuntimeSnapshot) P99s() (schedulerP99, gcPauseP99 time.Duration) {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	p99 := func(v metrics.Value, before []uint64) time.Duration {
		if v.Kind() != metrics.KindFloat64Histogram {
			return 0
		}
		h := v.Float64Histogram()
		if len(before) != len(h.Counts) {
			before = make([]uint64, len(h.Counts))
		}
		return deltaP99(h.Buckets, before, h.Counts)
	}
	return p99(s[0].Value, r.sched), p99(s[1].Value, r.gc)
}

// Judge applies the rule's thresholds to one set of self-measurements,
// with no sustain: the reasons over their thresholds (none: valid). A
// cpuShare of 0 is not judged (a command too short to measure it).
func (c Config) Judge(cpuShare float64, schedulerP99, gcPauseP99, sendLag, poolWait time.Duration) []string {
	var out []string
	for _, x := range []struct {
		over   bool
		reason string
	}{
		{cpuShare > c.CPU, ReasonCPU},
		{schedulerP99 > c.SchedulerP99, ReasonSchedulerLatency},
		{gcPauseP99 > c.GCPauseP99, ReasonGCPause},
		{sendLag > c.SendLagP99, ReasonSendLag},
		{poolWait > c.PoolWaitP99, ReasonPoolWait},
	} {
		if x.over {
			out = append(out, x.reason)
		}
	}
	return out
}
