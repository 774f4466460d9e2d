package prober

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sloprober/sloprober/config"
)

// targetClient is the connection pool and the prompt calibration of a
// target; both outlive reloads that leave the target unchanged.
type targetClient struct {
	cfg config.TargetConfig
	// pools is the client's number of connection pools (poolsFor); a
	// reload that needs another number swaps the client, keeping the
	// calibration and the loads.
	pools  int
	client atomic.Pointer[Client]
	cal    *Calibrator
	// reportMu orders the calibration reports of a target; applied is
	// closed once the Apply that made the client has registered the
	// target's series, before which reports would be lost.
	reportMu sync.Mutex
	applied  chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
	// contextKnown is closed once the target's context length is known
	// (or known to be unknown).
	contextKnown chan struct{}

	warnedCut    atomic.Bool // a prompt was cut to the context: logged once
	warnedFrozen atomic.Bool // calibration froze: logged once
	warnedThawed atomic.Bool // calibration adapted again: logged once
}

// poolsFor is the number of connection pools of a client for streams
// concurrent requests (see idlePerPool).
func poolsFor(streams int) int { return max(1, (streams+idlePerPool-1)/idlePerPool) }

// newTargetClient builds a target's client and starts calibrating its
// prompts from /tokenize in the background.
func newTargetClient(logger *slog.Logger, factory ObserverFactory, t *config.TargetConfig, userAgent string, maxStreams int, reader Reader) (*targetClient, error) {
	c, err := NewClient(t, userAgent, maxStreams, WithReader(reader))
	if err != nil {
		return nil, err
	}
	if c.FastOff != "" {
		logger.Info("The fast reader does not serve this target: the standard one does", "target", t.Name, "reason", c.FastOff)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tc := &targetClient{cfg: *t, pools: poolsFor(maxStreams), cal: NewCalibrator(), cancel: cancel,
		applied: make(chan struct{}), contextKnown: make(chan struct{}), done: make(chan struct{})}
	tc.client.Store(c)
	go func() {
		defer close(tc.done)
		info := c.LearnContext(ctx, tc.cal)
		close(tc.contextKnown)
		info = c.tokenize(ctx, tc.cal, info)
		select {
		case <-tc.applied:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return
		}
		if cobs, ok := factory.(CalibrationObserver); ok {
			for range info.Rejected {
				cobs.CalibrationRejected(t.Name)
			}
		}
		overhead, perWord := tc.cal.Model()
		args := []any{"target", t.Name, "context_tokens", info.Context, "context_from", info.ContextSource,
			"template_overhead_from", info.Template, "overhead_tokens", overhead, "tokens_per_word", perWord}
		switch {
		case info.Tokenize == "" && NoTokenize(info.Err):
			logger.Info("Prompt lengths calibrated from the replies' usage: the target has no /tokenize", args...)
			return
		case info.Tokenize == "":
			logger.Info("Prompt lengths calibrated from the replies' usage: no token counts from /tokenize", append(args, "err", info.Err)...)
			return
		}
		logger.Info("Prompt lengths calibrated from /tokenize", append(args, "tokenize_form", info.Tokenize)...)
	}()
	return tc, nil
}

// swapClient replaces the client by one of another number of pools (see
// poolsFor). Requests in flight finish on the old one; its connections are
// closed now if idle, and the others once its requests have ended, within
// the target's timeout.
func (tc *targetClient) swapClient(c *Client) {
	old := tc.client.Swap(c)
	tc.pools = len(c.pools)
	old.Close()
	time.AfterFunc(time.Duration(tc.cfg.Timeout)+time.Second, old.Close)
}

func (tc *targetClient) close() {
	tc.cancel()
	<-tc.done
	tc.client.Load().Close()
}

// contextWait bounds how long the manager waits for the context lengths of new
// targets (/v1/models, /props) before it starts their loads: a target
// that answers neither within it is probed with its context unknown until
// the lookup ends (each lookup is bounded by infoTimeout).
const contextWait = 2 * time.Second

// calibrate feeds the server's count of a prompt to the target's
// calibration, reports rejected counts and freezing, and warns once when
// the counts stay off the requested lengths.
func (c *targetClient) calibrate(logger *slog.Logger, factory ObserverFactory, req *Request, counted int) {
	name := c.cfg.Name
	cobs, _ := factory.(CalibrationObserver)
	c.reportMu.Lock() // reports in the order of the observations
	o := c.cal.Observe(req.Words, counted)
	if !o.Accepted && cobs != nil {
		cobs.CalibrationRejected(name)
	}
	if o.Changed && cobs != nil {
		cobs.CalibrationFrozen(name, o.Frozen)
	}
	c.reportMu.Unlock()
	overhead, perWord := c.cal.Model()
	switch {
	case o.Changed && o.Frozen && c.warnedFrozen.CompareAndSwap(false, true):
		logger.Warn("The target's prompt token counts cannot be followed (a server that truncates prompts, or reports a constant count): prompt calibration is frozen at its last sane model; see sloprober_calibration_frozen",
			"target", name, "requested_tokens", req.InputTokens, "words_sent", req.Words, "counted_tokens", counted,
			"reason", o.Reason, "overhead_tokens", overhead, "tokens_per_word", perWord, "context_tokens", c.cal.Context())
	case o.Changed && !o.Frozen && c.warnedThawed.CompareAndSwap(false, true):
		logger.Info("The target's prompt token counts can be followed again (they agree with the kept model, or make a plausible model of their own): prompt calibration adapts again",
			"target", name, "overhead_tokens", overhead, "tokens_per_word", perWord)
	}
	if !req.calibrated || o.Frozen {
		return
	}
	if c.cal.record(InputWithinTolerance(req.InputTokens, counted)) {
		logger.Warn("The target's prompt token counts stay off the requested lengths after calibration; see sloprober_length_mismatches_total",
			"target", name, "requested", req.InputTokens, "counted", counted,
			"overhead_tokens", overhead, "tokens_per_word", perWord)
	}
}
