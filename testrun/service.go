// Package testrun runs the configuration's step and soak tests in the
// daemon, beside the canary: on their cron schedules or on demand (the HTTP
// API), at most one test at a time per target, their results persisted in
// a runstore and summarised in Prometheus gauges (capacity, verdicts, runs,
// the next scheduled run).
package testrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/runstore"
	"github.com/sloprober/sloprober/validity"
)

// Errors of Start.
var (
	// ErrBusy: a test runs on the target already.
	ErrBusy = errors.New("a test is running on the target")
	// ErrUnknown: no test of that name in the configuration.
	ErrUnknown = errors.New("no such test")
	// ErrStopping: the service is stopping.
	ErrStopping = errors.New("sloprober is stopping")
)

// Service runs tests. Its methods are safe for concurrent use.
type Service struct {
	logger   *slog.Logger
	manager  *prober.Manager
	recorder *capacity.Recorder
	store    *runstore.Store
	metrics  *Metrics

	mu      sync.Mutex
	cfg     *config.Config
	tests   map[string]*scheduled // by name
	running map[string]*active    // by target
	wake    chan struct{}
	stopped bool
	runs    sync.WaitGroup

	validity *validity.Config
	faults   *faultaction.Runner
	// queues reads a target's engine queue depth, nil without engine
	// metrics (SetQueues).
	queues func(target string) capacity.QueueProbe

	// execute runs one test (capacity.Execute; tests replace it).
	execute func(ctx context.Context, env capacity.Env, t *config.TestConfig, load config.LoadSpec) *capacity.Run
}

// scheduled is a configured test and its next scheduled run.
type scheduled struct {
	cfg   *config.TestConfig
	sched cron.Schedule // nil: on demand only
	next  time.Time
}

// active is a running test.
type active struct {
	id      runstore.ID
	test    string
	maxRate float64 // the most its loads may send
	cancel  context.CancelCauseFunc
	done    chan struct{}
	// progress is the last level the run started, at progressAt (s.mu).
	progress   *capacity.Progress
	progressAt time.Time
}

// New returns a service that runs tests through manager (whose observers
// include recorder) and keeps their runs in store. Call ApplyConfig, then
// Run.
func New(logger *slog.Logger, manager *prober.Manager, recorder *capacity.Recorder, store *runstore.Store, metrics *Metrics) *Service {
	s := &Service{
		logger: logger, manager: manager, recorder: recorder, store: store, metrics: metrics,
		tests: map[string]*scheduled{}, running: map[string]*active{}, wake: make(chan struct{}, 1),
	}
	s.execute = capacity.Execute
	return s
}

// SetValidity sets the thresholds a step test judges the prober's health
// by, level by level (capacity.Step.Validity). Call it before Run.
func (s *Service) SetValidity(v validity.Config) { s.validity = &v }

// SetFaults sets the runner of soak tests' fault actions (by default one
// that refuses exec actions). Call it before Run.
func (s *Service) SetFaults(r *faultaction.Runner) { s.faults = r }

// LastCapacity returns a function that gives a target's last verified
// capacity from store (capacity.Env.LastCapacity): of its newest step run
// with production's prefix caching (a cold-cache capacity understates
// it), with the replicas that run measured.
func LastCapacity(store *runstore.Store) func(target string) *capacity.LastCapacity {
	return func(target string) *capacity.LastCapacity {
		run, ok := store.LastVerified(target, func(r *capacity.Run) bool { return r.Cache != config.CacheCold })
		if !ok {
			return nil
		}
		v := run.Header().VerifiedRate
		if v == nil {
			return nil
		}
		lc := &capacity.LastCapacity{RunID: run.ID, VerifiedRate: *v}
		if st := run.Setup; st != nil {
			lc.Replicas = st.Target.Replicas
		}
		return lc
	}
}

// SetQueues sets how a test reads its target's engine queue depth (for its
// drain checks and the reports): queue returns nil for a target without
// engine metrics. Call it before Run.
func (s *Service) SetQueues(queue func(target string) capacity.QueueProbe) { s.queues = queue }

// env is what a run of a test on target, of configuration cfg, takes
// from the daemon.
func (s *Service) env(cfg *config.Config, target string, maxRate float64) capacity.Env {
	env := capacity.Env{Manager: s.manager, Recorder: s.recorder, Logger: s.logger, MaxRate: maxRate, ConfigHash: cfg.Hash(), Validity: s.validity, Runner: "daemon",
		Faults: s.faults, LastCapacity: LastCapacity(s.store)}
	if s.queues != nil {
		env.Queue = s.queues(target)
	}
	return env
}

