package prober

import (
	"context"
	"log/slog"
	"reflect"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/ratelog"
)

// LoadStatus is what the manager tells about a running load.
type LoadStatus struct {
	LoadInfo
	// Owner is who runs the load: canary, or a test run.
	Owner    string
	Enabled  bool
	InFlight int
}

// runner runs the requests of a load: a Scheduler (open loop) or a
// ClosedLoop.
type runner interface {
	Run(ctx context.Context)
	Drain(grace time.Duration)
	InFlight() int
	Later(Arrival)
}

// load is one running (or paused) load: one scenario, or a mix.
type load struct {
	spec     config.LoadSpec
	owner    string
	name     string
	logger   *slog.Logger
	factory  ObserverFactory
	client   *targetClient  // a load whose target client is replaced restarts on the new one
	global   *Limiter       // the open-loop loads' share of global.max_in_flight
	tracing  *tracingState  // the manager's
	scen     []*scenarioRun // by Arrival.Scenario
	infos    []LoadInfo
	obs      []Observer
	failures *ratelog.Limiter // failed requests logged, at most one a failureLogInterval

	run  runner // nil while paused
	stop context.CancelFunc
	done chan struct{}
}

// newLoad prepares the load of a spec on a target's client; start runs it.
func (m *Manager) newLoad(owner string, spec config.LoadSpec, c *targetClient) *load {
	l := &load{spec: spec, owner: owner, name: spec.Name(), client: c, global: m.global, tracing: &m.tracing, logger: m.logger, factory: m.factory,
		failures: ratelog.New(failureLogInterval)}
	l.setInfos()
	for i, s := range spec.Scenarios {
		l.scen = append(l.scen, newScenarioRun(s.ScenarioConfig, l.infos[i].Key))
	}
	l.setOpts()
	return l
}

// setOpts gives the load's scenarios its hot tenant and cold cache.
func (l *load) setOpts() {
	for _, s := range l.scen {
		s.setOpts(l.spec.HotTenant, l.spec.ColdCache)
	}
}

// setInfos describes the load's label sets from its spec.
func (l *load) setInfos() {
	rates := l.spec.ScenarioRates()
	clients := l.spec.ScenarioClients()
	l.infos = make([]LoadInfo, 0, len(l.spec.Scenarios))
	for i, s := range l.spec.Scenarios {
		l.infos = append(l.infos, LoadInfo{Key: s.Key, Rate: rates[i], Clients: clients[i], Arrival: l.spec.Arrival,
			SLOs: s.SLOs(), Objective: s.Objective})
	}
}

// sameLoad reports whether two specs describe the same load, maybe at
// another rate or replay speed (open loop), with other clients, think time
// or maximum rate (closed loop), another hot tenant or cold cache (they
// change what later arrivals send, not the schedule), or paused or
// resumed: a change the running load takes in place.
func sameLoad(a, b *config.LoadSpec) bool {
	x, y := *a, *b
	if x.Replay != nil && y.Replay != nil {
		// A replay's speed is its rate: it changes in place, the trace
		// starting over at the new speed.
		rx, ry := *x.Replay, *y.Replay
		rx.Speed, ry.Speed = 0, 0
		x.Replay, y.Replay = &rx, &ry
	}
	x.Rate, y.Rate = 0, 0
	x.Clients, y.Clients = 0, 0
	x.ThinkTime, y.ThinkTime = 0, 0
	x.MaxRate, y.MaxRate = 0, 0
	x.Paused, y.Paused = false, false
	x.HotTenant, y.HotTenant = nil, nil
	x.ColdCache, y.ColdCache = false, false
	return reflect.DeepEqual(x, y)
}

