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
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/prober/config"
	"github.com/sloprober/sloprober/prober/simulator"
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
		cfg, err := config.Load([]byte(strings.ReplaceAll(defaultConfig, "{{SIM_URL}}", simURL)), false)
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

func (e *embeddedSim) stop() {
	e.cancel()
	<-e.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
}

// runCommand is `sloprober run`, the daemon.
type runCommand struct {
	cmd       *kingpin.CmdClause
	config    configSource
	web       *web.FlagConfig
	grace     *time.Duration
	simlisten *string
	pprof     *bool
}

func newRunCommand(app *kingpin.Application) *runCommand {
	c := &runCommand{cmd: app.Command("run", "Run the prober daemon: canary loads, /metrics, reload.")}
	c.config = addConfigFlags(c.cmd)
	c.web = kingpinflag.AddFlags(c.cmd, defaultListenAddress)
	c.grace = c.cmd.Flag("shutdown.grace-period", "On SIGTERM, how long requests in flight may take to end before they are cancelled (outcome shutdown).").
		Default("15s").Duration()
	c.simlisten = c.cmd.Flag("sim.listen-address", "Where the built-in simulator listens when no --config.file is given (loopback only; port 0 picks a free port).").
		Default("127.0.0.1:0").String()
	c.pprof = c.cmd.Flag("debug.pprof", "Serve Go profiling (net/http/pprof) on /debug/pprof/.").Default("false").Bool()
	return c
}

// daemon is the state `sloprober run` reloads.
type daemon struct {
	logger  *slog.Logger
	source  configSource
	simURL  string
	metrics *exporter.Metrics
	manager *prober.Manager

	reloadMu sync.Mutex
	cfg      atomic.Pointer[config.Config]
}

// reload reads the configuration and applies it; on error the configuration
// in force stays. It is the one reload path: start-up, SIGHUP and /-/reload.
func (d *daemon) reload() error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	cfg, err := d.source.load(d.simURL + "/v1")
	if err == nil {
		err = d.manager.Apply(cfg, func() { d.metrics.ApplyConfig(cfg) })
	}
	if err != nil {
		d.metrics.ReloadResult(false)
		d.logger.Error("Error loading config", "file", *d.source.file, "err", err)
		return err
	}
	d.cfg.Store(cfg)
	d.metrics.ReloadResult(true)
	d.logger.Info("Loaded config", "file", *d.source.file, "targets", len(cfg.Targets), "scenarios", len(cfg.Scenarios), "canary_loads", len(cfg.Canary))
	return nil
}

func (c *runCommand) run(logger *slog.Logger) int {
	logger.Info("Starting sloprober", "version", version.Info())
	logger.Info("Build context", "build_context", version.BuildContext())

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("sloprober"),
	)
	d := &daemon{logger: logger, source: c.config, metrics: exporter.NewMetrics(reg)}
	d.manager = prober.NewManager(logger, d.metrics, userAgent())

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
	if err := d.reload(); err != nil {
		if sim != nil {
			sim.stop()
		}
		return 1
	}

	var g run.Group
	g.Add(run.SignalHandler(context.Background(), os.Interrupt, syscall.SIGTERM))
	managerDone := make(chan struct{})
	{
		stop := make(chan struct{})
		var once sync.Once
		g.Add(func() error {
			<-stop
			logger.Info("Stopping loads", "grace_period", *c.grace)
			d.manager.Stop(*c.grace)
			close(managerDone)
			return nil
		}, func(error) { once.Do(func() { close(stop) }) })
	}
	{
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
		}, func(error) {
			signal.Stop(hup)
			close(cancel)
		})
	}
	{
		handler := exporter.NewHandler(exporter.WebOptions{
			Logger:   logger,
			Gatherer: reg,
			Metrics:  d.metrics,
			Reload:   d.reload,
			Config: func() string {
				if cfg := d.cfg.Load(); cfg != nil {
					return cfg.String()
				}
				return ""
			},
			Loads: d.manager.Loads,
			Pprof: *c.pprof,
			Ready: func() bool { return d.cfg.Load() != nil },
			Notes: func() []string {
				if sim == nil {
					return []string{"Configuration: " + *c.config.file}
				}
				return []string{
					"No configuration file: probing the built-in simulator at " + d.simURL + " with the embedded default configuration.",
					"Inject faults with: curl -X PUT " + d.simURL + `/sim/faults -d '{"error_rate":{"503":0.2}}'`,
				}
			},
		})
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		g.Add(func() error {
			if err := web.ListenAndServe(srv, c.web, logger); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}, func(error) {
			<-managerDone // keep /metrics up while loads drain
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
	}
	if sim != nil {
		done := make(chan struct{})
		g.Add(func() error {
			<-done
			return nil
		}, func(error) {
			<-managerDone // requests to it end as shutdown, not as broken streams
			sim.stop()
			close(done)
		})
	}
	err := g.Run()
	var sigErr run.SignalError
	if err != nil && !errors.As(err, &sigErr) {
		logger.Error("sloprober stopped", "err", err)
		return 1
	}
	logger.Info("See you next time!")
	return 0
}

func userAgent() string {
	v := version.Version
	if v == "" {
		v = "dev"
	}
	return "sloprober/" + v
}
