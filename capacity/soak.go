package capacity

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/internal/human"
	"github.com/sloprober/sloprober/internal/proc"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
)

// Soak drift rules besides the configured ones (drift.p99_growth and
// drift.goodput_drop):
const (
	// errorBurstRatio: a window in which more than 10% of the requests
	// failed is an error burst. A soak fails when its last window is one
	// (it did not recover), not for a burst it recovered from.
	errorBurstRatio = 0.10
	// memoryGrowth and memoryGrowthMin: the prober's own RSS growing by
	// more than 50% and 32 MiB from the first window to the smallest of
	// the last ones (a soak of three windows or more) is a leak of the
	// prober, which would distort what it measures.
	memoryGrowth    = 0.5
	memoryGrowthMin = 32 << 20
	// lastWindowsShare: the end of a soak is its last quarter of windows
	// (at least one), pooled, so one noisy window does not decide.
	lastWindowsShare = 0.25
)

// Soak runs a soak test: a fixed open-loop rate for its duration, one
// result per window, judged on drift.
type Soak struct {
	Manager  *prober.Manager
	Recorder *Recorder
	Test     *config.TestConfig
	Load     config.LoadSpec
	Logger   *slog.Logger
	Progress func(Progress)
	// ConfigHash is the configuration's hash (config.Config.Hash), for
	// the run's provenance.
	ConfigHash string
	// Checkpoint, if set, is handed the run's partial results after each
	// window (for storage; it must not keep the run).
	Checkpoint func(*Run)
	// Queue, if set, reads the engine's queue depth: every window records
	// it, and the final drain waits for the queue to empty.
	Queue QueueProbe
	// Validity, if set, judges the prober's health over each window, as
	// Step.Validity does a level's: a window measured while the prober was
	// the limit is marked prober-bound.
	Validity *validity.Config
	// Faults runs the fault plan's actions (nil: a runner that refuses
	// exec actions); LastCapacity, if set, returns the target's last
	// verified capacity (Env.LastCapacity).
	Faults       *faultaction.Runner
	LastCapacity func(target string) *LastCapacity

	// first and last are the per-request samples of the first window and
	// of the last keepLast windows summarized, for the drift.
	first    *requestSamples
	last     []*requestSamples
	keepLast int
	// start is when the soak started, sendEnd when it stopped sending.
	start, sendEnd time.Time
}

// plan implements procedure.
func (s *Soak) plan() string {
	t := s.Test
	return fmt.Sprintf("soak test %s on target %s: %g req/s for %s, windows of %s", t.Name, s.Load.Target.Name,
		t.Rate, time.Duration(t.Duration), time.Duration(t.Window.Steady))
}

