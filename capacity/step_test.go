package capacity_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/report"
	"github.com/sloprober/sloprober/simulator/simtest"
	"github.com/sloprober/sloprober/validity"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The simulator of the ground-truth test: 4 slots; prefill 4 ms (no
// per-token cost); a decode step of 8 ms + 2 ms per running sequence;
// replies of exactly 20 tokens (ignore_eos).
//
// Its capacity follows from the engine model (README, "The engine model").
// With c <= 4 closed-loop clients every request runs at once: a client's
// cycle is its own prefill, the prefills of the c - 1 others that pause
// its decoding, and 19 decode steps of 8 + 2c ms:
//
//	T(c) = 4c + 19 (8 + 2c) ms: T(1) = 194, T(2) = 236, T(4) = 320 ms
//
// so 4 clients complete 4 / 0.32 s = 12.5 req/s, and TTFT is the prefill
// plus at most one decode step: under 4 + 16 = 20 ms. The four requests of
// a full engine start within milliseconds of each other and so end in the
// same decode step: a fifth client waits a whole cycle (about 300 ms) once
// in every five requests, so 5 clients attain 80%, 6 clients 67%, 8 none.
// With a TTFT SLO of 150 ms and an objective of 85% the capacity is 4
// clients at 12.5 req/s, and the knee is at 4 clients (5 add nothing: the
// engine is full). Open loop, Poisson arrivals queue long before the engine
// is full (the seed's point), but at a quarter of that rate only 2% of
// requests find every slot taken (Erlang C of 4 slots at 25% load), and few
// of those wait 130 ms for one, so the SLO holds; at 1.5 times it the queue
// grows without bound. (Between the two the verdict of a 3 s window is a
// matter of luck.)
const groundTruthSim = `
slots: 4
prefill: {base: 4ms, per_token: 0s}
decode: {base: 8ms, per_sequence: 2ms}
`

const (
	analyticConcurrency = 4
	analyticRate        = 12.5 // req/s
)

func stepConfig(t *testing.T, url, test string) *config.Config {
	t.Helper()
	return loadStepConfig(t, url, "objective: 0.85, slo: {ttft: 150ms}", test)
}

// loadStepConfig is the configuration of a step test against the
// simulator at url, whose scenario "short" has the objective and SLOs of
// judging.
func loadStepConfig(t *testing.T, url, judging, test string) *config.Config {
	t.Helper()
	cfg, err := config.Load([]byte(fmt.Sprintf(`
global: {max_rate: 100, max_in_flight: 200}
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s, simulator: true}]
scenarios:
  - {name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, %s}
tests:
%s`, url, judging, test)), false)
	require.NoError(t, err)
	return cfg
}

// lenientConfig is stepConfig with a lenient scenario "short" (a TTFT
// SLO of 2 s, an objective of 50%), for the tests of what the procedure
// does around its levels (drains, the burst, prober-bound levels), not of
// how it judges one. On a busy host the in-process simulator and prober
// stretch a 20 ms TTFT past 150 ms now and then (7 of 53 requests at
// 3.5 req/s on 8 slots beside a CPU burner), and one client completes
// 3 req/s, not 5: 27 requests in three 3 s windows, where an objective of
// 85% needs 33 all good to be met at three looks (z 2.39, 1 - 0.05 / 3
// two-sided: z^2 * 0.85 / 0.15 = 32.4). Such levels stayed undecided, so
// no capacity was found and nothing was verified. At 50%, 6 requests all
// good meet it (z^2 * 0.5 / 0.5 = 5.7): a level decides in its first
// window.
func lenientConfig(t *testing.T, url, test string) *config.Config {
	t.Helper()
	return loadStepConfig(t, url, "objective: 0.5, slo: {ttft: 2s}", test)
}

// newManager returns a recorder and a manager whose observer it is, with
// the configuration's global caps; the manager stops when the test ends.
func newManager(t *testing.T, cfg *config.Config) (*capacity.Recorder, *prober.Manager) {
	t.Helper()
	rec := capacity.NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	t.Cleanup(func() { m.Stop(time.Second) })
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: cfg.Global.MaxRate, MaxInFlight: cfg.Global.MaxInFlight}))
	return rec, m
}

// runStep runs the configuration's first test against it.
func runStep(t *testing.T, ctx context.Context, cfg *config.Config) *capacity.Run {
	t.Helper()
	rec, m := newManager(t, cfg)
	tc := cfg.Tests[0]
	s := &capacity.Step{Manager: m, Recorder: rec, Test: tc, Load: cfg.TestLoad(tc), MaxRate: cfg.Global.MaxRate, Logger: promslog.NewNopLogger(), ConfigHash: cfg.Hash()}
	return s.Run(ctx)
}

