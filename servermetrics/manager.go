package servermetrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/ratelog"
)

// Errors of Queue.Waiting.
var (
	// ErrNotConfigured: the target has no server_metrics section.
	ErrNotConfigured = errors.New("no server_metrics configured")
	// ErrNoQueueMetric: the engine serves no waiting-queue metric (or its
	// value was rejected).
	ErrNoQueueMetric = errors.New("the engine's metrics have no waiting queue")
)

// errRunning is returned by a second Run.
var errRunning = errors.New("servermetrics: Run called twice")

// Manager scrapes the engine metrics of every target with a server_metrics
// section, each on its own interval, and re-exports them.
type Manager struct {
	logger  *slog.Logger
	metrics *Metrics

	mu      sync.Mutex
	targets map[string]*target
	ctx     context.Context // Run's; nil before Run
	ran     bool
	stopped bool // Run returned

	// Tests replace these.
	newTicker func(target string, interval time.Duration) (<-chan time.Time, func())
	onScrape  func(target string, s Snapshot, err error)
}

// target is one target's scrape loop.
type target struct {
	name     string
	cfg      config.ServerMetricsConfig
	scraper  *Scraper
	interval time.Duration
	latest   atomic.Pointer[Snapshot]

	cancel context.CancelFunc // nil until started
	done   chan struct{}

	// The loop goroutine's own.
	lastEnd time.Time
	down    bool
	log     *ratelog.Limiter // at most one warning a LogEvery
}

// NewManager returns a manager that records into metrics. Targets are
// scraped once Run runs.
func NewManager(logger *slog.Logger, metrics *Metrics) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		logger:  logger,
		metrics: metrics,
		targets: map[string]*target{},
		newTicker: func(_ string, d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
	}
}

// Apply makes the scraped targets those of cfg (a validated configuration)
// with a server_metrics section: a new one starts (with a scrape at once),
// a changed one restarts afresh, a removed one stops and its series are
// deleted. It fails, changing nothing, when a client cannot be built (e.g.
// an unreadable CA file). Before Run it only records the targets; after
// Run returned it does nothing.
func (m *Manager) Apply(cfg *config.Config) error {
	p, err := m.Prepare(cfg)
	if err != nil {
		return err
	}
	p.Commit()
	return nil
}

// Prepared is a configuration's scrapers, built but not running: Commit
// puts them in place, Discard closes them. One of the two must be called.
type Prepared struct {
	m     *Manager
	want  map[string]*config.ServerMetricsConfig
	built map[string]*Scraper
}

// Prepare builds the scrapers of cfg's changed targets, changing nothing:
// a reload builds everything that can fail first (a TLS file that cannot
// be read), and commits only once nothing can.
func (m *Manager) Prepare(cfg *config.Config) (*Prepared, error) {
	want := map[string]*config.ServerMetricsConfig{}
	for _, t := range cfg.Targets {
		if t.ServerMetrics != nil {
			want[t.Name] = t.ServerMetrics
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &Prepared{m: m, want: want, built: map[string]*Scraper{}}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if cur := m.targets[name]; cur != nil && reflect.DeepEqual(cur.cfg, *want[name]) {
			continue
		}
		s, err := NewScraper(name, want[name])
		if err != nil {
			p.Discard()
			return nil, err
		}
		p.built[name] = s
	}
	return p, nil
}

// Discard closes the prepared scrapers.
func (p *Prepared) Discard() {
	for _, b := range p.built {
		b.Close()
	}
}

// Commit replaces the running scrapers by the prepared ones: unchanged
// targets go on, changed ones restart with fresh series, removed ones stop
// and their series are deleted. After Run has returned it closes the
// prepared scrapers and changes nothing.
func (p *Prepared) Commit() {
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		p.Discard()
		return
	}
	for name, t := range m.targets {
		if p.want[name] == nil || p.built[name] != nil {
			m.stop(t)
			m.metrics.forget(name)
			delete(m.targets, name)
		}
	}
	for name, s := range p.built {
		c := p.want[name]
		t := &target{name: name, cfg: *c, scraper: s, interval: time.Duration(c.Interval), log: ratelog.New(LogEvery)}
		if t.interval <= 0 { // not validated; a ticker panics on it
			t.interval = time.Duration(config.DefaultServerMetricsConfig.Interval)
		}
		m.targets[name] = t
		if m.ctx != nil {
			m.start(t)
		}
	}
}

// Run scrapes the targets until ctx is done, then stops every scrape loop
// and returns once they ended (an in-flight scrape is cancelled). Call it
// once; with oklog/run:
//
//	ctx, cancel := context.WithCancel(context.Background())
//	g.Add(func() error { return sm.Run(ctx) }, func(error) { cancel() })
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.ran {
		m.mu.Unlock()
		return errRunning
	}
	m.ran, m.ctx = true, ctx
	for _, t := range m.targets {
		m.start(t)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	for _, t := range m.targets {
		m.stop(t)
	}
	return nil
}

// Latest returns the snapshot of a target's last scrape, if it succeeded:
// after a failure, like the re-exported series, there is none.
func (m *Manager) Latest(name string) (Snapshot, bool) {
	m.mu.Lock()
	t := m.targets[name]
	m.mu.Unlock()
	if t == nil {
		return Snapshot{}, false
	}
	if s := t.latest.Load(); s != nil {
		return *s, true
	}
	return Snapshot{}, false
}

// Queue returns a target's waiting queue as its engine reports it, for a
// capacity test's drain check (it satisfies capacity.QueueProbe). The
// target is looked up on every read, so it follows reloads.
func (m *Manager) Queue(name string) *Queue { return &Queue{m: m, target: name, now: time.Now} }

