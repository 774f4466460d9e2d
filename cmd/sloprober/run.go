package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/internal/proc"
	"github.com/sloprober/sloprober/internal/reload"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/runstore"
	"github.com/sloprober/sloprober/servermetrics"
	"github.com/sloprober/sloprober/simulator"
	"github.com/sloprober/sloprober/testrun"
	"github.com/sloprober/sloprober/tracing"
	"github.com/sloprober/sloprober/validity"
)

//go:embed default.yml
var defaultConfig string

// defaultListenAddress is the port of `sloprober run`.
const defaultListenAddress = ":9477"

// configSource is where the configuration comes from: a file, or the
// embedded default pointed at an in-process simulator.
type configSource struct {
	file      *string
	expandEnv *bool
}

func addConfigFlags(cmd *kingpin.CmdClause) configSource {
	return configSource{
		file: cmd.Flag("config.file", "sloprober configuration file. Without it, sloprober probes a built-in simulator it starts on a loopback port.").String(),
		expandEnv: cmd.Flag("config.expand-env", "Expand ${VAR} references in the configuration file with environment variables.").
			Default("false").Bool(),
	}
}

// load reads the configuration; simURL is the embedded simulator's base URL.
func (c configSource) load(simURL string) (*config.Config, error) {
	if *c.file == "" {
		root := strings.TrimSuffix(simURL, "/v1")
		cfg, err := config.Load([]byte(strings.NewReplacer("{{SIM_URL}}", simURL, "{{SIM_ROOT}}", root).Replace(defaultConfig)), false)
		if err != nil {
			return nil, fmt.Errorf("embedded default configuration: %w", err)
		}
		return cfg, nil
	}
	return config.LoadFile(*c.file, *c.expandEnv)
}