// Begin stores a run of test t as it starts (verdict running) and returns
// its id: a run cut short by a crash leaves its evidence.
func Begin(store *runstore.Store, t *config.TestConfig) (runstore.ID, error) {
	run := &capacity.Run{Summary: capacity.Summary{Test: t.Name, Kind: t.Kind, Target: t.Target, Start: time.Now()}}
	id, err := store.Begin(run)
	if err != nil {
		return "", fmt.Errorf("test %q: storing the run: %w", t.Name, err)
	}
	return id, nil
}

// Stored runs test t through execute (capacity.Execute), its run begun as
// id in store: the partial results are stored at every level or window
// (a run cut short by a crash keeps them, and its end, the file's last
// write, is known to within a level) and the final run at its end. The
// error is the final write's (runstore.ErrNotStored: the store holds the
// result in memory and retries); the run is returned whatever it says.
func Stored(ctx context.Context, store *runstore.Store, id runstore.ID, env capacity.Env, t *config.TestConfig, load config.LoadSpec,
	execute func(context.Context, capacity.Env, *config.TestConfig, config.LoadSpec) *capacity.Run) (*capacity.Run, error) {
	logger := env.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	env.Checkpoint = func(r *capacity.Run) {
		// A write that failed is logged by the store, which keeps the
		// partial results in memory.
		if err := store.Update(id, r); err != nil && !errors.Is(err, runstore.ErrNotStored) {
			logger.Warn("Storing a running test's partial results", "test", t.Name, "run", id, "err", err)
		}
	}
	r := execute(ctx, env, t, load)
	r.ID = string(id)
	if err := store.Finish(id, r); err != nil {
		return r, fmt.Errorf("test %q: storing the run %s: %w", t.Name, id, err)
	}
	return r, nil
}

// ApplyConfig takes a configuration's tests: new schedules apply from now;
// a running test goes on with the configuration it started with, to its
// end. It is PrepareConfig, then the change's Commit.
func (s *Service) ApplyConfig(cfg *config.Config) error {
	c, err := s.PrepareConfig(cfg)
	if err != nil {
		return err
	}
	c.Commit()
	return nil
}

// ConfigChange is a configuration's tests with their schedules parsed,
// not yet in force.
type ConfigChange struct {
	s     *Service
	cfg   *config.Config
	tests map[string]*scheduled
}

// PrepareConfig parses the schedules of cfg's tests, changing nothing in
// force.
func (s *Service) PrepareConfig(cfg *config.Config) (*ConfigChange, error) {
	tests := map[string]*scheduled{}
	now := time.Now()
	for _, t := range cfg.Tests {
		st := &scheduled{cfg: t}
		if t.Schedule != nil {
			sched, err := t.Schedule.Parse()
			if err != nil {
				return nil, fmt.Errorf("test %q: schedule: %w", t.Name, err)
			}
			st.sched, st.next = sched, sched.Next(now)
		}
		tests[t.Name] = st
	}
	return &ConfigChange{s: s, cfg: cfg, tests: tests}, nil
}

// Discard drops the change.
func (c *ConfigChange) Discard() {}

// Commit puts the change's tests and schedules in force.
func (c *ConfigChange) Commit() {
	s, cfg, tests := c.s, c.cfg, c.tests
	s.mu.Lock()
	old := s.tests
	next := map[string]time.Time{}
	for name, st := range tests {
		// An unchanged schedule keeps its next run: reloads more often
		// than it fires must not postpone it for ever.
		if o := old[name]; o != nil && o.sched != nil && st.sched != nil && *o.cfg.Schedule == *st.cfg.Schedule {
			st.next = o.next
		}
		if st.sched != nil {
			next[name] = st.next
		}
	}
	s.cfg, s.tests = cfg, tests
	s.mu.Unlock()
	s.metrics.configured(cfg.Tests, next, s.store)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run starts the scheduled runs as they fall due, until ctx is done. A run
// due while another test runs on its target is skipped and counted
// (sloprober_test_runs_skipped_total); a run due while sloprober was down
// is not made up for.
func (s *Service) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(s.untilNext())
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
			continue
		case <-timer.C:
		}
		now := time.Now()
		for _, name := range s.due(now) {
			if _, err := s.Start(name, "schedule"); err != nil {
				if errors.Is(err, ErrBusy) {
					s.metrics.skipped(s.targetOf(name), name)
				}
				s.logger.Warn("Scheduled test not started", "test", name, "err", err)
			}
		}
	}
}

// untilNext is the time to the next scheduled run (an hour if none).
func (s *Service) untilNext() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := time.Hour
	for _, t := range s.tests {
		if t.sched != nil {
			d = min(d, time.Until(t.next))
		}
	}
	return max(d, 0)
}

