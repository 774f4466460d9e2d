package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/runstore"
	"github.com/sloprober/sloprober/servermetrics"
	"github.com/sloprober/sloprober/testrun"
	"github.com/sloprober/sloprober/validity"
)

// Exit codes of `sloprober test run`.
const (
	exitPass  = 0 // the test passed
	exitFail  = 1 // fail or infeasible: the target does not do what the test asks
	exitError = 2 // the test could not run, was aborted or concluded nothing (inconclusive); usage errors too
)

// testCommand is `sloprober test run`: one run of a test, now.
type testCommand struct {
	cmd        *kingpin.CmdClause
	name       *string
	json       *string
	output     *string
	source     configSource
	url        *string
	starter    *starter
	simArg     *string
	storage    *string
	execFaults *bool
	reader     *string
	validity   validity.Config
	// logConfig is the command line's logging (main sets it), written
	// through prog on a terminal.
	logConfig *promslog.Config
	prog      *progress
}

func newTestCommand(app *kingpin.Application) *testCommand {
	test := app.Command("test", "Capacity tests: step tests (knee search) and soak tests.")
	c := &testCommand{cmd: test.Command("run", "Run a step or soak test of the configuration once, now, and print its results. Exit code: 0 pass, 1 fail or infeasible, 2 error, aborted or inconclusive (no capacity concluded).")}
	c.name = c.cmd.Arg("name", "The test's name in the configuration's tests section (the embedded default has \"knee\"; with --target, the starter configuration's \"capacity\", the default).").String()
	c.json = c.cmd.Flag("json", "Also write the run's results as JSON to this file.").String()
	c.output = c.cmd.Flag("output", "How the results are printed: table (fits 120 columns; a level's notes as footnotes), md (every column, for a CI summary) or json (the run, as --json writes it).").
		Default("table").Enum("table", "md", "json")
	c.storage = c.cmd.Flag("storage.path", "Directory the run is stored in, as `sloprober run` stores its runs: `sloprober report show ID` reads it from there. A daemon running on the same directory holds it: the run is stored beside the daemon's runs all the same.").Default("data/").String()
	c.source = addConfigFlags(c.cmd)
	c.url = c.cmd.Flag("target", "An endpoint's OpenAI base URL (e.g. http://127.0.0.1:8000/v1), tested with the configuration `sloprober init` writes for it (its step test \"capacity\"); instead of --config.file.").String()
	c.starter = addStarterFlags(c.cmd)
	c.starter.addProfileFlag(c.cmd)
	c.simArg = c.cmd.Flag("sim.listen-address", "Address of the built-in simulator started without --config.file (loopback only).").Default("127.0.0.1:0").String()
	c.execFaults = addExecFaultsFlag(c.cmd)
	c.reader = addReaderFlag(c.cmd)
	addValidityFlags(c.cmd, &c.validity)
	return c
}