// embeddedSim is the simulator `run` and `probe` start without a config file.
type embeddedSim struct {
	sim    *simulator.Simulator
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// startEmbeddedSim starts the simulator with its default configuration on
// addr, a loopback address.
func startEmbeddedSim(logger *slog.Logger, addr string) (*embeddedSim, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--sim.listen-address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("--sim.listen-address %q: the embedded simulator listens on loopback addresses only", addr)
	}
	cfg := simulator.DefaultConfig
	sim, err := simulator.New(&cfg, logger.With("component", "simulator"), prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded simulator: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &embeddedSim{sim: sim, ln: ln, cancel: cancel, done: make(chan struct{}),
		srv: &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		defer close(e.done)
		sim.Run(ctx)
	}()
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func (e *embeddedSim) url() string { return "http://" + e.ln.Addr().String() }

// stop stops the simulator's engine and its HTTP server within timeout:
// connections still busy then are closed.
func (e *embeddedSim) stop(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	e.cancel()
	select {
	case <-e.done:
	case <-ctx.Done():
	}
	if err := e.srv.Shutdown(ctx); err != nil {
		_ = e.srv.Close()
	}
}

// exitMargin is how long, beyond the grace period and the linger time, the
// last steps of an exit may take (the web server and the embedded
// simulator closing) before sloprober exits regardless.
const exitMargin = 2 * time.Second

// webShutdownTimeout bounds the graceful close of the web server; open
// connections still busy then (a long /debug/pprof/profile) are closed.
const webShutdownTimeout = time.Second

// simStopTimeout bounds the stop of the embedded simulator. `run` stops it
// alongside the linger and the web server's close, not after them, so
// that both fit in exitMargin.
const simStopTimeout = time.Second

// runCommand is `sloprober run`, the daemon.
type runCommand struct {
	cmd        *kingpin.CmdClause
	config     configSource
	web        *web.FlagConfig
	grace      *time.Duration
	linger     *time.Duration
	removed    *time.Duration
	simlisten  *string
	pprof      *bool
	storage    *string
	keepRuns   *int
	keepAge    *model.Duration
	testAPI    *bool
	execFaults *bool
	reader     *string
	instance   *string
	shard      *string
	validity   validity.Config
}

func newRunCommand(app *kingpin.Application) *runCommand {
	c := &runCommand{cmd: app.Command("run", "Run the prober daemon: canary loads, /metrics, reload.")}
	c.config = addConfigFlags(c.cmd)
	c.web = kingpinflag.AddFlags(c.cmd, defaultListenAddress)
	c.grace = c.cmd.Flag("shutdown.grace-period", "On SIGTERM, how long requests in flight may take to end before they are cancelled (outcome shutdown).").
		Default("15s").Duration()
	c.linger = c.cmd.Flag("shutdown.linger", "After the drain, how long /metrics stays up for a scrape of the final counts (outcome shutdown included); sloprober exits after the first such scrape or when this passes. Grace period plus linger bound the whole exit.").
		Default("5s").Duration()
	c.removed = c.cmd.Flag("metrics.removed-series-ttl", "How long the series of a load removed by a reload stay on /metrics, so that the next scrapes see its final counts; a load started again with the same labels replaces them at once (0: deleted at once).").
		Default("30s").Duration()
	c.simlisten = c.cmd.Flag("sim.listen-address", "Where the built-in simulator listens when no --config.file is given (loopback only; port 0 picks a free port).").
		Default("127.0.0.1:0").String()
	c.pprof = c.cmd.Flag("debug.pprof", "Serve Go profiling (net/http/pprof) on /debug/pprof/.").Default("false").Bool()
	c.storage = c.cmd.Flag("storage.path", "Directory of the results of test runs (one JSON file a run).").Default("data/").String()
	c.keepRuns = c.cmd.Flag("storage.retention.runs", "How many runs of each test are kept (0: no limit).").Default("100").Int()
	c.keepAge = new(model.Duration)
	c.cmd.Flag("storage.retention.age", "How long runs are kept after they ended (0: no limit).").Default("90d").SetValue((*modelDurationValue)(c.keepAge))
	c.shard = c.cmd.Flag("shard", "This process's part of the canary loads, i/N: N processes with shards 0/N to N-1/N together send every canary load exactly once, each its share (intended rate and caps per share); step and soak tests run on shard 0 only. ordinal/N takes i from the host name's last -<number> (a StatefulSet pod's ordinal).").Default("0/1").String()
	c.instance = c.cmd.Flag("tracing.instance", "The service.instance.id of the spans sloprober exports (default: the host name); tracing itself is configured in the configuration file's tracing section.").Default("").String()
	c.testAPI = c.cmd.Flag("web.enable-test-api", "Enable the test API's POST endpoints: start and abort test runs (the GET endpoints are always on).").Default("false").Bool()
	c.execFaults = addExecFaultsFlag(c.cmd)
	c.reader = addReaderFlag(c.cmd)
	addValidityFlags(c.cmd, &c.validity)
	return c
}

// addExecFaultsFlag adds --test.allow-exec-faults: a soak's exec fault
// actions run commands on the prober's host, so whoever can change the
// configuration (or start a run through the test API) could run anything;
// they are refused unless this is set.
func addExecFaultsFlag(cmd *kingpin.CmdClause) *bool {
	return cmd.Flag("test.allow-exec-faults", "Allow the exec fault actions of soak tests' fault plans: commands run on this host. Off by default: with it, whoever can change the configuration can run commands here.").Default("false").Bool()
}

// addReaderFlag adds --prober.reader: how probe responses are read.
func addReaderFlag(cmd *kingpin.CmdClause) *string {
	return cmd.Flag("prober.reader", "How probe responses are read: fast (Linux, the default there: HTTP/1.1 streams read from their sockets by an epoll poller, 10-35% less CPU a chunk; a target behind a proxy, with OAuth 2.0 or HTTP/2 over TLS keeps std) or std (net/http, a goroutine woken for every chunk).").
		Default(string(prober.DefaultReader)).Enum(prober.Readers...)
}

// addValidityFlags adds the flags of the measurement-validity rule
// (README, "Is the prober the problem?"), defaults validity.DefaultConfig.
func addValidityFlags(cmd *kingpin.CmdClause, v *validity.Config) {
	d := validity.DefaultConfig
	dur := func(x time.Duration) string { return model.Duration(x).String() }
	cmd.Flag("validity.window", "The window each self-measurement is taken over.").Default(dur(d.Window)).DurationVar(&v.Window)
	cmd.Flag("validity.sustain", "How long a self-measurement must stay over its threshold before the measurements are marked invalid.").Default(dur(d.Sustain)).DurationVar(&v.Sustain)
	cmd.Flag("validity.cpu", "Invalid above this share of GOMAXPROCS of CPU use.").Default(fmt.Sprint(d.CPU)).Float64Var(&v.CPU)
	cmd.Flag("validity.scheduler-latency", "Invalid above this P99 of the Go scheduler's latency.").Default(dur(d.SchedulerP99)).DurationVar(&v.SchedulerP99)
	cmd.Flag("validity.gc-pause", "Invalid above this P99 of GC stop-the-world pauses.").Default(dur(d.GCPauseP99)).DurationVar(&v.GCPauseP99)
	cmd.Flag("validity.send-lag", "A target's measurements are invalid above this P99 of its send lag.").Default(dur(d.SendLagP99)).DurationVar(&v.SendLagP99)
	cmd.Flag("validity.pool-wait", "A target's measurements are invalid above this P99 of its waits for a free connection (never dialing or TLS).").Default(dur(d.PoolWaitP99)).DurationVar(&v.PoolWaitP99)
}

// daemon is the state `sloprober run` reloads.
type daemon struct {
	logger  *slog.Logger
	source  configSource
	simURL  string
	metrics *exporter.Metrics
	manager *prober.Manager
	tests   *testrun.Service
	tracer  *tracing.Tracer
	engines *servermetrics.Manager
	shard   config.Shard
	// validity says whether the process's measurements can be trusted.
	validity *validity.Monitor

	// parts are what a configuration applies to, all or nothing
	// (subscribe).
	parts    reload.Coordinator
	reloadMu sync.Mutex
	cfg      atomic.Pointer[config.Config]
	// stopping is set as soon as sloprober begins to stop: reloads are
	// then refused at once, without waiting for the drain.
	stopping atomic.Bool
}

// subscribe makes the daemon's parts take each configuration, in this
// order: what can fail is prepared first in every part (clients of the
// engines' metrics and the trace exporter, a TLS file missing; the loads
// against the caps; the tests' schedules), and committed in this order
// once none failed, the metrics before the loads that feed them.
func (d *daemon) subscribe() {
	d.parts.Subscribe("engine metrics", reload.Of(d.engines.Prepare))
	d.parts.Subscribe("tracing", reload.Of(d.tracer.Prepare))
	d.parts.Subscribe("metrics", reload.Always(d.metrics.ApplyConfig))
	d.parts.Subscribe("probe tracing", reload.Always(func(cfg *config.Config) {
		d.manager.SetTracing(cfg.Tracing.Enabled(), cfg.Tracing.SamplingFraction)
	}))
	d.parts.Subscribe("loads", reload.Of(d.manager.PrepareConfig))
	d.parts.Subscribe("tests", reload.Of(func(cfg *config.Config) (*testrun.ConfigChange, error) {
		if d.shard.Index != 0 {
			// Step and soak tests run on shard 0 only: the others
			// keep no schedule and start nothing.
			noTests := *cfg
			noTests.Tests = nil
			cfg = &noTests
		}
		return d.tests.PrepareConfig(cfg)
	}))
}

// errStopping is the error of a reload refused because sloprober is stopping.
var errStopping = fmt.Errorf("%w: the configuration is not reloaded", exporter.ErrStopping)

// reload reads the configuration and applies it; on error the configuration
// in force stays. It is the one reload path: start-up, SIGHUP and /-/reload.
// Once sloprober is stopping it returns errStopping at once: a reload must
// neither start loads that the shutdown would have to drain too, nor keep a
// client waiting until the grace period ends.
func (d *daemon) reload() error {
	if d.stopping.Load() {
		return errStopping
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.stopping.Load() { // began while this reload waited for another
		return errStopping
	}
	cfg, err := d.source.load(d.simURL + "/v1")
	if err == nil {
		err = d.parts.Apply(cfg)
	}
	if err == nil && d.stopping.Load() {
		// The stop began while the reload prepared: the loads' part
		// dropped it at its commit.
		return errStopping
	}
	if err != nil && d.stopping.Load() {
		// The manager refused it because it is stopping: not a bad
		// configuration, so config_last_reload_successful stays.
		d.logger.Info("Not reloading the configuration: sloprober is stopping", "file", *d.source.file)
		return errStopping
	}
	if err != nil {
		d.metrics.ReloadResult(false)
		d.logger.Error("Error loading config", "file", *d.source.file, "err", err)
		return err
	}
	d.cfg.Store(cfg)
	d.metrics.ReloadResult(true)
	d.logger.Info("Loaded config", "file", *d.source.file, "targets", len(cfg.Targets), "scenarios", len(cfg.Scenarios), "canary_loads", len(cfg.Canary), "tests", len(cfg.Tests))
	return nil
}

func (c *runCommand) run(ctx context.Context, logger *slog.Logger, exit func(int)) int {
	// deadline is the exit's deadline once the stop has begun. It stays
	// armed through every deferred step of the stop (the tracer's flush,
	// the store's close): main exits after them; a test's in-process run
	// returns, and this first deferred call is the last to run.
	var deadline atomic.Pointer[deadlineTimer]
	defer func() {
		if t := deadline.Load(); t != nil {
			t.Stop()
		}
	}()
	logger.Info("Starting sloprober", "version", version.Info())
	logger.Info("Build context", "build_context", version.BuildContext())

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("sloprober"),
	)
	shard, err := config.ParseShard(*c.shard, config.Hostname())
	if err != nil {
		logger.Error("Bad --shard", "err", err)
		return 1
	}
	if err := c.validity.Validate(); err != nil {
		logger.Error("Bad --validity flags", "err", err)
		return 1
	}
	reader, err := prober.ParseReader(*c.reader)
	if err != nil {
		logger.Error("Bad --prober.reader", "err", err)
		return 1
	}
	shardCount := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sloprober_shard_count",
		Help: "Shards the canary loads are split over (--shard i/N): N. Fewer instances reporting than this value means a shard is missing."})
	shardIndex := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sloprober_shard_index", Help: "This process's shard (--shard i/N): i."})
	shardCount.Set(float64(max(shard.Count, 1)))
	shardIndex.Set(float64(shard.Index))
	reg.MustRegister(shardCount, shardIndex)
	d := &daemon{logger: logger, source: c.config, metrics: exporter.NewMetrics(reg), shard: shard}
	d.metrics.SetRemovedSeriesTTL(*c.removed)
	recent := exporter.NewRecent(20)
	recorder := capacity.NewRecorder()
	d.tracer = tracing.New(logger, tracing.NewMetrics(reg), *c.instance)
	defer d.tracer.Stop() // after the drain: the last requests' spans are flushed
	identity := exporter.NewIdentity(reg)
	d.validity = validity.New(c.validity, proc.CPU, reg)
	d.manager = prober.NewManager(logger, prober.Fanout(d.metrics, recent, identity, d.validity, recorder, d.tracer), userAgent())
	d.manager.SetShard(shard)
	d.manager.SetReader(reader)
	if shard.Sharded() {
		logger.Info("Sending a share of every canary load", "shard", shard.String(), "share", shard.Share(), "tests", shard.Index == 0)
	}
	retention := runstore.Retention{MaxRuns: *c.keepRuns, MaxAge: time.Duration(*c.keepAge)}
	store, serr := runstore.Open(*c.storage, retention, logger)
	switch {
	case errors.Is(serr, runstore.ErrUnwritable):
		// A full or read-only disk, missing permissions: the canary
		// needs none of it. The runs that can be read are served; a test
		// that starts fails, naming the path, until the storage can be
		// written (each start tries it again).
		logger.Warn("The storage of test runs cannot be written: starting without it; the stored runs that can be read are served, and test runs fail until it can be written",
			"storage.path", *c.storage, "err", serr)
		store = runstore.OpenReadOnly(*c.storage, retention, serr, logger)
	case errors.Is(serr, runstore.ErrLocked):
		// Another sloprober holds it, most often a `test run` in the
		// same directory: the canary must not wait for it. The next
		// test run of the daemon opens the storage once it is free.
		logger.Warn("The storage of test runs is in use by another sloprober (a test run?): starting without it; its finished runs are served, and test runs fail until it is free",
			"storage.path", *c.storage, "err", serr)
		store = runstore.OpenReadOnly(*c.storage, retention, serr, logger)
	case serr != nil:
		logger.Error("Error opening the storage of test runs", "storage.path", *c.storage, "err", serr)
		return 1
	}
	defer store.Close()
	d.tests = testrun.New(logger, d.manager, recorder, store, testrun.NewMetrics(reg))
	d.tests.SetValidity(c.validity)
	faults := &faultaction.Runner{AllowExec: *c.execFaults}
	d.tests.SetFaults(faults)
	d.engines = servermetrics.NewManager(logger, servermetrics.NewMetrics(reg))
	d.tests.SetQueues(func(target string) capacity.QueueProbe {
		cfg := d.cfg.Load()
		if cfg == nil {
			return nil
		}
		return engineQueue(cfg, d.engines)(target)
	})

	var sim *embeddedSim
	if *c.config.file == "" {
		var err error
		sim, err = startEmbeddedSim(logger, *c.simlisten)
		if err != nil {
			logger.Error("Error starting the embedded simulator", "err", err)
			return 1
		}
		d.simURL = sim.url()
		logger.Info("No --config.file: probing the built-in simulator with the embedded default configuration",
			"simulator", d.simURL, "inject_faults", "curl -X PUT "+d.simURL+"/sim/faults -d '{\"error_rate\":{\"503\":0.2}}'")
	}
	d.subscribe()
	if err := d.reload(); err != nil {
		if sim != nil {
			sim.stop(simStopTimeout)
		}
		return 1
	}

	// The exit, once begun, takes at most grace + linger (+ exitMargin):
	// the drain, then /metrics waiting for its last scrape. Interrupt
	// functions of a run.Group run one after the other, so the manager's
	// comes before the web server's, which waits for the drain; the
	// embedded simulator's, which only starts its stop, comes before the
	// web server's too, so that the two close side by side.
	var g run.Group
	// SIGINT, SIGTERM, or ctx done (a test's in-process run) stop it.
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	managerDone := make(chan struct{})
	{
		ctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			d.tests.Run(ctx)
			return nil
		}, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			return d.engines.Run(ctx)
		}, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			d.validity.Run(ctx)
			return nil
		}, func(error) { cancel() })
	}
	{
		stop := make(chan struct{})
		var once sync.Once
		g.Add(func() error {
			<-stop
			// A running test ends first, as aborted with its partial
			// results stored; then the canary drains.
			d.tests.Stop()
			logger.Info("Stopping loads", "grace_period", *c.grace)
			d.manager.Stop(*c.grace)
			close(managerDone)
			return nil
		}, func(error) {
			once.Do(func() {
				d.stopping.Store(true)
				deadline.Store(exitDeadline(logger, *c.grace+*c.linger+exitMargin, exit, faults.Pending))
				close(stop)
			})
		})
	}
	{
		// The SIGHUP channel stays registered until the process exits:
		// unregistered, a SIGHUP during the grace period would kill
		// sloprober with the default action and lose the final counts.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		cancel := make(chan struct{})
		g.Add(func() error {
			for {
				select {
				case <-hup:
					_ = d.reload()
				case <-cancel:
					return nil
				}
			}
		}, func(error) { close(cancel) })
	}
	if sim != nil {
		stopped := make(chan struct{})
		g.Add(func() error {
			<-stopped
			return nil
		}, func(error) {
			go func() {
				defer close(stopped)
				<-managerDone // requests to it end as shutdown, not as broken streams
				sim.stop(simStopTimeout)
			}()
		})
	}
	{
		handler := c.handler(d, logger, reg, recent, sim)
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		serving := make(chan struct{})
		g.Add(func() error {
			defer close(serving)
			if err := web.ListenAndServe(srv, c.web, logger); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}, func(error) {
			// Every endpoint keeps answering while the loads drain, and
			// /metrics until Prometheus has seen the final counts.
			<-managerDone
			lingerFor(logger, *c.linger, handler.NextScrape(), serving)
			ctx, cancel := context.WithTimeout(context.Background(), webShutdownTimeout)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		})
	}
	err = g.Run()
	var sigErr run.SignalError
	if err != nil && !errors.As(err, &sigErr) && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
		logger.Error("sloprober stopped", "err", err)
		return 1
	}
	logger.Info("See you next time!")
	return 0
}

