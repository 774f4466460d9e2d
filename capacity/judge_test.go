package capacity

import (
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// soakWindow is a synthetic soak window: its requests' TTFTs (seconds,
// one per request, all counted), how many of them were good, the
// prober's RSS, and whether it was an error burst.
type soakWindow struct {
	ttft  []float64
	good  int
	rss   int64
	burst bool
}

// ttfts returns n TTFTs evenly spread from lo to hi.
func ttfts(n int, lo, hi float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + (hi-lo)*float64(i)/float64(max(n-1, 1))
	}
	return v
}

// judgeWindows judges a soak of synthetic windows of 10 s each, their
// misses spread evenly over each window.
func judgeWindows(test *config.TestConfig, windows []soakWindow) (*Soak, *SoakRun, string, string) {
	s := &Soak{Test: test, keepLast: lastWindows(len(windows))}
	s.Test.Window.Steady = model.Duration(10 * time.Second)
	sr := &SoakRun{}
	t0 := time.Unix(1_700_000_000, 0)
	for i, w := range windows {
		start := t0.Add(time.Duration(i) * 10 * time.Second)
		n := len(w.ttft)
		var records []Record
		for j, v := range w.ttft {
			records = append(records, Record{Sent: start.Add(time.Duration(j) * 10 * time.Second / time.Duration(max(n, 1))),
				Counted: true, Good: true, TTFT: time.Duration(v * float64(time.Second)), HasTTFT: true})
		}
		// n - good misses, spread evenly over the window.
		for j := range n - w.good {
			records[j*n/(n-w.good)].Good = false
		}
		sw := SoakWindow{ProberRSSBytes: w.rss, ErrorBurst: w.burst}
		sw.Sent, sw.Counted = n, n
		sw.Scenarios = []ScenarioResult{{Scenario: "chat", Counted: n, Good: w.good}}
		sr.Windows = append(sr.Windows, sw)
		samples := samplesOf(records, start)
		if i == 0 {
			s.first = samples
		} else {
			s.last = append(s.last, samples)
		}
	}
	verdict, reason := s.judge(sr)
	return s, sr, verdict, reason
}

