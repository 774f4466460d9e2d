// Package capacity runs the step and soak tests of the README's "Capacity
// tests": the seed article's procedure for finding how much load an
// endpoint carries while keeping its SLOs (a baseline, a closed-loop sweep
// with a refined knee, open-loop verification and a burst), and whether it
// keeps them for hours. A test runs its loads through the prober's
// Manager, beside the canary, as their owner, and keeps the raw records of
// its requests through a Recorder (a prober.ObserverFactory composed with
// the metrics), from which each level's percentiles are exact.
//
// Execute (execute.go) is the one entry point, for `sloprober test run` and
// the daemon alike, and the one place that switches on a test's kind; a
// run's result is a Run, whose JSON model is all in run.go.
package capacity

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/proc"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
)

// Recorder keeps the requests of running tests. It is a
// prober.ObserverFactory: cmd composes it with the metrics (prober.Fanout),
// and loads whose test label is not a running test's cost it nothing.
type Recorder struct {
	mu      sync.Mutex
	tests   map[string]*Collector   // by test label
	watches map[string]*CanaryWatch // by target: the canary during a test
}

var _ prober.ObserverFactory = (*Recorder)(nil)

// NewRecorder returns a recorder with no running test.
func NewRecorder() *Recorder {
	return &Recorder{tests: map[string]*Collector{}, watches: map[string]*CanaryWatch{}}
}

// Start begins keeping the requests of a test's loads (those with
// test=<test>), before they start; Stop ends it.
func (r *Recorder) Start(test string) *Collector {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &Collector{}
	r.tests[test] = c
	return c
}

// Stop ends keeping a test's requests.
func (r *Recorder) Stop(test string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tests, test)
}

// Observe implements prober.ObserverFactory.
func (r *Recorder) Observe(info prober.LoadInfo) prober.Observer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if info.Test == config.CanaryTest {
		return &canaryObserver{r: r, info: info}
	}
	c, ok := r.tests[info.Test]
	if !ok {
		return nopObserver{}
	}
	return &collectorObserver{c: c, scenario: info.Scenario}
}

// WatchCanary counts the canary's requests on target while a test runs
// there: a step test overloads the target on purpose, and what that costs
// the unrelated traffic (head-of-line blocking) belongs in its report.
func (r *Recorder) WatchCanary(target string) *CanaryWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := &CanaryWatch{scenarios: map[string]*CanaryScenario{}}
	r.watches[target] = w
	return w
}

// StopWatch ends counting the canary on target.
func (r *Recorder) StopWatch(target string, w *CanaryWatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watches[target] == w {
		delete(r.watches, target)
	}
}

// canaryBudgetPeriod is the period of the error budget a test's cost to
// the canary is stated in: 30 days, the usual SLO window.
const canaryBudgetPeriod = 30 * 24 * time.Hour

// CanaryWatch counts the canary's requests during a test.
type CanaryWatch struct {
	mu        sync.Mutex
	scenarios map[string]*CanaryScenario
}

// Results returns the canary's attainment per scenario, sorted.
func (w *CanaryWatch) Results() []CanaryScenario {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]CanaryScenario, 0, len(w.scenarios))
	for _, s := range w.scenarios {
		c := *s
		c.Attainment = ratio(c.Good, c.Counted)
		if budget := (1 - c.Objective) * c.rate * canaryBudgetPeriod.Seconds(); budget > 0 {
			c.BudgetConsumed = float64(c.Counted-c.Good) / budget
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b CanaryScenario) int { return strings.Compare(a.Scenario, b.Scenario) })
	return out
}

// canaryObserver counts a canary load's requests into the watch of its
// target, while there is one.
type canaryObserver struct {
	nopObserver
	r    *Recorder
	info prober.LoadInfo
}