// handler is the daemon's web: /metrics, the landing page, reload, the
// test API and the reports, each endpoint reading the daemon's state.
func (c *runCommand) handler(d *daemon, logger *slog.Logger, reg prometheus.Gatherer, recent *exporter.Recent, sim *embeddedSim) *exporter.Handler {
	return exporter.NewHandler(exporter.WebOptions{
		Logger:   logger,
		Gatherer: reg,
		Recent:   recent,
		Reload:   d.reload,
		Config: func() string {
			if cfg := d.cfg.Load(); cfg != nil {
				return cfg.String()
			}
			return ""
		},
		Loads:    d.manager.Loads,
		Pprof:    *c.pprof,
		API:      testrun.NewAPI(d.tests, *c.testAPI),
		Reports:  func() []exporter.ReportLink { return reportLinks(d.tests.Runs("")) },
		Tests:    func() []exporter.TestLink { return testLinks(d.tests.Tests()) },
		Ready:    func() bool { return d.cfg.Load() != nil },
		Stopping: d.stopping.Load,
		Health:   d.validity.Status,
		Notes: func() []string {
			var notes []string
			switch err := d.tests.StorageError(); {
			case errors.Is(err, runstore.ErrLocked):
				notes = append(notes, fmt.Sprintf("Test runs cannot be stored: --storage.path %s is in use by another sloprober (%v); a test run fails until it is free.", *c.storage, err))
			case err != nil:
				notes = append(notes, fmt.Sprintf("Test runs cannot be stored: --storage.path %s cannot be written (%v); a test run fails until it can be.", *c.storage, err))
			}
			if sim == nil {
				return append(notes, "Configuration: "+*c.config.file)
			}
			return append(notes,
				"No configuration file: probing the built-in simulator at "+d.simURL+" with the embedded default configuration.",
				"Inject faults with: curl -X PUT "+d.simURL+`/sim/faults -d '{"error_rate":{"503":0.2}}'`,
			)
		},
	})
}

