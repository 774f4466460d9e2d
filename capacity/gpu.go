package capacity

import (
	"context"
	"log/slog"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/gpu"
)

// gpuSource reads a target's GPUs (target.gpu) over each level and window
// of a test; a nil one, for a target without a GPU source, reads nothing,
// and its levels say "GPU: not measured".
type gpuSource struct {
	reader   gpu.Reader
	interval time.Duration
}

// newGPUSource returns the GPU source of target, nil without one (or when
// its reader cannot be built: the configuration was validated, so that is
// logged, and the test goes on without GPU data).
func newGPUSource(target config.TargetConfig, logger *slog.Logger) *gpuSource {
	c := target.GPU
	if c == nil {
		return nil
	}
	r, err := gpu.NewReader(target.Name, c)
	if err != nil {
		if logger != nil {
			logger.Warn("Reading the target's GPUs", "target", target.Name, "err", err)
		}
		return nil
	}
	return &gpuSource{reader: r, interval: time.Duration(c.Interval)}
}

// start samples the GPUs until the sampler's Stop; nil without a source.
func (g *gpuSource) start(ctx context.Context) *gpu.Sampler {
	if g == nil {
		return nil
	}
	return gpu.Start(ctx, g.reader, g.interval)
}

// close releases the reader's idle connections.
func (g *gpuSource) close() {
	if g == nil {
		return
	}
	if c, ok := g.reader.(interface{ Close() }); ok {
		c.Close()
	}
}