// Run runs the soak until its duration has passed or ctx is done.
func (s *Soak) Run(ctx context.Context) *Run {
	t := s.Test
	start := time.Now()
	run := &Run{Summary: Summary{Test: t.Name, Kind: config.TestSoak, Target: s.Load.Target.Name, Start: start}, Soak: &SoakRun{Rate: t.Rate}}
	begin(ctx, run, s.Manager, t, &s.Load, s.ConfigHash)
	col := s.Recorder.Start(t.Name)
	defer s.Recorder.Stop(t.Name)
	defer end(run, col)
	canary := s.Recorder.WatchCanary(s.Load.Target.Name)
	defer func() {
		run.Canary = canary.Results()
		s.Recorder.StopWatch(s.Load.Target.Name, canary)
	}()
	defer func() {
		if err := s.Manager.Apply(t.Name, nil); err != nil {
			s.Logger.Debug("Stopping the test's loads", "test", t.Name, "err", err)
		}
		run.End = time.Now()
	}()
	spec := openLoop(s.Load, t.Rate)
	run.Cache = t.Cache
	spec.ColdCache = t.Cache == config.CacheCold || t.Cache == config.CacheAlternate
	if err := s.Manager.Apply(t.Name, []config.LoadSpec{spec}); err != nil {
		run.Verdict, run.Reason = VerdictAborted, err.Error()
		return run
	}
	var plan *faultPlan
	if len(t.Faults) > 0 {
		var err error
		plan, err = newFaultPlan(s.Load.Target.URL, t.Faults, s.Faults, s.Logger)
		if err != nil {
			run.Verdict, run.Reason = VerdictAborted, fmt.Sprintf("fault plan: %v", err)
			return run
		}
		pctx, stopPlan := context.WithCancel(ctx)
		planned := make(chan struct{})
		go func() {
			defer close(planned)
			plan.run(pctx, start, t.Faults)
		}()
		defer func() {
			stopPlan()
			<-planned // a step in force is restored first
			run.Soak.Faults = plan.Events()
			run.Soak.PlanNotRun = plan.NotRun()
			planVerdict(run)
			s.impacts(run, col, plan)
		}()
	}
	// A Step lends the soak its watch, drain and summaries; the stop rules
	// are judged per window (below), not as requests end: an error burst
	// the target recovers from is part of a soak, not a reason to stop.
	st := &Step{Manager: s.Manager, Test: t, Load: s.Load, Queue: s.Queue, Validity: s.Validity, col: col, start: start, noStopRules: true,
		gpus: newGPUSource(s.Load.Target, s.Logger)}
	defer st.gpus.close()
	warmup, steady := time.Duration(t.Window.Warmup), time.Duration(t.Window.Steady)
	end := start.Add(time.Duration(t.Duration))
	n := int((time.Duration(t.Duration) - warmup) / steady)
	s.keepLast = lastWindows(n)
	// The series starts with the soak, warm-up included: a fault step
	// may come at any time.
	col.TrackSeries(start, impactBucket(steady, time.Duration(t.Duration)))
	s.start = start
	err := st.watch(ctx, warmup, nil)
	var windows []*Window
	done := map[int]bool{} // summarized windows
	// A window's summary waits for its requests: those sent late in it
	// end in the next one, within the target's timeout. When a window is
	// longer than that (and the 5 s a drain allows more), window i is
	// summarized, and its records released, when window i+1 ends; else
	// all at the end.
	early := steady > drainLimit(&s.Load.Target)
	broken := 0 // windows in a row over a stop rule
	now := time.Now()
	for i := 0; err == nil && i < n; i++ {
		if s.Progress != nil {
			p := Progress{Stage: "soak", Rate: t.Rate, Level: i + 1, Levels: n, Elapsed: time.Since(start), Remaining: time.Until(end),
				RemainingMax: time.Until(end) + drainLimit(&s.Load.Target)} // and its requests' drain
			if i > 0 {
				// Good requests that ended in the last window: the
				// window's own goodput waits for its requests.
				p.Goodput = float64(col.LevelGood()) / steady.Seconds()
			}
			s.Progress(p)
		}
		col.ResetLevel()
		// Windows follow each other without a gap: the next one opens
		// at the instant the last one closed.
		w := col.Open(now)
		windows = append(windows, w)
		queue, gpus := sampleQueue(ctx, s.Queue), st.gpus.start(ctx)
		err = st.watch(ctx, time.Until(now.Add(steady)), nil)
		mode := spec.ColdCache
		if t.Cache == config.CacheAlternate && err == nil && i+1 < n {
			// Cold windows and production ones in turn, cold first:
			// the next window's mode is set the instant before this
			// window closes (a request built in one mode is sent in its
			// window); the load changes in place, its schedule going on.
			spec.ColdCache = (i+1)%2 == 0
			err = s.Manager.Apply(t.Name, []config.LoadSpec{spec})
		}
		now = time.Now()
		col.Close(w, now)
		sw := SoakWindow{ProberRSSBytes: proc.RSS(), ProberGoroutines: runtime.NumGoroutine()}
		if t.Cache != config.CacheProduction {
			sw.Cache = config.CacheProduction
			if mode {
				sw.Cache = config.CacheCold
			}
		}
		sw.EngineQueue, sw.GPU = queue.stop(), gpus.Stop()
		run.Soak.Windows = append(run.Soak.Windows, sw)
		if serr := st.stopRule(); serr != nil && err == nil {
			// Plainly broken for two windows in a row: not recovering.
			if broken++; broken >= 2 {
				err = fmt.Errorf("%w (two windows in a row)", serr)
			}
		} else {
			broken = 0
		}
		if i > 0 && early {
			s.summarizeWindow(st, run, windows, i-1)
			done[i-1] = true
		}
		if s.Checkpoint != nil {
			s.Checkpoint(soakCheckpoint(run, done, plan))
		}
	}
	// Sending ends here: the drain's empty buckets after it are no
	// recovery of a fault.
	s.sendEnd = time.Now()
	stop := spec
	stop.Paused = true
	_, derr := st.drain(ctx, stop)
	for i := range windows {
		if !done[i] {
			s.summarizeWindow(st, run, windows, i)
		}
	}
	switch {
	case err != nil:
		run.Verdict, run.Reason = VerdictAborted, abortReason(ctx, err)
	case derr != nil:
		run.Verdict, run.Reason = VerdictAborted, derr.Error()
	case len(windows) == 0:
		run.Verdict, run.Reason = VerdictAborted, "the soak ended before its first window"
	default:
		run.Verdict, run.Reason = s.judge(run.Soak)
	}
	return run
}