// maxReportLinks bounds the runs the landing page lists.
const maxReportLinks = 20

// reportLinks are the landing page's rows of the newest stored runs
// (runs newest first), each linking its report; a run held in memory only
// (its write failed) says "not stored" after its verdict.
func reportLinks(runs []runstore.Summary) []exporter.ReportLink {
	out := make([]exporter.ReportLink, 0, min(len(runs), maxReportLinks))
	for _, r := range runs[:min(len(runs), maxReportLinks)] {
		l := exporter.ReportLink{ID: r.ID, Test: r.Test, Kind: r.Kind, Target: r.Target, Verdict: r.Verdict, End: r.End}
		if r.StorageError != "" {
			l.Verdict += " (not stored)"
		}
		if r.VerifiedRate != nil {
			l.Capacity = fmt.Sprintf("%.3g req/s", *r.VerifiedRate)
		}
		out = append(out, l)
	}
	return out
}

// testLinks are the configured tests for the landing page.
func testLinks(tests []testrun.TestStatus) []exporter.TestLink {
	out := make([]exporter.TestLink, 0, len(tests))
	for _, t := range tests {
		l := exporter.TestLink{Name: t.Name, Kind: t.Kind, Target: t.Target, Schedule: t.Schedule, Next: t.Next, Running: string(t.Running)}
		if p := t.Progress; p != nil {
			load := capacity.Progress{Concurrency: p.Clients, Rate: p.Rate}.LoadName()
			left := capacity.Progress{Remaining: time.Duration(p.RemainingSeconds) * time.Second, RemainingMax: time.Duration(p.RemainingMaxSeconds) * time.Second}.RemainingText()
			l.Progress = fmt.Sprintf("level %d of about %d, %s at %s; %s elapsed, %s", p.Level, p.Levels, p.Stage, load,
				(time.Duration(p.ElapsedSeconds) * time.Second).Round(time.Second), left)
		} else if t.Running != "" {
			l.Progress = "starting"
		}
		if t.Last != nil {
			links := reportLinks([]runstore.Summary{*t.Last})
			l.Last = &links[0]
		}
		out = append(out, l)
	}
	return out
}

