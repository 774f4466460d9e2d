package prober

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"sort"
	"strings"
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
	loads   map[string]*load
	clients map[string]*targetClient
	stopped bool
}

// errStopped is returned by Apply once Stop has been called.
var errStopped = errors.New("the prober is stopping")

// targetClient is the connection pool and the prompt calibration of a
// target; both outlive reloads that leave the target unchanged.
type targetClient struct {
	cfg     config.TargetConfig
	streams int
	client  *Client
	cal     *Calibrator
	cancel  context.CancelFunc
	done    chan struct{}
}

// newTargetClient builds a target's client and starts calibrating its
// prompts from /tokenize in the background.
func newTargetClient(logger *slog.Logger, t *config.TargetConfig, userAgent string, maxStreams int) (*targetClient, error) {
	c, err := NewClient(t, userAgent, maxStreams)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	tc := &targetClient{cfg: *t, streams: maxStreams, client: c, cal: NewCalibrator(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tc.done)
		if err := c.Tokenize(ctx, tc.cal); err != nil {
			logger.Debug("No token counts from /tokenize: calibrating prompt lengths from usage only", "target", t.Name, "err", err)
			return
		}
		overhead, perWord := tc.cal.Model()
		logger.Debug("Prompt lengths calibrated from /tokenize", "target", t.Name, "overhead_tokens", overhead, "tokens_per_word", perWord)
	}()
	return tc, nil
}

func (tc *targetClient) close() {
	tc.cancel()
	<-tc.done
	tc.client.Close()
}

// load is one running (or paused) load: one scenario, or a mix.
type load struct {
	cfg      config.LoadConfig
	target   config.TargetConfig
	scen     []*scenarioRun // by Arrival.Scenario
	infos    []LoadInfo
	obs      []Observer
	rate     float64 // intended request rate of the whole load
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
		loads:     map[string]*load{},
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
		// Enough pooled connections for every request in flight the
		// target's loads may have.
		streams := 0
		for _, l := range cfg.Canary {
			if l.Target == t.Name {
				streams += t.MaxInFlight
			}
		}
		streams = min(streams, cfg.Global.MaxInFlight)
		if old := m.clients[t.Name]; old != nil && reflect.DeepEqual(old.cfg, *t) && old.streams == streams {
			clients[t.Name] = old
			continue
		}
		tc, err := newTargetClient(m.logger, t, m.userAgent, streams)
		if err != nil {
			for name, tc := range clients {
				if m.clients[name] != tc {
					tc.close()
				}
			}
			return err
		}
		clients[t.Name] = tc
	}
	if prepare != nil {
		prepare()
	}
	m.global.SetMax(cfg.Global.MaxInFlight)

	desired := map[string]*load{}
	for _, lc := range cfg.Canary {
		l := &load{cfg: *lc, target: *cfg.Target(lc.Target), rate: cfg.LoadRate(lc)}
		names, _ := lc.Scenarios()
		rates := cfg.ScenarioRates(lc)
		for i, k := range lc.Keys() {
			s := cfg.Scenario(names[i])
			l.scen = append(l.scen, newScenarioRun(*s, k))
			info := LoadInfo{Key: k, Arrival: lc.Process(), SLOs: s.SLO.List(), Objective: s.Objective}
			if lc.Replay != nil {
				info.Arrival = "replay"
			}
			if lc.IsEnabled() {
				info.Rate = rates[i]
			}
			l.infos = append(l.infos, info)
		}
		desired[l.name()] = l
	}

	for name, old := range m.loads {
		if l, ok := desired[name]; ok && old.sameAs(l) {
			desired[name] = old
			continue
		}
		old.halt(0)
		for _, info := range old.infos {
			m.factory.Forget(info)
		}
		m.logger.Info("Load stopped", "load", name)
	}
	for name, l := range desired {
		if l.obs != nil {
			continue // unchanged
		}
		for _, info := range l.infos {
			l.obs = append(l.obs, m.factory.Observe(info))
		}
		m.start(l, clients[l.target.Name])
		m.logger.Info("Load started", "load", name, "rate", l.rate, "arrival", l.infos[0].Arrival, "enabled", l.cfg.IsEnabled())
	}
	for name, tc := range m.clients {
		if clients[name] != tc {
			tc.close()
		}
	}
	m.clients, m.loads = clients, desired
	return nil
}

// name identifies a load in logs and in the manager: its label sets.
func (l *load) name() string {
	keys := make([]string, len(l.infos))
	for i, info := range l.infos {
		keys[i] = info.Key.String()
	}
	return strings.Join(keys, "+")
}

