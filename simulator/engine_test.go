package simulator_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Tolerances. The simulator reports its phases as measured wall-clock time,
// so comparisons between its timings and the test client's clock (the same
// process, the same monotonic clock) are exact lower bounds; upper bounds
// allow for goroutine wake-ups on a loaded 2-core machine under -race.
// Comparisons with the configured model (nominal times) use medians, because
// Go timers overshoot by up to about a millisecond.
const (
	wakeSlackMS = 25.0 // loose maximum: how late a chunk may be read after it exists
	nominalMS   = 3.0  // median overshoot of a timed phase over its nominal length
	clientSlack = 10.0 // median difference of a client's and the server's view of a phase
)

// TestFIFOQueueOneSlot: with one slot, requests are served one at a time in
// arrival order, and a request's queue_ms is the service time of the one
// ahead of it.
func TestFIFOQueueOneSlot(t *testing.T) {
	s := startSim(t, `
slots: 1
prefill: {base: 5ms, per_token: 0s}
decode: {base: 10ms, per_sequence: 0s}
`)
	const n = 4
	results := make([]*result, n)
	var wg sync.WaitGroup
	for i := range n {
		accepted := make(chan struct{})
		wg.Go(func() {
			var once sync.Once
			results[i] = s.post(t, "/v1/chat/completions", chat(text(fmt.Sprint(i), 10), 20, true), func(event) {
				once.Do(func() { close(accepted) }) // the role chunk: the request is queued
			})
			once.Do(func() { close(accepted) })
		})
		<-accepted
	}
	wg.Wait()

	first := results[0].summary(t).Timings
	require.NotNil(t, first)
	serviceA := first.PromptMS + first.PredictedMS
	require.GreaterOrEqual(t, serviceA, 5.0+19*10.0, "service time below the configured model")
	for i := 1; i < n; i++ {
		prev, cur := results[i-1], results[i]
		require.Equal(t, http.StatusOK, cur.status)
		prevTok, curTok := prev.tokens(t), cur.tokens(t)
		require.Len(t, curTok, 20)
		require.True(t, curTok[0].After(prevTok[len(prevTok)-1]), "request %d got its first token before request %d ended", i, i-1)
	}
	// Request B arrived after A was admitted and no later than its own role
	// chunk; it waits from its arrival until A's last token.
	b := results[1].summary(t).Timings
	arrivalGap := msSince(results[0].sent, results[1].events[0].at)
	require.LessOrEqual(t, b.QueueMS, first.QueueMS+serviceA+1, "B queued longer than A's service")
	require.GreaterOrEqual(t, b.QueueMS, serviceA-arrivalGap-1, "B queued shorter than A's remaining service")
}

// TestPrefillLinearInUncachedTokens: prompt_ms = base + per_token * prompt_n.
// On testing/synctest's fake clock (bubbleSim), so each prefill is checked
// exactly, in the reply's timings and in when its first token came: on
// the real clock a busy machine stretched a 55ms prefill to 60 to 400ms
// beside a CPU burner.
func TestPrefillLinearInUncachedTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startBubbleSim(t, `
slots: 1
prefill: {base: 5ms, per_token: 50us}
`)
		sizes := []int{100, 1000, 3000}
		got := make([]float64, len(sizes))
		for i, size := range sizes {
			r := s.post(t, "/v1/completions", map[string]any{
				"model": "sim-model", "prompt": text(fmt.Sprint("p", i), size), "max_tokens": 1, "ignore_eos": true,
				"stream": true, "stream_options": map[string]any{"include_usage": true},
			})
			require.Equal(t, http.StatusOK, r.status, string(r.body))
			nominal := 5*time.Millisecond + time.Duration(size)*50*time.Microsecond
			at := r.tokens(t)
			require.Len(t, at, 1)
			require.Equal(t, nominal, at[0].Sub(r.sent), "the first token of a prompt of %d tokens", size)
			tm := r.summary(t).Timings
			require.Equal(t, size, tm.PromptN)
			require.Zero(t, tm.QueueMS)
			require.Equal(t, ms(nominal), tm.PromptMS, "prefill of %d tokens", size)
			got[i] = tm.PromptMS
		}
		slope := (got[2] - got[0]) / float64(sizes[2]-sizes[0])
		require.InDelta(t, 0.05, slope, 1e-9, "prefill ms per token")
	})
}