// TestStepGroundTruth: the step test finds the analytic capacity in
// clients (4, the engine's slots), the knee at the same level, bisects 8
// down to 6 and 5, verifies a quarter of the rate open loop, and passes.
//
// The rate 4 clients complete is 12.5 req/s on the engine model's nominal
// phases, but only on a quiet machine: beside a CPU burner the
// simulator's timers overshoot (its decode steps at 4 clients took 21 to
// 24 ms, not 16) and the prober's own round trips stretch each client's
// cycle (546 ms, not 320), so 4 clients completed 7.2 to 7.5 req/s and a
// check against 12.5 failed. The rate is checked against the simulator's
// own clock instead (its timings and its stamp_chunks stamps, collected
// beside the recorder): it is within 10% of the rate at which the
// simulator, by its clock, completed the requests that arrived in the
// level's window, and no more than 10% over what the engine's four slots
// allow at the speed its own clock says they ran (four over the
// requests' mean prefill + decode, the time each held its slot, over a
// window that ends when the last of them does), nor over the nominal
// 12.5, which only a faster engine could beat. (The queue is not a
// slot's time: it counts the reading and parsing of a request and the
// wait for the next step, while the slot it will take may be idle; and a
// 6 s window's arrivals end up to a request's length after it. Without
// either, the bound was 8.24 req/s where 4 clients completed 9.30 of
// them, by the same clock, beside a CPU burner and other test runs.)
//
// A level may take up to 60 s, 200 batches of 0.3 s, looked at after 3,
// 5, 8, 12, 18, 27, 41, 62, 93, 140 and 200 batches: a level whose every
// request is good decides met at an objective of 85% once its requests
// number z^2 * 0.85 / 0.15, with z at 1 - 0.025 / 20 at the first ten
// looks (3.02): 52; at the last (2.24) 29; with a bad request or two a
// few more (Wilson's interval; a request now and then misses the 150 ms
// TTFT on a busy machine). The quarter rate is a quarter of the capacity
// measured: 2.8 req/s on a quiet machine, 1.8 beside a CPU burner, which
// draws 107 requests in 60 s on average.
func TestStepGroundTruth(t *testing.T) {
	sim := simtest.Start(t, groundTruthSim+"stamp_chunks: true\n")
	cfg := stepConfig(t, sim.URL, `
  - name: knee
    kind: step
    target: sim
    scenario: short
    baseline: {requests: 10}
    sweep: {concurrency: [1, 2, 4, 8], refine: 2}
    window: {warmup: 1s, steady: 3s, min_requests: 20, max_steady: 60s}
    verify: {rates: [0.25, 1.5], max_levels: 2, burst: {factor: 2, for: 2s}, drain_within: 10s}
`)
	// The manager's results go to the recorder, and to seen for the
	// simulator's own account of them.
	seen := &finished{}
	rec := capacity.NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), teeFactory{rec, seen}, "sloprober/test")
	t.Cleanup(func() { m.Stop(time.Second) })
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: cfg.Global.MaxRate, MaxInFlight: cfg.Global.MaxInFlight}))
	tc := cfg.Tests[0]
	run := (&capacity.Step{Manager: m, Recorder: rec, Test: tc, Load: cfg.TestLoad(tc), MaxRate: cfg.Global.MaxRate, Logger: promslog.NewNopLogger(), ConfigHash: cfg.Hash()}).Run(t.Context())
	for _, l := range append(append([]capacity.Level{*run.Baseline}, run.Sweep...), run.Verify...) {
		t.Logf("%-8s c=%-2d rate=%5.2f sent=%3d completed=%5.2f/s goodput=%5.2f/s attainment=%.2f ttft p50/p95/p99 %.0f/%.0f/%.0f ms drain %.2fs",
			l.Stage, l.Concurrency, l.IntendedRate, l.Sent, l.CompletedRate, l.Goodput, l.Attainment, 1e3*l.TTFT.P50, 1e3*l.TTFT.P95, 1e3*l.TTFT.P99, l.DrainSeconds)
	}
	require.Equal(t, capacity.VerdictPass, run.Verdict, run.Reason)
	require.NotNil(t, run.Capacity)
	require.Equal(t, analyticConcurrency, run.Capacity.Concurrency, "capacity in clients")
	var capLevel capacity.Level
	for _, l := range run.Sweep {
		if l.Concurrency == analyticConcurrency {
			capLevel = l
		}
	}
	require.Equal(t, capLevel.CompletedRate, run.Capacity.Rate, "the capacity is what 4 clients completed")
	served, engine := seen.simulatorRates(t, capLevel.Start, capLevel.WindowSeconds, analyticConcurrency)
	t.Logf("capacity %.2f req/s in %.1f s; by the simulator's clock it completed %.2f req/s of the window's arrivals, and its 4 slots allow %.2f at the speed they ran (%.1f nominally)",
		run.Capacity.Rate, capLevel.WindowSeconds, served, engine, analyticRate)
	require.InEpsilon(t, served, run.Capacity.Rate, 0.10, "capacity in req/s at 4 clients against what the simulator served")
	require.LessOrEqual(t, run.Capacity.Rate, 1.1*engine, "no more than the engine's 4 slots allow at the speed they ran")
	require.LessOrEqual(t, run.Capacity.Rate, 1.1*analyticRate, "no more than the nominal engine allows")

	var concurrency []int
	for _, l := range run.Sweep {
		concurrency = append(concurrency, l.Concurrency)
		// Below the capacity a level meets, or is implied by a higher
		// one that met when its own requests were too few (every one
		// good).
		require.Equal(t, l.Concurrency <= analyticConcurrency, l.Met || l.ImpliedBy > 0, "level %d: %+v", l.Concurrency, l.Scenarios)
		if l.ImpliedBy > 0 {
			require.Equal(t, analyticConcurrency, l.ImpliedBy, "implied by the capacity's level")
			require.Equal(t, l.Counted, l.Scenarios[0].Good, "implied: every request good")
		}
		require.Equal(t, l.Sent, l.Outcomes[prober.OutcomeOK], "level %d: every request ok", l.Concurrency)
		// A level is measured in batches of 0.3 s (a tenth of the
		// steady window) until a look decides it, up to 200 (max_steady
		// 60s).
		require.Positive(t, l.Batches)
		require.LessOrEqual(t, l.Batches, 200)
		// Each batch ends when its timer fires, never before (the next
		// opens at that instant), and is due at the first's start plus
		// a whole number of batches, so that lateness does not add up:
		// the level's window is its batches, and less than one more.
		t.Logf("%s c=%d: %d batches in %.3f s (%.0f ms over)", l.Stage, l.Concurrency, l.Batches, l.WindowSeconds,
			1e3*(l.WindowSeconds-0.3*float64(l.Batches)))
		require.GreaterOrEqual(t, l.WindowSeconds, 0.3*float64(l.Batches), "the batches")
		require.Less(t, l.WindowSeconds, 0.3*float64(1+l.Batches), "the batches")
		require.NotNil(t, l.Interval)
		require.Equal(t, l.Met, l.Interval.Lower >= 0.85, "level %d: met is the interval's lower end at the objective: %+v", l.Concurrency, l.Interval)
		require.Positive(t, l.TTFT.N)
		require.Contains(t, l.TTFT.LowConfidence, "p99", "fewer than 1,000 samples")
	}
	require.Equal(t, []int{1, 2, 4, 5, 6, 8}, concurrency, "bisection between 4 and 8: 6, then 5")
	require.NotNil(t, run.Knee)
	require.True(t, run.Knee.Reached, run.Knee.Reason)
	require.Equal(t, analyticConcurrency, run.Knee.Concurrency, run.Knee.Reason)

	require.Len(t, run.Verify, 2)
	require.True(t, run.Verify[0].Met, "a quarter of the capacity, open loop: %+v", run.Verify[0].Scenarios)
	require.Equal(t, capacity.DecisionMissed, run.Verify[1].Decision, "1.5 times it overloads: %+v", run.Verify[1].Scenarios)
	verified, ok := run.Capacity.Verified()
	require.True(t, ok)
	require.Equal(t, run.Verify[0].OfferedRate, verified, "stated at the rate its window offered")
	v0 := run.Verify[0]
	require.InDelta(t, float64(max(v0.Scheduled, v0.Sent))/v0.WindowSeconds, verified, 1e-9, "the arrivals its windows drew over their length")
	require.Equal(t, run.Verify[1].OfferedRate, run.Capacity.Bound)
	require.Equal(t, capacity.DecisionMissed, run.Capacity.BoundDecision)
	require.NotNil(t, run.Burst)
	require.Less(t, run.Burst.DrainSeconds, 10.0)
	require.Equal(t, 10, run.Baseline.Sent)

	// What a report is built from: the run's provenance and setup, who
	// the simulator said it was, per level the lengths sent, the longest
	// requests, the prober's health and the server's own timings, and the
	// burst's timeline.
	require.Equal(t, cfg.Hash(), run.Provenance.ConfigHash)
	require.Equal(t, sim.URL+"/v1", run.Setup.Target.URL)
	require.Equal(t, 1, run.Setup.Target.Replicas)
	require.Equal(t, []capacity.SLOSetup{{Name: "ttft", ThresholdSeconds: 0.15}}, run.Setup.Scenarios[0].SLOs)
	require.Contains(t, run.Setup.Test, "concurrency:")
	require.Equal(t, "sim-model", run.Identity.Models[0].ID)
	require.Equal(t, "sim-model", run.Identity.ReplyModels[0].Value)
	require.Contains(t, run.Identity.Servers[0].Value, "sloprober-sim")
	for _, l := range append(run.Sweep, run.Verify...) {
		require.Equal(t, 16.0, l.Lengths.Input.P50, "%s %d: 16 tokens sent", l.Stage, l.Concurrency)
		require.Equal(t, 20.0, l.Lengths.Output.P99, "%s %d: 20 tokens received", l.Stage, l.Concurrency)
		if l.Sent >= 10 {
			require.Equal(t, l.Sent/10, l.Longest.Requests, "%s %d: the top decile", l.Stage, l.Concurrency)
		} else {
			require.Nil(t, l.Longest, "%s %d: no decile of fewer than 10 requests", l.Stage, l.Concurrency)
		}
		require.Equal(t, l.Sent, l.Prober.Sends)
		if l.Concurrency > 0 {
			require.Zero(t, l.Prober.LagMax, "%s %d: a closed-loop request is due when it is sent", l.Stage, l.Concurrency)
		} else {
			// The median: the P99 of fewer than 100 sends is their
			// largest lag, one hiccup of a busy machine (52 ms beside
			// a CPU burner), as the validity judgement reads it too.
			require.Positive(t, l.Prober.LagMax, "%s %g req/s: open-loop sends are never exactly on time", l.Stage, l.IntendedRate)
			require.Less(t, l.Prober.LagP50, 0.05, "%s %g req/s", l.Stage, l.IntendedRate)
		}
		require.Positive(t, l.Prober.CPUSeconds)
		require.Equal(t, l.Sent, l.Server.Reported, "the simulator times every request")
	}
	tl := run.Burst.Timeline
	require.NotNil(t, tl)
	require.Greater(t, tl.BurstEnd, tl.BurstStart)
	require.InDelta(t, 2, tl.BurstEnd-tl.BurstStart, 0.5, "verify.burst.for")
	require.Greater(t, tl.Drained, tl.BurstEnd, "the backlog drained")
	require.Positive(t, slices.Max(tl.InFlight))
	require.InDelta(t, tl.Drained/0.1, len(tl.InFlight), 50, "ten samples a second until the end")

	// Its report states the analytic capacity as the closed-loop one.
	rep := report.Build(run)
	require.Equal(t, analyticConcurrency, rep.Capacity.Concurrency)
	require.Equal(t, run.Capacity.Rate, rep.Capacity.ClosedRate)
	require.Equal(t, verified, rep.Capacity.VerifiedRate)
	var md strings.Builder
	require.NoError(t, report.WriteMarkdown(&md, rep))
	require.Contains(t, md.String(), "Closed loop: 4 clients completed")
}