func (o *canaryObserver) Finished(_ *prober.Result, m *prober.Measurement) {
	if !m.Counted {
		return
	}
	o.r.mu.Lock()
	w := o.r.watches[o.info.Target]
	o.r.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.scenarios[o.info.Scenario]
	if !ok {
		s = &CanaryScenario{Scenario: o.info.Scenario, Objective: o.info.Objective, rate: o.info.Rate}
		w.scenarios[o.info.Scenario] = s
	}
	s.Counted++
	if m.Good {
		s.Good++
	}
}

// Update implements prober.ObserverFactory.
func (r *Recorder) Update(prober.LoadInfo) {}

// Forget implements prober.ObserverFactory.
func (r *Recorder) Forget(prober.LoadInfo) {}

type nopObserver struct{}

func (nopObserver) Scheduled()                                   {}
func (nopObserver) Dropped(prober.DropReason)                    {}
func (nopObserver) Sent(time.Time, time.Duration)                {}
func (nopObserver) Finished(*prober.Result, *prober.Measurement) {}

// Record is what a test keeps of one finished request: its measurement,
// without the chunk offsets, whose gaps are pooled in the window.
type Record struct {
	Scenario string
	// Tenant is the request's tenant, "" when its scenario has none.
	Tenant  string
	Sent    time.Time
	Outcome prober.Outcome
	Counted bool
	Good    bool
	Missed  []string

	TTFT, TPOT, E2E time.Duration
	HasTTFT         bool
	HasTPOT         bool
	HasE2E          bool
	TTFA            time.Duration
	HasTTFA         bool
	// Ended is how long the request took from Sent to its end, Lag how
	// late it was sent (Sent less its scheduled time): its flight, for
	// the prober's read delay over it, and its arrival as the schedule
	// had it, for the burstiness of the sends.
	Ended, Lag time.Duration
	// MaxITL is the request's longest gap between chunks: a soak's drift
	// compares one per request, not every pooled gap.
	MaxITL    time.Duration
	HasMaxITL bool

	InputTokens, OutputTokens     int
	InputMismatch, OutputMismatch bool
	// InputSent is the prompt's length as sent: the workload's count of
	// it (calibrated against the server's tokenizer), whatever usage says.
	InputSent int

	// Server is the server's own account of the request, where it gave
	// one (serverOf).
	Server serverRecord
}

// serverRecord is what a server said of one request's work: its timings
// (seconds) and its cached prompt tokens.
type serverRecord struct {
	HasTimings, Implausible bool
	HasQueue                bool
	Queue, Prefill          float64
	DecodePerToken          float64 // 0 when predicted_n is 0
	// Cached and Prompt are usage's cached and prompt tokens, where both
	// were reported.
	HasCached      bool
	Cached, Prompt int
}

// timingSlack is how much longer than the request took at the client a
// server's timings may add up to: 5% and 5 ms (the server's clock and
// rounding). A server that claims more did not spend it on this request.
const (
	timingSlackShare = 0.05
	timingSlack      = 5 * time.Millisecond
)

// serverOf keeps what the server said of r, where it said it, and only
// what it could have spent: queue, prefill and decode times that add up to
// more than the request took at the client (plus timingSlack) are
// implausible and not used.
func serverOf(r *prober.Result) serverRecord {
	var s serverRecord
	if cached, prompt, ok := r.CachedPromptTokens(); ok {
		s.HasCached, s.Cached, s.Prompt = true, cached, prompt
	}
	t := r.Timings
	if t == nil {
		return s
	}
	total := t.PromptMS + t.PredictedMS
	if t.QueueMS != nil {
		total += *t.QueueMS
	}
	limit := r.Ended + time.Duration(timingSlackShare*float64(r.Ended)) + timingSlack
	if time.Duration(total*float64(time.Millisecond)) > limit {
		s.Implausible = true
		return s
	}
	s.HasTimings = true
	s.Prefill = t.PromptMS / 1e3
	if t.QueueMS != nil {
		s.HasQueue, s.Queue = true, *t.QueueMS/1e3
	}
	if t.PredictedN > 0 {
		s.DecodePerToken = t.PredictedMS / 1e3 / float64(t.PredictedN)
	}
	return s
}

