package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
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

	"github.com/sloprober/sloprober/simulator"
)

// simCommand is `sloprober sim`: the simulated LLM engine as a server.
type simCommand struct {
	cmd        *kingpin.CmdClause
	configFile *string
	web        *web.FlagConfig
}

func newSimCommand(app *kingpin.Application) *simCommand {
	c := &simCommand{cmd: app.Command("sim", "Serve a simulated OpenAI-compatible LLM engine with known ground truth.")}
	c.configFile = c.cmd.Flag("config.file", "Simulator configuration file (YAML). Without it the built-in defaults apply.").String()
	c.web = kingpinflag.AddFlags(c.cmd, "127.0.0.1:8000")
	return c
}

func (c *simCommand) run(ctx context.Context, logger *slog.Logger) int {
	cfg := simulator.DefaultConfig
	if *c.configFile != "" {
		loaded, err := simulator.LoadFile(*c.configFile)
		if err != nil {
			logger.Error("Error loading simulator config", "err", err)
			return 1
		}
		cfg = *loaded
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("sloprober"),
	)
	sim, err := simulator.New(&cfg, logger, reg)
	if err != nil {
		logger.Error("Error creating simulator", "err", err)
		return 1
	}
	logger.Info("Starting sloprober simulator", "version", version.Info(), "model", cfg.Model, "slots", cfg.Slots)

	var g run.Group
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	{
		ctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			sim.Run(ctx)
			return nil
		}, func(error) { cancel() })
	}
	{
		srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}
		g.Add(func() error {
			if err := web.ListenAndServe(srv, c.web, logger); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}, func(error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
	}
	if err := g.Run(); err != nil && !errors.As(err, &run.SignalError{}) && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
		logger.Error("Simulator stopped", "err", err)
		return 1
	}
	logger.Info("Simulator stopped")
	return 0
}
