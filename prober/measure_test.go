package prober

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Result
		want Outcome
	}{
		{"cancelled wins over everything", Result{Cause: ErrCancelled, ConnectErr: "x", StatusCode: 500}, OutcomeCancelled},
		{"shutdown", Result{Cause: fmt.Errorf("wrapped: %w", ErrShutdown), StatusCode: 200}, OutcomeShutdown},
		{"timeout", Result{Cause: ErrTimeout, ConnectErr: "dial tcp: i/o timeout"}, OutcomeTimeout},
		{"deadline of a parent context", Result{Cause: context.DeadlineExceeded}, OutcomeTimeout},
		{"connect error", Result{ConnectErr: "connection refused"}, OutcomeConnectError},
		{"429", Result{StatusCode: 429, Done: true}, OutcomeHTTP429},
		{"404", Result{StatusCode: 404}, OutcomeHTTP4xx},
		{"400", Result{StatusCode: 400}, OutcomeHTTP4xx},
		{"502", Result{StatusCode: 502}, OutcomeHTTP5xx},
		{"503", Result{StatusCode: 503}, OutcomeHTTP5xx},
		{"302 not followed", Result{StatusCode: 302}, OutcomeProtocolError},
		{"protocol before stream error", Result{StatusCode: 200, ProtocolErr: "bad chunk", StreamErr: "broken"}, OutcomeProtocolError},
		{"stream error after [DONE]", Result{StatusCode: 200, StreamErr: "error in stream", Done: true}, OutcomeStreamError},
		{"no [DONE], even after finish_reason", Result{StatusCode: 200, FinishReason: "stop"}, OutcomeStreamError},
		{"ok", Result{StatusCode: 200, Done: true}, OutcomeOK},
		{"206 is 2xx", Result{StatusCode: 206, Done: true}, OutcomeOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Classify(&tc.r))
		})
	}
}

