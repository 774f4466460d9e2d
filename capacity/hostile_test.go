package capacity_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/testkit/hostile"
	"github.com/sloprober/sloprober/prober"
)

// honestUnderOne answers chat requests honestly after 20 ms while it has
// one in flight, and with bad while it has more: a server that passes a
// baseline and breaks under load the way no simulator fault does. Every
// other path (models, tokenize) is answered honestly.
type honestUnderOne struct {
	inFlight atomic.Int32
	ok, bad  http.Handler
}

func (h *honestUnderOne) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		h.ok.ServeHTTP(w, r)
		return
	}
	defer h.inFlight.Add(-1)
	if h.inFlight.Add(1) > 1 {
		h.bad.ServeHTTP(w, r)
		return
	}
	select {
	case <-time.After(20 * time.Millisecond):
	case <-r.Context().Done():
		return
	}
	h.ok.ServeHTTP(w, r)
}

// hostileConfig is a configuration of one target, liar, at url (timeout
// 1 s), a scenario s (TTFT SLO 150 ms, objective 0.85) and the test.
func hostileConfig(t *testing.T, url, test string) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(fmt.Sprintf(`
global: {max_rate: 100, max_in_flight: 50}
targets: [{name: liar, url: "%s", model: hostile-model, timeout: 1s}]
scenarios:
  - {name: s, input_tokens: 16, output_tokens: 20, ignore_eos: true, objective: 0.85, slo: {ttft: 150ms}}
tests:
%s`, url, test)), false)
	require.NoError(t, err)
	return cfg
}

// TestStepStopRulesAgainstLyingServers: a server honest at one request in
// flight and broken above it, in the ways real servers break (an error
// inside a 200, headers and then silence, a stream that never stops),
// has the stop rules end the sweep's first broken level long before its
// window: the capacity below it stands, and the run ends with a verdict,
// in a bounded time. The silent one is stopped by ttft_over although no
// TTFT is ever measured: a failed request counts its wait.
func TestStepStopRulesAgainstLyingServers(t *testing.T) {
	const test = `  - {name: t, kind: step, target: liar, scenario: s, baseline: {requests: 3}, sweep: {concurrency: [1, 4], refine: 0},
     window: {warmup: 0s, steady: 2s, min_requests: 1}, verify: {rates: [0.1], max_levels: 1, burst: {factor: 1}}, stop: {error_ratio: 0.2, ttft_over: 500ms}}
`
	for _, tc := range []struct {
		name string
		bad  http.Handler
		rule string
	}{
		{"error in a 200", hostile.JSONError200("the engine is overloaded"), "stop.error_ratio 0.2"},
		{"headers then silence", hostile.HeadersThenSilence(), "for its first token, above stop.ttft_over 500ms"},
		{"tokens forever", hostile.TokensForever(), "above stop.error_ratio 0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := hostile.Start(&honestUnderOne{ok: hostile.OK(), bad: tc.bad})
			defer srv.Close()
			start := time.Now()
			run := runStep(t, t.Context(), hostileConfig(t, srv.URL, test))
			took := time.Since(start)

			require.NotNil(t, run.Baseline)
			// 3 requests cannot meet an objective of 85% (their
			// interval is [44%, 100%]); none missed.
			require.NotEqual(t, capacity.DecisionMissed, run.Baseline.Decided(), "one request at a time is answered honestly")
			require.Len(t, run.Sweep, 2, run.Reason)
			require.True(t, run.Sweep[0].Met)
			broken := run.Sweep[1]
			require.False(t, broken.Met)
			require.Contains(t, broken.Note, tc.rule)
			// The stop rule, not the 2 s window, ended the level (the
			// silent server's at its 1 s timeout).
			require.Less(t, broken.WindowSeconds, 1.5)
			require.NotNil(t, run.Capacity, run.Reason)
			require.Equal(t, 1, run.Capacity.Concurrency, "the level below the broken one stands")
			require.Contains(t, []string{capacity.VerdictPass, capacity.VerdictFail, capacity.VerdictInconclusive}, run.Verdict, run.Reason)
			require.Less(t, took, 20*time.Second, "a baseline, a level, a level cut short, one verification stage")
			t.Logf("%s in %s: %s", run.Verdict, took.Round(time.Millisecond), run.Reason)
		})
	}
}