// lingerFor waits, after the drain, until a scrape of /metrics has been
// answered (scraped), the web server has stopped serving, or linger has
// passed, whichever comes first: a Prometheus scraping every 15 s would
// otherwise never see the requests that ended as shutdown.
func lingerFor(logger *slog.Logger, linger time.Duration, scraped, serving <-chan struct{}) {
	if linger <= 0 {
		return
	}
	logger.Info("Loads stopped; serving the final counts until the next scrape of /metrics", "linger", linger)
	t := time.NewTimer(linger)
	defer t.Stop()
	select {
	case <-scraped:
		logger.Debug("Final counts scraped")
	case <-serving:
	case <-t.C:
		logger.Info("No scrape of the final counts within the linger time", "linger", linger)
	}
}

// exitDeadline makes the exit a hard limit: if sloprober has not exited
// after d (grace period + linger + exitMargin from the start of the stop),
// something hangs, and exit(1) ends the process with a log line saying so,
// rather than leaving it for a SIGKILL that loses the log.
//
// One thing extends it: a fault action's call under way (pending), an
// undo putting a replica back in rotation above all. Exiting before it
// ends would leave the replica out and the run without a record of the
// undo; the call's own timeout bounds the wait (30 s by default), then
// the stop has its budget d again (the canary's drain and the linger
// come after the test's end), and the log says what is awaited and until
// when. A pod's terminationGracePeriodSeconds must cover it.
func exitDeadline(logger *slog.Logger, d time.Duration, exit func(int), pending func() (time.Time, string)) *deadlineTimer {
	dt := &deadlineTimer{}
	start := time.Now()
	fire := func() {
		dt.mu.Lock()
		defer dt.mu.Unlock()
		if dt.stopped {
			return // stopped while this call waited for the lock
		}
		if until, what := pending(); until.After(time.Now()) {
			// The test's stop waits for it; the canary's drain and the
			// linger come after: the whole budget again from its end.
			logger.Warn("A fault action is under way: the exit waits for it, at most until its timeout", "action", what, "until", until.Format(time.RFC3339))
			dt.t.Reset(time.Until(until) + d)
			return
		}
		logger.Error("sloprober did not stop within the grace period and the linger time; exiting now", "after", time.Since(start).Round(time.Millisecond))
		exit(1)
	}
	dt.mu.Lock()
	defer dt.mu.Unlock()
	dt.t = time.AfterFunc(d, fire)
	return dt
}

// deadlineTimer is the exit's deadline. Stop ends it for good: a call
// that fired as it was stopped neither re-arms it nor exits.
type deadlineTimer struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// Stop stops the deadline.
func (dt *deadlineTimer) Stop() {
	dt.mu.Lock()
	defer dt.mu.Unlock()
	dt.stopped = true
	dt.t.Stop()
}

func userAgent() string {
	v := version.Version
	if v == "" {
		v = "dev"
	}
	return "sloprober/" + v
}

// modelDurationValue is a kingpin flag of a Prometheus duration (90d).
type modelDurationValue model.Duration

func (d *modelDurationValue) Set(s string) error {
	v, err := model.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = modelDurationValue(v)
	return nil
}

func (d *modelDurationValue) String() string { return model.Duration(*d).String() }
