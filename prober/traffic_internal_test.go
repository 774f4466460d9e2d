package prober

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/workload"
)

func TestPromptWordsAreThreeLetters(t *testing.T) {
	for _, w := range promptWords {
		require.Len(t, w, 3, "blockPrompt cuts blocks by wordsLen")
	}
}

// gaps returns the gaps of n arrivals in seconds.
func gaps(a Arrivals, n int) []float64 {
	prev := a.Next().Due
	out := make([]float64, n)
	for i := range out {
		next := a.Next().Due
		out[i] = next.Sub(prev).Seconds()
		prev = next
	}
	return out
}

func meanCV(xs []float64) (float64, float64) {
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return m, math.Sqrt(v/float64(len(xs))) / m
}

// TestGammaBurstiness: the gamma shape sets the coefficient of variation of
// the gaps, 1/sqrt(shape), at the same mean rate.
func TestGammaBurstiness(t *testing.T) {
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	for _, shape := range []float64{0.25, 0.5, 1, 4} {
		m, cv := meanCV(gaps(NewGammaArrivals(10, shape, 5, start), 50000))
		// Window boundaries restart the renewal process once a minute
		// (every ~600 gaps), which shortens a few gaps: a small bias.
		require.InEpsilon(t, 0.1, m, 0.03, "mean gap at shape %g", shape)
		require.InEpsilon(t, 1/math.Sqrt(shape), cv, 0.06, "CV at shape %g", shape)
	}
}

// TestMixArrivals: a mix draws scenarios by weight, the same for the same
// arrival, independent of the order arrivals are drawn in.
func TestMixArrivals(t *testing.T) {
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	weights := []float64{7, 2, 1}
	a := NewMixArrivals(NewPoissonArrivals(100, 1, start), 9, weights)
	counts := make([]int, 3)
	const n = 30000
	first := map[uint64]int{}
	for range n {
		arr := a.Next()
		counts[arr.Scenario]++
		first[arr.Seq] = arr.Scenario
	}
	for i, w := range weights {
		p := w / 10
		require.InDelta(t, p*n, counts[i], 4*math.Sqrt(n*p*(1-p)), "scenario %d", i)
	}
	// A restart in the middle draws the same scenarios for the same arrivals.
	b := NewMixArrivals(NewPoissonArrivals(100, 1, start.Add(time.Minute)), 9, weights)
	for range 1000 {
		arr := b.Next()
		require.Equal(t, first[arr.Seq], arr.Scenario)
	}
}

// TestReplayArrivals: a replay keeps the trace's relative times, scaled by
// the speed, from its start, and starts over one mean gap after the end.
func TestReplayArrivals(t *testing.T) {
	tr := &workload.Trace{Timed: true, Records: []workload.Record{
		{At: 0, Input: 1}, {At: 1 * time.Second, Input: 2}, {At: 3 * time.Second, Input: 3},
	}}
	start := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	a := NewReplayArrivals(tr, 2, true, start)
	want := []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond, 2250 * time.Millisecond, 2750 * time.Millisecond}
	for i, w := range want {
		arr := a.Next()
		require.Equal(t, start.Add(w), arr.Due, "arrival %d", i)
		require.Equal(t, i/3, arr.Pass)
		require.Equal(t, i%3+1, arr.Record.Input)
	}
	once := NewReplayArrivals(tr, 1, false, start)
	for range 3 {
		require.False(t, once.Next().Due.IsZero())
	}
	require.True(t, once.Next().Due.IsZero(), "no loop: the replay ends")
}

func scenario(t *testing.T, yml string) *scenarioRun {
	t.Helper()
	c, err := config.Load([]byte("scenarios:\n  - "+yml+"\n"), false)
	require.NoError(t, err)
	return newScenarioRun(*c.Scenarios[0], config.Key{Target: "t", Scenario: c.Scenarios[0].Name, Test: "canary"})
}