// TestJudgeSoak: the soak's drift rules on synthetic windows. A latency
// drifted when the interval of its growth lies beyond the allowance; the
// tail compared is the one the fewest samples can tell (P99 over 1,000,
// P95 over 200, else the median); the attainment is good over counted,
// with its interval; an empty window is not a drop; the prober's memory
// counts over three windows or more; a last window of errors is no
// recovery.
func TestJudgeSoak(t *testing.T) {
	const mib = 1 << 20
	test := &config.TestConfig{Drift: config.DriftConfig{P99Growth: 0.2, GoodputDrop: 0.05}}
	steady := soakWindow{ttft: ttfts(100, 0.1, 0.3), good: 99, rss: 40 * mib}
	with := func(w soakWindow, f func(*soakWindow)) soakWindow {
		w.ttft = append([]float64(nil), w.ttft...)
		f(&w)
		return w
	}
	// tail is n TTFTs from lo to hi, their top share at top.
	tail := func(n int, lo, hi, share, top float64) []float64 {
		v := ttfts(n, lo, hi)
		for i := n - int(share*float64(n)); i < n; i++ {
			v[i] = top
		}
		return v
	}
	for _, tc := range []struct {
		name    string
		windows []soakWindow
		verdict string
		reason  string
	}{
		{"steady", []soakWindow{steady, steady}, VerdictPass, "no drift over 2 windows"},
		{"one window", []soakWindow{steady}, VerdictPass, "one window: nothing to compare"},
		{
			// 100 samples: the P99 is their largest; only the median
			// (unchanged) is compared.
			"P99 of few samples is noise",
			[]soakWindow{steady, with(steady, func(w *soakWindow) { w.ttft[99] = 3 })}, VerdictPass, "",
		},
		{
			"median grows",
			[]soakWindow{steady, with(steady, func(w *soakWindow) {
				for i := range w.ttft {
					w.ttft[i] *= 1.6
				}
			})},
			VerdictFail, "ttft P50 grew 60% [29, 98] over 100 and 100 requests (drift.p99_growth 0.2)",
		},
		{
			// +30% at the median, but 100 requests a side cannot tell it
			// from +20%: no drift is claimed.
			"a growth within the interval",
			[]soakWindow{steady, with(steady, func(w *soakWindow) {
				for i := range w.ttft {
					w.ttft[i] *= 1.3
				}
			})},
			VerdictPass, "",
		},
		{
			"P95 over 200 samples",
			[]soakWindow{{ttft: ttfts(300, 0.1, 0.2), good: 300}, {ttft: tail(300, 0.1, 0.2, 0.1, 0.5), good: 300}},
			VerdictFail, "ttft P95 grew 156% [153, 160] over 300 and 300 requests",
		},
		{
			"P99 over 1,000 samples",
			[]soakWindow{{ttft: tail(2000, 0.1, 0.3, 0.02, 0.3), good: 2000}, {ttft: tail(2000, 0.1, 0.3, 0.02, 0.6), good: 2000}},
			VerdictFail, "ttft P99 grew 100% [100, 100] over 2000 and 2000 requests",
		},
		{
			"the attainment drops",
			[]soakWindow{{ttft: ttfts(100, 0.1, 0.3), good: 100}, {ttft: ttfts(100, 0.1, 0.3), good: 80}},
			VerdictFail, "the attainment fell 20% [10, 29] (100.0% to 80.0% good, of 100 and 100 requests; drift.goodput_drop 0.05)",
		},
		{
			// Half the requests (a Poisson count) at the same share
			// good: no drop.
			"fewer arrivals, same share",
			[]soakWindow{{ttft: ttfts(100, 0.1, 0.3), good: 90}, {ttft: ttfts(50, 0.1, 0.3), good: 45}},
			VerdictPass, "",
		},
		{
			"last window counted nothing",
			[]soakWindow{{ttft: ttfts(7, 0.1, 0.3), good: 7}, {}},
			VerdictPass, "attainment not compared: the last windows counted no request",
		},
		{
			"first window counted nothing",
			[]soakWindow{{}, {ttft: ttfts(7, 0.1, 0.3), good: 1}},
			VerdictPass, "attainment not compared: the first window counted no request",
		},
		{
			"prober leaks",
			[]soakWindow{steady, with(steady, func(w *soakWindow) { w.rss = 80 * mib }), with(steady, func(w *soakWindow) { w.rss = 120 * mib }),
				with(steady, func(w *soakWindow) { w.rss = 160 * mib })},
			VerdictFail, "the prober's memory grew 300% (40 to 160 MiB)",
		},
		{
			// Growth below 32 MiB is a heap's cycle, not a leak.
			"prober memory grows a little",
			[]soakWindow{with(steady, func(w *soakWindow) { w.rss = 20 * mib }), steady, with(steady, func(w *soakWindow) { w.rss = 50 * mib })},
			VerdictPass, "",
		},
		{
			"last window an error burst",
			[]soakWindow{steady, with(steady, func(w *soakWindow) { w.burst = true })},
			VerdictFail, "the last window is an error burst (more than 10% failed): no recovery",
		},
		{
			"an error burst recovered from",
			[]soakWindow{steady, with(steady, func(w *soakWindow) { w.burst = true }), steady},
			VerdictPass, "1 error bursts, recovered",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, verdict, reason := judgeWindows(test, tc.windows)
			require.Equal(t, tc.verdict, verdict, reason)
			require.Contains(t, reason, tc.reason)
		})
	}
}

