package prober

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sloprober/sloprober/config"
)

// ObserverFactory creates the observers of loads. The exporter implements it
// with Prometheus metrics; a test runner can implement it with a recorder.
type ObserverFactory interface {
	// Observe creates the series of a load, at zero, and returns their observer.
	Observe(LoadInfo) Observer
	// Forget deletes the series of a load once it has stopped.
	Forget(LoadInfo)
}

// CalibrationObserver is implemented by an ObserverFactory that exports the
// state of each target's prompt calibration (see Calibrator). The manager
// calls it from request goroutines, concurrently.
type CalibrationObserver interface {
	// CalibrationFrozen reports whether a target's calibration has stopped
	// adapting because the server's prompt token counts cannot be followed
	// (sloprober_calibration_frozen).
	CalibrationFrozen(target string, frozen bool)
	// CalibrationRejected counts one observation of a target that
	// calibration refused (sloprober_calibration_rejected_total).
	CalibrationRejected(target string)
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
	cfg config.TargetConfig
	// pools is the client's number of connection pools (poolsFor); a
	// reload that needs another number swaps the client, keeping the
	// calibration and the loads.
	pools  int
	client atomic.Pointer[Client]
	cal    *Calibrator
	// reportMu orders the calibration reports of a target; applied is
	// closed once the Apply that made the client has registered the
	// target's series, before which reports would be lost.
	reportMu sync.Mutex
	applied  chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
	// contextKnown is closed once the target's context length is known
	// (or known to be unknown).
	contextKnown chan struct{}

	warnedCut    atomic.Bool // a prompt was cut to the context: logged once
	warnedFrozen atomic.Bool // calibration froze: logged once
	warnedThawed atomic.Bool // calibration adapted again: logged once
}

// poolsFor is the number of connection pools of a client for streams
// concurrent requests (see idlePerPool).
func poolsFor(streams int) int { return max(1, (streams+idlePerPool-1)/idlePerPool) }

// newTargetClient builds a target's client and starts calibrating its
// prompts from /tokenize in the background.
func newTargetClient(logger *slog.Logger, factory ObserverFactory, t *config.TargetConfig, userAgent string, maxStreams int) (*targetClient, error) {
	c, err := NewClient(t, userAgent, maxStreams)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	tc := &targetClient{cfg: *t, pools: poolsFor(maxStreams), cal: NewCalibrator(), cancel: cancel,
		applied: make(chan struct{}), contextKnown: make(chan struct{}), done: make(chan struct{})}
	tc.client.Store(c)
	go func() {
		defer close(tc.done)
		info := c.LearnContext(ctx, tc.cal)
		close(tc.contextKnown)
		info = c.tokenize(ctx, tc.cal, info)
		select {
		case <-tc.applied:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return
		}
		if cobs, ok := factory.(CalibrationObserver); ok {
			for range info.Rejected {
				cobs.CalibrationRejected(t.Name)
			}
		}
		overhead, perWord := tc.cal.Model()
		args := []any{"target", t.Name, "context_tokens", info.Context, "context_from", info.ContextSource,
			"template_overhead_from", info.Template, "overhead_tokens", overhead, "tokens_per_word", perWord}
		if info.Tokenize == "" {
			logger.Info("Prompt lengths calibrated from usage only: no token counts from /tokenize", append(args, "err", info.Err)...)
			return
		}
		logger.Info("Prompt lengths calibrated from /tokenize", append(args, "tokenize_form", info.Tokenize)...)
	}()
	return tc, nil
}

func (tc *targetClient) close() {
	tc.cancel()
	<-tc.done
	tc.client.Load().Close()
}

// load is one running (or paused) load: one scenario, or a mix.
type load struct {
	cfg      config.LoadConfig
	target   config.TargetConfig
	client   *targetClient  // a load whose target client is replaced restarts on the new one
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
	var fresh []*targetClient // made by this Apply
	fail := func(err error) error {
		for _, tc := range fresh {
			tc.close()
		}
		return err
	}
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
		if old := m.clients[t.Name]; old != nil && reflect.DeepEqual(old.cfg, *t) {
			if old.pools != poolsFor(streams) {
				// More or fewer pools: a new client, the same
				// calibration and loads. Requests in flight finish
				// on the old one.
				c, err := NewClient(t, m.userAgent, streams)
				if err != nil {
					return fail(err)
				}
				old.client.Swap(c).Close()
				old.pools = poolsFor(streams)
			}
			clients[t.Name] = old
			continue
		}
		tc, err := newTargetClient(m.logger, m.factory, t, m.userAgent, streams)
		if err != nil {
			return fail(err)
		}
		clients[t.Name] = tc
		fresh = append(fresh, tc)
	}
	// A new target's first prompts must know its context: wait for the
	// context lookups of the new clients, together, at most contextWait.
	wait := time.NewTimer(contextWait)
	for _, tc := range fresh {
		select {
		case <-tc.contextKnown:
		case <-wait.C:
			wait.Reset(0)
		}
	}
	wait.Stop()
	if prepare != nil {
		prepare()
	}
	if cobs, ok := m.factory.(CalibrationObserver); ok {
		for _, tc := range fresh {
			cobs.CalibrationFrozen(tc.cfg.Name, false) // a new calibrator starts unfrozen
		}
	}
	m.global.SetMax(cfg.Global.MaxInFlight)

	desired := map[string]*load{}
	for _, lc := range cfg.Canary {
		l := &load{cfg: *lc, target: *cfg.Target(lc.Target), rate: cfg.LoadRate(lc), client: clients[lc.Target]}
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
		m.start(l, l.client)
		m.logger.Info("Load started", "load", name, "rate", l.rate, "arrival", l.infos[0].Arrival, "enabled", l.cfg.IsEnabled())
	}
	for name, tc := range m.clients {
		if clients[name] != tc {
			tc.close()
		}
	}
	for _, tc := range fresh {
		close(tc.applied)
	}
	m.clients, m.loads = clients, desired
	return nil
}