// maxWindowGaps bounds the inter-token gaps a window keeps: 4 M gaps
// (16 MiB) are 2 min of 1,000 streams at 17 tokens/s. Beyond it the gaps
// are a uniform sample (reservoir sampling), and the window says so.
const maxWindowGaps = 4 << 20

// Window collects the requests sent between its start and its end, and
// the arrivals dropped meanwhile. Requests sent in the window are kept
// when they finish, even after its end: a level waits for them.
type Window struct {
	Start, End time.Time // End is zero while open

	records   []Record
	gaps      []float32 // seconds
	gapsSeen  int64
	dropped   map[prober.DropReason]int
	scheduled int
	limit     int // keep the first limit requests to finish; 0: all

	// lags are the send lags of the requests sent in the window (seconds;
	// a uniform sample beyond maxWindowGaps), cpu the process's CPU time
	// at its start and end: the prober's own health over the window.
	lags     []float32
	lagsSeen int64
	// inFlight are the window's requests not yet ended: its records are
	// complete when it is 0 after the window closed.
	inFlight int
	// discarded: the window was opened for an extension its level did
	// not need; it keeps no records.
	discarded  bool
	cpu0, cpu1 time.Duration
	// runtime and runtimeEnd are the Go runtime's scheduler-latency and
	// GC-pause histograms at the start and at the end; sched and gc their
	// P99s over the window.
	runtime, runtimeEnd *validity.RuntimeSnapshot
	sched, gc           time.Duration
}

// Collector keeps the windows of one test run and its requests in flight.
type Collector struct {
	inFlight atomic.Int64

	mu      sync.Mutex
	windows []*Window
	level   levelCounts // of the requests sent since the last ResetLevel: for the stop rules
	// levelStart is when the running level started (ResetLevel): a
	// request sent before it is an earlier level's, and counts nothing
	// of this one.
	levelStart time.Time
	rng        uint64 // reservoir sampling of gaps and lags
	identity   identityCounts
	// inputs and outputs are the lengths of every request kept in a
	// window: input as sent, output as received (ok requests).
	inputs, outputs lengthSample
	// byScenario are the same per scenario of a mix (its scenarios are
	// the configuration's, so the map is bounded).
	byScenario map[string]*[2]lengthSample
	// series, if tracked, counts the requests by their send time's
	// bucket, for a soak's fault impacts.
	series *series
	// stalls, if tracked, are the prober's late wake-ups: each request's
	// read delay (stall.go).
	stalls *stallSampler
}

// TrackStalls starts sampling the prober's late wake-ups, for each
// request's read delay (Data); the function it returns stops it.
func (c *Collector) TrackStalls() (stop func()) {
	st := startStalls()
	c.mu.Lock()
	c.stalls = st
	c.mu.Unlock()
	return func() {
		st.stop()
		c.mu.Lock()
		c.stalls = nil
		c.mu.Unlock()
	}
}

// lengthSample is a uniform sample of lengths, at most maxWindowGaps.
type lengthSample struct {
	v    []float32
	seen int64
}

func (s *lengthSample) add(c *Collector, v int) {
	s.seen++
	if len(s.v) < maxWindowGaps {
		s.v = append(s.v, float32(v))
	} else if j := c.random() % uint64(s.seen); j < maxWindowGaps {
		s.v[j] = float32(v)
	}
}

// Lengths returns the lengths of every request the run's windows kept.
func (c *Collector) Lengths() *Lengths {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inputs.seen == 0 {
		return nil
	}
	return &Lengths{Input: percentiles(float64s(c.inputs.v)), Output: percentiles(float64s(c.outputs.v))}
}

// ScenarioLengths returns the lengths per scenario, or nil for a load of
// one scenario (its lengths are the run's).
func (c *Collector) ScenarioLengths() map[string]*Lengths {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byScenario) < 2 {
		return nil
	}
	out := map[string]*Lengths{}
	for name, s := range c.byScenario {
		out[name] = &Lengths{Input: percentiles(float64s(s[0].v)), Output: percentiles(float64s(s[1].v))}
	}
	return out
}

