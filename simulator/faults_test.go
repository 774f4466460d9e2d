package simulator_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/simulator"
)

// observed is what a client saw of a batch of requests under faults.
type observed struct {
	requests, ok                         int
	status                               map[int]int
	reset, stall, malformed, missingDone int
}

// classify sends n streaming requests from 8 workers and classifies what
// each reply did. A stall shows as a gap of at least stallMS between events.
func classify(t *testing.T, s *testSim, n int, stallMS float64) observed {
	t.Helper()
	return classifyWith(func() *result {
		return s.post(t, "/v1/chat/completions", chat("fault?", 4, true), nil)
	}, n, stallMS)
}

// classifyWith is classify with the request sent by post.
func classifyWith(post func() *result, n int, stallMS float64) observed {
	o := observed{requests: n, status: map[int]int{}}
	var mu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range work {
				r := post()
				mu.Lock()
				o.status[r.status]++
				if r.status == http.StatusOK {
					o.ok++
					for i, e := range r.events {
						if e.data != "[DONE]" && !json.Valid([]byte(e.data)) {
							o.malformed++
						}
						if i > 0 && msSince(r.events[i-1].at, e.at) >= stallMS {
							o.stall++
						}
					}
					switch {
					case r.readErr != nil:
						o.reset++
						if msSince(r.events[len(r.events)-1].at, r.ended) >= stallMS {
							o.stall++ // stalled, then reset
						}
					case !r.done():
						o.missingDone++
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return o
}

// requireBinomial checks that k successes out of n are consistent with rate
// p: within four standard deviations (a false alarm about once in 16,000 runs).
func requireBinomial(t *testing.T, name string, k, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	require.InDelta(t, mean, float64(k), 4*sd+1, "%s: %d of %d at rate %g", name, k, n, p)
}

// TestFaultRates: every fault happens at its configured rate, and the
// simulator counts exactly the faults clients saw. On testing/synctest's
// fake clock (bubbleSim): a stall is a gap of exactly its 300 ms and no
// other gap is more than 0, where over loopback a loaded machine made gaps
// of 250 ms without a stall (one run in four failed under heavy load). A
// reset aborts the handler here; TestFaultsPerAPI sees its TCP RST.
func TestFaultRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startBubbleSim(t, fastSim+`
faults:
  error_rate: {"429": 0.1, "500": 0.1, "503": 0.05}
  reset_rate: 0.1
  stall: {rate: 0.1, duration: 300ms}
  malformed_rate: 0.1
  missing_done_rate: 0.1
`)
		const n = 400
		o := classifyWith(func() *result {
			return s.post(t, "/v1/chat/completions", chat("fault?", 4, true))
		}, n, 300)
		requireBinomial(t, "429", o.status[429], n, 0.1)
		requireBinomial(t, "500", o.status[500], n, 0.1)
		requireBinomial(t, "503", o.status[503], n, 0.05)
		require.Equal(t, n, o.status[200]+o.status[429]+o.status[500]+o.status[503])
		requireBinomial(t, "reset", o.reset, o.ok, 0.1)
		requireBinomial(t, "stall", o.stall, o.ok, 0.1)
		requireBinomial(t, "malformed", o.malformed, o.ok, 0.1)
		requireBinomial(t, "missing [DONE]", o.missingDone, o.ok-o.reset, 0.1)

		st := s.Stats()
		require.Equal(t, int64(o.status[429]+o.status[500]+o.status[503]), st.FaultsInjected["error"])
		require.Equal(t, int64(o.reset), st.FaultsInjected["reset"])
		require.Equal(t, int64(o.stall), st.FaultsInjected["stall"])
		require.Equal(t, int64(o.malformed), st.FaultsInjected["malformed"])
		require.Equal(t, int64(o.missingDone), st.FaultsInjected["missing_done"])
		require.Equal(t, int64(o.status[429]), st.Responses["429"])
	})
}