// finished keeps every request a manager finished, for the simulator's
// own account of them (its timings and stamps).
type finished struct {
	mu      sync.Mutex
	results []*prober.Result
}

// teeFactory hands a manager's requests to the recorder, and keeps them
// in seen.
type teeFactory struct {
	*capacity.Recorder
	seen *finished
}

func (f teeFactory) Observe(info prober.LoadInfo) prober.Observer {
	return teeObserver{f.Recorder.Observe(info), f.seen}
}

type teeObserver struct {
	prober.Observer
	seen *finished
}

func (o teeObserver) Finished(r *prober.Result, m *prober.Measurement) {
	o.Observer.Finished(r, m)
	o.seen.mu.Lock()
	o.seen.results = append(o.seen.results, r)
	o.seen.mu.Unlock()
}

// simulatorRates is the simulator's own account of a window of secs
// seconds from start, on its clock (stamp_chunks): served, the rate at
// which it completed the ok requests that arrived in the window (its
// first token's stamp less the queue and prefill it reported), and
// engine, the most that slots could complete of those arrivals at the
// speed they ran. Each request holds a slot for its prefill + decode
// (from its admission to its last token), and the window's arrivals are
// served by the window's end plus the longest of them (the last one
// admitted ends that much later): n x mean(prefill + decode) <= slots x
// (secs + longest), so n / secs <= slots / mean x (1 + longest / secs).
func (f *finished) simulatorRates(t *testing.T, start time.Time, secs float64, slots int) (served, engine float64) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	from, to := start.UnixNano(), start.Add(time.Duration(secs*float64(time.Second))).UnixNano()
	n, busy, queued, longest := 0, 0.0, 0.0, 0.0
	for _, r := range f.results {
		tm := r.Timings
		if r.Outcome != prober.OutcomeOK || tm == nil || tm.QueueMS == nil || len(r.Stamps) == 0 {
			continue
		}
		before := *tm.QueueMS + tm.PromptMS // from its arrival to its first token
		if arrived := r.Stamps[0] - int64(before*1e6); arrived < from || arrived >= to {
			continue
		}
		n++
		busy += tm.PromptMS + tm.PredictedMS
		queued += *tm.QueueMS
		longest = max(longest, *tm.QueueMS+tm.PromptMS+tm.PredictedMS)
	}
	require.Positive(t, n, "the simulator stamped the window's requests")
	t.Logf("the simulator's account of %d requests: mean queue %.1f ms, prefill + decode %.1f ms, the longest %.1f ms", n, queued/float64(n), busy/float64(n), longest)
	return float64(n) / secs, float64(slots) / (busy / float64(n) / 1e3) * (1 + longest/1e3/secs)
}