// planVerdict keeps a soak whose fault plan did not run as configured
// from passing: a soak that was to show recovery from an outage shows
// nothing of it when the outage was never set (every action failing
// used to pass as "no drift over 4 windows"). It is inconclusive, or, if
// it failed on its own, says so beside the failure.
func planVerdict(run *Run) {
	notRun := run.Soak.PlanNotRun
	if len(notRun) == 0 {
		return
	}
	why := "the fault plan did not run as configured: " + strings.Join(notRun, "; ")
	switch run.Verdict {
	case VerdictPass:
		run.Verdict, run.Reason = VerdictInconclusive, "not concluded: "+why+" (the soak itself: "+run.Reason+")"
	case VerdictFail, VerdictInconclusive:
		run.Reason += "; " + why
	}
}

// impacts measures each step of the fault plan that ran (impact.go), and
// the remaining capacity after one replica is lost where a step took one
// away.
func (s *Soak) impacts(run *Run, col *Collector, plan *faultPlan) {
	ser := col.Series()
	if ser == nil {
		return
	}
	last := ser.bucket(s.sendEnd)
	if s.sendEnd.IsZero() {
		last = ser.bucket(time.Now())
	}
	ran := plan.Ran()
	notBefore := 0
	steps := s.Test.Faults
	for i := range steps {
		tm, ok := ran[i]
		if !ok {
			continue
		}
		st := &steps[i]
		desc := st.Action.Describe()
		if st.Kind() == config.FaultSimulator {
			desc = "simulator faults " + compactJSON(mustJSON(stringKeys(st.Set)))
		}
		at := impactSpans{notBefore: notBefore, last: last}
		if st.Kind() == config.FaultKubernetes {
			// A pod's deletion has no end of its own: its failures may
			// come after the step's for (grace period, endpoints), so
			// it is judged up to the next step or the soak's end.
			at.settle = last - impactSpan
			if i+1 < len(steps) {
				at.settle = ser.bucket(s.start.Add(time.Duration(steps[i+1].At))) - impactSpan
			}
		}
		fi := ser.impactOf(i, st.Kind(), desc, tm.start, tm.end, at, s.Test.Drift.GoodputDrop)
		fi.ReplicaLost, fi.DryRun = st.LosesReplica(), tm.dryRun
		run.Soak.Impacts = append(run.Soak.Impacts, fi)
		// The next step's reference begins after this one has ended
		// and recovered.
		notBefore = ser.bucket(tm.end)
		if r := fi.RecoverySeconds; r != nil {
			notBefore = max(notBefore, ser.bucket(tm.start.Add(time.Duration(*r*float64(time.Second))))+impactSpan)
		}
	}
	var lc *LastCapacity
	if s.LastCapacity != nil {
		lc = s.LastCapacity(s.Load.Target.Name)
	}
	run.Soak.OneLost = replicaLoss(run.Soak.Impacts, s.Load.Target.Replicas, s.Test.Rate, objectiveOf(&s.Load), lc)
}

// objectiveOf is the objective a load's pooled attainment is judged
// against: its scenarios' highest.
func objectiveOf(load *config.LoadSpec) float64 {
	o := 0.0
	for _, sc := range load.Scenarios {
		o = max(o, sc.Objective)
	}
	return o
}

// soakCheckpoint is what a running soak stores: its windows summarized so
// far (a window waiting for its requests is not one yet) and what its
// fault plan did.
func soakCheckpoint(run *Run, done map[int]bool, plan *faultPlan) *Run {
	cp := *run
	sr := *run.Soak
	sr.Windows = nil
	for i, w := range run.Soak.Windows {
		if done[i] {
			sr.Windows = append(sr.Windows, w)
		}
	}
	if plan != nil {
		sr.Faults = plan.Events()
	}
	cp.Soak = &sr
	return &cp
}