func TestMeasure(t *testing.T) {
	slos := []config.SLO{{Name: "ttft", Threshold: ms(100)}, {Name: "tpot", Threshold: ms(20)}, {Name: "e2e", Threshold: ms(300)}, {Name: "max_itl", Threshold: ms(50)}}
	all := []string{"ttft", "tpot", "e2e", "max_itl"}
	chunks := []time.Duration{ms(80), ms(100), ms(130), ms(140), ms(160)}
	for _, tc := range []struct {
		name string
		r    Result
		slos []config.SLO
		want Measurement
	}{{
		name: "ok with usage: N from usage, several tokens a chunk",
		r:    Result{Outcome: OutcomeOK, Chunks: chunks, Usage: &Usage{PromptTokens: 100, CompletionTokens: 9}, InputTokens: 100, OutputTokens: 9, IgnoreEOS: true},
		slos: slos,
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(160), HasE2E: true,
			TPOT: ms(10), HasTPOT: true, MaxITL: ms(30), HasMaxITL: true, HasITL: true,
			OutputTokens: 9, HasOutput: true, InputTokens: 100, Counted: true, Good: true},
	}, {
		name: "ok without usage: N is the chunk count, both fallbacks",
		r:    Result{Outcome: OutcomeOK, Chunks: chunks, InputTokens: 64},
		slos: slos,
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(160), HasE2E: true,
			TPOT: ms(20), HasTPOT: true, MaxITL: ms(30), HasMaxITL: true, HasITL: true,
			OutputTokens: 5, HasOutput: true, OutputFallback: true, InputTokens: 64, InputFallback: true,
			Counted: true, Good: true},
	}, {
		// A server that lies in usage: 5 text chunks 20 ms apart (TPOT
		// 20 ms) said to be 1 token would have no TPOT, so met.
		name: "usage below the text chunks: N is the chunks, a length mismatch",
		r:    Result{Outcome: OutcomeOK, Chunks: chunks, Usage: &Usage{PromptTokens: 100, CompletionTokens: 1}, InputTokens: 100, OutputTokens: 5},
		slos: []config.SLO{{Name: "tpot", Threshold: ms(10)}},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(160), HasE2E: true,
			TPOT: ms(20), HasTPOT: true, MaxITL: ms(30), HasMaxITL: true, HasITL: true,
			OutputTokens: 5, UsageBelowChunks: true, OutputMismatch: true, HasOutput: true, InputTokens: 100, Counted: true, Missed: []string{"tpot"}},
	}, {
		// Ten times the tokens asked for: N is at most max_tokens (its
		// TPOT and tokens/s are not cut or multiplied tenfold).
		name: "usage above max_tokens: N is what was asked, a length mismatch",
		r:    Result{Outcome: OutcomeOK, Chunks: chunks, Usage: &Usage{PromptTokens: 100, CompletionTokens: 50}, InputTokens: 100, OutputTokens: 5},
		slos: []config.SLO{{Name: "tpot", Threshold: ms(10)}},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(160), HasE2E: true,
			TPOT: ms(20), HasTPOT: true, MaxITL: ms(30), HasMaxITL: true, HasITL: true,
			OutputTokens: 5, UsageAboveAsked: true, OutputMismatch: true, HasOutput: true, InputTokens: 100, Counted: true, Missed: []string{"tpot"}},
	}, {
		name: "SLO bounds are inclusive",
		r:    Result{Outcome: OutcomeOK, Chunks: []time.Duration{ms(100), ms(150), ms(300)}, Usage: &Usage{PromptTokens: 10, CompletionTokens: 11}, InputTokens: 10},
		slos: []config.SLO{{Name: "ttft", Threshold: ms(100)}, {Name: "tpot", Threshold: ms(20)}, {Name: "e2e", Threshold: ms(300)}, {Name: "max_itl", Threshold: ms(150)}},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(100), HasTTFT: true, E2E: ms(300), HasE2E: true,
			TPOT: ms(20), HasTPOT: true, MaxITL: ms(150), HasMaxITL: true, HasITL: true,
			OutputTokens: 11, HasOutput: true, InputTokens: 10, Counted: true, Good: true},
	}, {
		name: "one chunk: TPOT and max ITL unmeasurable, so met",
		r:    Result{Outcome: OutcomeOK, Chunks: []time.Duration{ms(90)}, Usage: &Usage{PromptTokens: 10, CompletionTokens: 1}, InputTokens: 10},
		slos: slos,
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(90), HasTTFT: true, E2E: ms(90), HasE2E: true,
			OutputTokens: 1, HasOutput: true, InputTokens: 10, Counted: true, Good: true},
	}, {
		name: "misses: slow first token and a stall",
		r:    Result{Outcome: OutcomeOK, Chunks: []time.Duration{ms(150), ms(160), ms(260)}, Usage: &Usage{PromptTokens: 10, CompletionTokens: 3}, InputTokens: 10},
		slos: slos,
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(150), HasTTFT: true, E2E: ms(260), HasE2E: true,
			TPOT: ms(55), HasTPOT: true, MaxITL: ms(100), HasMaxITL: true, HasITL: true,
			OutputTokens: 3, HasOutput: true, InputTokens: 10, Counted: true, Missed: []string{"ttft", "tpot", "max_itl"}},
	}, {
		name: "ok without text: counted, not good, misses every SLO",
		r:    Result{Outcome: OutcomeOK, Usage: &Usage{PromptTokens: 10}, InputTokens: 10},
		slos: slos,
		want: Measurement{Outcome: OutcomeOK, InputTokens: 10, Counted: true, Missed: all},
	}, {
		name: "no SLOs: good is ok with text",
		r:    Result{Outcome: OutcomeOK, Chunks: []time.Duration{ms(5000)}, Usage: &Usage{PromptTokens: 10, CompletionTokens: 1}, InputTokens: 10},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(5000), HasTTFT: true, E2E: ms(5000), HasE2E: true,
			OutputTokens: 1, HasOutput: true, InputTokens: 10, Counted: true, Good: true},
	}, {
		name: "timeout after tokens: TTFT and ITL observed, no E2E, misses all",
		r:    Result{Outcome: OutcomeTimeout, Chunks: chunks[:2], InputTokens: 10},
		slos: slos,
		want: Measurement{Outcome: OutcomeTimeout, TTFT: ms(80), HasTTFT: true, HasITL: true,
			OutputTokens: 2, HasOutput: true, InputTokens: 10, Counted: true, Missed: all},
	}, {
		name: "cancelled: no TTFT, no ITL, not counted",
		r:    Result{Outcome: OutcomeCancelled, Chunks: chunks[:3], InputTokens: 10},
		slos: slos,
		want: Measurement{Outcome: OutcomeCancelled, OutputTokens: 3, HasOutput: true, InputTokens: 10},
	}, {
		name: "shutdown: TTFT observed, not counted",
		r:    Result{Outcome: OutcomeShutdown, Chunks: chunks[:1], InputTokens: 10},
		slos: slos,
		want: Measurement{Outcome: OutcomeShutdown, TTFT: ms(80), HasTTFT: true, OutputTokens: 1, HasOutput: true, InputTokens: 10},
	}, {
		name: "HTTP 503: counted, misses all",
		r:    Result{Outcome: OutcomeHTTP5xx, InputTokens: 10},
		slos: slos[:1],
		want: Measurement{Outcome: OutcomeHTTP5xx, InputTokens: 10, Counted: true, Missed: []string{"ttft"}},
	}, {
		name: "length mismatches: input off by more than 25%, output short although ignore_eos",
		r:    Result{Outcome: OutcomeOK, Chunks: chunks, Usage: &Usage{PromptTokens: 130, CompletionTokens: 5}, InputTokens: 100, OutputTokens: 64, IgnoreEOS: true},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(160), HasE2E: true,
			TPOT: ms(20), HasTPOT: true, MaxITL: ms(30), HasMaxITL: true, HasITL: true,
			OutputTokens: 5, HasOutput: true, InputTokens: 130, InputMismatch: true, OutputMismatch: true, Counted: true, Good: true},
	}, {
		name: "short output without ignore_eos is no mismatch",
		r:    Result{Outcome: OutcomeOK, Chunks: chunks[:1], Usage: &Usage{PromptTokens: 108, CompletionTokens: 1}, InputTokens: 100, OutputTokens: 64},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(80), HasE2E: true,
			OutputTokens: 1, HasOutput: true, InputTokens: 108, Counted: true, Good: true},
	}, {
		name: "output longer than requested is a mismatch, with or without ignore_eos",
		r:    Result{Outcome: OutcomeOK, Chunks: chunks, Usage: &Usage{PromptTokens: 100, CompletionTokens: 5}, InputTokens: 100, OutputTokens: 4},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(160), HasE2E: true,
			TPOT: ms(20), HasTPOT: true, MaxITL: ms(30), HasMaxITL: true, HasITL: true,
			OutputTokens: 5, HasOutput: true, InputTokens: 100, OutputMismatch: true, Counted: true, Good: true},
	}, {
		name: "a later turn: only the part after the history is judged",
		// 500 tokens of history, 44 new: 548 counted is 48 for 44 in the
		// new part, within 8 tokens.
		r: Result{Outcome: OutcomeOK, Chunks: chunks[:1], Usage: &Usage{PromptTokens: 548, CompletionTokens: 1}, InputTokens: 544, InputBase: 500},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(80), HasE2E: true,
			OutputTokens: 1, HasOutput: true, InputTokens: 548, Counted: true, Good: true},
	}, {
		name: "a later turn off in its new part",
		r:    Result{Outcome: OutcomeOK, Chunks: chunks[:1], Usage: &Usage{PromptTokens: 592, CompletionTokens: 1}, InputTokens: 544, InputBase: 500},
		want: Measurement{Outcome: OutcomeOK, TTFT: ms(80), HasTTFT: true, E2E: ms(80), HasE2E: true,
			OutputTokens: 1, HasOutput: true, InputTokens: 592, InputMismatch: true, Counted: true, Good: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			// Without reasoning, the first answer token is the first token.
			tc.want.TTFA, tc.want.HasTTFA = tc.want.TTFT, tc.want.HasTTFT
			require.Equal(t, tc.want, Measure(&tc.r, tc.slos))
		})
	}
}