// levelCounts are what the stop rules look at while a level runs.
type levelCounts struct {
	finished, failed, good int
	maxTTFT                time.Duration
}

// InFlight returns the test's requests in flight.
func (c *Collector) InFlight() int { return int(c.inFlight.Load()) }

// Open opens a window at start; a zero start is the time now, read with
// the collector locked, so that a request sent at the window's edge is
// counted in the window its record will go to.
func (c *Collector) Open(start time.Time) *Window {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open(start)
}

// open opens a window at start (zero: now); c.mu is held.
func (c *Collector) open(start time.Time) *Window {
	if start.IsZero() {
		start = time.Now()
	}
	w := &Window{Start: start, dropped: map[prober.DropReason]int{}, cpu0: proc.CPU(), runtime: validity.TakeRuntimeSnapshot()}
	c.windows = append(c.windows, w)
	return w
}

// Roll closes last and opens the next window at the same instant, read
// with the collector locked: every request is counted in, and recorded
// by, the same one of the two.
func (c *Collector) Roll(last *Window) *Window {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.open(time.Time{})
	last.End, last.cpu1, last.runtimeEnd = next.Start, proc.CPU(), next.runtime
	last.sched, last.gc = last.runtime.P99sTo(last.runtimeEnd)
	return next
}

// OpenFirst opens a window at start that keeps the first n of its
// requests to finish: a baseline of n requests one at a time is n,
// although its client sent the next one before the window closed.
func (c *Collector) OpenFirst(start time.Time, n int) *Window {
	w := c.Open(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	w.limit = n
	return w
}

// Discard closes a window at end and drops what it collected: an
// extension opened while its level's decision was pending, which the
// decision made unneeded.
func (c *Collector) Discard(w *Window, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.End, w.discarded = end, true
	w.records, w.gaps, w.lags = nil, nil, nil
}

// Ended reports whether windows are closed and every request sent in
// them has ended: their records are complete, while the load may go on
// into the next one.
func (c *Collector) Ended(ws ...*Window) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range ws {
		if w.End.IsZero() || w.inFlight > 0 {
			return false
		}
	}
	return true
}

// Close ends a window at end: requests sent later are not its own.
func (c *Collector) Close(w *Window, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.End, w.cpu1, w.runtimeEnd = end, proc.CPU(), validity.TakeRuntimeSnapshot()
	w.sched, w.gc = w.runtime.P99sTo(w.runtimeEnd)
}

// windowData is a copy of what a window collected.
type windowData struct {
	records    []Record
	gaps, lags []float32 // seconds
	gapsSeen   int64
	lagsSeen   int64
	cpu        time.Duration // the process's CPU time over the window
	sched, gc  time.Duration // the Go scheduler's latency and GC pause P99s over it
	start, end time.Time
	scheduled  int
	dropped    map[prober.DropReason]int
	// stalls are the prober's late wake-ups over the records' flights,
	// if stallsTracked.
	stalls        []stall
	stallsTracked bool
}

// Data returns a copy of what windows collected, pooled, with the
// prober's stalls over their requests' flights: a level's batches, which
// follow each other. Call it once the requests sent in them have ended.
func (c *Collector) Data(ws ...*Window) windowData {
	return c.withStalls(c.data(ws...))
}

// data is Data without the stalls.
func (c *Collector) data(ws ...*Window) windowData {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := windowData{dropped: map[prober.DropReason]int{}}
	for _, w := range ws {
		d.records = append(d.records, w.records...)
		d.gaps = append(d.gaps, w.gaps...)
		d.gapsSeen += w.gapsSeen
		d.lags = append(d.lags, w.lags...)
		d.lagsSeen += w.lagsSeen
		d.scheduled += w.scheduled
		for r, n := range w.dropped {
			d.dropped[r] += n
		}
		if w.cpu1 > w.cpu0 {
			d.cpu += w.cpu1 - w.cpu0
		}
		d.sched, d.gc = max(d.sched, w.sched), max(d.gc, w.gc)
	}
	if len(ws) > 0 {
		d.start, d.end = ws[0].Start, ws[len(ws)-1].End
		if first, last := ws[0], ws[len(ws)-1]; first.runtime != nil && last.runtimeEnd != nil {
			// The span's own P99s: over a level of 30 batches, the
			// worst batch's P99 would be close to its maximum.
			d.sched, d.gc = first.runtime.P99sTo(last.runtimeEnd)
		}
	}
	return d
}