// summarizeWindow fills window i of a soak run, and keeps its requests'
// samples for the drift when it is the first or may be among the last.
func (s *Soak) summarizeWindow(st *Step, run *Run, windows []*Window, i int) {
	w := &run.Soak.Windows[i]
	w.Level = Level{Stage: "soak", IntendedRate: s.Test.Rate, EngineQueue: w.EngineQueue, GPU: w.GPU}
	d := st.col.Data(windows[i])
	summarize(&w.Level, &s.Load, d, s.Test.Window.MinRequests, s.batch(), confidence)
	judgeProber(&w.Level, s.Validity, "its latencies include the prober's own delays")
	bad := 0
	for outcome, n := range w.Outcomes {
		if failed(outcome) {
			bad += n
		}
	}
	w.ErrorBurst = w.Sent > 0 && float64(bad) > errorBurstRatio*float64(w.Sent)
	samples := samplesOf(d.records, d.start)
	switch {
	case i == 0:
		s.first = samples
	case s.Test.Cache == config.CacheAlternate && i%2 == 1:
		// The drift compares windows of one cache mode: the first
		// (cold) with the last cold ones.
	default:
		s.last = append(s.last, samples)
		if len(s.last) > s.keepLast {
			s.last = s.last[1:]
		}
	}
	st.col.Release(windows[i])
}

// batch is the length of a soak window's batches: a tenth of it.
func (s *Soak) batch() time.Duration {
	return time.Duration(s.Test.Window.Steady) / batchesPerWindow
}

// lastWindows is how many of n windows are the end of a soak: its last
// quarter after the first window, at least one.
func lastWindows(n int) int {
	return max(1, int(math.Ceil(lastWindowsShare*float64(n-1))))
}

// judge decides a finished soak's verdict from its drift: the first
// window against the last quarter of windows, on per-request samples
// (drift.go).
func (s *Soak) judge(sr *SoakRun) (string, string) {
	t := s.Test
	ws := sr.Windows
	if len(ws) == 1 {
		return VerdictPass, "one window: nothing to compare it with (the soak is shorter than two windows)"
	}
	first := &ws[0]
	k := lastWindows(len(ws))
	last := ws[len(ws)-k:]
	if t.Cache == config.CacheAlternate {
		// The server's timings are compared between windows of one
		// cache mode, the first's, as the latencies are.
		var same []SoakWindow
		for _, w := range last {
			if w.Cache == first.Cache {
				same = append(same, w)
			}
		}
		if len(same) > 0 {
			last = same
		}
	}
	d := &Drift{P99Growth: map[string]float64{}, Percentile: map[string]string{}}
	sr.Drift = d
	var fails, notes []string
	samples := s.last[max(0, len(s.last)-k):]
	if s.first != nil && len(samples) > 0 {
		fails = driftOf(d, s.first, samples, s.batch(), t.Drift.P99Growth)
	}
	// A window that sent nothing (a low rate's Poisson arrivals: at 3
	// req/s a 1 s window is empty 5% of the time) has no attainment to
	// compare: not a drop of 100%.
	switch drop, lower, upper, a0, aN, ok := attainmentDrop(s.first, samples, s.batch()); {
	case first.Counted == 0:
		notes = append(notes, "attainment not compared: the first window counted no request")
	case !ok:
		notes = append(notes, "attainment not compared: the last windows counted no request, or the first none good")
	default:
		d.GoodputDrop, d.GoodputDropLower, d.GoodputDropUpper, d.AttainmentFirst, d.AttainmentLast = drop, lower, upper, a0, aN
		if lower > t.Drift.GoodputDrop {
			fails = append(fails, fmt.Sprintf("the attainment fell %.0f%% [%.0f, %.0f] (%.1f%% to %.1f%% good, of %d and %d requests; drift.goodput_drop %g)",
				100*drop, 100*lower, 100*upper, 100*ratio(goodCount(s.first.outcomes), len(s.first.outcomes)),
				100*ratio(goodCount(pooled(samples).outcomes), len(pooled(samples).outcomes)), a0.N, aN.N, t.Drift.GoodputDrop))
		}
	}
	// A leak grows for good; a heap's cycles and the load's start do not:
	// the smallest RSS of the last windows against the first window's, and
	// only over three windows or more.
	rN := ws[len(ws)-1].ProberRSSBytes
	for i := range last {
		rN = min(rN, last[i].ProberRSSBytes)
	}
	if r0 := first.ProberRSSBytes; r0 > 0 && len(ws) >= 3 {
		d.MemoryGrowth = float64(rN)/float64(r0) - 1
		if d.MemoryGrowth > memoryGrowth && rN-r0 > memoryGrowthMin {
			fails = append(fails, fmt.Sprintf("the prober's memory grew %.0f%% (%d to %d MiB)", 100*d.MemoryGrowth, r0>>20, rN>>20))
		}
	}
	server := serverGrowth(first, last)
	if len(server) > 0 {
		d.ServerGrowth = server
	}
	if ws[len(ws)-1].ErrorBurst {
		fails = append(fails, fmt.Sprintf("the last window is an error burst (more than %.0f%% failed): no recovery", 100*errorBurstRatio))
	}
	if len(fails) > 0 {
		reason := "drift: " + strings.Join(fails, "; ")
		if len(server) > 0 {
			reason += "; the server's own timings (P50): " + d.ServerTimings()
		}
		return VerdictFail, reason
	}
	bursts := 0
	for i := range ws {
		if ws[i].ErrorBurst {
			bursts++
		}
	}
	reason := fmt.Sprintf("no drift over %d windows: %s growth within %g, attainment within %g", len(ws), d.compared(), t.Drift.P99Growth, t.Drift.GoodputDrop)
	if bursts > 0 {
		reason += fmt.Sprintf("; %d error bursts, recovered", bursts)
	}
	if len(notes) > 0 {
		reason += "; " + strings.Join(notes, "; ")
	}
	return VerdictPass, reason
}

