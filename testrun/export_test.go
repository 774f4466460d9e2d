package testrun

import (
	"context"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/runstore"
)

// SetRunner replaces how the service runs a test.
func (s *Service) SetRunner(run func(ctx context.Context, t *config.TestConfig, load config.LoadSpec, maxRate float64) *capacity.Run) {
	s.runTest = func(ctx context.Context, t *config.TestConfig, load config.LoadSpec, maxRate float64, _ runstore.ID) *capacity.Run {
		return run(ctx, t, load, maxRate)
	}
}