// start runs the load, unless it is paused.
func (l *load) start() {
	if l.spec.Paused {
		return
	}
	seed := Seed(l.name)
	send := func(ctx context.Context, a Arrival, started func(time.Time), done func()) {
		go l.request(ctx, a, started, done)
	}
	if l.spec.Closed() {
		turns := make([]int, len(l.scen))
		for i, s := range l.scen {
			turns[i] = s.turns()
		}
		loop := NewClosedLoop(l.spec.Clients, l.spec.ThinkTime, l.spec.MaxRate, seed, conversationStarts(&l.spec, turns), send, l.obs...)
		if r := l.spec.Replay; r != nil && r.Trace != nil {
			loop.Replay(r.Trace.Records)
		}
		l.run = loop
	} else {
		// A request handled more than a second after its due time is
		// dropped as late, or after the target's timeout if shorter.
		late := min(time.Second, time.Duration(l.spec.Target.Timeout))
		l.run = NewScheduler(l.arrivals(seed, time.Now()), l.spec.Target.MaxInFlight, l.global, late, send, l.obs...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		l.run.Run(ctx)
	}()
}

func (l *load) arrivals(seed uint64, now time.Time) Arrivals {
	turns := make([]int, len(l.scen))
	for i, s := range l.scen {
		turns[i] = s.turns()
	}
	return arrivalsFor(&l.spec, turns, seed, now)
}

// change takes a spec of the same load (sameLoad) with another rate or
// clients, or paused or resumed: the schedule or the clients change, the
// series go on, and requests in flight end as they would have. A paused
// open-loop load has no arrivals; a paused closed loop no clients.
func (l *load) change(spec config.LoadSpec) {
	l.spec = spec
	l.setInfos()
	l.setOpts()
	switch run := l.run.(type) {
	case nil: // started paused
		l.start()
	case *Scheduler:
		if spec.Paused {
			run.SetArrivals(noArrivals{})
		} else {
			run.SetArrivals(l.arrivals(Seed(l.name), time.Now()))
		}
	case *ClosedLoop:
		clients := spec.Clients
		if spec.Paused {
			clients = 0
		}
		run.Set(clients, spec.ThinkTime, spec.MaxRate)
	}
}

// noArrivals are the arrivals of a paused open-loop load: none.
type noArrivals struct{}

func (noArrivals) Next() Arrival { return Arrival{} }

// halt stops scheduling and drains the load with the grace period.
func (l *load) halt(grace time.Duration) {
	if l.run == nil {
		return
	}
	l.stop()
	<-l.done
	l.run.Drain(grace)
}

// request sends the request of one arrival, reports it, and schedules the
// next turn of its conversation.
func (l *load) request(ctx context.Context, a Arrival, started func(time.Time), done func()) {
	defer done()
	c := l.client
	s := l.scen[a.Scenario]
	k := s.key        // not l.infos, which a rate change rewrites under the manager's lock
	req := &Request{} // stopping: no prompt is built (up to 8 MiB of work); Do reports the shutdown
	if ctx.Err() == nil {
		req = s.request(a, c.cal)
	}
	req.OnSend = started
	if h := l.tracing.Load(); h != nil {
		req.SpanContext = h.spanContext(req.ID)
	}
	if req.CancelAfter > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		t := time.AfterFunc(req.CancelAfter, func() { cancel(ErrCancelled) })
		defer func() {
			t.Stop()
			cancel(nil)
		}()
	}
	r := &Result{Target: k.Target, Scenario: k.Scenario, Test: k.Test, Scheduled: a.Due}
	if req.CutToContext && c.warnedCut.CompareAndSwap(false, true) {
		l.logger.Warn("The workload asks for more tokens than the target's context holds: prompts are cut to fit, and their input is counted in sloprober_length_mismatches_total",
			"load", k.String(), "input_tokens", req.InputTokens, "output_tokens", req.OutputTokens, "context_tokens", c.cal.Context())
	}
	client := c.client.Load()
	client.Do(ctx, req, r)
	if r.NotSent {
		started(time.Time{}) // counted by its outcome only
	}
	meas := Measure(r, s.slos)
	meas.Split = SplitPhases(r, client.timing.sources)
	l.obs[a.Scenario].Finished(r, &meas)
	if r.Usage != nil && r.Usage.PromptTokens > 0 && r.Outcome == OutcomeOK {
		switch {
		case req.calibrate:
			c.calibrate(l.logger, l.factory, req, r.Usage.PromptTokens)
		case req.turn != nil && req.turn.N > 1:
			c.cal.ObserveTurn(req.Words, req.TurnReply, r.Usage.PromptTokens-req.InputBase)
		case req.Check != nil:
			s.observeCheck(req, r.Usage.PromptTokens, c.cal)
		}
	}
	if next, ok := s.next(req, r, c.cal, time.Now(), a.Scenario); ok {
		l.run.Later(next)
	}
	if r.Outcome != OutcomeOK && r.Outcome != OutcomeCancelled && r.Outcome != OutcomeShutdown {
		l.logFailure(k, r)
	}
}

// NewRequest builds the request of a scenario for an arrival due now, as a
// load would: for `sloprober probe`.
func NewRequest(s *config.ScenarioConfig, k config.Key, cal *Calibrator) *Request {
	now := time.Now()
	return newScenarioRun(*s, k).request(Arrival{Due: now, Seq: uint64(now.UnixNano())}, cal)
}

// logFailure logs a failed request of the load, at most one a
// failureLogInterval, with the number left out since the last one.
func (l *load) logFailure(k config.Key, r *Result) {
	if ok, skipped := l.failures.Allow(time.Now()); ok {
		l.logger.Warn("Probe request failed", "load", k.String(), "outcome", r.Outcome, "err", r.Error(),
			"request_id", r.RequestID, "failures_not_logged", skipped)
	}
}

// failureLogInterval is the least time between two logged failures of a
// load: a target failing every request at 50 req/s logs one line every 10s,
// not 500.
const failureLogInterval = 10 * time.Second