// TestPrefixGroups: a share of prompts begin with one of the groups' shared
// prompts, identical text; the others share nothing.
func TestPrefixGroups(t *testing.T) {
	s := scenario(t, "{name: sys, input_tokens: 300, prefix: {tokens: 200, share: 0.75, groups: 3}}")
	var prefixes []string
	for g := range 3 {
		p := SynthesizePrompt(Seed("prefix", "sys"), uint64(g), 200)
		for _, q := range prefixes {
			require.NotEqual(t, strings.Fields(p)[0:4], strings.Fields(q)[0:4], "groups differ from their first words")
		}
		prefixes = append(prefixes, p)
	}
	const n = 4000
	groups := make([]int, 3)
	plain := 0
	firstWords := map[string]bool{}
	cal := NewCalibrator()
	for seq := range uint64(n) {
		req := s.request(Arrival{Seq: seq}, cal)
		require.Len(t, strings.Fields(req.Prompt), 300)
		require.Equal(t, 300, req.InputTokens)
		g := -1
		for i, p := range prefixes {
			if strings.HasPrefix(req.Prompt, p+" ") {
				g = i
			}
		}
		if g < 0 {
			plain++
			firstWords[strings.Join(strings.Fields(req.Prompt)[:4], " ")] = true
			continue
		}
		groups[g]++
	}
	require.InDelta(t, 0.25*n, plain, 4*math.Sqrt(n*0.25*0.75))
	require.Len(t, firstWords, plain, "prompts without a prefix share nothing")
	for g := range groups {
		require.InDelta(t, 0.25*n, groups[g], 4*math.Sqrt(n*0.25*0.75), "group %d", g)
	}
	// Every load of the scenario uses the same shared prompts.
	other := newScenarioRun(s.cfg, config.Key{Target: "u", Scenario: "sys", Test: "canary"})
	found := false
	for seq := range uint64(20) {
		found = found || strings.HasPrefix(other.request(Arrival{Seq: seq}, cal).Prompt, prefixes[0]+" ")
	}
	require.True(t, found)
}

// TestJointLengths: lengths_from draws input and output together, so their
// correlation survives; distributions are drawn per request.
func TestJointLengths(t *testing.T) {
	c, err := config.Load([]byte(`
scenarios:
  - name: azure
    lengths_from: {file: ../examples/traces/azure-llm-inference-2023-conv.csv, format: azure}
`), false)
	require.NoError(t, err)
	s := newScenarioRun(*c.Scenarios[0], config.Key{Target: "t", Scenario: "azure", Test: "canary"})
	tr := &workload.Trace{}
	for seq := range uint64(10000) {
		req := s.request(Arrival{Seq: seq}, NewCalibrator())
		tr.Records = append(tr.Records, workload.Record{Input: req.InputTokens, Output: req.OutputTokens})
	}
	drawn := workload.ComputeStats(tr)
	real := workload.ComputeStats(c.Scenarios[0].LengthsFrom.Trace)
	// Sampling 10,000 pairs: the correlation's standard error is about 0.01.
	require.InDelta(t, real.Correlation, drawn.Correlation, 0.04, "the joint distribution is kept")
	require.Less(t, drawn.Correlation, -0.05)
	require.InEpsilon(t, real.Input.Mean, drawn.Input.Mean, 0.03)
	require.InEpsilon(t, real.Output.Mean, drawn.Output.Mean, 0.03)
	require.InEpsilon(t, real.Input.P50, drawn.Input.P50, 0.03)
}

// TestCancelShare: a share of requests is marked for cancellation.
func TestCancelShare(t *testing.T) {
	s := scenario(t, "{name: c, cancel: {share: 0.2, after: 300ms}}")
	const n = 5000
	cancelled := 0
	for seq := range uint64(n) {
		if req := s.request(Arrival{Seq: seq}, NewCalibrator()); req.CancelAfter > 0 {
			require.Equal(t, 300*time.Millisecond, req.CancelAfter)
			cancelled++
		}
	}
	require.InDelta(t, 0.2*n, cancelled, 4*math.Sqrt(n*0.2*0.8))
}

// TestBlockPrompt: equal Mooncake ids are equal text, cut at the input length.
func TestBlockPrompt(t *testing.T) {
	a := blockPrompt([]int{0, 1, 2}, 0, 512, 1100)
	b := blockPrompt([]int{0, 3}, 0, 512, 600)
	require.Len(t, strings.Fields(a), 1100)
	require.Len(t, strings.Fields(b), 600)
	require.Equal(t, a[:4*512], b[:4*512], "block 0 is shared, its trailing space included")
	require.NotEqual(t, a[:4*513], b[:4*513], "then they differ")
	require.Len(t, a, 4*1100, "four characters a token")
	require.NotEqual(t, a[:4*512], blockPrompt([]int{0}, 1, 512, 512), "a second pass salts the ids")
	require.Len(t, strings.Fields(blockPrompt([]int{7}, 0, 512, 700)), 700, "more input than blocks")
	require.Len(t, strings.Fields(blockPrompt([]int{0, 1}, 0, 256, 500)), 500, "calibrated: 256 words a block")
}

// TestCalibrator: the affine model from two points, the ratio from one
// length, and a persistent mismatch reported once.
func TestCalibrator(t *testing.T) {
	c := NewCalibrator()
	require.Equal(t, 500, c.Words(500), "one word a token before any observation")
	c.Observe(100, 132) // 12 tokens of template + 1.2 a word
	c.Observe(1000, 1212)
	overhead, perWord := c.Model()
	require.InDelta(t, 12, overhead, 1e-9)
	require.InDelta(t, 1.2, perWord, 1e-9)
	require.Equal(t, 407, c.Words(500))
	require.Equal(t, 427, c.BlockWords(512), "a block inside a prompt carries no overhead")

	one := NewCalibrator()
	one.Observe(256, 512)
	one.Observe(256, 512)
	require.Equal(t, 50, one.Words(100), "one length only: the ratio")

	reported := 0
	for i := range 40 {
		one.Observe(256, 512)
		if one.record(i%3 == 0) { // two in three off
			reported++
		}
	}
	require.Equal(t, 1, reported, "a persistent mismatch is reported once")
}