// withStalls adds to d the stalls of its records' flights, where they are
// tracked. The collector is not locked meanwhile: the sends and the
// records of the load go on.
func (c *Collector) withStalls(d windowData) windowData {
	c.mu.Lock()
	st := c.stalls
	c.mu.Unlock()
	if st == nil || len(d.records) == 0 {
		return d
	}
	from, to := d.records[0].Sent, d.records[0].Sent
	for i := range d.records {
		r := &d.records[i]
		from, to = minTime(from, r.Sent), maxTime(to, r.Sent.Add(r.Ended))
	}
	d.stalls, d.stallsTracked = st.between(from, to), true
	return d
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Release drops a summarized window's records and gaps: a soak of hours
// keeps only the windows still open or waiting for their requests.
func (c *Collector) Release(w *Window) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.records, w.gaps, w.lags = nil, nil, nil
}

// Identity returns who the target said it was in the test's replies.
func (c *Collector) Identity() *Identity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.identity.result()
}

// windowAt returns the window open at t, or nil; c.mu is held.
func (c *Collector) windowAt(t time.Time) *Window {
	for i := len(c.windows) - 1; i >= 0; i-- {
		w := c.windows[i]
		if !t.Before(w.Start) && (w.End.IsZero() || t.Before(w.End)) {
			return w
		}
	}
	return nil
}

// TrackSeries starts counting the requests sent from origin on by the
// bucket of their send time (Series), buckets of bucket.
func (c *Collector) TrackSeries(origin time.Time, bucket time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.series = &series{origin: origin, bucketD: bucket}
}

// Series returns a copy of the counts TrackSeries started, nil without.
func (c *Collector) Series() *series {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.series == nil {
		return nil
	}
	return c.series.clone()
}

// ResetLevel starts the stop rules' counts of a new level: from now on
// they count the requests sent from now on, and only those. An earlier
// level's requests that end later (an overloaded level's, timing out one
// by one) are that level's: against llama-server, 11 of them failing in
// the next level's first 18 µs made it "missed" on a stop rule, with not
// one request of its own sent.
func (c *Collector) ResetLevel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.level = levelCounts{}
	c.levelStart = time.Now()
}

// Level returns the stop rules' counts of the requests sent since
// ResetLevel that have finished.
func (c *Collector) Level() (finished, failed int, maxTTFT time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.level.finished, c.level.failed, c.level.maxTTFT
}

// LevelGood returns the good requests sent since ResetLevel that have
// finished (a soak's progress: its window's, not those of the window
// before that end in it).
func (c *Collector) LevelGood() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.level.good
}

type collectorObserver struct {
	c        *Collector
	scenario string
}

func (o *collectorObserver) Scheduled() {
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if w := o.c.windowAt(time.Now()); w != nil {
		w.scheduled++
	}
}

func (o *collectorObserver) Dropped(r prober.DropReason) {
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if w := o.c.windowAt(time.Now()); w != nil {
		w.dropped[r]++
	}
}

func (o *collectorObserver) Sent(t0 time.Time, lag time.Duration) {
	o.c.inFlight.Add(1)
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	w := o.c.windowAt(t0)
	if w == nil {
		return
	}
	w.inFlight++
	if w.discarded {
		return
	}
	w.lagsSeen++
	if v := float32(lag.Seconds()); len(w.lags) < maxWindowGaps {
		w.lags = append(w.lags, v)
	} else if j := o.c.random() % uint64(w.lagsSeen); j < maxWindowGaps {
		w.lags[j] = v
	}
}