func (c *testCommand) run(ctx context.Context, logger *slog.Logger, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sloprober: %v\n", err)
		return exitError
	}
	if err := c.validity.Validate(); err != nil {
		return fail(fmt.Errorf("bad --validity flags: %w", err))
	}
	c.prog = newProgress(stderr, isTerminal(stderr))
	defer c.prog.close()
	if c.prog.tty && c.logConfig != nil {
		// Log lines are written above the updating line, not over it.
		lc := *c.logConfig
		lc.Writer = c.prog
		logger = promslog.New(&lc)
	}
	var cfg *config.Config
	switch {
	case *c.url != "":
		if *c.source.file != "" {
			return fail(errors.New("--target URL and --config.file exclude each other: the URL is tested with the configuration `sloprober init` writes for it"))
		}
		if err := c.starter.resolve(ctx, *c.url); err != nil {
			return fail(err)
		}
		var err error
		if cfg, err = c.starter.config(c.starter.model); err != nil {
			return fail(err)
		}
		if *c.name == "" {
			*c.name = starterTest
		}
	default:
		if err := c.starter.unused(); err != nil {
			return fail(err)
		}
		if *c.name == "" {
			return fail(errors.New("test run needs a test's name (sloprober test run knee) or an endpoint's --target URL"))
		}
		simURL := ""
		if *c.source.file == "" {
			sim, err := startEmbeddedSim(logger, *c.simArg)
			if err != nil {
				return fail(err)
			}
			defer sim.stop(time.Second)
			simURL = sim.url() + "/v1"
		}
		var err error
		if cfg, err = c.source.load(simURL); err != nil {
			return fail(err)
		}
	}
	t := cfg.Test(*c.name)
	if t == nil {
		var names []string
		for _, t := range cfg.Tests {
			names = append(names, t.Name)
		}
		return fail(fmt.Errorf("no test %q in the configuration (tests: %s)", *c.name, strings.Join(names, ", ")))
	}

	maxRate, err := cfg.TestMaxRate(t, false)
	if err != nil {
		return fail(err)
	}
	// The run is stored as the daemon stores its runs. A daemon (or
	// another test run) holding the directory does not keep the test
	// from running: its run is stored beside the holder's, as a guest.
	// Storage that cannot be written is found before the test starts.
	store, err := runstore.Open(*c.storage, runstore.Retention{}, logger)
	if errors.Is(err, runstore.ErrLocked) {
		store, err = runstore.OpenGuest(*c.storage, logger)
		if err == nil {
			holder := "another sloprober"
			if pid := runstore.LockHolder(*c.storage); pid > 0 {
				holder = fmt.Sprintf("another sloprober (process %d)", pid)
			}
			logger.Info("The storage is in use by "+holder+": this run is stored beside its runs, which it lists from its next start",
				"storage.path", *c.storage)
		}
	}
	if err != nil {
		return fail(fmt.Errorf("opening --storage.path %s: %w", *c.storage, err))
	}
	defer store.Close()

	// One-shot: the test alone, without the canary, within the global caps.
	rec := capacity.NewRecorder()
	m := prober.NewManager(logger, rec, userAgent())
	defer m.Stop(time.Second)
	reader, err := prober.ParseReader(*c.reader)
	if err != nil {
		return fail(fmt.Errorf("--prober.reader: %w", err))
	}
	m.SetReader(reader)
	if err := m.SetLimits(prober.Limits{MaxRate: cfg.Global.MaxRate, MaxInFlight: cfg.Global.MaxInFlight}); err != nil {
		return fail(err)
	}
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	// The engine's queue depth, for the drain checks and the report,
	// read afresh when asked: no series are exported by a one-shot run.
	engines := servermetrics.NewManager(logger, servermetrics.NewMetrics(prometheus.NewRegistry()))
	if err := engines.Apply(cfg); err != nil {
		return fail(err)
	}
	prog := c.prog
	defer prog.close()
	env := capacity.Env{Manager: m, Recorder: rec, Logger: logger, MaxRate: maxRate, ConfigHash: cfg.Hash(), Runner: "cli",
		Queue: engineQueue(cfg, engines)(t.Target), Validity: &c.validity,
		Faults: &faultaction.Runner{AllowExec: *c.execFaults}, LastCapacity: testrun.LastCapacity(store),
		Started:  func(plan string) { prog.println("Running " + plan) },
		Progress: prog.update,
	}
	id, err := testrun.Begin(store, t)
	if err != nil {
		return fail(err)
	}
	run, serr := testrun.Stored(ctx, store, id, env, t, cfg.TestLoad(t), capacity.Execute)
	prog.close()
	if err := writeRun(stdout, run, *c.output); err != nil {
		return fail(err)
	}
	if serr == nil {
		fmt.Fprintf(stderr, "Run %s stored in %s: sloprober report show %s --storage.path=%s\n", id, store.Dir(), id, store.Dir())
	}
	if *c.json != "" {
		if serr != nil {
			run.ID = "" // its report must not name a run the store does not hold whole
		}
		b, err := json.MarshalIndent(run, "", "  ")
		if err == nil {
			err = os.WriteFile(*c.json, append(b, '\n'), 0o644)
		}
		if err != nil {
			return fail(fmt.Errorf("--json: %w", err))
		}
	}
	if serr != nil {
		// The output and --json have the results; the store does not.
		where := "the output above"
		if *c.json != "" {
			where += " and " + *c.json
		}
		return fail(fmt.Errorf("%w; the run's results are only in %s", serr, where))
	}
	switch run.Verdict {
	case capacity.VerdictPass:
		return exitPass
	case capacity.VerdictFail, capacity.VerdictInfeasible:
		return exitFail
	}
	return exitError
}