// TestCalibratorDistrustsCounts: counts no tokenizer makes (a server that
// truncates prompts, or reports a constant) are rejected and freeze the
// calibration at its last sane model: prompts stay bounded; counts that
// agree again thaw it.
func TestCalibratorDistrustsCounts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count func(words int) int
	}{
		{"truncates at 647", func(w int) int { return min(w, 647) }},
		{"constant 100", func(int) int { return 100 }},
		{"constant 1", func(int) int { return 1 }},
		{"absurdly large", func(w int) int { return 100 * w }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCalibrator()
			c.Observe(64, 70) // /tokenize: 6 tokens of template, a word a token
			c.Observe(1024, 1030)
			frozen := 0
			for i := range 50 {
				words := c.Words(3000)
				require.LessOrEqual(t, words, 2*3000, "request %d: never more than two words a token", i)
				o := c.Observe(words, tc.count(words))
				require.False(t, o.Accepted)
				if o.Changed {
					frozen++
					require.True(t, o.Frozen)
				}
			}
			require.Equal(t, 1, frozen, "frozen once")
			require.True(t, c.Frozen())
			overhead, perWord := c.Model()
			require.InDelta(t, 6, overhead, 1e-6, "the last sane model is kept")
			require.InDelta(t, 1, perWord, 1e-6)
			require.Equal(t, 2994, c.Words(3000))

			for i := range unfreezeAfter {
				o := c.Observe(2000, 2006)
				require.Equal(t, i == unfreezeAfter-1, o.Changed)
			}
			require.False(t, c.Frozen(), "counts that agree again thaw it")
		})
	}
}

// TestCalibratorBounds: the model stays within plausible tokenizers, and
// no prompt exceeds the context or MaxPromptWords.
func TestCalibratorBounds(t *testing.T) {
	c := NewCalibrator()
	require.Equal(t, MaxPromptWords, c.Words(10*MaxPromptWords), "capped at MaxPromptWords")
	require.Equal(t, 1, c.Words(-5))
	o := c.Observe(100, 30) // 0.3 tokens a word: no tokenizer
	require.False(t, o.Accepted)
	require.Equal(t, 100, c.Words(100))
	c.SetContext(1024)
	require.False(t, c.Observe(2000, 2000).Accepted, "more than the context")
	require.True(t, c.Observe(100, 300).Accepted, "three tokens a word is plausible")
	require.Equal(t, 33, c.Words(100))
}

// TestRenewalStartCost: starting a Poisson process draws the gaps of at most
// about one window (arrivalsPerWindow arrivals), whatever the rate, so a
// reload into a high rate never spins holding the manager's lock.
func TestRenewalStartCost(t *testing.T) {
	start := time.Unix(0, 59*int64(time.Second)+999*int64(time.Millisecond)) // late in a minute window
	for _, rate := range []float64{0.01, 1, 100, 10000, 1e9} {
		draws := 0
		mean := float64(time.Second) / rate
		p := newRenewal(func(r *rand.Rand) float64 { draws++; return r.ExpFloat64() * mean }, 1, windowFor(rate), start)
		require.Less(t, draws, 4*arrivalsPerWindow, "rate %g", rate)
		require.False(t, time.Unix(0, p.peek()).Before(start))
	}
	require.Equal(t, renewalWindow, windowFor(1))
	require.Equal(t, int64(100*time.Millisecond), windowFor(10000))
	require.Equal(t, minRenewalWindow, windowFor(1e9))
}

// TestCalibratorFollowsNewTokenizer: a tokenizer that changes behind the
// same URL (a model rollout) freezes the calibration, and its counts, which
// fit a plausible model of their own, replace the kept one.
func TestCalibratorFollowsNewTokenizer(t *testing.T) {
	c := NewCalibrator()
	for i := range 20 {
		w := 100 + 50*(i%10)
		require.True(t, c.Observe(w, w+10).Accepted)
	}
	frozen, thawed := false, false
	for i := range 40 {
		w := c.Words(100 + 50*(i%10)) // what the prober would send
		o := c.Observe(w, 2*w+30)     // the new tokenizer: two tokens a word
		if o.Changed && o.Frozen {
			frozen = true
		}
		if o.Changed && !o.Frozen {
			thawed = true
			break
		}
	}
	require.True(t, frozen)
	require.True(t, thawed, "the new tokenizer's counts make the model")
	overhead, perWord := c.Model()
	require.InDelta(t, 2, perWord, 1e-6)
	require.InDelta(t, 30, overhead, 1e-6)
}

