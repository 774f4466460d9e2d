package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/sloprober/sloprober/prober/config"
)

// ObserverFactory creates the observers of loads. The exporter implements it
// with Prometheus metrics; a test runner can implement it with a recorder.
type ObserverFactory interface {
	// Observe creates the series of a load, at zero, and returns their observer.
	Observe(LoadInfo) Observer
	// Forget deletes the series of a load once it has stopped.
	Forget(LoadInfo)
}

// LoadInfo describes a load: its labels and what it is configured to do.
type LoadInfo struct {
	config.Key
	// Rate is the intended arrival rate, req/s; 0 while the load is paused.
	Rate      float64
	Arrival   string
	SLOs      []config.SLO
	Objective float64
}

// LoadStatus is what the manager tells about a running load.
type LoadStatus struct {
	LoadInfo
	Enabled  bool
	InFlight int
}

// Manager runs the loads of a configuration and applies a new configuration
// as a diff: unchanged loads keep their schedule (and connections), changed
// ones restart, removed ones stop and their series are deleted.
type Manager struct {
	logger    *slog.Logger
	factory   ObserverFactory
	userAgent string
	global    *Limiter

	mu      sync.Mutex
	loads   map[config.Key]*load
	clients map[string]*targetClient
	stopped bool
}

// errStopped is returned by Apply once Stop has been called.
var errStopped = errors.New("the prober is stopping")

type targetClient struct {
	cfg    config.TargetConfig
	client *Client
}

// load is one running (or paused) load.
type load struct {
	info     LoadInfo
	cfg      config.LoadConfig
	target   config.TargetConfig
	scenario config.ScenarioConfig
	seed     uint64
	obs      Observer
	failures failureLog

	sched *Scheduler // nil while paused
	stop  context.CancelFunc
	done  chan struct{}
}

// NewManager returns a manager with no loads. userAgent is sent on every
// probe request.
func NewManager(logger *slog.Logger, factory ObserverFactory, userAgent string) *Manager {
	return &Manager{
		logger:    logger,
		factory:   factory,
		userAgent: userAgent,
		global:    NewLimiter(config.DefaultGlobalConfig.MaxInFlight),
		loads:     map[config.Key]*load{},
		clients:   map[string]*targetClient{},
	}
}

// Apply makes the running loads those of cfg. On error nothing has changed.
// prepare, if not nil, is called once the configuration is known to be
// usable and before any load changes: the exporter sets up its metrics there.
func (m *Manager) Apply(cfg *config.Config, prepare func()) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return errStopped
	}

	clients := map[string]*targetClient{}
	for _, t := range cfg.Targets {
		if old := m.clients[t.Name]; old != nil && reflect.DeepEqual(old.cfg, *t) {
			clients[t.Name] = old
			continue
		}
		c, err := NewClient(t, m.userAgent)
		if err != nil {
			for name, tc := range clients {
				if m.clients[name] != tc {
					tc.client.Close()
				}
			}
			return err
		}
		clients[t.Name] = &targetClient{cfg: *t, client: c}
	}
	if prepare != nil {
		prepare()
	}
	m.global.SetMax(cfg.Global.MaxInFlight)

	desired := map[config.Key]*load{}
	for _, lc := range cfg.Canary {
		t, s := cfg.Target(lc.Target), cfg.Scenario(lc.Scenario)
		l := &load{cfg: *lc, target: *t, scenario: *s}
		l.info = LoadInfo{Key: lc.Key(), Arrival: lc.Arrival, SLOs: s.SLO.List(), Objective: s.Objective}
		if lc.IsEnabled() {
			l.info.Rate = lc.Rate
		}
		l.seed = Seed(l.info.Target, l.info.Scenario, l.info.Test)
		desired[l.info.Key] = l
	}

	for key, old := range m.loads {
		if l, ok := desired[key]; ok && old.sameAs(l) {
			desired[key] = old
			continue
		}
		old.halt(0)
		m.factory.Forget(old.info)
		m.logger.Info("Load stopped", "load", key.String())
	}
	for key, l := range desired {
		if l.obs != nil {
			continue // unchanged
		}
		l.obs = m.factory.Observe(l.info)
		m.start(l, clients[l.target.Name].client)
		m.logger.Info("Load started", "load", key.String(), "rate", l.info.Rate, "arrival", l.info.Arrival, "enabled", l.cfg.IsEnabled())
	}
	for name, tc := range m.clients {
		if clients[name] != tc {
			tc.client.Close()
		}
	}
	m.clients, m.loads = clients, desired
	return nil
}