// TestDecodeStepGrowsWithBatch: a decode step takes base + per_sequence *
// running sequences, and every running sequence gets one token per step.
// The engine runs on testing/synctest's fake clock (bubbleSim), so a step
// lasts exactly its modelled length and the test asserts exact times: on
// the real clock a busy machine stretched the steps (a lone sequence's 14ms
// read 16 to 23ms beside a CPU burner, eight sequences' 42ms 66ms), which
// no tolerance tells from a wrong model.
func TestDecodeStepGrowsWithBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startBubbleSim(t, `
slots: 8
prefill: {base: 1ms, per_token: 0s}
decode: {base: 10ms, per_sequence: 4ms}
`)
		const tokens = 30
		// requireSteps checks r's timings and that its first token came
		// at first, and the others one a step from decode on (from its
		// arrival).
		requireSteps := func(r *result, first, decode, step time.Duration, what string) {
			t.Helper()
			require.Equal(t, http.StatusOK, r.status, "%s: %s", what, r.body)
			at := r.tokens(t)
			require.Len(t, at, tokens, what)
			require.Equal(t, first, at[0].Sub(r.sent), "%s: first token", what)
			for i := 1; i < tokens; i++ {
				require.Equal(t, decode+time.Duration(i)*step, at[i].Sub(r.sent), "%s: token %d", what, i+1)
			}
			tm := r.summary(t).Timings
			require.Equal(t, ms(first), tm.QueueMS+tm.PromptMS, what)
			require.Equal(t, ms(at[tokens-1].Sub(at[0])), tm.PredictedMS, what)
		}

		alone := s.post(t, "/v1/chat/completions", chat("alone", tokens, true))
		requireSteps(alone, time.Millisecond, time.Millisecond, 14*time.Millisecond, "one sequence: 10ms + 1*4ms")
		require.Equal(t, 14.0, tpot(t, alone))

		// Eight at once: they are prefilled one after the other (1ms
		// each, decode paused), then decode together, 10ms + 8*4ms =
		// 42ms a step, and end on the same step.
		results := make([]*result, 8)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i] = s.post(t, "/v1/chat/completions", chat(fmt.Sprint("batch", i), tokens, true)) })
		}
		wg.Wait()
		sort.Slice(results, func(i, j int) bool { return results[i].tokens(t)[0].Before(results[j].tokens(t)[0]) })
		start, end := results[0].sent, results[0].tokens(t)[tokens-1]
		for k, r := range results {
			require.WithinDuration(t, start, r.sent, 0, "all eight arrive at once")
			requireSteps(r, time.Duration(k+1)*time.Millisecond, 8*time.Millisecond, 42*time.Millisecond, fmt.Sprintf("batch, prefilled %d", k+1))
			require.WithinDuration(t, end, r.tokens(t)[tokens-1], 0, "every sequence gets one token per step, and all end on the same one")
			// TPOT: 29 steps, after the prefills of those admitted later.
			require.InDelta(t, (29*42+float64(7-k))/29, tpot(t, r), 1e-9, "TPOT of one of eight sequences")
		}
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestPrefillPausesDecode: an admitted request's prefill stops the running
// sequences, so they see an inter-token gap as long as that prefill. On
// testing/synctest's fake clock (bubbleSim), so the gap is checked exactly:
// over loopback a loaded machine stretched it past any tolerance.
func TestPrefillPausesDecode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startBubbleSim(t, `
slots: 2
prefill: {base: 5ms, per_token: 50us}
decode: {base: 10ms, per_sequence: 0s}
`)
		var a *result
		var wg sync.WaitGroup
		wg.Go(func() { a = s.post(t, "/v1/chat/completions", chat("running", 40, true)) })
		// The running request is prefilled in about 5 ms and decodes a
		// token every 10 ms: at 57 ms it is between two tokens.
		time.Sleep(57 * time.Millisecond)
		b := s.post(t, "/v1/chat/completions", chat(text("long", 4000), 2, true))
		wg.Wait()
		prefill := b.summary(t).Timings.PromptMS
		require.Equal(t, 205.0, prefill, "5 ms and 4,000 tokens at 50 us")
		toks := a.tokens(t)
		require.Len(t, toks, 40)
		var gaps []float64
		for i := 1; i < len(toks); i++ {
			gaps = append(gaps, msSince(toks[i-1], toks[i]))
		}
		// The step under way when b arrived ends, b's prefill runs, then
		// the next step: one gap of the prefill and a step, the others a
		// step.
		require.Equal(t, prefill+10, quantile(gaps, 1), "the running sequence did not pause for the prefill")
		require.Equal(t, 10.0, median(gaps), "normal inter-token gap")
	})
}

