package testrun

import (
	"context"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
)

// SetRunner replaces how the service runs a test.
func (s *Service) SetRunner(run func(ctx context.Context, t *config.TestConfig, load config.LoadSpec, maxRate float64) *capacity.Run) {
	s.execute = func(ctx context.Context, env capacity.Env, t *config.TestConfig, load config.LoadSpec) *capacity.Run {
		return run(ctx, t, load, env.MaxRate)
	}
}

// SetExecute replaces how the service runs a test, with the run's Env.
func (s *Service) SetExecute(run func(ctx context.Context, env capacity.Env, t *config.TestConfig, load config.LoadSpec) *capacity.Run) {
	s.execute = run
}