func (l *load) sameAs(o *load) bool {
	return reflect.DeepEqual(l.cfg, o.cfg) && reflect.DeepEqual(l.target, o.target) && reflect.DeepEqual(l.scenario, o.scenario)
}

// start schedules a load, unless it is paused.
func (m *Manager) start(l *load, c *Client) {
	if !l.cfg.IsEnabled() {
		return
	}
	now := time.Now()
	var arrivals Arrivals
	switch l.cfg.Arrival {
	case "constant":
		arrivals = NewConstantArrivals(l.cfg.Rate, l.seed, now)
	default:
		arrivals = NewPoissonArrivals(l.cfg.Rate, l.seed, now)
	}
	late := min(time.Second, time.Duration(l.target.Timeout))
	send := func(ctx context.Context, a Arrival, done func()) {
		go m.request(ctx, l, c, a, done)
	}
	l.sched = NewScheduler(arrivals, l.target.MaxInFlight, m.global, late, send, l.obs)
	ctx, cancel := context.WithCancel(context.Background())
	l.stop, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		l.sched.Run(ctx)
	}()
}

// request sends the request of one arrival and reports it.
func (m *Manager) request(ctx context.Context, l *load, c *Client, a Arrival, done func()) {
	defer done()
	r := &Result{Target: l.info.Target, Scenario: l.info.Scenario, Test: l.info.Test, Scheduled: a.Due}
	c.Do(ctx, NewRequest(&l.scenario, l.seed, a.Seq()), r)
	l.obs.Finished(r)
	if r.Outcome != OutcomeOK && r.Outcome != OutcomeCancelled && r.Outcome != OutcomeShutdown {
		l.failures.log(m.logger, l.info.Key, r)
	}
}

// failureLogInterval is the least time between two logged failures of a
// load: a target failing every request at 50 req/s logs one line every 10s,
// not 500.
const failureLogInterval = 10 * time.Second

// failureLog logs the failed requests of a load, at most one a
// failureLogInterval, with the number left out since the last one.
type failureLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (f *failureLog) log(logger *slog.Logger, k config.Key, r *Result) {
	f.mu.Lock()
	now := time.Now()
	if !f.last.IsZero() && now.Sub(f.last) < failureLogInterval {
		f.skipped++
		f.mu.Unlock()
		return
	}
	skipped := f.skipped
	f.last, f.skipped = now, 0
	f.mu.Unlock()
	logger.Warn("Probe request failed", "load", k.String(), "outcome", r.Outcome, "err", r.Error(),
		"request_id", r.RequestID, "failures_not_logged", skipped)
}

// NewRequest builds the request of a scenario for an arrival; the prompt is
// the same for the same seed and sequence number.
func NewRequest(s *config.ScenarioConfig, seed, seq uint64) *Request {
	return &Request{
		ID:           fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()),
		Prompt:       SynthesizePrompt(seed, seq, s.InputTokens),
		InputTokens:  s.InputTokens,
		OutputTokens: s.OutputTokens,
		IgnoreEOS:    s.IgnoreEOS,
	}
}

// halt stops scheduling and drains the load with the grace period.
func (l *load) halt(grace time.Duration) {
	if l.sched == nil {
		return
	}
	l.stop()
	<-l.done
	l.sched.Drain(grace)
}

// Stop stops every load: scheduling ends at once, requests in flight get the
// grace period to end, those left are cancelled (outcome shutdown). It
// returns when every request has been reported.
func (m *Manager) Stop(grace time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	var wg sync.WaitGroup
	for _, l := range m.loads {
		wg.Go(func() { l.halt(grace) })
	}
	wg.Wait()
	for _, tc := range m.clients {
		tc.client.Close()
	}
	m.loads, m.clients = map[config.Key]*load{}, map[string]*targetClient{}
}

// Loads returns the status of every load, sorted by key.
func (m *Manager) Loads() []LoadStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]LoadStatus, 0, len(m.loads))
	for _, l := range m.loads {
		st := LoadStatus{LoadInfo: l.info, Enabled: l.cfg.IsEnabled()}
		if l.sched != nil {
			st.InFlight = l.sched.InFlight()
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}
