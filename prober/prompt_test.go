package prober

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/ratelog"
)

func TestSynthesizePrompt(t *testing.T) {
	p := SynthesizePrompt(42, 7, 500)
	require.Equal(t, p, SynthesizePrompt(42, 7, 500), "deterministic for a seed and sequence number")
	words := strings.Fields(p)
	require.Len(t, words, 500, "one word a token")
	// About one token per four characters, the common rule of thumb and the
	// simulator's default tokenizer.
	require.InDelta(t, 500, float64(len(p))/4, 1)
	distinct := map[string]bool{}
	for _, w := range words {
		distinct[w] = true
	}
	require.Greater(t, len(distinct), 100, "varied text, not one repeated word")

	// Every request has its own text from the first word on.
	firsts := map[string]bool{}
	for seq := range uint64(1000) {
		firsts[strings.Join(strings.Fields(SynthesizePrompt(42, seq, 10))[:prefixWords], " ")] = true
	}
	require.Len(t, firsts, 1000)
	require.NotEqual(t, strings.Fields(SynthesizePrompt(1, 7, 10))[:prefixWords], strings.Fields(SynthesizePrompt(2, 7, 10))[:prefixWords])

	require.Equal(t, "", SynthesizePrompt(1, 1, 0))
	require.Len(t, strings.Fields(SynthesizePrompt(1, 1, 1)), 1)
}

// TestFailureLogRateLimit: a target failing every request logs one line
// every ten seconds, saying how many failures it left out.
func TestFailureLogRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, nil))
		f := &load{logger: logger, failures: ratelog.New(failureLogInterval)}
		r := &Result{Outcome: OutcomeHTTP5xx, StatusCode: 503, RequestID: "abc"}
		k := config.Key{Target: "t", Scenario: "s", Test: "canary"}
		for range 100 { // 10 req/s for 10s
			f.logFailure(k, r)
			time.Sleep(100 * time.Millisecond)
		}
		f.logFailure(k, r)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 2)
		require.Contains(t, lines[0], `msg="Probe request failed" load=t/s/canary outcome=http_5xx err="HTTP 503" request_id=abc failures_not_logged=0`)
		require.Contains(t, lines[1], "failures_not_logged=99")
	})
}
