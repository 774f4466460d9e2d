package capacity

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
)

// Env is what a test run takes from the process that runs it: the
// prober's manager (whose observers include Recorder) and the process's
// settings. `sloprober test run` and the daemon's scheduler (testrun) fill
// it alike and hand it to Execute.
type Env struct {
	Manager  *prober.Manager
	Recorder *Recorder
	Logger   *slog.Logger
	// MaxRate is the most the test may send, req/s
	// (config.Config.TestMaxRate).
	MaxRate float64
	// ConfigHash is the configuration's hash (config.Config.Hash), for
	// the run's provenance.
	ConfigHash string
	// Queue, if set, reads the target's engine queue depth (its
	// server_metrics): the drains wait for it, the windows record it.
	Queue QueueProbe
	// Validity, if set, judges the prober's own health over each level
	// or window (Step.Validity).
	Validity *validity.Config
	// Started, if set, is told the test's plan as it starts, e.g. "step
	// test knee on target sim: sweep [1 2 4 8], windows 5s + 15s a level".
	Started func(plan string)
	// Progress, if set, is told each level or window as it starts.
	Progress func(Progress)
	// Checkpoint, if set, is handed the run's partial results as it goes
	// (for storage; it must not keep the run).
	Checkpoint func(*Run)
	// Runner is what runs the test, for the run's provenance: "cli" or
	// "daemon".
	Runner string
	// Faults runs the fault actions of a soak's fault plan (nil: a
	// runner that refuses exec actions).
	Faults *faultaction.Runner
	// LastCapacity, if set, returns a target's last verified capacity, for
	// a soak's computed remaining capacity after one replica is lost.
	LastCapacity func(target string) *LastCapacity
}

// procedure is one kind of test: a step test (step.go), a soak test
// (soak.go).
type procedure interface {
	// plan says what the test will do, in one line.
	plan() string
	// Run runs the test until it ends or ctx is done.
	Run(ctx context.Context) *Run
}

// Execute runs one test of its configuration's kind on load (the test's
// load: config.Config.TestLoad), until it ends or ctx is done (an abort:
// the partial results are kept), and returns its run sealed for storage.
// It is the one place that knows the kinds: a new kind is a file of this
// package with its procedure, a case here, and its validation in config.
func Execute(ctx context.Context, env Env, t *config.TestConfig, load config.LoadSpec) *Run {
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	var p procedure
	switch t.Kind {
	case config.TestStep:
		p = &Step{Manager: env.Manager, Recorder: env.Recorder, Test: t, Load: load, MaxRate: env.MaxRate, Logger: env.Logger,
			Progress: env.Progress, Queue: env.Queue, ConfigHash: env.ConfigHash, Checkpoint: env.Checkpoint, Validity: env.Validity}
	case config.TestSoak:
		p = &Soak{Manager: env.Manager, Recorder: env.Recorder, Test: t, Load: load, Logger: env.Logger,
			Progress: env.Progress, Queue: env.Queue, ConfigHash: env.ConfigHash, Checkpoint: env.Checkpoint, Validity: env.Validity,
			Faults: env.Faults, LastCapacity: env.LastCapacity}
	default:
		// config.Validate refuses it: a configuration built otherwise.
		now := time.Now()
		run := &Run{Summary: Summary{Test: t.Name, Kind: t.Kind, Target: load.Target.Name, Start: now, End: now,
			Verdict: VerdictAborted, Reason: fmt.Sprintf("test %q: unknown kind %q", t.Name, t.Kind)}}
		run.Seal()
		return run
	}
	if env.Started != nil {
		env.Started(p.plan())
	}
	run := p.Run(ctx)
	if pv := run.Provenance; pv != nil {
		pv.Runner = env.Runner
		if v := env.Validity; v != nil {
			pv.Validity = &ValiditySetup{WindowSeconds: v.Window.Seconds(), SustainSeconds: v.Sustain.Seconds(), CPU: v.CPU,
				SchedulerP99Seconds: v.SchedulerP99.Seconds(), GCPauseP99Seconds: v.GCPauseP99.Seconds(),
				SendLagP99Seconds: v.SendLagP99.Seconds(), PoolWaitP99Seconds: v.PoolWaitP99.Seconds()}
		}
	}
	run.Seal()
	return run
}