// TestStepVerdicts: the other verdicts, each with its reason.
func TestStepVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name, sim, test, verdict, reason string
		// lenient: the scenario of lenientConfig, not stepConfig's;
		// judging, the scenario's objective and SLOs when set.
		lenient bool
		judging string
	}{
		{
			// Every request good, but a 99.9% objective wants about
			// 5,000 of them in a row: 2 s windows hold a few dozen, so
			// each level stops at its first look and says what would
			// decide it, and so does the verdict.
			name:    "inconclusive: an objective no window can show",
			judging: "objective: 0.999, slo: {ttft: 2s}",
			sim:     "slots: 4\nprefill: {base: 4ms, per_token: 0s}\ndecode: {base: 8ms, per_sequence: 2ms}\n",
			test: `
  - name: strict
    kind: step
    target: sim
    scenario: short
    baseline: {requests: 3}
    sweep: {concurrency: [1, 2], refine: 0}
    window: {warmup: 200ms, steady: 1s, min_requests: 3, max_steady: 2s}
`,
			verdict: capacity.VerdictInconclusive,
			reason:  "more requests (~",
		},
		{
			name: "infeasible: one request at a time misses the SLO",
			sim:  "slots: 4\nprefill: {base: 200ms, per_token: 0s}\ndecode: {base: 2ms, per_sequence: 0s}\n",
			test: `
  - {name: slow, kind: step, target: sim, scenario: short, baseline: {requests: 5}, sweep: {concurrency: [1, 2]}}
`,
			verdict: capacity.VerdictInfeasible,
			reason:  "one request at a time already misses the objective: short attained 0.0% [0.0, 43.5] of 5 (objective 85.0%), ttft 0.0%",
		},
		{
			name: "aborted: a stop rule",
			sim:  "slots: 4\nfaults: {error_rate: {\"500\": 1}}\n",
			test: `
  - {name: broken, kind: step, target: sim, scenario: short, baseline: {requests: 50}, stop: {error_ratio: 0.5}}
`,
			verdict: capacity.VerdictAborted,
			reason:  "requests failed, above stop.error_ratio 0.5",
		},
		{
			// 8 slots: the open loop at 0.4x rarely queues, so that
			// its level decides and the burst runs; the lenient
			// scenario, so that a busy host's late TTFTs do not leave
			// it undecided (86.8% [63.2, 96.2] of 53 at 85%, 150 ms
			// beside a CPU burner): the burst is under test, not the
			// level.
			name:    "fail: the burst's backlog does not drain in time",
			lenient: true,
			sim:     "slots: 8\nprefill: {base: 4ms, per_token: 0s}\ndecode: {base: 8ms, per_sequence: 2ms}\n",
			test: `
  - name: burst
    kind: step
    target: sim
    scenario: short
    baseline: {requests: 5}
    sweep: {concurrency: [4], refine: 0}
    window: {warmup: 500ms, steady: 5s, min_requests: 10, max_steady: 15s}
    verify: {rates: [0.4], max_levels: 1, burst: {factor: 6, for: 2s}, drain_within: 1ms}
`,
			verdict: capacity.VerdictFail,
			// "(it took 4.1s)" on a quiet host, "(not drained after
			// 10.0s)" when a busy one (CI, 2 cores) slows the drain
			// past the watch: both fail the 1 ms bound.
			reason: "the backlog of a 6x burst for 2s did not drain within 1ms (",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := simtest.Start(t, tc.sim)
			cfg := stepConfig(t, sim.URL, tc.test)
			if tc.lenient {
				cfg = lenientConfig(t, sim.URL, tc.test)
			}
			if tc.judging != "" {
				cfg = loadStepConfig(t, sim.URL, tc.judging, tc.test)
			}
			run := runStep(t, t.Context(), cfg)
			require.Equal(t, tc.verdict, run.Verdict, run.Reason)
			require.Contains(t, run.Reason, tc.reason)
			early := 0
			for _, l := range run.Sweep {
				if td := l.ToDecide; td != nil && td.Early {
					// Stopped before its last look: it says so.
					early++
					require.Less(t, l.Batches, 20, "%s: stopped before max_steady's 20 batches", l.RateName())
					require.Contains(t, strings.Join(l.Notes(false), "; "), "more than window.max_steady holds")
				}
			}
			if tc.verdict == capacity.VerdictInconclusive {
				require.Positive(t, early, "a level stopped early says what would decide it")
			}
		})
	}
}