// writeRun prints a run's results in format (table, md or json).
func writeRun(w io.Writer, run *capacity.Run, format string) error {
	switch format {
	case "md":
		capacity.WriteMarkdown(w, run)
	case "json":
		b, err := json.MarshalIndent(run, "", "  ")
		if err != nil {
			return fmt.Errorf("--output json: %w", err)
		}
		_, err = w.Write(append(b, '\n'))
		return err
	default:
		capacity.WriteTable(w, run)
	}
	return nil
}

// progressLine is one line of a running test's progress.
func progressLine(p capacity.Progress) string {
	line := levelText(p) + "; " + elapsedText(p)
	if p.Level > 1 {
		line += fmt.Sprintf("; last goodput %.3g good req/s", p.Goodput)
	}
	return line
}

// levelText names the level under way: "level 7 of about 11: verify,
// 6.79 req/s intended".
func levelText(p capacity.Progress) string {
	return fmt.Sprintf("level %d of about %d: %s, %s", p.Level, p.Levels, p.Stage, p.LoadName())
}

// elapsedText is the time spent and left: "elapsed 3m12s, about 2m10s
// left (up to 22m)".
func elapsedText(p capacity.Progress) string {
	return fmt.Sprintf("elapsed %s, %s", p.Elapsed.Round(time.Second), p.RemainingText())
}

// engineQueue returns how a test reads its target's engine queue depth:
// from the engine's metrics where the target has server_metrics, else
// nil (the drain waits for the test's own requests only).
func engineQueue(cfg *config.Config, engines *servermetrics.Manager) func(target string) capacity.QueueProbe {
	return func(target string) capacity.QueueProbe {
		t := cfg.Target(target)
		if t == nil || t.ServerMetrics == nil {
			return nil
		}
		return &engineQueueProbe{engines: engines, target: target, fresh: engines.Queue(target), maxAge: time.Duration(t.ServerMetrics.Interval)}
	}
}

// engineQueueProbe reads an engine's queue depth: a drain check scrapes
// afresh (it must see the queue as it is now), a window's sampling takes
// the daemon's last regular scrape when it is at most an interval old, so
// that a test does not add a read a second to the engine's /metrics.
type engineQueueProbe struct {
	engines *servermetrics.Manager
	target  string
	fresh   *servermetrics.Queue
	maxAge  time.Duration

	mu sync.Mutex
	// cache are the prefix-cache counters of the last read, of the
	// scrape it took (the daemon's or its own).
	cache *servermetrics.PrefixCacheCounters
}

func (p *engineQueueProbe) Waiting(ctx context.Context) (int, error) {
	if capacity.Sampling(ctx) {
		if s, ok := p.engines.Latest(p.target); ok && s.Waiting != nil && time.Since(s.Time) <= p.maxAge {
			p.setCache(s.PrefixCache)
			return int(math.Round(*s.Waiting)), nil
		}
	}
	n, err := p.fresh.Waiting(ctx)
	if c, ok := p.fresh.PrefixCacheCounters(); ok && err == nil {
		p.setCache(&c)
	}
	return n, err
}

func (p *engineQueueProbe) setCache(c *servermetrics.PrefixCacheCounters) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cache = c
}

// PrefixCacheCounters implements capacity.PrefixCacheProbe.
func (p *engineQueueProbe) PrefixCacheCounters() (servermetrics.PrefixCacheCounters, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cache == nil {
		return servermetrics.PrefixCacheCounters{}, false
	}
	return *p.cache, true
}
