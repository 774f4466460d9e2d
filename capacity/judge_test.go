package capacity

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// window is a soak window of sent requests, good of them, a TTFT of n
// samples with the given P50/P95/P99 (seconds), and the prober's RSS.
func window(sent, good, n int, p50, p95, p99 float64, rss int64) SoakWindow {
	w := SoakWindow{ProberRSSBytes: rss}
	w.Sent = sent
	w.Scenarios = []ScenarioResult{{Scenario: "chat", Counted: sent, Good: good}}
	w.TTFT = Percentiles{N: n, P50: p50, P95: p95, P99: p99}
	return w
}

// TestJudgeSoak: the soak's drift rules on synthetic windows. The tail
// compared is the one the fewest samples can tell (P99 over 1,000, P95
// over 200, else the median); goodput is per request sent; an empty
// window is not a drop; the prober's memory counts over three windows or
// more; a last window of errors is no recovery.
func TestJudgeSoak(t *testing.T) {
	const mib = 1 << 20
	test := &config.TestConfig{Drift: config.DriftConfig{P99Growth: 0.2, GoodputDrop: 0.05}}
	for _, tc := range []struct {
		name    string
		windows []SoakWindow
		verdict string
		reason  string
	}{
		{
			name:    "steady",
			windows: []SoakWindow{window(100, 99, 100, 0.1, 0.2, 0.3, 40*mib), window(100, 99, 100, 0.1, 0.2, 0.3, 40*mib)},
			verdict: VerdictPass,
			reason:  "no drift over 2 windows",
		},
		{
			name:    "one window",
			windows: []SoakWindow{window(100, 99, 100, 0.1, 0.2, 0.3, 40*mib)},
			verdict: VerdictPass,
			reason:  "one window: nothing to compare",
		},
		{
			// 100 samples: the P99 is their largest; only the median
			// (unchanged) is compared.
			name:    "P99 of few samples is noise",
			windows: []SoakWindow{window(100, 99, 100, 0.1, 0.2, 0.3, 40*mib), window(100, 99, 100, 0.1, 0.2, 3, 40*mib)},
			verdict: VerdictPass,
		},
		{
			name:    "median grows",
			windows: []SoakWindow{window(100, 99, 100, 0.1, 0.2, 0.3, 40*mib), window(100, 99, 100, 0.15, 0.2, 0.3, 40*mib)},
			verdict: VerdictFail,
			reason:  "ttft P50 grew 50% (0.1s to 0.15s; drift.p99_growth 0.2)",
		},
		{
			name:    "P95 over 200 samples",
			windows: []SoakWindow{window(300, 300, 300, 0.1, 0.2, 0.3, 40*mib), window(300, 300, 300, 0.1, 0.3, 0.3, 40*mib)},
			verdict: VerdictFail,
			reason:  "ttft P95 grew 50%",
		},
		{
			name:    "P99 over 1,000 samples",
			windows: []SoakWindow{window(2000, 2000, 2000, 0.1, 0.2, 0.3, 40*mib), window(2000, 2000, 2000, 0.1, 0.2, 0.6, 40*mib)},
			verdict: VerdictFail,
			reason:  "ttft P99 grew 100%",
		},
		{
			name:    "goodput per request drops",
			windows: []SoakWindow{window(100, 100, 100, 0.1, 0.2, 0.3, 40*mib), window(50, 40, 100, 0.1, 0.2, 0.3, 40*mib)},
			verdict: VerdictFail,
			reason:  "goodput per request fell 20% (100.0% to 80.0% good; drift.goodput_drop 0.05)",
		},
		{
			// Half the requests (a Poisson count) at the same share
			// good: no drop.
			name:    "fewer arrivals, same share",
			windows: []SoakWindow{window(100, 90, 100, 0.1, 0.2, 0.3, 40*mib), window(50, 45, 100, 0.1, 0.2, 0.3, 40*mib)},
			verdict: VerdictPass,
		},
		{
			name:    "last window sent nothing",
			windows: []SoakWindow{window(7, 7, 7, 0.1, 0.2, 0.3, 40*mib), window(0, 0, 0, 0, 0, 0, 40*mib)},
			verdict: VerdictPass,
			reason:  "goodput not compared: the last windows sent no request",
		},
		{
			name:    "first window sent nothing",
			windows: []SoakWindow{window(0, 0, 0, 0, 0, 0, 40*mib), window(7, 1, 7, 0.1, 0.2, 0.3, 40*mib)},
			verdict: VerdictPass,
			reason:  "goodput not compared: the first window sent no request",
		},
		{
			name: "prober leaks",
			windows: []SoakWindow{
				window(100, 100, 100, 0.1, 0.2, 0.3, 40*mib), window(100, 100, 100, 0.1, 0.2, 0.3, 80*mib),
				window(100, 100, 100, 0.1, 0.2, 0.3, 120*mib), window(100, 100, 100, 0.1, 0.2, 0.3, 160*mib),
			},
			verdict: VerdictFail,
			reason:  "the prober's memory grew 300% (40 to 160 MiB)",
		},
		{
			// Growth below 32 MiB is a heap's cycle, not a leak.
			name: "prober memory grows a little",
			windows: []SoakWindow{
				window(100, 100, 100, 0.1, 0.2, 0.3, 20*mib), window(100, 100, 100, 0.1, 0.2, 0.3, 40*mib),
				window(100, 100, 100, 0.1, 0.2, 0.3, 50*mib),
			},
			verdict: VerdictPass,
		},
		{
			name: "last window an error burst",
			windows: []SoakWindow{
				window(100, 100, 100, 0.1, 0.2, 0.3, 40*mib),
				func() SoakWindow { w := window(100, 100, 100, 0.1, 0.2, 0.3, 40*mib); w.ErrorBurst = true; return w }(),
			},
			verdict: VerdictFail,
			reason:  "the last window is an error burst (more than 10% failed): no recovery",
		},
		{
			name: "an error burst recovered from",
			windows: []SoakWindow{
				window(100, 100, 100, 0.1, 0.2, 0.3, 40*mib),
				func() SoakWindow { w := window(100, 100, 100, 0.1, 0.2, 0.3, 40*mib); w.ErrorBurst = true; return w }(),
				window(100, 100, 100, 0.1, 0.2, 0.3, 40*mib),
			},
			verdict: VerdictPass,
			reason:  "1 error bursts, recovered",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdict, reason := judgeSoak(test, &SoakRun{Windows: tc.windows})
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
	first, last := window(100, 100, 100, 0.1, 0.2, 0.3, 0), window(100, 100, 100, 0.2, 0.2, 0.3, 0)
	first.Server = &ServerSignals{Reported: 100, Queue: Percentiles{N: 100, P50: 0.0001}, Prefill: Percentiles{N: 100, P50: 0.02}, DecodePerToken: Percentiles{N: 100, P50: 0.005}}
	last.Server = &ServerSignals{Reported: 100, Queue: Percentiles{N: 100, P50: 0.0002}, Prefill: Percentiles{N: 100, P50: 0.02}, DecodePerToken: Percentiles{N: 100, P50: 0.01}}
	sr := &SoakRun{Windows: []SoakWindow{first, last}}
	verdict, reason := judgeSoak(test, sr)
	require.Equal(t, VerdictFail, verdict)
	require.Contains(t, reason, "; the server's own timings (P50): prefill +0%, decode per token +100%")
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
			o.Sent(0)
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