// putFaults sends PUT /sim/faults (with query) and returns the status and
// the body.
func putFaults(t *testing.T, s *testSim, query, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, s.url+"/sim/faults"+query, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestFaultsAtRunTime: PUT /sim/faults replaces the faults, as JSON or YAML;
// omitted keys are 0, and a bad block changes nothing.
func TestFaultsAtRunTime(t *testing.T) {
	s := startSim(t, fastSim)
	put := func(body string) int {
		code, _ := putFaults(t, s, "", body)
		return code
	}
	o := classify(t, s, 20, 90)
	require.Equal(t, 20, o.status[200])

	require.Equal(t, http.StatusOK, put(`{"error_rate": {"500": 1}}`))
	require.Equal(t, 20, classify(t, s, 20, 90).status[500])

	require.Equal(t, http.StatusOK, put("error_rate: {503: 1}\nmissing_done_rate: 1\n"))
	require.Equal(t, 20, classify(t, s, 20, 90).status[503])

	require.Equal(t, http.StatusBadRequest, put(`{"error_rate": {"503": 0.7, "500": 0.7}}`))
	require.Equal(t, 20, classify(t, s, 20, 90).status[503], "a rejected block must not change the faults")

	require.Equal(t, http.StatusOK, put(`missing_done_rate: 1`))
	o = classify(t, s, 20, 90)
	require.Equal(t, 20, o.status[200], "error_rate was omitted, so it is 0")
	require.Equal(t, 20, o.missingDone)

	require.Equal(t, http.StatusOK, put(`{}`))
	o = classify(t, s, 20, 90)
	require.Equal(t, 20, o.status[200])
	require.Zero(t, o.missingDone+o.reset+o.stall+o.malformed)

	require.Equal(t, simulator.Faults{Stall: simulator.StallConfig{Duration: simulator.DefaultConfig.Faults.Stall.Duration}}, s.Config().Faults)
}

// TestHeaderDelay: every response's headers come header_delay late.
func TestHeaderDelay(t *testing.T) {
	s := startSim(t, fastSim+`
faults: {header_delay: 150ms}
`)
	for _, stream := range []bool{true, false} {
		r := s.post(t, "/v1/chat/completions", chat("slow", 2, stream), nil)
		require.Equal(t, http.StatusOK, r.status)
		require.GreaterOrEqual(t, msSince(r.sent, r.headers), 150.0)
	}
	require.Equal(t, int64(2), s.Stats().FaultsInjected["header_delay"])
}

// TestResetWholeReply: a non-streaming reply can be reset too.
func TestNonStreamingFaults(t *testing.T) {
	s := startSim(t, fastSim+`
faults: {reset_rate: 1}
`)
	r := s.post(t, "/v1/chat/completions", chat("x", 2, false), nil)
	require.Error(t, r.readErr, "the connection must be reset")

	s = startSim(t, fastSim+`
faults: {malformed_rate: 1}
`)
	r = s.post(t, "/v1/chat/completions", chat("x", 2, false), nil)
	require.Equal(t, http.StatusOK, r.status)
	require.False(t, json.Valid(r.body), "the body must not be valid JSON: %s", r.body)
}

// metric returns the value of the sample series (name and labels as
// exposed, e.g. `x{model_name="sim-model"}`) on /metrics.
func metric(t *testing.T, s *testSim, series string) float64 {
	t.Helper()
	resp, err := s.client.Get(s.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return seriesValue(t, string(b), series)
}

// bubbleMetric is metric for a simulator in a synctest bubble.
func bubbleMetric(t *testing.T, s *bubbleSim, series string) float64 {
	t.Helper()
	code, b := s.send(t, http.MethodGet, "/metrics", "")
	require.Equal(t, http.StatusOK, code, b)
	return seriesValue(t, b, series)
}

// seriesValue returns the value of series in an exposition.
func seriesValue(t *testing.T, exposition, series string) float64 {
	t.Helper()
	for line := range strings.Lines(exposition) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no series %s on /metrics", series)
	return 0
}

const (
	prefillFactor = `sloprober_sim_degrade_factor{model_name="sim-model",phase="prefill"}`
	decodeFactor  = `sloprober_sim_degrade_factor{model_name="sim-model",phase="decode"}`
	leakSeconds   = `sloprober_sim_degrade_leak_seconds{model_name="sim-model"}`
)

// tpot is a reply's true time per output token after the first.
func tpot(t *testing.T, r *result) float64 {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	tm := r.summary(t).Timings
	return tm.PredictedMS / float64(tm.PredictedN-1)
}

// TestDegradeGrowsLinearly: with degrade {prefill: 1, decode: 1, per: 2s}
// a prefill or a decode step that starts t after the fault was set takes
// 1 + t/2s times as long, with the engine and with the fixed timing, and
// the reply's timings show it. Two requests at the start, two 3s on.
// The simulator runs on testing/synctest's fake clock (bubbleSim), so
// every phase lasts exactly its degraded length and each one is checked
// against the model at its own start: on the real clock a busy machine
// stretched them (a 20ms step read 50ms, a 75ms prefill 124ms beside a
// CPU burner), and tolerances wide enough for that would not tell a
// factor of 1 + t/2s from one of 1 + t/1s.
func TestDegradeGrowsLinearly(t *testing.T) {
	const degrade = `
faults:
  degrade: {prefill: 1, decode: 1, per: 2s}
`
	for _, m := range []struct{ name, cfg string }{
		{"engine", "slots: 1\nprefill: {base: 40ms, per_token: 0s}\ndecode: {base: 20ms, per_sequence: 0s}\n" + degrade},
		{"fixed", "slots: 0\nfixed: {ttft: 40ms, itl: 20ms}\n" + degrade},
	} {
		t.Run(m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now() // the fault is set when the simulator starts
				s := startBubbleSim(t, m.cfg)
				// degraded is a phase of nominal length base that
				// starts at start, in milliseconds.
				degraded := func(base float64, start time.Time) float64 {
					return base * (1 + msSince(t0, start)/2000)
				}
				const tokens = 15
				var steps []float64 // each request's mean step
				for i := range 4 {
					if i == 2 {
						time.Sleep(time.Until(t0.Add(3 * time.Second)))
					}
					r := s.post(t, "/v1/chat/completions", chat(fmt.Sprint(m.name, i), tokens, true))
					require.Equal(t, http.StatusOK, r.status, "%d: %s", i, r.body)
					at := r.tokens(t)
					require.Len(t, at, tokens)
					prefill := degraded(40, r.sent) // the slot is free: no queue
					require.InDelta(t, prefill, msSince(r.sent, at[0]), 1e-3, "%d: prefill", i)
					for j := 1; j < tokens; j++ {
						require.InDelta(t, degraded(20, at[j-1]), msSince(at[j-1], at[j]), 1e-3,
							"%d: the step to token %d, %.0fms on", i, j+1, msSince(t0, at[j-1]))
					}
					tm := r.summary(t).Timings
					require.Zero(t, tm.QueueMS, "%d", i)
					require.InDelta(t, prefill, tm.PromptMS, 1e-3, "%d: timings' prefill", i)
					require.InDelta(t, msSince(at[0], at[tokens-1]), tm.PredictedMS, 1e-3, "%d: timings' decode", i)
					steps = append(steps, tpot(t, r))
					t.Logf("%d: at %.0fms prefill %.1fms, mean step %.1fms", i, msSince(t0, r.sent), tm.PromptMS, steps[i])
				}
				// The mean factor of each request's decode: 1.09
				// and 1.28 at the start (the second starts 345ms
				// on), 2.72 and 3.19 three seconds on (the fourth
				// at 3.86s), a ratio of 2.5; a factor of 1 + t/1s
				// would make it 4.0, one of 1 + t/4s 1.75.
				ratio := (steps[2] + steps[3]) / (steps[0] + steps[1])
				require.InDelta(t, 2.5, ratio, 0.05, "decode steps 3s on vs at the start")
			})
		})
	}
}