// TestStepAbort: a run whose context ends (SIGTERM, the abort API) ends
// within the target's timeout, as aborted, its partial results kept.
func TestStepAbort(t *testing.T) {
	sim := simtest.Start(t, groundTruthSim)
	cfg := stepConfig(t, sim.URL, `
  - {name: long, kind: step, target: sim, scenario: short, baseline: {requests: 5}, sweep: {concurrency: [1, 2]}, window: {warmup: 0s, steady: 1m}}
`)
	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(3*time.Second, func() { cancel(fmt.Errorf("test abort")) })
	start := time.Now()
	run := runStep(t, ctx, cfg)
	require.Less(t, time.Since(start), 15*time.Second)
	require.Equal(t, capacity.VerdictAborted, run.Verdict)
	require.Equal(t, "aborted: test abort", run.Reason)
	require.NotNil(t, run.Baseline)
	require.Len(t, run.Sweep, 1, "the level running is kept")
	require.Positive(t, run.Sweep[0].Sent)
}

// queueUntil is a target's queue that holds requests until a set time
// after each level's drain begins to ask; the windows' sampling reads see
// it and change nothing.
type queueUntil struct {
	mu             sync.Mutex
	hold           time.Duration
	since          time.Time
	calls, samples int
}

func (q *queueUntil) Waiting(ctx context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if capacity.Sampling(ctx) {
		q.samples++
		return 2, nil
	}
	if q.since.IsZero() {
		q.since = time.Now()
	}
	q.calls++
	if time.Since(q.since) < q.hold {
		return 3, nil
	}
	q.since = time.Time{}
	return 0, nil
}

