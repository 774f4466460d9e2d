package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sloprober/sloprober/config"
)

// CanaryOwner owns the loads of the configuration's canary section.
const CanaryOwner = config.CanaryTest

// Limits are the global caps over the loads of every owner
// (global.max_rate, global.max_in_flight).
type Limits struct {
	// MaxRate caps the sum of the peak rates of all loads, req/s: the
	// rates of open-loop loads and the maximum rates of closed-loop ones.
	MaxRate float64
	// MaxInFlight caps requests in flight over all loads. Closed-loop
	// clients reserve their share; open-loop loads share the rest, and an
	// arrival beyond it is dropped (reason max_in_flight).
	MaxInFlight int
}

// Manager runs loads for their owners: the canary of the configuration,
// and test runs beside it. Each owner applies its own set of load specs as
// a diff against its running loads, so a reload of the canary leaves a
// running test alone and a test never touches the canary: unchanged loads
// keep their schedule (and connections), loads whose rate or clients alone
// changed take it in place, other changed ones restart, removed ones stop
// and their series are forgotten. Targets' clients (connection pools and
// prompt calibration) are shared by the loads of every owner.
type Manager struct {
	logger    *slog.Logger
	factory   ObserverFactory
	userAgent string
	// reader is how the clients read responses (SetReader).
	reader Reader
	// global caps the requests in flight of open-loop loads: the global
	// cap less the clients of closed-loop loads.
	global *Limiter
	// tracing is the head sampling of probes' trace context, nil while
	// tracing is off (SetTracing).
	tracing tracingState
	// shard is this process's part of the canary loads (SetShard).
	shard atomic.Pointer[config.Shard]

	mu     sync.Mutex
	limits Limits
	owners map[string]map[string]*load // owner, load name
	// clients are the shared client of each target; configured are the
	// targets of the applied configuration, whose clients stay while no
	// load uses them; open are all clients not yet closed, replaced ones
	// still in use by a load included.
	clients    map[string]*targetClient
	configured map[string]bool
	open       map[*targetClient]bool
	stopped    bool
	// held is open while a prepared configuration (ConfigChange) holds
	// the loads: closed at its commit or discard. stopping is closed by
	// Stop.
	held     chan struct{}
	stopping chan struct{}
}

// ErrOverCaps is wrapped by the error of an Apply, ApplyConfig or
// SetLimits refused because the loads would exceed the global caps: a
// step test ends its sweep there.
var ErrOverCaps = errors.New("over the global caps")

// errStopped is returned by Apply once Stop has been called.
var errStopped = errors.New("the prober is stopping")

// NewManager returns a manager with no loads and the default global caps.
// userAgent is sent on every probe request.
func NewManager(logger *slog.Logger, factory ObserverFactory, userAgent string) *Manager {
	return &Manager{
		logger:    logger,
		factory:   factory,
		userAgent: userAgent,
		global:    NewLimiter(config.DefaultGlobalConfig.MaxInFlight),
		limits:    Limits{MaxRate: config.DefaultGlobalConfig.MaxRate, MaxInFlight: config.DefaultGlobalConfig.MaxInFlight},
		owners:    map[string]map[string]*load{},
		clients:   map[string]*targetClient{},
		open:      map[*targetClient]bool{},
		stopping:  make(chan struct{}),
		reader:    DefaultReader,
	}
}

// ApplyConfig makes the canary loads those of cfg, its targets the
// configured ones and its global section the caps: PrepareConfig, then
// the change's Commit. On error nothing has changed.
func (m *Manager) ApplyConfig(cfg *config.Config) error {
	c, err := m.PrepareConfig(cfg)
	if err != nil {
		return err
	}
	c.Commit()
	return nil
}

// ConfigChange is a configuration's canary loads, targets and caps,
// checked and with their new clients built, not yet in force: Commit puts
// it in force, Discard drops it. One of the two must be called: until
// then, other owners' Apply waits (a test changing its level cannot slip
// between a configuration's check and its commit), and no other
// configuration can be prepared.
type ConfigChange struct {
	m    *Manager
	plan *applyPlan
	once sync.Once
}

