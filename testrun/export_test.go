package testrun

import (
	"context"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
)

// SetRunner replaces how the service runs a test.
func (s *Service) SetRunner(run func(ctx context.Context, t *config.TestConfig, load config.LoadSpec, maxRate float64) *capacity.Run) {
	s.runTest = run
}