// contextWait bounds how long Apply waits for the context lengths of new
// targets (/v1/models, /props) before it starts their loads: a target
// that answers neither within it is probed with its context unknown until
// the lookup ends (each lookup is bounded by infoTimeout).
const contextWait = 2 * time.Second

// name identifies a load in logs and in the manager: its label sets.
func (l *load) name() string {
	keys := make([]string, len(l.infos))
	for i, info := range l.infos {
		keys[i] = info.Key.String()
	}
	return strings.Join(keys, "+")
}

func (l *load) sameAs(o *load) bool {
	if l.client != o.client || !reflect.DeepEqual(l.cfg, o.cfg) || !reflect.DeepEqual(l.target, o.target) || len(l.scen) != len(o.scen) {
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
	send := func(ctx context.Context, a Arrival, started func(time.Time), done func()) {
		go m.request(ctx, l, c, a, started, done)
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
func (m *Manager) request(ctx context.Context, l *load, c *targetClient, a Arrival, started func(time.Time), done func()) {
	defer done()
	s := l.scen[a.Scenario]
	info := l.infos[a.Scenario]
	req := &Request{} // stopping: no prompt is built (up to 8 MiB of work); Do reports the shutdown
	if ctx.Err() == nil {
		req = s.request(a, c.cal)
	}
	req.OnSend = started
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
	if req.CutToContext && c.warnedCut.CompareAndSwap(false, true) {
		m.logger.Warn("The workload asks for more tokens than the target's context holds: prompts are cut to fit, and their input is counted in sloprober_length_mismatches_total",
			"load", info.Key.String(), "input_tokens", req.InputTokens, "output_tokens", req.OutputTokens, "context_tokens", c.cal.Context())
	}
	c.client.Load().Do(ctx, req, r)
	meas := Measure(r, info.SLOs)
	l.obs[a.Scenario].Finished(r, &meas)
	if r.Usage != nil && r.Usage.PromptTokens > 0 && r.Outcome == OutcomeOK {
		switch {
		case req.calibrate:
			m.calibrate(c, req, r.Usage.PromptTokens)
		case req.turn != nil && req.turn.N > 1:
			c.cal.ObserveTurn(req.Words, req.TurnReply, r.Usage.PromptTokens-req.InputBase)
		}
	}
	if next, ok := s.next(req, r, c.cal, time.Now(), a.Scenario); ok {
		l.sched.Later(next)
	}
	if r.Outcome != OutcomeOK && r.Outcome != OutcomeCancelled && r.Outcome != OutcomeShutdown {
		l.failures.log(m.logger, info.Key, r)
	}
}

// calibrate feeds the server's count of a prompt to the target's
// calibration, reports rejected counts and freezing, and warns once when
// the counts stay off the requested lengths.
func (m *Manager) calibrate(c *targetClient, req *Request, counted int) {
	name := c.cfg.Name
	cobs, _ := m.factory.(CalibrationObserver)
	c.reportMu.Lock() // reports in the order of the observations
	o := c.cal.Observe(req.Words, counted)
	if !o.Accepted && cobs != nil {
		cobs.CalibrationRejected(name)
	}
	if o.Changed && cobs != nil {
		cobs.CalibrationFrozen(name, o.Frozen)
	}
	c.reportMu.Unlock()
	overhead, perWord := c.cal.Model()
	switch {
	case o.Changed && o.Frozen && c.warnedFrozen.CompareAndSwap(false, true):
		m.logger.Warn("The target's prompt token counts cannot be followed (a server that truncates prompts, or reports a constant count): prompt calibration is frozen at its last sane model; see sloprober_calibration_frozen",
			"target", name, "requested_tokens", req.InputTokens, "words_sent", req.Words, "counted_tokens", counted,
			"reason", o.Reason, "overhead_tokens", overhead, "tokens_per_word", perWord, "context_tokens", c.cal.Context())
	case o.Changed && !o.Frozen && c.warnedThawed.CompareAndSwap(false, true):
		m.logger.Info("The target's prompt token counts can be followed again (they agree with the kept model, or make a plausible model of their own): prompt calibration adapts again",
			"target", name, "overhead_tokens", overhead, "tokens_per_word", perWord)
	}
	if !req.calibrated || o.Frozen {
		return
	}
	if c.cal.record(InputWithinTolerance(req.InputTokens, counted)) {
		m.logger.Warn("The target's prompt token counts stay off the requested lengths after calibration; see sloprober_length_mismatches_total",
			"target", name, "requested", req.InputTokens, "counted", counted,
			"overhead_tokens", overhead, "tokens_per_word", perWord)
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
// returns when every request has been reported. Apply fails at once from
// the moment Stop is called; Loads answers throughout the drain.
func (m *Manager) Stop(grace time.Duration) {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	loads, clients := m.loads, m.clients
	m.mu.Unlock()

	var wg sync.WaitGroup
	for _, l := range loads {
		wg.Go(func() { l.halt(grace) })
	}
	wg.Wait()
	for _, tc := range clients {
		tc.close()
	}
	m.mu.Lock()
	m.loads, m.clients = map[string]*load{}, map[string]*targetClient{}
	m.mu.Unlock()
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