// TestStepDrainWaitsForQueue: with a QueueProbe, a level's drain waits
// until the target's queue is empty too.
//
// The lenient scenario (lenientConfig): its levels decide in their first
// window on a busy host too, so that the sweep finds a capacity and the
// verify level runs (with 85% at 150 ms one client was left undecided
// beside a CPU burner, and nothing was verified).
func TestStepDrainWaitsForQueue(t *testing.T) {
	sim := simtest.Start(t, groundTruthSim)
	cfg := lenientConfig(t, sim.URL, `
  - {name: q, kind: step, target: sim, scenario: short, baseline: {requests: 3}, sweep: {concurrency: [1], refine: 0}, window: {warmup: 0s, steady: 3s, min_requests: 1, max_steady: 9s}, verify: {rates: [0.25], max_levels: 1, burst: {factor: 1}}}
`)
	rec := capacity.NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: 100, MaxInFlight: 200}))
	q := &queueUntil{hold: 300 * time.Millisecond}
	s := &capacity.Step{Manager: m, Recorder: rec, Test: cfg.Tests[0], Load: cfg.TestLoad(cfg.Tests[0]), MaxRate: 100,
		Logger: promslog.NewNopLogger(), Queue: q}
	run := s.Run(t.Context())
	require.NotEqual(t, capacity.VerdictAborted, run.Verdict, run.Reason)
	require.Len(t, run.Verify, 1, run.Reason)
	for _, l := range append([]capacity.Level{*run.Baseline, run.Sweep[0]}, run.Verify...) {
		require.GreaterOrEqual(t, l.DrainSeconds, 0.3, "%s", l.Stage)
	}
	require.Greater(t, q.calls, 3)
	require.Positive(t, q.samples)
	for _, l := range append([]capacity.Level{*run.Baseline, run.Sweep[0]}, run.Verify...) {
		if eq := l.EngineQueue; eq != nil {
			require.Equal(t, capacity.EngineQueue{Samples: eq.Samples, Mean: 2, Max: 2}, *eq, "%s: the window's samples of the engine's queue", l.Stage)
		}
	}
	require.NotNil(t, run.Sweep[0].EngineQueue, "a level's window samples the engine's queue")
}

// TestStepReplay: a step test with a trace sends the trace's requests:
// every level's replies are the trace's 7 tokens, not the scenario's 20,
// closed loop as open loop (where the trace's arrivals are replayed at the
// stage's rate).
func TestStepReplay(t *testing.T) {
	sim := simtest.Start(t, groundTruthSim)
	dir := t.TempDir()
	var trace strings.Builder
	for i := range 40 {
		fmt.Fprintf(&trace, `{"timestamp": %d, "input_length": 64, "output_length": 7, "hash_ids": [%d]}`+"\n", 100*i, i%3)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trace.jsonl"), []byte(trace.String()), 0o600))
	file := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`
global: {max_rate: 100, max_in_flight: 200}
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s}]
scenarios: [{name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, objective: 0.85, slo: {ttft: 150ms}}]
tests:
  - name: traced
    kind: step
    target: sim
    scenario: short
    replay: {file: trace.jsonl, format: mooncake}
    baseline: {requests: 3}
    sweep: {concurrency: [1, 2], refine: 0}
    window: {warmup: 300ms, steady: 1500ms, min_requests: 1}
    verify: {rates: [0.25], burst: {factor: 1}}
`, sim.URL)), 0o600))
	cfg, err := config.LoadFile(file, false)
	require.NoError(t, err)
	run := runStep(t, t.Context(), cfg)
	require.NotEqual(t, capacity.VerdictAborted, run.Verdict, run.Reason)
	for _, l := range append(append([]capacity.Level{}, run.Sweep...), run.Verify...) {
		require.Positive(t, l.Sent, l.Stage)
		require.InDelta(t, 7, l.OutputTokensRate/l.CompletedRate, 0.01, "%s: the trace's output lengths", l.Stage)
	}
}

// queueStuck is a target's queue that other clients keep full during the
// first drain that asks, and empty after it.
type queueStuck struct {
	mu       sync.Mutex
	last     time.Time
	episodes int
}

func (q *queueStuck) Waiting(ctx context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if capacity.Sampling(ctx) {
		return 0, nil
	}
	if time.Since(q.last) > 500*time.Millisecond {
		q.episodes++ // a new drain
	}
	q.last = time.Now()
	if q.episodes == 1 {
		return 5, nil
	}
	return 0, nil
}