// due returns the tests due at now, sorted, and moves their next run on.
func (s *Service) due(now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name, t := range s.tests {
		if t.sched != nil && !t.next.After(now) {
			names = append(names, name)
			t.next = t.sched.Next(now)
			s.metrics.setNext(t.cfg.Target, name, t.next)
		}
	}
	sort.Strings(names)
	return names
}

func (s *Service) targetOf(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tests[name]; ok {
		return t.cfg.Target
	}
	return ""
}

// Start starts a run of a test now; why is logged (schedule, api). It
// fails when the test is unknown, a test runs on its target, or the
// service is stopping.
func (s *Service) Start(name, why string) (runstore.ID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return "", ErrStopping
	}
	st, ok := s.tests[name]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	t, cfg := st.cfg, s.cfg
	if a, busy := s.running[t.Target]; busy {
		return "", fmt.Errorf("%w: %s runs on %s (run %s)", ErrBusy, a.test, t.Target, a.id)
	}
	for target, a := range s.running {
		if a.test == name { // moved to another target by a reload while it ran
			return "", fmt.Errorf("%w: %s still runs on %s (run %s)", ErrBusy, name, target, a.id)
		}
	}
	maxRate, err := cfg.TestMaxRate(t, true)
	if err != nil {
		return "", err
	}
	claim := maxRate
	if t.Kind == config.TestSoak && t.MaxRate == 0 && t.Rate > 0 {
		claim = t.Rate // a soak sends at its rate
	}
	if err := s.fitsBeside(cfg, t, claim); err != nil {
		return "", err
	}
	id, err := Begin(s.store, t)
	if err != nil {
		// Nothing ran: the storage cannot take the run.
		s.metrics.storageFailed(t.Target, t.Name)
		return "", err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	a := &active{id: id, test: t.Name, maxRate: claim, cancel: cancel, done: make(chan struct{})}
	s.running[t.Target] = a
	s.metrics.setRunning(t.Target, t.Name, true)
	s.logger.Info("Test started", "test", t.Name, "kind", t.Kind, "target", t.Target, "run", id, "by", why)
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		defer close(a.done)
		defer cancel(nil)
		load := cfg.TestLoad(t)
		env := s.env(cfg, load.Target.Name, maxRate)
		env.Progress = func(p capacity.Progress) {
			s.mu.Lock()
			a.progress, a.progressAt = &p, time.Now()
			s.mu.Unlock()
		}
		r, err := Stored(ctx, s.store, id, env, t, load, s.execute)
		if err != nil {
			// ErrNotStored: logged by the store, which serves the result
			// from memory (the API with its storage_error) and retries.
			s.metrics.storageFailed(t.Target, t.Name)
			if !errors.Is(err, runstore.ErrNotStored) {
				s.logger.Error("Storing a test run", "test", t.Name, "run", id, "storage", s.store.Dir(), "err", err)
			}
		}
		s.metrics.finished(r)
		s.mu.Lock()
		delete(s.running, t.Target)
		s.mu.Unlock()
		s.metrics.setRunning(t.Target, t.Name, false)
		s.logger.Info("Test ended", "test", t.Name, "run", id, "verdict", r.Verdict, "reason", r.Reason, "stored", err == nil)
	}()
	return id, nil
}

// fitsBeside refuses (ErrBusy) a test whose max_rate, beside those of the
// tests running on other targets and the canary's, would exceed
// global.max_rate: its levels would be refused by the caps mid-run, and
// it would be stored aborted a moment after the API said 202. It checks
// the rate alone: a closed-loop level's clients are bounded by
// global.max_in_flight as they run (ErrOverCaps), not here, since how
// many of the caps' requests in flight the others hold moves with their
// targets' latency. A test without a max_rate may take all the canary
// leaves, so two such tests never run at once; with max_rates that add
// up within the caps they do.
// Called with s.mu held.
func (s *Service) fitsBeside(cfg *config.Config, t *config.TestConfig, maxRate float64) error {
	var running []string
	total := maxRate
	for target, a := range s.running {
		total += a.maxRate
		running = append(running, fmt.Sprintf("%s on %s up to %g req/s", a.test, target, a.maxRate))
	}
	budget := cfg.RateBesideCanary()
	if len(running) == 0 || total <= budget*(1+1e-9) {
		return nil
	}
	slices.Sort(running)
	return fmt.Errorf("%w: over the global caps: %s up to %g req/s beside %s is above the %g req/s global.max_rate leaves beside the canary: give each test a max_rate that fits, or wait for the others to end",
		ErrBusy, t.Name, maxRate, strings.Join(running, ", "), budget)
}