// TestDegradeLeak: every request completed adds leak to each decode step,
// up to leak_max: after 10 requests steps are 5ms longer, not 10ms. The
// simulator runs on testing/synctest's fake clock (bubbleSim), so every
// step is checked exactly: on the real clock a busy machine stretched the
// capped 15ms steps to 16 to 22ms beside a CPU burner, as much as the
// leak being measured.
func TestDegradeLeak(t *testing.T) {
	t.Run("engine", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startBubbleSim(t, `
slots: 1
prefill: {base: 1ms, per_token: 0s}
decode: {base: 10ms, per_sequence: 0s}
faults:
  degrade: {leak: 1ms, leak_max: 5ms}
`)
			const tokens = 11
			for k := range 12 {
				r := s.post(t, "/v1/chat/completions", chat(fmt.Sprint("leak", k), tokens, true))
				require.Equal(t, http.StatusOK, r.status, "request %d: %s", k, r.body)
				step := time.Duration(10+min(k, 5)) * time.Millisecond // k completed before it
				at := r.tokens(t)
				require.Len(t, at, tokens)
				require.Equal(t, time.Millisecond, at[0].Sub(r.sent), "request %d: prefill", k)
				for j := 1; j < tokens; j++ {
					require.Equal(t, step, at[j].Sub(at[j-1]), "request %d: the step to token %d", k, j+1)
				}
				require.Equal(t, ms(step), tpot(t, r), "request %d", k)
			}
			require.Equal(t, 0.005, bubbleMetric(t, s, leakSeconds))
			require.Equal(t, 1.0, bubbleMetric(t, s, prefillFactor))
			require.Equal(t, 1.0, bubbleMetric(t, s, decodeFactor))
		})
	})
	t.Run("fixed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := startBubbleSim(t, `
slots: 0
fixed: {ttft: 5ms, itl: 3ms}
faults:
  degrade: {leak: 2ms, leak_max: 5ms}
`)
			const tokens = 6
			for k, leak := range []time.Duration{0, 2, 4, 5, 5} {
				r := s.post(t, "/v1/chat/completions", chat(fmt.Sprint("leak", k), tokens, true))
				require.Equal(t, http.StatusOK, r.status, "request %d: %s", k, r.body)
				step := 3*time.Millisecond + leak*time.Millisecond
				at := r.tokens(t)
				require.Len(t, at, tokens)
				require.Equal(t, 5*time.Millisecond, at[0].Sub(r.sent), "request %d: ttft", k)
				for j := 1; j < tokens; j++ {
					require.Equal(t, step, at[j].Sub(at[j-1]), "request %d: the step to token %d", k, j+1)
				}
				require.Equal(t, ms(step), tpot(t, r), "request %d", k)
			}
			require.Equal(t, 0.005, bubbleMetric(t, s, leakSeconds))
		})
	})
}

// TestDegradeReset: PUT /sim/faults starts a degradation afresh, from factor
// 1 and no leak, even when it is the same one; without degrade the
// factors are 1 and the leak 0. On testing/synctest's fake clock
// (bubbleSim), so each step is checked against the degradation it starts
// under, exactly: on the real clock a busy machine stretched the fresh
// steps past the bound that allowed for it (a mean 35.4ms against 33.5ms,
// where about 10.5ms was due, the unreset degradation's 57.5ms).
func TestDegradeReset(t *testing.T) {
	const block = `{"degrade": {"decode": 3, "per": "1s", "leak": "1ms", "leak_max": "50ms"}}`
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now() // the fault is set when the simulator starts
		s := startBubbleSim(t, `
slots: 1
prefill: {base: 1ms, per_token: 0s}
decode: {base: 10ms, per_sequence: 0s}
faults: `+block+`
`)
		// requireSteps checks that each of r's decode steps took 10ms
		// scaled by 1 + 3 * (its start - since)/1s, plus leak.
		requireSteps := func(r *result, since time.Time, leak float64, what string) {
			t.Helper()
			require.Equal(t, http.StatusOK, r.status, "%s: %s", what, r.body)
			at := r.tokens(t)
			require.Len(t, at, 5, what)
			for j := 1; j < len(at); j++ {
				require.InDelta(t, 10*(1+3*msSince(since, at[j-1])/1000)+leak, msSince(at[j-1], at[j]), 1e-3,
					"%s: the step to token %d, %.0fms after the fault was set", what, j+1, msSince(since, at[j-1]))
			}
		}
		for k := range 3 {
			require.Equal(t, http.StatusOK, s.post(t, "/v1/chat/completions", chat(fmt.Sprint(k), 2, true)).status)
		}
		time.Sleep(time.Until(t0.Add(time.Second)))
		require.Equal(t, 4.0, bubbleMetric(t, s, decodeFactor), "1 + 3 * 1s/1s")
		require.Equal(t, 1.0, bubbleMetric(t, s, prefillFactor))
		require.Equal(t, 0.003, bubbleMetric(t, s, leakSeconds))
		r := s.post(t, "/v1/chat/completions", chat("slow", 5, true))
		requireSteps(r, t0, 3, "slow")
		slow := tpot(t, r)

		put := func(body string) string {
			code, b := s.send(t, http.MethodPut, "/sim/faults", body)
			require.Equal(t, http.StatusOK, code, b)
			return b
		}
		time.Sleep(time.Until(t0.Add(1500 * time.Millisecond))) // the old degradation goes on growing
		require.Equal(t, 5.5, bubbleMetric(t, s, decodeFactor), "1 + 3 * 1.5s/1s")
		set := time.Now()
		got := put(block)
		require.Equal(t, `"1s"`, field(t, got, "degrade", "per"))
		require.Equal(t, 1.0, bubbleMetric(t, s, decodeFactor), "the factor starts again from 1")
		require.Zero(t, bubbleMetric(t, s, leakSeconds), "so does the leak")
		r = s.post(t, "/v1/chat/completions", chat("fresh", 5, true))
		requireSteps(r, set, 0, "fresh")
		fresh := tpot(t, r)
		t.Logf("mean step %.2fms before the reset, %.2fms after", slow, fresh)

		require.NotContains(t, put(`{}`), "degrade")
		require.Equal(t, 1.0, bubbleMetric(t, s, prefillFactor))
		require.Equal(t, 1.0, bubbleMetric(t, s, decodeFactor))
		require.Zero(t, bubbleMetric(t, s, leakSeconds))
		require.Nil(t, s.Config().Faults.Degrade)
	})
}

// TestFaultsFor: PUT /sim/faults?for=D sets faults for D, then the faults
// of before come back by themselves (a soak's fault plan survives its
// prober's crash); faults set again meanwhile cancel the return; a bad
// duration is refused.
func TestFaultsFor(t *testing.T) {
	s := startSim(t, fastSim+"faults: {missing_done_rate: 1}\n")
	put := func(query, body string) int {
		code, _ := putFaults(t, s, query, body)
		return code
	}
	require.Equal(t, http.StatusOK, put("?for=300ms", `{"error_rate": {"503": 1}}`))
	require.Equal(t, 1.0, s.Config().Faults.ErrorRate["503"])
	require.Eventually(t, func() bool { return s.Config().Faults.MissingDoneRate == 1 }, 5*time.Second, 10*time.Millisecond,
		"the faults of before are back")
	require.Zero(t, s.Config().Faults.ErrorRate["503"])

	require.Equal(t, http.StatusOK, put("?for=200ms", `{"error_rate": {"503": 1}}`))
	require.Equal(t, http.StatusOK, put("", `{"reset_rate": 1}`))
	// The first PUT's return would have come by now; the second PUT
	// cancelled it.
	time.Sleep(400 * time.Millisecond) //nolint:forbidigo // the absence of an event: nothing to wait on
	require.Equal(t, 1.0, s.Config().Faults.ResetRate)

	require.Equal(t, http.StatusBadRequest, put("?for=soon", `{}`))
	require.Equal(t, http.StatusBadRequest, put("?for=-1s", `{}`))
}

// TestSeedFaultSequence: a seed gives the fault decisions it always gave.
// Tests elsewhere probe the simulator at fixed rates for a few seconds, and
// a changed sequence can leave a fault they expect out of their window: a
// fault added later must draw from a stream of its own.
func TestSeedFaultSequence(t *testing.T) {
	s := startSim(t, fastSim+`
seed: 1
faults: {error_rate: {"400": 0.1}, stream_error_rate: 0.5, wrong_answer_rate: 0.5}
reasoning_tokens: {distribution: fixed, value: 1}
`)
	var got []int
	for i := range 60 {
		if r := s.post(t, "/v1/chat/completions", chat("What is 1 + 1?", 2, true), nil); r.status == http.StatusBadRequest {
			got = append(got, i)
		}
	}
	require.Equal(t, []int{6, 19, 22, 26, 45, 54, 56}, got, "the requests seed 1 answers 400 at a rate of 0.1")
}