// TestStepDrainEngineQueueStuck: when the test's own requests have ended
// but the engine's queue does not empty (other clients), the level ends at
// the drain's bound with a note saying so; the test goes on.
func TestStepDrainEngineQueueStuck(t *testing.T) {
	sim := simtest.Start(t, groundTruthSim)
	cfg := stepConfig(t, sim.URL, `
  - {name: q, kind: step, target: sim, scenario: short, baseline: {requests: 2}, sweep: {concurrency: [1], refine: 0}, window: {warmup: 0s, steady: 1s, min_requests: 1}, verify: {rates: [0.25], burst: {factor: 1}}}
`)
	cfg.Targets[0].Timeout = model.Duration(time.Second)
	load := cfg.TestLoad(cfg.Tests[0])
	rec := capacity.NewRecorder()
	m := prober.NewManager(promslog.NewNopLogger(), rec, "sloprober/test")
	defer m.Stop(time.Second)
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: 100, MaxInFlight: 200}))
	s := &capacity.Step{Manager: m, Recorder: rec, Test: cfg.Tests[0], Load: load, MaxRate: 100,
		Logger: promslog.NewNopLogger(), Queue: &queueStuck{}}
	run := s.Run(t.Context())
	require.NotEqual(t, capacity.VerdictAborted, run.Verdict, run.Reason)
	require.Contains(t, run.Baseline.Note, "engine queue still 5 after 6s (other clients?)")
	require.GreaterOrEqual(t, run.Baseline.DrainSeconds, 6.0)
	require.NotContains(t, run.Sweep[0].Note, "engine queue")
}

// TestStepProberLate: a level measured while the prober was over its
// validity thresholds stands when the prober's delays could not change
// its decision: with a CPU threshold any use is over, every level is
// over it, and the run concludes as on a quiet prober. A met level says
// "met all the same" (a late read only makes a level look worse); each
// carries its read delays, bounded below by the stall sampler's period,
// and its decisions with every request corrected by them. On a busy
// host the delays are real, tens of ms (a level over a real threshold
// too, or reads so late that a closed-loop level's clients waited on the
// prober), and may change a level's decision: such a level may be
// prober-bound, and the run may conclude nothing, saying so.
func TestStepProberLate(t *testing.T) {
	sim := simtest.Start(t, groundTruthSim)
	cfg := lenientConfig(t, sim.URL, `
  - {name: pb, kind: step, target: sim, scenario: short, baseline: {requests: 2}, sweep: {concurrency: [1, 2, 4], refine: 0}, window: {warmup: 0s, steady: 2s, min_requests: 1, max_steady: 4s}, verify: {rates: [0.5], max_levels: 1, burst: {factor: 1}}}
`)
	rec, m := newManager(t, cfg)
	v := validity.DefaultConfig
	v.CPU = 1e-9
	s := &capacity.Step{Manager: m, Recorder: rec, Test: cfg.Tests[0], Load: cfg.TestLoad(cfg.Tests[0]), MaxRate: 100,
		Logger: promslog.NewNopLogger(), Validity: &v}
	run := s.Run(t.Context())
	require.NotEmpty(t, run.Sweep)
	met, busy := 0, false
	for _, l := range run.Sweep {
		p := l.Prober
		require.Contains(t, p.Over, validity.ReasonCPU, "level %d", l.Concurrency)
		busy = busy || slices.ContainsFunc(p.Over, func(r string) bool { return r != validity.ReasonCPU })
		require.GreaterOrEqual(t, p.ReadDelayMax, 0.0025, "level %d: at least the sampler's period and floor", l.Concurrency)
		require.NotEmpty(t, p.DecisionIfBetter, "level %d", l.Concurrency)
		require.NotEmpty(t, p.DecisionIfWorse, "level %d", l.Concurrency)
		if l.Decided() == capacity.DecisionMet && l.IdleClients() {
			// Its reads were so late that its clients waited on the
			// prober (a busy host: 30 ms of a 362 ms E2E): fewer
			// requests in flight than clients, and a met may owe it to
			// that. It is set aside, and says why.
			busy = true
			require.True(t, l.ProberBound(), "level %d: %s", l.Concurrency, l.Note)
			require.Contains(t, l.Note, "its clients waited on the prober")
		} else if l.Decided() == capacity.DecisionMet {
			met++
			require.False(t, l.ProberBound(), "level %d met: a late read only makes a level look worse (over %v, %s: %s)", l.Concurrency, p.Over, p.Rule, l.Note)
			require.Equal(t, "met despite the prober's delays, which only make a level look worse", p.Rule)
			require.Contains(t, l.Note, "prober late (")
			require.Contains(t, l.Note, "met all the same")
		}
		require.Contains(t, p.Diagnosis, "saturated prober")
	}
	if busy {
		t.Logf("the host was busy (real delays): %s", run.Reason)
		return
	}
	require.NotContains(t, run.Reason, "prober-bound", run.Reason)
	require.Positive(t, met, run.Reason)
	require.NotNil(t, run.Capacity, run.Reason)
}