// Queue is a target's engine queue; see Manager.Queue.
type Queue struct {
	m      *Manager
	target string
	now    func() time.Time

	mu   sync.Mutex // held across a read: concurrent callers share it
	at   time.Time  // when the last read ended
	n    int
	err  error
	read bool
	// cache are the prefix-cache counters of the last read that had
	// them (PrefixCacheCounters).
	cache *cacheCounters
}

// PrefixCacheCounters returns the engine's prefix-cache counters as the
// last Waiting read found them (vLLM's prefix_cache_hits/queries,
// SGLang's cached_tokens/prompt_tokens); false when no read found them.
// A capacity level takes their increase over its window: 30,000 more
// hits of 40,000 more queries is a hit ratio of 75%, whatever the usage
// of each reply says.
func (q *Queue) PrefixCacheCounters() (PrefixCacheCounters, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cache == nil {
		return PrefixCacheCounters{}, false
	}
	return *q.cache.public(), true
}

// Waiting returns the requests waiting in the engine's queue, rounded,
// from a fresh scrape of its metrics (within the target's timeout; a
// drain check must not act on a snapshot up to an interval old), or from
// the last one when it ended less than QueueReadEvery ago. The scrape is
// not recorded: neither the re-exported series nor the hit ratio's
// counters change. It fails with ErrNotConfigured when the target has no
// server_metrics section, ErrNoQueueMetric when the engine serves no
// waiting-queue metric, or the scrape's error.
func (q *Queue) Waiting(ctx context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.read && q.now().Sub(q.at) < QueueReadEvery {
		return q.n, q.err
	}
	q.n, q.err = q.fetch(ctx)
	if ctx.Err() != nil { // the caller's cancel is not the engine's answer
		q.read = false
		return q.n, q.err
	}
	q.at, q.read = q.now(), true
	return q.n, q.err
}

func (q *Queue) fetch(ctx context.Context) (int, error) {
	q.m.mu.Lock()
	t := q.m.targets[q.target]
	q.m.mu.Unlock()
	if t == nil {
		return 0, fmt.Errorf("target %q: %w", q.target, ErrNotConfigured)
	}
	r, err := t.scraper.read(ctx)
	if err != nil {
		return 0, fmt.Errorf("target %q: reading the engine's metrics: %w", q.target, err)
	}
	if r.cache != nil {
		q.cache = r.cache
	}
	if r.waiting == nil {
		engine := r.engine
		if engine == "" {
			engine = "unknown engine"
		}
		return 0, fmt.Errorf("target %q (%s): %w", q.target, engine, ErrNoQueueMetric)
	}
	return int(math.Round(*r.waiting)), nil
}

// start starts t's loop under Run's context; m.mu is held.
func (m *Manager) start(t *target) {
	ctx, cancel := context.WithCancel(m.ctx)
	t.cancel, t.done = cancel, make(chan struct{})
	m.metrics.start(t.name)
	go m.loop(ctx, t)
}

// stop ends t's loop and waits for it; m.mu is held (the loop never takes
// it). An in-flight scrape is cancelled, so the wait is short.
func (m *Manager) stop(t *target) {
	if t.cancel != nil {
		t.cancel()
		<-t.done
		t.cancel = nil
	}
	t.scraper.Close()
}

// loop scrapes at once, then on every tick of the interval. A tick that
// fell due while the previous scrape still ran is skipped and counted:
// scrapes of a target never overlap, and a slow engine is not read twice
// in a row.
func (m *Manager) loop(ctx context.Context, t *target) {
	defer close(t.done)
	ticks, stopTicker := m.newTicker(t.name, t.interval)
	defer stopTicker()
	m.scrape(ctx, t)
	for {
		select {
		case <-ctx.Done():
			return
		case tick := <-ticks:
			if tick.Before(t.lastEnd) {
				m.metrics.skipped.WithLabelValues(t.name).Inc()
				continue
			}
			m.scrape(ctx, t)
		}
	}
}

// scrape scrapes t once and records the result.
func (m *Manager) scrape(ctx context.Context, t *target) {
	start := time.Now()
	snap, err := t.scraper.Scrape(ctx)
	t.lastEnd = time.Now()
	if ctx.Err() != nil {
		return // stopping: nothing is recorded, the series are deleted or kept by the caller
	}
	seconds := t.lastEnd.Sub(start).Seconds()
	if err != nil {
		reason := Reason(err)
		m.metrics.fail(t.name, reason, seconds)
		t.latest.Store(nil)
		t.down = true
		if ok, suppressed := t.log.Allow(t.lastEnd); ok {
			m.logger.Warn("Scraping the engine's metrics failed", "target", t.name, "url", config.RedactURL(t.cfg.URL),
				"reason", reason, "err", err, "suppressed", suppressed)
		}
	} else {
		m.metrics.observe(t.name, snap, seconds)
		t.latest.Store(&snap)
		if len(snap.Rejected) > 0 {
			if ok, suppressed := t.log.Allow(t.lastEnd); ok {
				m.logger.Warn("Rejected values of the engine's metrics", "target", t.name, "engine", snap.Engine,
					"metrics", snap.Rejected, "suppressed", suppressed)
			}
		}
		if t.down {
			t.down = false
			if ok, suppressed := t.log.Allow(t.lastEnd); ok {
				m.logger.Info("Scraping the engine's metrics works again", "target", t.name, "engine", snap.Engine, "suppressed", suppressed)
			}
		}
	}
	if m.onScrape != nil {
		m.onScrape(t.name, snap, err)
	}
}