// TestTurnOverhead: later turns of a conversation are expected with the
// template's tokens around a turn, learned from their counts.
func TestTurnOverhead(t *testing.T) {
	c := NewCalibrator()
	c.Observe(100, 130) // 30 tokens of template around a single message
	c.Observe(1000, 1030)
	require.Equal(t, 230, c.TurnTokens(200), "before any turn: the whole prompt's overhead")
	for range 30 {
		c.ObserveTurn(200, 64, 64+200+9) // the reply, the new text, 9 tokens of wrapping
	}
	require.Equal(t, 209, c.TurnTokens(200))
}

// TestMismatchJudgedOnlyWhenCalibrated: requests built before the first
// count (one word a token, against a server of two) do not make a
// persistent-mismatch warning; calibrated ones that match do not either.
func TestMismatchJudgedOnlyWhenCalibrated(t *testing.T) {
	var log strings.Builder
	logger := slog.New(slog.NewTextHandler(&log, nil))
	tc := &targetClient{cfg: config.TargetConfig{Name: "t"}, cal: NewCalibrator()}
	for range 30 { // all sent before the first reply
		tc.calibrate(logger, nil, &Request{InputTokens: 512, Words: 512, calibrate: true}, 1024)
	}
	for range 30 {
		w := tc.cal.Words(512)
		tc.calibrate(logger, nil, &Request{InputTokens: 512, Words: w, calibrate: true, calibrated: true}, 2*w)
	}
	require.NotContains(t, log.String(), "stay off the requested lengths")

	for range 30 { // now the counts really are off
		w := tc.cal.Words(512)
		tc.calibrate(logger, nil, &Request{InputTokens: 512, Words: w, calibrate: true, calibrated: true}, 2*w+100)
	}
	require.Contains(t, log.String(), "stay off the requested lengths")
}

// TestCalibratorEdgeCases: small fixed prompts under a large template are
// followed, not rejected; a tokenizer 10% off is followed within 50 counts;
// a server truncating at a fixed length never replaces the model.
func TestCalibratorEdgeCases(t *testing.T) {
	small := NewCalibrator()
	for range 20 {
		require.True(t, small.Observe(small.Words(38), 38).Accepted, "8 words and a 30-token template")
	}
	require.False(t, small.Frozen())

	drift := NewCalibrator()
	for i := range 100 {
		w := 200 + 100*(i%5)
		drift.Observe(w, w)
	}
	for i := range 100 {
		w := drift.Words(200 + 100*(i%5))
		drift.Observe(w, int(1.1*float64(w)))
	}
	_, perWord := drift.Model()
	require.InDelta(t, 1.1, perWord, 0.01, "the model follows a tokenizer that changed a little")

	trunc := NewCalibrator()
	for range 20 {
		trunc.Observe(3000, 3000)
	}
	for range 200 {
		w := trunc.Words(3000)
		require.LessOrEqual(t, w, 6000)
		trunc.Observe(w, min(w, 2000)) // two thirds: a ratio a tokenizer could have
	}
	_, perWord = trunc.Model()
	require.InDelta(t, 1, perWord, 1e-6, "equal lengths never replace the model")
	require.True(t, trunc.Frozen())
}

// TestLaterTurnFitsTheContext: a later turn's new text is cut so that the
// history, the text and the output fit the usable context; a turn with no
// room left is not sent (ErrConversationFull).
func TestLaterTurnFitsTheContext(t *testing.T) {
	s := newScenarioRun(config.ScenarioConfig{Name: "c", InputTokens: workload.FixedLength(300), OutputTokens: workload.FixedLength(100),
		Conversation: &config.ConversationConfig{Turns: 5}}, config.Key{Target: "t", Scenario: "c", Test: "canary"})
	cal := NewCalibrator()
	cal.SetContext(1000) // usable: 950
	conv := &Conversation{ID: 1, Turns: 5, tokens: 600, prompt: 500, messages: []Message{{Role: "user", Content: "x"}, {Role: "assistant", Content: "y"}}}
	req := s.request(Arrival{Seq: 2, Turn: &Turn{Conv: conv, N: 2}}, cal)
	require.NoError(t, req.Skip)
	require.True(t, req.CutToContext)
	require.LessOrEqual(t, 600+4*req.Words+req.OutputTokens, 950, "at most 4 tokens a word: it fits")
	require.Equal(t, 500, req.InputBase)

	conv.tokens = 949
	req = s.request(Arrival{Seq: 3, Turn: &Turn{Conv: conv, N: 3}}, cal)
	require.ErrorIs(t, req.Skip, ErrConversationFull)
	require.ErrorIs(t, req.Skip, ErrCancelled, "it ends cancelled")
}