// TestStepProberBound: a level whose decision the prober's delays could
// change is measured while the prober was the limit: measured again up
// to retries, then left out, and the run concludes nothing, naming the
// cause first. The simulator answers in 20 ms; against a TTFT SLO of 19
// ms every request misses, by less than its read delay (at least 2.5 ms:
// the sampler's period and floor): corrected, they would all be good.
func TestStepProberBound(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 20ms, itl: 1ms}\n")
	cfg, err := config.Load([]byte(fmt.Sprintf(`
global: {max_rate: 100, max_in_flight: 200}
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 10s, simulator: true}]
scenarios: [{name: short, input_tokens: 16, output_tokens: 5, ignore_eos: true, objective: 0.85, slo: {ttft: 19ms}}]
tests:
  - {name: pbb, kind: step, target: sim, scenario: short, baseline: {requests: 5}, sweep: {concurrency: [1]}, window: {warmup: 0s, steady: 1s, min_requests: 1}, retries: 1}
`, sim.URL)), false)
	require.NoError(t, err)
	rec, m := newManager(t, cfg)
	v := validity.DefaultConfig
	v.CPU = 1e-9
	s := &capacity.Step{Manager: m, Recorder: rec, Test: cfg.Tests[0], Load: cfg.TestLoad(cfg.Tests[0]), MaxRate: 100,
		Logger: promslog.NewNopLogger(), Validity: &v}
	run := s.Run(t.Context())
	b := run.Baseline
	require.NotNil(t, b)
	require.Equal(t, capacity.DecisionMissed, b.Decision, "every request misses 19 ms: %+v", b.TTFT)
	require.True(t, b.ProberBound(), "%+v", b.Prober)
	require.NotEqual(t, capacity.DecisionMissed, b.Prober.DecisionIfBetter, "corrected by its read delay, a request of 20 ms is within 19")
	require.Equal(t, "the decision could change with the prober's delays", b.Prober.Rule)
	require.Regexp(t, `not used: prober-bound \(CPU \d+% of \d+ cores, .*reads up to \d+ ms late, saturated prober\)`, b.Note, "what held the prober, measured, and its cause")
	require.Contains(t, b.Note, "with every request corrected by its read delay it would be")
	require.Len(t, b.Remeasured, 1, "measured twice (retries: 1)")
	require.Equal(t, capacity.VerdictInconclusive, run.Verdict, run.Reason)
	require.Contains(t, run.Reason, "not concluded: saturated prober: the baseline missed the objective while prober-bound at 1 client (cpu")
	require.Nil(t, run.Header().VerifiedRate, "no capacity is stated, not 0")
}

// TestStepVerifyProberLate: open-loop levels over the send-lag threshold
// (1 ns: every send) stand when they met, and carry the dispersion of
// their sends against their schedule's (1 for Poisson arrivals; the
// prober's few milliseconds of lag leave them as Poisson as their
// schedule). Closed-loop clients send without lag: not over it.
func TestStepVerifyProberLate(t *testing.T) {
	sim := simtest.Start(t, groundTruthSim)
	cfg := lenientConfig(t, sim.URL, `
  - {name: pbv, kind: step, target: sim, scenario: short, baseline: {requests: 2}, sweep: {concurrency: [1, 2], refine: 0}, window: {warmup: 0s, steady: 3s, min_requests: 1}, verify: {rates: [0.5, 0.8], max_levels: 2, burst: {factor: 1}}, retries: 0}
`)
	rec, m := newManager(t, cfg)
	v := validity.Config{Window: time.Minute, CPU: 1, SchedulerP99: time.Hour, GCPauseP99: time.Hour, SendLagP99: time.Nanosecond, PoolWaitP99: time.Hour}
	s := &capacity.Step{Manager: m, Recorder: rec, Test: cfg.Tests[0], Load: cfg.TestLoad(cfg.Tests[0]), MaxRate: 100,
		Logger: promslog.NewNopLogger(), Validity: &v}
	run := s.Run(t.Context())
	for _, l := range run.Sweep {
		require.Empty(t, l.Prober.Over, "closed-loop level %d: no send lag", l.Concurrency)
	}
	require.NotEmpty(t, run.Verify, run.Reason)
	for _, l := range run.Verify {
		p := l.Prober
		require.Positive(t, p.Sends, "verify level %g req/s", l.IntendedRate)
		require.Equal(t, []string{validity.ReasonSendLag}, p.Over, "verify level %g req/s", l.IntendedRate)
		require.Contains(t, p.Diagnosis, "busy host")
		if l.Decided() == capacity.DecisionMet {
			require.False(t, l.ProberBound(), "verify level %g req/s met: it stands", l.IntendedRate)
		}
		if l.Sent >= 50 {
			require.Positive(t, p.SendDispersion, "verify level %g req/s", l.IntendedRate)
			require.Positive(t, p.ScheduleDispersion, "verify level %g req/s", l.IntendedRate)
		}
	}
	require.Equal(t, capacity.VerdictPass, run.Verdict, run.Reason)
}
