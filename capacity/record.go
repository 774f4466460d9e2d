// Package capacity runs the step and soak tests of the README's "Capacity
// tests": the seed article's procedure for finding how much load an
// endpoint carries while keeping its SLOs (a baseline, a closed-loop sweep
// with a refined knee, open-loop verification and a burst), and whether it
// keeps them for hours. A test runs its loads through the prober's
// Manager, beside the canary, as their owner, and keeps the raw records of
// its requests through a Recorder (a prober.ObserverFactory composed with
// the metrics), from which each level's percentiles are exact.
package capacity

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sloprober/sloprober/prober"
)

// Recorder keeps the requests of running tests. It is a
// prober.ObserverFactory: cmd composes it with the metrics (prober.Fanout),
// and loads whose test label is not a running test's cost it nothing.
type Recorder struct {
	mu    sync.Mutex
	tests map[string]*Collector // by test label
}

var _ prober.ObserverFactory = (*Recorder)(nil)

// NewRecorder returns a recorder with no running test.
func NewRecorder() *Recorder { return &Recorder{tests: map[string]*Collector{}} }

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
	c, ok := r.tests[info.Test]
	if !ok {
		return nopObserver{}
	}
	return &collectorObserver{c: c, scenario: info.Scenario}
}

// Update implements prober.ObserverFactory.
func (r *Recorder) Update(prober.LoadInfo) {}

// Forget implements prober.ObserverFactory.
func (r *Recorder) Forget(prober.LoadInfo) {}

type nopObserver struct{}

func (nopObserver) Scheduled()                                   {}
func (nopObserver) Dropped(prober.DropReason)                    {}
func (nopObserver) Sent(time.Duration)                           {}
func (nopObserver) Finished(*prober.Result, *prober.Measurement) {}

// Record is what a test keeps of one finished request: its measurement,
// without the chunk offsets, whose gaps are pooled in the window.
type Record struct {
	Scenario string
	Sent     time.Time
	Outcome  prober.Outcome
	Counted  bool
	Good     bool
	Missed   []string

	TTFT, TPOT, E2E time.Duration
	HasTTFT         bool
	HasTPOT         bool
	HasE2E          bool

	InputTokens, OutputTokens int
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
}

// Collector keeps the windows of one test run and its requests in flight.
type Collector struct {
	inFlight atomic.Int64

	mu      sync.Mutex
	windows []*Window
	level   levelCounts // since the last ResetLevel: for the stop rules
	rng     uint64      // reservoir sampling of gaps
}

// levelCounts are what the stop rules look at while a level runs.
type levelCounts struct {
	finished, failed, good int
	maxTTFT                time.Duration
}

// InFlight returns the test's requests in flight.
func (c *Collector) InFlight() int { return int(c.inFlight.Load()) }

// Open opens a window at start.
func (c *Collector) Open(start time.Time) *Window {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &Window{Start: start, dropped: map[prober.DropReason]int{}}
	c.windows = append(c.windows, w)
	return w
}

// Close ends a window at end: requests sent later are not its own.
func (c *Collector) Close(w *Window, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.End = end
}

// Records returns a copy of a window's records and gaps; call it once the
// requests sent in the window have ended.
func (c *Collector) Records(w *Window) ([]Record, []float32, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Record(nil), w.records...), append([]float32(nil), w.gaps...), w.gapsSeen
}

// Release drops a summarized window's records and gaps: a soak of hours
// keeps only the windows still open or waiting for their requests.
func (c *Collector) Release(w *Window) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.records, w.gaps = nil, nil
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

// ResetLevel starts the stop rules' counts of a new level.
func (c *Collector) ResetLevel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.level = levelCounts{}
}

// Level returns the stop rules' counts since ResetLevel.
func (c *Collector) Level() (finished, failed int, maxTTFT time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.level.finished, c.level.failed, c.level.maxTTFT
}

// LevelGood returns the good requests finished since ResetLevel.
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

func (o *collectorObserver) Sent(time.Duration) { o.c.inFlight.Add(1) }

func (o *collectorObserver) Finished(r *prober.Result, m *prober.Measurement) {
	defer o.c.inFlight.Add(-1)
	rec := Record{
		Scenario: o.scenario, Sent: r.Sent, Outcome: r.Outcome, Counted: m.Counted, Good: m.Good, Missed: m.Missed,
		TTFT: m.TTFT, HasTTFT: m.HasTTFT, TPOT: m.TPOT, HasTPOT: m.HasTPOT, E2E: m.E2E, HasE2E: m.HasE2E,
		InputTokens: m.InputTokens, OutputTokens: m.OutputTokens,
	}
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	l := &o.c.level
	l.finished++
	if m.Good {
		l.good++
	}
	if r.Outcome != prober.OutcomeOK && r.Outcome != prober.OutcomeCancelled && r.Outcome != prober.OutcomeShutdown {
		l.failed++
	}
	if m.HasTTFT {
		l.maxTTFT = max(l.maxTTFT, m.TTFT)
	}
	sent := r.Sent
	if sent.IsZero() {
		sent = r.Scheduled
	}
	w := o.c.windowAt(sent)
	if w == nil {
		return
	}
	w.records = append(w.records, rec)
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
		o.c.rng = o.c.rng*6364136223846793005 + 1442695040888963407
		if j := (o.c.rng >> 11) % uint64(w.gapsSeen); j < maxWindowGaps {
			w.gaps[j] = g
		}
	}
}