// random is the collector's pseudo-random stream (an LCG) for reservoir
// sampling; c.mu is held.
func (c *Collector) random() uint64 {
	c.rng = c.rng*6364136223846793005 + 1442695040888963407
	return c.rng >> 11
}

func (o *collectorObserver) Finished(r *prober.Result, m *prober.Measurement) {
	if !r.NotSent {
		defer o.c.inFlight.Add(-1)
	}
	rec := Record{
		Scenario: o.scenario, Tenant: r.Tenant, Sent: r.Sent, Outcome: r.Outcome, Counted: m.Counted, Good: m.Good, Missed: m.Missed,
		TTFT: m.TTFT, HasTTFT: m.HasTTFT, TPOT: m.TPOT, HasTPOT: m.HasTPOT, E2E: m.E2E, HasE2E: m.HasE2E,
		TTFA: m.TTFA, HasTTFA: m.HasTTFA, Ended: r.Ended, Lag: max(r.Lag(), 0),
		MaxITL: m.MaxITL, HasMaxITL: m.HasMaxITL,
		InputTokens: m.InputTokens, OutputTokens: m.OutputTokens,
		InputMismatch: m.InputMismatch, OutputMismatch: m.OutputMismatch,
		InputSent: r.InputTokens, Server: serverOf(r),
	}
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	sent := r.Sent
	if sent.IsZero() || r.NotSent {
		// Never sent: its Sent is when it ended; it belongs where it
		// was due.
		sent = r.Scheduled
	}
	isFailed := failed(r.Outcome)
	if l := &o.c.level; !sent.Before(o.c.levelStart) {
		l.finished++
		if m.Good {
			l.good++
		}
		if isFailed {
			l.failed++
		}
		switch {
		case m.HasTTFT:
			l.maxTTFT = max(l.maxTTFT, m.TTFT)
		case isFailed:
			// A request that failed without a first token waited that
			// long for it at least: a server that sends headers and
			// then nothing until the timeout (60 s) is over a
			// stop.ttft_over of 30 s, although no TTFT was ever
			// measured.
			l.maxTTFT = max(l.maxTTFT, r.Ended)
		}
	}
	o.c.identity.add(r)
	if o.c.series != nil && !r.NotSent {
		o.c.series.add(sent, m.Counted, m.Good, isFailed)
	}
	w := o.c.windowAt(sent)
	if w == nil {
		return
	}
	if !r.NotSent {
		w.inFlight = max(w.inFlight-1, 0)
	}
	if w.discarded || w.limit > 0 && len(w.records) >= w.limit {
		return
	}
	w.records = append(w.records, rec)
	if o.c.byScenario == nil {
		o.c.byScenario = map[string]*[2]lengthSample{}
	}
	sc := o.c.byScenario[rec.Scenario]
	if sc == nil {
		sc = &[2]lengthSample{}
		o.c.byScenario[rec.Scenario] = sc
	}
	if rec.InputSent > 0 {
		o.c.inputs.add(o.c, rec.InputSent)
		sc[0].add(o.c, rec.InputSent)
	}
	if rec.Outcome == prober.OutcomeOK {
		o.c.outputs.add(o.c, rec.OutputTokens)
		sc[1].add(o.c, rec.OutputTokens)
	}
	if !m.HasITL {
		return
	}
	for gap := range prober.Gaps(r.Chunks) {
		w.gapsSeen++
		g := float32(gap.Seconds())
		if len(w.gaps) < maxWindowGaps {
			w.gaps = append(w.gaps, g)
			continue
		}
		// Reservoir sampling: keep the gap with probability
		// maxWindowGaps / gapsSeen.
		if j := o.c.random() % uint64(w.gapsSeen); j < maxWindowGaps {
			w.gaps[j] = g
		}
	}
}

// failed reports whether an outcome is a failure of the target, for the
// stop rules and error bursts: anything but ok, and the client's own
// cancellations and shutdown.
func failed(o prober.Outcome) bool {
	return o != prober.OutcomeOK && o != prober.OutcomeCancelled && o != prober.OutcomeShutdown
}