func (l *load) sameAs(o *load) bool {
	if !reflect.DeepEqual(l.cfg, o.cfg) || !reflect.DeepEqual(l.target, o.target) || len(l.scen) != len(o.scen) {
		return false
	}
	for i := range l.scen {
		if !reflect.DeepEqual(l.scen[i].cfg, o.scen[i].cfg) {
			return false
		}
	}
	return true
}

// start schedules a load, unless it is paused.
func (m *Manager) start(l *load, c *targetClient) {
	if !l.cfg.IsEnabled() {
		return
	}
	now := time.Now()
	seed := Seed(l.name())
	var arrivals Arrivals
	if r := l.cfg.Replay; r != nil {
		arrivals = NewReplayArrivals(r.Trace, r.Speed, r.Loops(), now)
	} else {
		// A conversation of n turns is n requests: new conversations start
		// at a rate such that requests, later turns included, come at the
		// configured rate, split over a mix by weight.
		_, weights := l.cfg.Scenarios()
		starts := make([]float64, len(weights))
		sumW, sumStarts := 0.0, 0.0
		for i, w := range weights {
			starts[i] = w / float64(l.scen[i].turns())
			sumW += w
			sumStarts += starts[i]
		}
		rate := l.cfg.Rate * sumStarts / sumW
		switch l.cfg.Process() {
		case "constant":
			arrivals = NewConstantArrivals(rate, seed, now)
		case "gamma":
			arrivals = NewGammaArrivals(rate, l.cfg.Shape(), seed, now)
		default:
			arrivals = NewPoissonArrivals(rate, seed, now)
		}
		arrivals = NewMixArrivals(arrivals, seed, starts)
	}
	late := min(time.Second, time.Duration(l.target.Timeout))
	send := func(ctx context.Context, a Arrival, done func()) {
		go m.request(ctx, l, c, a, done)
	}
	l.sched = NewScheduler(arrivals, l.target.MaxInFlight, m.global, late, send, l.obs...)
	ctx, cancel := context.WithCancel(context.Background())
	l.stop, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		l.sched.Run(ctx)
	}()
}

// request sends the request of one arrival, reports it, and schedules the
// next turn of its conversation.
func (m *Manager) request(ctx context.Context, l *load, c *targetClient, a Arrival, done func()) {
	defer done()
	s := l.scen[a.Scenario]
	info := l.infos[a.Scenario]
	req := s.request(a, c.cal)
	if req.CancelAfter > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		t := time.AfterFunc(req.CancelAfter, func() { cancel(ErrCancelled) })
		defer func() {
			t.Stop()
			cancel(nil)
		}()
	}
	r := &Result{Target: info.Target, Scenario: info.Scenario, Test: info.Test, Scheduled: a.Due}
	c.client.Do(ctx, req, r)
	l.obs[a.Scenario].Finished(r)
	if req.calibrate && r.Usage != nil && r.Usage.PromptTokens > 0 {
		c.cal.Observe(req.Words, r.Usage.PromptTokens)
		if c.cal.record(InputWithinTolerance(req.InputTokens, r.Usage.PromptTokens)) {
			overhead, perWord := c.cal.Model()
			m.logger.Warn("The target's prompt token counts stay off the requested lengths after calibration; see sloprober_length_mismatches_total",
				"target", c.cfg.Name, "requested", req.InputTokens, "counted", r.Usage.PromptTokens,
				"overhead_tokens", overhead, "tokens_per_word", perWord)
		}
	}
	if next, ok := s.next(req, r, time.Now(), a.Scenario); ok {
		l.sched.Later(next)
	}
	if r.Outcome != OutcomeOK && r.Outcome != OutcomeCancelled && r.Outcome != OutcomeShutdown {
		l.failures.log(m.logger, info.Key, r)
	}
}

// NewRequest builds the request of a scenario for an arrival due now, as a
// load would: for `sloprober probe`.
func NewRequest(s *config.ScenarioConfig, k config.Key, cal *Calibrator) *Request {
	now := time.Now()
	return newScenarioRun(*s, k).request(Arrival{Due: now, Seq: uint64(now.UnixNano())}, cal)
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
		tc.close()
	}
	m.loads, m.clients = map[string]*load{}, map[string]*targetClient{}
}

// Loads returns the status of every load, sorted by key.
func (m *Manager) Loads() []LoadStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]LoadStatus, 0, len(m.loads))
	for _, l := range m.loads {
		for _, info := range l.infos {
			st := LoadStatus{LoadInfo: info, Enabled: l.cfg.IsEnabled()}
			if l.sched != nil {
				st.InFlight = l.sched.InFlight() // shared by the scenarios of a mix
			}
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}