// TestMeasureAnswer: with reasoning first, the time to first answer token
// is that of the first content or tool-call chunk; a reply that is all
// reasoning has none and misses a ttfa SLO; reasoning tokens come from
// usage, bounded by the output.
func TestMeasureAnswer(t *testing.T) {
	chunks := []time.Duration{ms(80), ms(100), ms(130), ms(140), ms(160)}
	slos := []config.SLO{{Name: "ttft", Threshold: ms(100)}, {Name: "ttfa", Threshold: ms(135)}}
	reasoning := func(n int) *int { return &n }
	for _, tc := range []struct {
		name      string
		r         Result
		ttfa      time.Duration
		hasTTFA   bool
		reasoning int
		missed    []string
	}{
		{name: "answer after two reasoning chunks", r: Result{Outcome: OutcomeOK, Chunks: chunks, FirstAnswer: 2,
			Usage: &Usage{CompletionTokens: 5, ReasoningTokens: reasoning(2)}}, ttfa: ms(130), hasTTFA: true, reasoning: 2},
		{name: "answer too late", r: Result{Outcome: OutcomeOK, Chunks: chunks, FirstAnswer: 3}, ttfa: ms(140), hasTTFA: true, missed: []string{"ttfa"}},
		{name: "reasoning only", r: Result{Outcome: OutcomeOK, Chunks: chunks, FirstAnswer: -1,
			Usage: &Usage{CompletionTokens: 5, ReasoningTokens: reasoning(5)}}, reasoning: 5, missed: []string{"ttfa"}},
		{name: "reasoning tokens beyond the output", r: Result{Outcome: OutcomeOK, Chunks: chunks, FirstAnswer: 1,
			Usage: &Usage{CompletionTokens: 5, ReasoningTokens: reasoning(1 << 30)}}, ttfa: ms(100), hasTTFA: true, reasoning: 5},
		{name: "index out of range", r: Result{Outcome: OutcomeOK, Chunks: chunks, FirstAnswer: 5}, missed: []string{"ttfa"}},
		{name: "cancelled", r: Result{Outcome: OutcomeCancelled, Chunks: chunks, FirstAnswer: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Measure(&tc.r, slos)
			require.Equal(t, tc.hasTTFA, m.HasTTFA)
			require.Equal(t, tc.ttfa, m.TTFA)
			require.Equal(t, tc.reasoning, m.ReasoningTokens)
			require.Equal(t, tc.missed, m.Missed)
		})
	}
}

func TestInputWithinTolerance(t *testing.T) {
	for _, tc := range []struct {
		requested, counted int
		want               bool
	}{
		{100, 108, true}, {100, 92, true}, {100, 109, false}, {100, 91, false},
		{255, 263, true}, {256, 268, true}, {256, 269, false},
		{1000, 1050, true}, {1000, 950, true}, {1000, 1051, false},
	} {
		require.Equal(t, tc.want, InputWithinTolerance(tc.requested, tc.counted), "%d vs %d", tc.requested, tc.counted)
	}
}