// TestServerSignals: a server's own timings are used where they fit in
// what the request took at the client (5% and 5 ms of slack), and its
// cached tokens where it reports them with the prompt's; a soak that
// drifts says which phase the server timed grew.
func TestServerSignals(t *testing.T) {
	ms := func(v float64) *float64 { return &v }
	cached := func(n int) *int { return &n }
	for _, tc := range []struct {
		name string
		r    prober.Result
		want serverRecord
	}{
		{"none", prober.Result{Ended: 100 * time.Millisecond}, serverRecord{}},
		{
			"honest",
			prober.Result{Ended: 100 * time.Millisecond, Timings: &prober.ServerTimings{QueueMS: ms(10), PromptMS: 20, PredictedN: 10, PredictedMS: 60}},
			serverRecord{HasTimings: true, HasQueue: true, Queue: 0.01, Prefill: 0.02, DecodePerToken: 0.006},
		},
		{
			// 104 ms of work in a request of 100 ms: within the slack.
			"a server's clock",
			prober.Result{Ended: 100 * time.Millisecond, Timings: &prober.ServerTimings{PromptMS: 44, PredictedN: 0, PredictedMS: 60}},
			serverRecord{HasTimings: true, Prefill: 0.044},
		},
		{
			// An hour of queue in a request of 100 ms.
			"implausible",
			prober.Result{Ended: 100 * time.Millisecond, Timings: &prober.ServerTimings{QueueMS: ms(3.6e6), PromptMS: 20, PredictedN: 10, PredictedMS: 60}},
			serverRecord{Implausible: true},
		},
		{
			"cached",
			prober.Result{Ended: time.Second, Usage: &prober.Usage{PromptTokens: 1000, CachedTokens: cached(750)}},
			serverRecord{HasCached: true, Cached: 750, Prompt: 1000},
		},
		{
			"more cached than the prompt",
			prober.Result{Ended: time.Second, Usage: &prober.Usage{PromptTokens: 10, CachedTokens: cached(750)}},
			serverRecord{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serverOf(&tc.r)
			require.InDelta(t, tc.want.DecodePerToken, got.DecodePerToken, 1e-12)
			got.DecodePerToken, tc.want.DecodePerToken = 0, 0
			require.Equal(t, tc.want, got)
		})
	}

	records := []Record{
		{Server: serverRecord{HasTimings: true, HasQueue: true, Queue: 0.01, Prefill: 0.02, DecodePerToken: 0.006}},
		{Server: serverRecord{Implausible: true}},
		{Server: serverRecord{HasCached: true, Cached: 750, Prompt: 1000}},
		{},
	}
	s := serverSignals(records)
	require.Equal(t, 1, s.Reported)
	require.Equal(t, 1, s.Implausible)
	require.Equal(t, 1, s.Queue.N)
	require.NotNil(t, s.CachedShare)
	require.InDelta(t, 0.75, *s.CachedShare, 1e-9)
	require.Nil(t, serverSignals([]Record{{}}), "no server said anything")

	test := &config.TestConfig{Drift: config.DriftConfig{P99Growth: 0.2, GoodputDrop: 0.05}}
	first, last := soakWindow{ttft: ttfts(100, 0.1, 0.3), good: 100}, soakWindow{ttft: ttfts(100, 0.2, 0.6), good: 100}
	soak, sr, _, _ := judgeWindows(test, []soakWindow{first, last})
	sr.Windows[0].Server = &ServerSignals{Reported: 100, Queue: Percentiles{N: 100, P50: 0.0001}, Prefill: Percentiles{N: 100, P50: 0.02}, DecodePerToken: Percentiles{N: 100, P50: 0.005}}
	sr.Windows[1].Server = &ServerSignals{Reported: 100, Queue: Percentiles{N: 100, P50: 0.0002}, Prefill: Percentiles{N: 100, P50: 0.02}, DecodePerToken: Percentiles{N: 100, P50: 0.01}}
	verdict, reason := soak.judge(sr)
	require.Equal(t, VerdictFail, verdict)
	require.Contains(t, reason, "; the server's own timings (P50): prefill 0%, decode per token +100%")
	require.NotContains(t, sr.Drift.ServerGrowth, "queue", "0.1 ms to 0.2 ms is no growth to speak of")
}

// TestScenarioLengths: a run keeps the lengths of every request kept in a
// window, pooled and, in a mix, per scenario: input as sent, output as
// received by ok requests.
func TestScenarioLengths(t *testing.T) {
	c := &Collector{}
	w := c.Open(time.Now().Add(-time.Minute))
	chat := &collectorObserver{c: c, scenario: "chat"}
	code := &collectorObserver{c: c, scenario: "code"}
	for i := range 10 {
		for _, o := range []*collectorObserver{chat, code} {
			in, out := 100, 20
			if o == code {
				in, out = 2000, 300
			}
			o.Sent(time.Now(), 0)
			r := &prober.Result{Sent: time.Now(), InputTokens: in + i, Outcome: prober.OutcomeOK}
			o.Finished(r, &prober.Measurement{Counted: true, OutputTokens: out})
		}
	}
	c.Close(w, time.Now())
	all := c.Lengths()
	require.Equal(t, 20, all.Input.N)
	by := c.ScenarioLengths()
	require.Len(t, by, 2)
	require.Equal(t, 104.0, by["chat"].Input.P50)
	require.Equal(t, 2004.0, by["code"].Input.P50)
	require.Equal(t, 300.0, by["code"].Output.P99)

	one := &Collector{}
	one.Open(time.Now().Add(-time.Minute))
	(&collectorObserver{c: one, scenario: "chat"}).Finished(&prober.Result{Sent: time.Now(), InputTokens: 5}, &prober.Measurement{})
	require.Nil(t, one.ScenarioLengths(), "one scenario: the run's lengths are its own")
}