// Abort aborts a running test, by its name; the run ends as aborted with
// its partial results. It reports whether the test was running, and
// whether its run ended within wait: a run whose fault step's undo is
// under way ends, and is stored with the undo's outcome, when the undo
// does (its timeout bounds it), and the caller is not held that long.
func (s *Service) Abort(name, why string, wait time.Duration) (found, ended bool) {
	s.mu.Lock()
	var a *active
	for _, r := range s.running {
		if r.test == name {
			a = r
		}
	}
	s.mu.Unlock()
	if a == nil {
		return false, false
	}
	a.cancel(errors.New(why))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-a.done:
		return true, true
	case <-t.C:
		// A fault step's undo under way: the run is stored when it
		// ends, bounded by its timeout.
		return true, false
	}
}

// Stop aborts every running test ("sloprober is stopping") and waits for
// them to end, their partial results stored; from then on Start fails.
// Ending takes at most a level's drain (the target's timeout).
func (s *Service) Stop() {
	s.mu.Lock()
	s.stopped = true
	for _, a := range s.running {
		a.cancel(ErrStopping)
	}
	s.mu.Unlock()
	s.runs.Wait()
}

// TestStatus is a configured test as the API lists it.
type TestStatus struct {
	Name     string      `json:"name"`
	Kind     string      `json:"kind"`
	Target   string      `json:"target"`
	Schedule string      `json:"schedule,omitempty"`
	Next     time.Time   `json:"next_run,omitzero"`
	Running  runstore.ID `json:"running,omitempty"`
	// Progress is the running run's: the level under way, how long it
	// has run and an estimate of what is left.
	Progress *Progress   `json:"progress,omitempty"`
	Last     *RunSummary `json:"last,omitempty"`
}

// Progress is a running test's progress, its times moved on to now.
type Progress struct {
	Level            int     `json:"level"`
	Levels           int     `json:"levels"` // an estimate: extensions and stop rules change it
	Stage            string  `json:"stage"`
	Clients          int     `json:"clients,omitempty"`
	Rate             float64 `json:"rate,omitempty"`
	ElapsedSeconds   float64 `json:"elapsed_seconds"`
	RemainingSeconds float64 `json:"remaining_seconds"`
	// RemainingMaxSeconds is the most left if every level left takes
	// its longest.
	RemainingMaxSeconds float64 `json:"remaining_max_seconds"`
}

// RunSummary is a stored run without its levels, and its storage_error
// while its latest state is held in memory only.
type RunSummary = runstore.Summary

// Tests lists the configured tests.
func (s *Service) Tests() []TestStatus {
	s.mu.Lock()
	var out []TestStatus
	for name, t := range s.tests {
		ts := TestStatus{Name: name, Kind: t.cfg.Kind, Target: t.cfg.Target}
		if t.sched != nil {
			ts.Schedule, ts.Next = t.cfg.Schedule.Cron, t.next
			if tz := t.cfg.Schedule.TimeZone; tz != "" {
				ts.Schedule += " (" + tz + ")"
			}
		}
		if a, ok := s.running[t.cfg.Target]; ok && a.test == name {
			ts.Running = a.id
			if p := a.progress; p != nil {
				since := time.Since(a.progressAt)
				ts.Progress = &Progress{Level: p.Level, Levels: p.Levels, Stage: p.Stage, Clients: p.Concurrency, Rate: p.Rate,
					ElapsedSeconds: (p.Elapsed + since).Seconds(), RemainingSeconds: max(0, p.Remaining-since).Seconds(),
					RemainingMaxSeconds: max(0, p.RemainingMax-since).Seconds()}
			}
		}
		out = append(out, ts)
	}
	s.mu.Unlock()
	for i := range out {
		if last, ok := s.store.Latest(out[i].Name); ok {
			out[i].Last = &last
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Runs lists the stored runs of a test ("": all), newest first.
func (s *Service) Runs(test string) []RunSummary { return s.store.List(test) }

// Get returns a stored run.
func (s *Service) Get(id runstore.ID) (*capacity.Run, error) { return s.store.Get(id) }

// Lookup returns a stored run and its storage error: not empty while the
// run's latest state is held in memory only (runstore.Summary).
func (s *Service) Lookup(id runstore.ID) (*capacity.Run, string, error) { return s.store.Lookup(id) }

// StorageError is why runs cannot be stored, nil when they can: the
// storage could not be opened for writing at start (runstore.OpenReadOnly),
// and no run has begun since that could open it.
func (s *Service) StorageError() error { return s.store.Unwritable() }