// serverPhases are the phases a server may time itself, in order.
var serverPhases = []string{"queue", "prefill", "decode_per_token"}

// serverGrowth returns the growth of the median of each phase the server
// timed, the mean of the last windows' over the first window's.
func serverGrowth(first *SoakWindow, last []SoakWindow) map[string]float64 {
	phase := func(s *ServerSignals, name string) Percentiles {
		switch name {
		case "queue":
			return s.Queue
		case "prefill":
			return s.Prefill
		}
		return s.DecodePerToken
	}
	out := map[string]float64{}
	if first.Server == nil {
		return out
	}
	for _, name := range serverPhases {
		p0 := phase(first.Server, name)
		sum, n := 0.0, 0
		for i := range last {
			if s := last[i].Server; s != nil {
				if p := phase(s, name); p.N > 0 {
					sum += p.P50
					n++
				}
			}
		}
		// A phase of a few microseconds (the simulator's empty queue)
		// grows by any percentage from nothing: compare from 1 ms.
		if p0.N == 0 || n == 0 || p0.P50 < 1e-3 && sum/float64(n) < 1e-3 {
			continue
		}
		out[name] = sum/float64(n)/max(p0.P50, 1e-3) - 1
	}
	return out
}

// ServerTimings writes the growth of the server's own timings in
// serverPhases order: "queue +3%, decode per token +95%".
func (d *Drift) ServerTimings() string {
	var parts []string
	for _, name := range serverPhases {
		if v, ok := d.ServerGrowth[name]; ok {
			parts = append(parts, strings.ReplaceAll(name, "_", " ")+" "+human.SignedPercent(v))
		}
	}
	return strings.Join(parts, ", ")
}

// compared says which tail was compared: "P99", or, with fewer samples,
// e.g. "P50 (fewer than 200 samples a window)".
func (d *Drift) compared() string {
	q := "p99"
	for _, p := range d.Percentile {
		if p < q { // "p50" < "p95" < "p99": the lowest one used
			q = p
		}
	}
	switch q {
	case "p50":
		return "median (fewer than 200 samples a window)"
	case "p95":
		return "P95 (fewer than 1,000 samples a window)"
	}
	return "P99"
}

// Growth writes each latency's growth with the percentile compared:
// "ttft P50 +12%, tpot P50 +3%, ...".
func (d *Drift) Growth() string {
	var parts []string
	for _, name := range []string{"ttft", "tpot", "itl", "max_itl", "e2e"} {
		g, ok := d.P99Growth[name]
		if !ok {
			continue
		}
		q := strings.ToUpper(d.Percentile[name])
		if q == "" {
			q = "P99"
		}
		part := fmt.Sprintf("%s %s %s", name, q, human.SignedPercent(g))
		if iv := d.Intervals[name]; iv != nil {
			part += fmt.Sprintf(" [%+.0f, %+.0f]", 100*iv.Lower, 100*iv.Upper)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// Attainment writes the drop of the attainment with its interval where
// the run has one (schema 2): "attainment -2% [-5, +1]"; else, as schema
// 1 said it, "goodput per request -2%".
func (d *Drift) Attainment() string {
	if d.AttainmentFirst == nil {
		return "goodput per request " + human.SignedPercent(-d.GoodputDrop)
	}
	return fmt.Sprintf("attainment %s [%+.0f, %+.0f]", human.SignedPercent(-d.GoodputDrop), -100*d.GoodputDropUpper, -100*d.GoodputDropLower)
}