// TestPrefixCache: prompt blocks seen before are not prefilled again.
func TestPrefixCache(t *testing.T) {
	s := startSim(t, `
slots: 1
prefill: {base: 5ms, per_token: 50us}
prefix_cache: {block_tokens: 64}
`)
	p := text("cached", 1000)
	run := func(prompt string) (*result, final) {
		r := s.post(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 1, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}, nil)
		require.Equal(t, http.StatusOK, r.status)
		return r, r.summary(t)
	}
	_, cold := run(p)
	require.Equal(t, 0, cold.Timings.CacheN)
	require.Equal(t, 1000, cold.Timings.PromptN)

	_, warm := run(p)
	require.Equal(t, 960, warm.Timings.CacheN, "15 whole blocks of 64 tokens")
	require.Equal(t, 40, warm.Timings.PromptN)
	require.Equal(t, 960, warm.Usage.PromptTokensDetails.CachedTokens)
	require.Equal(t, 1000, warm.Usage.PromptTokens)
	// Prefill is timed by the engine's sleep, which a busy host makes
	// late (a 7 ms prefill measured 30.6 ms beside other work, where 55
	// ms measured 56): the least of five warm runs against the least of
	// five cold prompts, each as long.
	warmMS, coldMS := warm.Timings.PromptMS, cold.Timings.PromptMS
	for i := range 4 {
		_, w := run(p)
		warmMS = min(warmMS, w.Timings.PromptMS)
		_, c := run(text(fmt.Sprintf("cold-%d", i), 1000))
		require.Equal(t, 0, c.Timings.CacheN)
		coldMS = min(coldMS, c.Timings.PromptMS)
	}
	require.Less(t, warmMS, coldMS/3, "a cache hit must shorten prefill")

	_, partial := run(p[:512*4] + text("different", 488))
	require.Equal(t, 512, partial.Timings.CacheN, "the shared first 512 tokens")

	_, other := run(text("unrelated", 1000))
	require.Equal(t, 0, other.Timings.CacheN)
}

// TestMaxQueue: arrivals beyond max_queue waiting requests are answered
// 429, and clients that leave free their slot and queue place. On
// testing/synctest's fake clock (bubbleSim): synctest.Wait is the moment
// the first request runs and the second waits, however busy the machine.
func TestMaxQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startBubbleSim(t, `
slots: 1
max_queue: 1
decode: {base: 10ms, per_sequence: 0s}
`)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() { s.postCtx(ctx, t, "/v1/chat/completions", chat(fmt.Sprint(i), 1000, true)) })
			synctest.Wait()
		}
		st := s.Stats()
		require.EqualValues(t, 1, st.Running)
		require.EqualValues(t, 1, st.Waiting)
		r := s.post(t, "/v1/chat/completions", chat("third", 5, true))
		require.Equal(t, http.StatusTooManyRequests, r.status, string(r.body))
		require.Contains(t, string(r.body), "max_queue 1")
		cancel()
		wg.Wait()
		// The engine drops a sequence whose client left at its next step,
		// at most one 10 ms step away, and the waiting one when it comes
		// to admit it.
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		st = s.Stats()
		require.Zero(t, st.Running)
		require.Zero(t, st.Waiting)
	})
}