// PrepareConfig checks cfg's canary loads against its caps and the other
// owners' loads, and builds the clients its targets need (it waits for
// new targets' context lookups, at most contextWait). It changes nothing
// in force: a reload prepares every part of the program this way, then
// commits them all, or discards them all if one part failed.
func (m *Manager) PrepareConfig(cfg *config.Config) (*ConfigChange, error) {
	specs := cfg.CanaryLoads()
	shard := m.Shard()
	for i := range specs {
		specs[i].Shard = shard
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.waitHeld(); err != nil {
		return nil, err
	}
	p, err := m.plan(CanaryOwner, specs, &configUpdate{
		limits:  Limits{MaxRate: cfg.Global.MaxRate, MaxInFlight: cfg.Global.MaxInFlight},
		targets: cfg.Targets,
	})
	if err != nil {
		return nil, err
	}
	if err := m.build(p); err != nil {
		return nil, err
	}
	m.held = make(chan struct{})
	return &ConfigChange{m: m, plan: p}, nil
}

// Commit puts the change in force: unchanged loads go on, changed ones
// take their new rate or restart, removed ones stop. After Stop it
// discards the change instead. Nothing in it can fail.
func (c *ConfigChange) Commit() {
	c.once.Do(func() {
		m := c.m
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.stopped {
			c.plan.discard()
		} else {
			m.commit(c.plan)
		}
		m.release()
	})
}

// Discard drops the change: the clients it built are closed.
func (c *ConfigChange) Discard() {
	c.once.Do(func() {
		m := c.m
		m.mu.Lock()
		defer m.mu.Unlock()
		c.plan.discard()
		m.release()
	})
}

// waitHeld waits, m.mu held, until no prepared configuration holds the
// loads; it fails once the manager is stopping, at once even while one
// holds them.
func (m *Manager) waitHeld() error {
	for m.held != nil && !m.stopped {
		held := m.held
		m.mu.Unlock()
		select {
		case <-held:
		case <-m.stopping:
		}
		m.mu.Lock()
	}
	if m.stopped {
		return errStopped
	}
	return nil
}

// release ends the hold of a prepared configuration; m.mu is held.
func (m *Manager) release() {
	if m.held != nil {
		close(m.held)
		m.held = nil
	}
}

// Apply makes the running loads of owner those of specs, beside the loads
// of other owners. It fails, changing nothing, when a spec is invalid,
// when its labels are those of another owner's load, or when all loads
// together would exceed the global caps. While a configuration is
// prepared (PrepareConfig) it waits for its commit or discard.
func (m *Manager) Apply(owner string, specs []config.LoadSpec) error {
	if owner == CanaryOwner {
		return fmt.Errorf("owner %q is the configuration's: use ApplyConfig", owner)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.waitHeld(); err != nil {
		return err
	}
	p, err := m.plan(owner, specs, nil)
	if err != nil {
		return err
	}
	if err := m.build(p); err != nil {
		return err
	}
	m.commit(p)
	return nil
}

// SetLimits changes the global caps: for a manager that runs no
// configuration, such as `sloprober bench`'s (ApplyConfig takes them from
// the global section). It fails, changing nothing, when the running loads
// would exceed them.
func (m *Manager) SetLimits(limits Limits) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !(limits.MaxRate > 0) || limits.MaxInFlight <= 0 {
		return fmt.Errorf("global caps must be positive, got %g req/s and %d in flight", limits.MaxRate, limits.MaxInFlight)
	}
	if err := m.check("", nil, limits); err != nil {
		return err
	}
	m.limits = limits
	m.global.SetMax(m.openLoopInFlight("", nil))
	return nil
}

// configUpdate is what a configuration changes besides its canary loads.
type configUpdate struct {
	limits  Limits
	targets []*config.TargetConfig
}

// clientSlot is the client a load of this Apply runs on: an open one, or
// one to make.
type clientSlot struct {
	cfg config.TargetConfig
	tc  *targetClient
	// shared: the slot is the target's shared client (m.clients).
	shared bool
}

// clientSwap is a target's client with another number of connection
// pools, for a target client whose loads now keep more or fewer streams.
type clientSwap struct {
	tc     *targetClient
	client *Client
}

// applyPlan is one change of an owner's loads (the canary's: with a
// configuration's targets and caps), from plan to commit.
type applyPlan struct {
	owner string
	specs []config.LoadSpec
	cu    *configUpdate // nil for a test's loads
	// limits are the caps the loads are checked against and, for a
	// configuration, put in force.
	limits Limits
	// slots are the clients the loads run on, by key; loadSlot the key
	// of each spec's.
	slots    map[string]*clientSlot
	loadSlot []string
	// streams are the requests in flight each target's loads may have,
	// over all owners: the connections its pools need.
	streams map[string]int
	// fresh are the clients build made; swaps the pooled clients it made
	// for clients kept.
	fresh []*targetClient
	swaps []clientSwap
}

// discard closes what build made.
func (p *applyPlan) discard() {
	for _, sw := range p.swaps {
		sw.client.Close()
	}
	for _, tc := range p.fresh {
		tc.close()
	}
	p.swaps, p.fresh = nil, nil
}

// plan checks owner's specs against the caps and the other owners' loads
// and chooses the client each runs on; m.mu is held. It makes nothing.
func (m *Manager) plan(owner string, specs []config.LoadSpec, cu *configUpdate) (*applyPlan, error) {
	p := &applyPlan{owner: owner, specs: specs, cu: cu, limits: m.limits, slots: map[string]*clientSlot{}}
	if cu != nil {
		p.limits = cu.limits
	}
	if err := m.check(owner, specs, p.limits); err != nil {
		return nil, err
	}

	// The clients: the shared client of a target whose configuration is
	// unchanged; a configuration's changed target gets a new shared one;
	// a test's spec with a target configured otherwise than the shared
	// client gets a client of its own, so a test never changes the
	// canary's.
	slotOf := func(t *config.TargetConfig, shared bool) (string, error) {
		key := t.Name
		cur := m.clients[t.Name]
		if !shared && cur != nil && !reflect.DeepEqual(cur.cfg, *t) {
			key = t.Name + "\x00" + owner
		}
		if s, ok := p.slots[key]; ok {
			if !reflect.DeepEqual(s.cfg, *t) {
				return "", fmt.Errorf("the loads of %s configure target %q in two different ways", owner, t.Name)
			}
			return key, nil
		}
		s := &clientSlot{cfg: *t, shared: key == t.Name}
		if cur != nil && reflect.DeepEqual(cur.cfg, *t) {
			s.tc = cur
		} else {
			for _, l := range m.owners[owner] {
				if reflect.DeepEqual(l.client.cfg, *t) {
					s.tc = l.client // the owner's own client, kept (and shared if the target has none)
					break
				}
			}
		}
		p.slots[key] = s
		return key, nil
	}
	if cu != nil {
		for _, t := range cu.targets {
			if _, err := slotOf(t, true); err != nil {
				return nil, err
			}
		}
	}
	p.loadSlot = make([]string, len(specs))
	for i := range specs {
		key, err := slotOf(&specs[i].Target, cu != nil)
		if err != nil {
			return nil, err
		}
		p.loadSlot[i] = key
	}

	// Enough pooled connections for every request in flight the loads of
	// a target may have, over all owners.
	p.streams = map[string]int{}
	for o, loads := range m.owners {
		if o == owner {
			continue
		}
		for _, l := range loads {
			p.streams[l.spec.Target.Name] += l.spec.MaxInFlight()
		}
	}
	for i := range specs {
		p.streams[specs[i].Target.Name] += specs[i].MaxInFlight()
	}
	for name, n := range p.streams {
		p.streams[name] = min(n, p.limits.MaxInFlight)
	}
	return p, nil
}

// build makes the clients the plan needs: new target clients, and clients
// with more or fewer pools for the ones kept (swapped in by commit, with
// the same calibration and loads). A new target's first prompts must know
// its context: it waits for the new clients' context lookups, together,
// at most contextWait. On error it has closed what it made. m.mu is held.
func (m *Manager) build(p *applyPlan) error {
	for _, key := range slices.Sorted(maps.Keys(p.slots)) {
		s := p.slots[key]
		if s.tc != nil {
			continue
		}
		tc, err := newTargetClient(m.logger, m.factory, &s.cfg, m.userAgent, p.streams[s.cfg.Name], m.reader)
		if err != nil {
			p.discard()
			return err
		}
		s.tc = tc
		p.fresh = append(p.fresh, tc)
	}
	for _, key := range slices.Sorted(maps.Keys(p.slots)) {
		s := p.slots[key]
		if slices.Contains(p.fresh, s.tc) || s.tc.pools == poolsFor(p.streams[s.cfg.Name]) {
			continue
		}
		c, err := NewClient(&s.cfg, m.userAgent, p.streams[s.cfg.Name], WithReader(m.reader))
		if err != nil {
			p.discard()
			return err
		}
		p.swaps = append(p.swaps, clientSwap{s.tc, c})
	}
	wait := time.NewTimer(contextWait)
	for _, tc := range p.fresh {
		select {
		case <-tc.contextKnown:
		case <-wait.C:
			wait.Reset(0)
		}
	}
	wait.Stop()
	return nil
}

// commit puts a built plan in force; nothing in it fails. m.mu is held.
func (m *Manager) commit(p *applyPlan) {
	owner, specs, cu := p.owner, p.specs, p.cu
	if cobs, ok := m.factory.(CalibrationObserver); ok {
		for _, tc := range p.fresh {
			cobs.CalibrationFrozen(tc.cfg.Name, false) // a new calibrator starts unfrozen
		}
	}
	for _, sw := range p.swaps {
		sw.tc.swapClient(sw.client)
	}
	if cu != nil {
		m.limits = p.limits
		m.configured = map[string]bool{}
		for _, t := range cu.targets {
			m.configured[t.Name] = true
		}
	}
	for _, s := range p.slots {
		if s.shared {
			m.clients[s.cfg.Name] = s.tc
		}
		m.open[s.tc] = true
	}
	desired := map[string]*load{}
	for i := range specs {
		l := m.newLoad(owner, specs[i], p.slots[p.loadSlot[i]].tc)
		desired[l.name] = l
	}
	m.global.SetMax(m.openLoopInFlight(owner, specs))
	running := m.owners[owner]
	for name, old := range running {
		if l, ok := desired[name]; ok && old.client == l.client && sameLoad(&old.spec, &l.spec) {
			if !reflect.DeepEqual(old.spec, l.spec) {
				old.change(l.spec)
				for _, info := range old.infos {
					m.factory.Update(info)
				}
				// A test changes its loads every level: at debug level.
				level := slog.LevelInfo
				if owner != CanaryOwner {
					level = slog.LevelDebug
				}
				m.logger.Log(context.Background(), level, "Load changed", "owner", owner, "load", name, "rate", logRate(old.spec.Rate), "clients", old.spec.Clients, "enabled", !old.spec.Paused)
			}
			desired[name] = old
			continue
		}
		old.halt(0)
		for _, info := range old.infos {
			m.factory.Forget(info)
		}
		m.logger.Info("Load stopped", "owner", owner, "load", name)
	}
	for name, l := range desired {
		if l.obs != nil {
			continue // running
		}
		for _, info := range l.infos {
			l.obs = append(l.obs, m.factory.Observe(info))
		}
		l.start()
		m.logger.Info("Load started", "owner", owner, "load", name, "arrival", l.spec.Arrival, "rate", logRate(l.spec.Rate),
			"clients", l.spec.Clients, "enabled", !l.spec.Paused)
	}
	if len(desired) == 0 {
		delete(m.owners, owner)
	} else {
		m.owners[owner] = desired
	}
	m.closeUnused()
	for _, tc := range p.fresh {
		close(tc.applied)
	}
}

// check validates the specs of owner and checks that the loads of every
// owner, these in place of owner's running ones, stay within limits. An
// empty owner checks the running loads alone (SetLimits).
func (m *Manager) check(owner string, specs []config.LoadSpec, limits Limits) error {
	var errs []error
	keys := map[config.Key]string{}
	for i := range specs {
		s := &specs[i]
		if err := errors.Join(s.Validate(), s.ValidateTenancy()); err != nil {
			errs = append(errs, err)
			continue
		}
		name := s.Name()
		for _, k := range s.Keys() {
			if k.Test != owner {
				// An owner's labels are its own: a test cannot take the
				// canary's series, nor another test's.
				errs = append(errs, fmt.Errorf("load %s: a load of %s must have test=%q, got %q", name, owner, owner, k.Test))
			}
			if other, dup := keys[k]; dup {
				errs = append(errs, fmt.Errorf("load %s: target=%q scenario=%q test=%q are also the labels of load %s", name, k.Target, k.Scenario, k.Test, other))
			}
			keys[k] = name
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("loads of %s: %w", owner, errors.Join(errs...))
	}

	// What the loads would ask for: this owner's, and the others'.
	var (
		rate, otherRate       float64
		clients, otherClients int
		openInFlight          int // max_in_flight of the open-loop loads
		busy, busyClients     []string
	)
	for i := range specs {
		rate += specs[i].PeakRate()
		clients += closedClients(&specs[i])
		openInFlight += openMaxInFlight(&specs[i])
	}
	for _, o := range slices.Sorted(maps.Keys(m.owners)) {
		if o == owner {
			continue
		}
		r, c := 0.0, 0
		for _, l := range m.owners[o] {
			r += l.spec.PeakRate()
			c += closedClients(&l.spec)
			openInFlight += openMaxInFlight(&l.spec)
		}
		otherRate += r
		otherClients += c
		busy = append(busy, fmt.Sprintf("%s %g req/s", o, r))
		if c > 0 {
			busyClients = append(busyClients, fmt.Sprintf("%s %d", o, c))
		}
	}
	mine := fmt.Sprintf("the loads of %s (%g req/s) and those running (%s)", owner, rate, strings.Join(busy, ", "))
	switch {
	case owner == "":
		mine = fmt.Sprintf("the running loads (%s)", strings.Join(busy, ", "))
	case len(busy) == 0:
		mine = fmt.Sprintf("the loads of %s", owner)
	}
	// A relative tolerance: the canary's rates summed in another order
	// must not fail a configuration that validated.
	if total := rate + otherRate; total > limits.MaxRate*(1+1e-9) {
		return fmt.Errorf("%w: %s add up to %g req/s, above global.max_rate %g", ErrOverCaps, mine, total, limits.MaxRate)
	}
	// Closed-loop clients are reserved out of global.max_in_flight; the
	// rest must still hold every open-loop load's own max_in_flight, so a
	// test never makes the canary drop. With the default 1,000 and four
	// canary loads of 64, tests may keep 744 clients.
	if total := clients + otherClients; total > 0 && total+min(openInFlight, limits.MaxInFlight) > limits.MaxInFlight {
		who := fmt.Sprintf("the closed-loop loads of %s (%d clients)", owner, clients)
		if owner == "" {
			who = "the running closed-loop loads"
		}
		if len(busyClients) > 0 {
			who += fmt.Sprintf(" and those running (%s)", strings.Join(busyClients, ", "))
		}
		return fmt.Errorf("%w: %s keep %d clients, and the open-loop loads' max_in_flight add up to %d: above global.max_in_flight %d",
			ErrOverCaps, who, total, openInFlight, limits.MaxInFlight)
	}
	return nil
}

// closedClients are the clients a spec reserves out of global.max_in_flight.
func closedClients(s *config.LoadSpec) int {
	if s.Closed() && !s.Paused {
		return s.Clients
	}
	return 0
}

// openMaxInFlight is the max_in_flight of an open-loop spec that runs.
func openMaxInFlight(s *config.LoadSpec) int {
	if s.Closed() || s.Paused {
		return 0
	}
	return s.MaxInFlight()
}

// openLoopInFlight is the share of global.max_in_flight left to open-loop
// loads once owner's specs replace its loads: the cap less the clients of
// closed-loop loads, which each keep one request in flight at most.
func (m *Manager) openLoopInFlight(owner string, specs []config.LoadSpec) int {
	n := m.limits.MaxInFlight
	for o, loads := range m.owners {
		if o == owner {
			continue
		}
		for _, l := range loads {
			n -= closedClients(&l.spec)
		}
	}
	for i := range specs {
		n -= closedClients(&specs[i])
	}
	return max(n, 0)
}

// closeUnused closes the clients no load runs on, except the shared
// clients of configured targets (their calibration is kept for the loads
// a reload adds); m.mu is held.
func (m *Manager) closeUnused() {
	used := map[*targetClient]bool{}
	for _, loads := range m.owners {
		for _, l := range loads {
			used[l.client] = true
		}
	}
	for name, tc := range m.clients {
		if m.configured[name] {
			used[tc] = true
		} else if !used[tc] {
			delete(m.clients, name)
		}
	}
	for tc := range m.open {
		if !used[tc] {
			tc.close()
			delete(m.open, tc)
		}
	}
}

// SetShard makes this process shard s of the canary loads from the next
// ApplyConfig on: it sends the arrivals of each canary load that fall to
// it, and its caps apply to its share. Loads of other owners (a test run)
// are not split.
func (m *Manager) SetShard(s config.Shard) { m.shard.Store(&s) }

// Shard returns the shard SetShard set, the whole load by default.
func (m *Manager) Shard() config.Shard {
	if s := m.shard.Load(); s != nil {
		return *s
	}
	return config.Shard{}
}

// SetReader sets how the clients made from now on read responses
// (--prober.reader); DefaultReader until it is called.
func (m *Manager) SetReader(r Reader) {
	m.mu.Lock()
	m.reader = r
	m.mu.Unlock()
}

// UserAgent is the User-Agent of the manager's probes, for a test's own
// requests to the same target (its /v1/models).
func (m *Manager) UserAgent() string { return m.userAgent }

// Stop stops every load of every owner: scheduling ends at once, requests
// in flight get the grace period to end, those left are cancelled (outcome
// shutdown). It returns when every request has been reported. Apply fails
// at once from the moment Stop is called; Loads answers throughout the
// drain.
func (m *Manager) Stop(grace time.Duration) {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	close(m.stopping)
	owners, open := m.owners, m.open
	m.mu.Unlock()

	var wg sync.WaitGroup
	for _, loads := range owners {
		for _, l := range loads {
			wg.Go(func() { l.halt(grace) })
		}
	}
	wg.Wait()
	for tc := range open {
		tc.close()
	}
	m.mu.Lock()
	m.owners, m.clients, m.open = map[string]map[string]*load{}, map[string]*targetClient{}, map[*targetClient]bool{}
	m.mu.Unlock()
}

// Loads returns the status of every load of every owner, sorted by key.
func (m *Manager) Loads() []LoadStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []LoadStatus
	for owner, loads := range m.owners {
		for _, l := range loads {
			for _, info := range l.infos {
				st := LoadStatus{LoadInfo: info, Owner: owner, Enabled: !l.spec.Paused}
				if l.run != nil {
					st.InFlight = l.run.InFlight() // shared by the scenarios of a mix
				}
				out = append(out, st)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}

// logRate rounds a rate for the log to four significant digits: a test's
// verification rate is a fraction of a measured one (5.199488272603596).
func logRate(r float64) float64 {
	if r == 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return r
	}
	f, _ := strconv.ParseFloat(strconv.FormatFloat(r, 'g', 4, 64), 64)
	return f
}