// TestStepLevelCountsLyingUsage: a server whose usage.prompt_tokens is a
// constant a thousand times the prompt it was sent. The level's input
// token rate is the server's count, as the contract defines it, and the
// level says in how many requests that count was off what was sent.
func TestStepLevelCountsLyingUsage(t *testing.T) {
	srv := hostile.Start(hostile.ConstantCount(16_000))
	defer srv.Close()
	run := runStep(t, t.Context(), hostileConfig(t, srv.URL, `  - {name: t, kind: step, target: liar, scenario: s, baseline: {requests: 5}, sweep: {concurrency: [1], refine: 0},
     window: {warmup: 0s, steady: 500ms, min_requests: 1}, verify: {rates: [0.1], max_levels: 1, burst: {factor: 1}}}
`))
	require.NotNil(t, run.Baseline, run.Reason)
	require.Equal(t, 5, run.Baseline.Sent)
	require.Equal(t, 5, run.Baseline.LengthMismatches["input"], "every request's usage is off the 16-token prompt")
	for _, l := range run.Sweep {
		require.Equal(t, l.Sent, l.LengthMismatches["input"], "level %d", l.Concurrency)
		sent := float64(l.Sent) / l.WindowSeconds
		require.InDelta(t, 16_000*sent, l.InputTokensRate, 16_000*sent*0.01, "the server's count")
		require.Equal(t, l.Sent, l.Outcomes[prober.OutcomeOK])
	}
	var b strings.Builder
	capacity.WriteTable(&b, run)
	require.Contains(t, b.String(), "usage.prompt_tokens off the prompt in 5")
}

// TestSoakAgainstServerThatStartsResetting: a soak of a server that
// resets every stream mid-way from its second window on is aborted by
// its stop rule after two windows in a row over it, with the windows it
// measured kept.
func TestSoakAgainstServerThatStartsResetting(t *testing.T) {
	var broken atomic.Bool
	ok, reset := hostile.OK(), hostile.ResetMidStream(3)
	srv := hostile.Start(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if broken.Load() && strings.HasSuffix(r.URL.Path, "/chat/completions") {
			reset.ServeHTTP(w, r)
			return
		}
		ok.ServeHTTP(w, r)
	}))
	defer srv.Close()
	cfg := hostileConfig(t, srv.URL, `  - {name: soak, kind: soak, target: liar, scenario: s, rate: 20, duration: 1m, window: 1s, stop: {error_ratio: 0.5}}
`)
	time.AfterFunc(1500*time.Millisecond, func() { broken.Store(true) })
	start := time.Now()
	run := runSoak(t, cfg, nil)
	require.Equal(t, capacity.VerdictAborted, run.Verdict, run.Reason)
	require.Contains(t, run.Reason, "(two windows in a row)")
	require.Less(t, time.Since(start), 15*time.Second, "not the minute of its duration")
	ws := run.Soak.Windows
	require.GreaterOrEqual(t, len(ws), 3)
	require.False(t, ws[0].ErrorBurst)
	last := ws[len(ws)-1]
	require.True(t, last.ErrorBurst)
	require.Positive(t, last.Outcomes[prober.OutcomeStreamError], "a reset mid-stream is a stream error")
}

// TestStepAgainstDelayedCloser: a whole step test (a baseline of 10,
// closed loop at 1 and 4 clients, open loop) against a server that closes
// each connection 0-3 ms after its response and never reads a request
// that races the close loses no request to a close, and the server
// processes none twice: the client reuses no connection before it knows
// the server keeps them, and after the first close soon after a response
// gives each request a connection of its own. On a busy host the
// server's own close can come late, after the client's wait: only as
// many requests as such late closes may be lost.
func TestStepAgainstDelayedCloser(t *testing.T) {
	srv, err := hostile.StartCloser(3*time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	defer srv.Close()
	run := runStep(t, t.Context(), hostileConfig(t, srv.URL(), `  - {name: t, kind: step, target: liar, scenario: s, baseline: {requests: 10}, sweep: {concurrency: [1, 4], refine: 0},
     window: {warmup: 0s, steady: 1s, min_requests: 1}, verify: {rates: [0.5], max_levels: 1, burst: {factor: 1}}}
`))
	require.NotNil(t, run.Baseline, run.Reason)
	levels := append([]capacity.Level{*run.Baseline}, run.Sweep...)
	levels = append(levels, run.Verify...)
	// A close the host delayed past the client's wait may race a
	// request: those, and only those, may be lost (the server's count).
	late := srv.Late()
	sent, lost := 0, 0
	var losing []string
	for _, l := range levels {
		if l.Prober == nil {
			continue
		}
		sent += l.Sent
		if n := l.Sent - l.Outcomes[prober.OutcomeOK]; n > 0 {
			lost += n
			losing = append(losing, fmt.Sprintf("%s level %s: %v", l.Stage, l.RateName(), l.Outcomes))
		}
	}
	require.LessOrEqual(t, lost, late, "requests lost (%s), closes %v or more late", strings.Join(losing, "; "), hostile.LateClose)
	require.Equal(t, 10, run.Baseline.Sent, "the baseline's 10 requests")
	processed := srv.Processed()
	delete(processed, "") // not a probe: /models and the like carry no request id
	for id, n := range processed {
		require.Equal(t, 1, n, "request %s processed %d times", id, n)
	}
	require.GreaterOrEqual(t, len(processed), sent, "every request counted was processed")
	t.Logf("%s: %d requests sent in levels, %d processed, %d lost, %d closes late", run.Verdict, sent, len(processed), lost, late)
}
