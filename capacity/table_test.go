package capacity_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
)

func readRun(t *testing.T, file string) *capacity.Run {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var r capacity.Run
	require.NoError(t, json.Unmarshal(b, &r))
	return &r
}

// bigRun is the stored step run with its verify levels as wide as a
// level gets: an attainment interval, an inconclusive decision and every
// kind of note, with sent requests, rates (req/s) and latencies
// (seconds) as given.
func bigRun(t *testing.T, sent int, rate, ttftP50, p99 float64) *capacity.Run {
	r := readRun(t, "testdata/v1-step-run.json")
	for i := range r.Verify {
		l := &r.Verify[i]
		l.Decision, l.Extensions, l.Insufficient = "inconclusive", 3, true
		l.Remeasured = []string{"scheduler_latency: P99 80 ms over 50 ms"}
		l.Note = "a note as long as a level's notes get when everything happens at once to one level"
		l.Interval = &capacity.Interval{Lower: 0.9512, Upper: 0.9876}
		l.Sent, l.Goodput, l.OfferedRate, l.IntendedRate = sent, rate, rate, rate
		l.TTFT.P50, l.TTFT.P99, l.E2E.P99 = ttftP50, p99, p99
	}
	return r
}

// wideRun is as large as a 2-minute window at 800 req/s against a
// 2-minute timeout gives.
func wideRun(t *testing.T) *capacity.Run { return bigRun(t, 99999, 833.3, 12.345, 119.999) }

// worstRun is beyond any real run: the width still holds, the decisions
// going to the footnotes.
func worstRun(t *testing.T) *capacity.Run {
	r := bigRun(t, 1234567, 1234.5, 123.456, 12345.678)
	for i := range r.Verify { // and the engine's queue column
		r.Verify[i].EngineQueue = &capacity.EngineQueue{Samples: 10, Mean: 12345.6, Max: 99999}
	}
	return r
}

// TestTableWidth: no line of the terminal table is wider than 120
// columns; every note is in its row or in a footnote the row refers to.
func TestTableWidth(t *testing.T) {
	for name, r := range map[string]*capacity.Run{
		"step":  readRun(t, "testdata/v1-step-run.json"),
		"soak":  readRun(t, "testdata/v1-soak-run.json"),
		"wide":  wideRun(t),
		"worst": worstRun(t),
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			capacity.WriteTable(&b, r)
			out := b.String()
			for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				require.LessOrEqual(t, len(line), capacity.TableWidth, "%q\n%s", line, out)
				require.Equal(t, strings.TrimRight(line, " "), line, "trailing spaces")
			}
			refs := regexp.MustCompile(`\[(\d+)\]$`)
			n := 0
			for _, line := range strings.Split(out, "\n") {
				if m := refs.FindStringSubmatch(line); m != nil {
					n++
					require.Equal(t, fmt.Sprint(n), m[1], "footnotes numbered in row order")
					require.Contains(t, out, "\n["+m[1]+"] ", "the footnote of %q", line)
				}
			}
			flat := strings.Join(strings.Fields(out), " ")
			for _, l := range r.Verify {
				if l.Note != "" {
					require.Contains(t, flat, l.Note, "every note is shown")
				}
			}
		})
	}
	var b bytes.Buffer
	capacity.WriteTable(&b, wideRun(t))
	require.Contains(t, b.String(), "inconclusive [", "the decision stays in its row")
	require.Contains(t, b.String(), "[2] verify at 833 req/s: window extended 3x; measured 2 times (scheduler_latency)")
}

// TestWriteMarkdown: every column, one row a level, notes in their rows.
func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	capacity.WriteMarkdown(&b, readRun(t, "testdata/v1-step-run.json"))
	out := b.String()
	require.Contains(t, out, "- test knee (step) on sim: PASS")
	require.Contains(t, out, "| stage | clients | intended/s | offered/s | window | sent | ok/s | good/s | in tok/s | out tok/s | attained [95% CI] | TTFT p50/p95/p99 ms (n) | TPOT p99 ms | E2E p99 ms | drain s | note |")
	require.Contains(t, out, "| burst | - | 17.8 | 12.8 | 5s | 64 | 12.8 | 1.6 | 3277 | 409.6 | 12.5% | 655/744*/748* (64) | 23* | 1455* | 1.90 | dropped 41 (max_in_flight); drained in 1.9s (within 10s) |")
	require.Equal(t, 11, strings.Count(out, "\n| ")-1, "a row a level")

	b.Reset()
	capacity.WriteMarkdown(&b, readRun(t, "testdata/v1-soak-run.json"))
	require.Contains(t, b.String(), "- soak: 4 req/s open loop, 5 windows of 15 s")
	require.Contains(t, b.String(), "| error burst; 43 of 60 failed (http_5xx 43); prober 22 MiB, 30 goroutines |")
}

// TestSearchText: the search line names each verification level's rate,
// decision and how it came: bisection, forecast, measured again, pooled
// with the levels above it.
func TestSearchText(t *testing.T) {
	met := func(rate float64, why string, again int) capacity.Level {
		l := capacity.Level{Stage: "verify", OfferedRate: rate, Decision: capacity.DecisionMet, Why: why, Prober: &capacity.ProberHealth{}}
		for range again {
			l.Remeasured = append(l.Remeasured, "attained 100.0% [53.4, 100.0] of 32")
		}
		return l
	}
	run := &capacity.Run{Stages: capacity.Stages{Verify: []capacity.Level{
		met(5, "0.5x the closed-loop rate", 0),
		met(8, "0.8x the closed-loop rate", 1),
		met(9, "bisection between 8 req/s and 10 req/s", 2),
		met(6, "forecast peak: 3 replicas", 0),
		{Stage: "verify", OfferedRate: 7, Decision: capacity.DecisionMet, Why: "0.9x the closed-loop rate", Prober: &capacity.ProberHealth{}, First: "attained 100.0% [53.4, 100.0] of 32"},
		{Stage: "verify", IntendedRate: 20, Note: "not run: capped by max_rate 15 req/s"},
		{Stage: "verify", OfferedRate: 9.5, Decision: capacity.DecisionMet, Why: "bisection between 9 req/s and 10 req/s", Prober: &capacity.ProberHealth{},
			Pooled: &capacity.Pooled{Rates: []float64{9.8, 10}}},
		{Stage: "verify", OfferedRate: 9.7, Decision: capacity.DecisionMet, Why: "measured again: 9.8 req/s stayed undecided above its objective, ...", Prober: &capacity.ProberHealth{},
			Pooled: &capacity.Pooled{Rates: []float64{9.8}}},
	}}}
	require.Equal(t, "5 req/s met, 8 req/s met (measured again), 9 req/s met (bisection, measured 3 times), 6 req/s met (forecast peak), 7 req/s met (measured again), 9.5 req/s met (bisection, pooled with 9.8 and 10), 9.7 req/s met (a second window, pooled with 9.8)", run.SearchText())
}
