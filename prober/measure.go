package prober

import (
	"iter"
	"math"
	"time"

	"github.com/sloprober/sloprober/config"
)

// InputWithinTolerance reports whether the server's count of a prompt is
// close enough to the requested length: within 5%, or within 8 tokens below
// 256 tokens, which prompt calibration achieves for nine requests in ten.
func InputWithinTolerance(requested, counted int) bool {
	tol := 0.05 * float64(requested)
	if requested < 256 {
		tol = 8
	}
	return math.Abs(float64(counted-requested)) <= tol
}

// Measurement is what one finished request contributes to the metrics, by
// the definitions of the README's metric reference. Each Has* flag says whether the
// quantity is observed for this request.
type Measurement struct {
	Outcome Outcome

	TTFT      time.Duration // t1 - t0
	HasTTFT   bool          // received a token, not cancelled
	TTFA      time.Duration // time to first answer token: the first content or tool-call chunk (after any reasoning) - t0
	HasTTFA   bool          // received an answer token, not cancelled
	E2E       time.Duration // tN - t0
	HasE2E    bool          // ok, with a token
	TPOT      time.Duration // (tN - t1) / (N - 1)
	HasTPOT   bool          // ok, N >= 2 and at least 2 chunks
	MaxITL    time.Duration // largest gap between chunks
	HasMaxITL bool          // ok, at least 2 chunks
	HasITL    bool          // the gaps of Chunks are observed: not cancelled

	// ReasoningTokens are the output tokens the server counted as
	// reasoning (usage's reasoning_tokens; within OutputTokens), 0 when
	// not reported.
	ReasoningTokens int
	OutputTokens    int  // N: usage within [chunks, max(asked, chunks)], else the chunk count
	HasOutput       bool // received tokens
	OutputFallback  bool // an ok reply without usage: N is the chunk count
	// UsageBelowChunks: usage's completion_tokens was below the text
	// chunks received, which N is then (and a length mismatch).
	UsageBelowChunks bool
	// UsageAboveAsked: usage's completion_tokens was above the tokens
	// asked for and the chunks received, the most N can be, which N is
	// then (and a length mismatch).
	UsageAboveAsked bool
	InputTokens     int  // usage, else the workload's estimate
	InputFallback   bool // an ok reply without usage

	InputMismatch  bool // server-counted input off the request beyond InputWithinTolerance
	OutputMismatch bool // ok output longer than requested, or shorter although ignore_eos was sent

	// CheckPassed: the reply passed the scenario's quality check
	// (Result.Check); a reply without a verdict did not.
	CheckPassed bool

	// Counted: in the attainment denominator (sent - cancelled - shutdown).
	Counted bool
	// Good: ok, carried text, met every SLO.
	Good bool
	// Missed lists the SLOs (of those configured) the request missed; only
	// for counted requests.
	Missed []string

	// Split is the request's time by phase, from its target's timing
	// sources (SplitPhases); the load sets it after Measure.
	Split Split
}

// Measure computes the measurement of a finished request under the given
// SLOs. It is a pure function of its arguments.
func Measure(r *Result, slos []config.SLO) Measurement {
	m := Measurement{Outcome: r.Outcome}
	ok := r.Outcome == OutcomeOK
	n := len(r.Chunks)
	cancelled := r.Outcome == OutcomeCancelled

	if n > 0 {
		m.HasOutput = true
		m.OutputTokens = n
		if r.Usage != nil && r.Usage.CompletionTokens > 0 {
			m.OutputTokens = r.Usage.CompletionTokens
			if m.OutputTokens < n {
				// Each text-carrying chunk carries a token at least: a
				// usage below their count is false (a server claiming
				// 1 token for 20 chunks would hide its TPOT), and N is
				// the chunks.
				m.OutputTokens, m.UsageBelowChunks = n, true
			}
			if most := max(r.OutputTokens, n); r.OutputTokens > 0 && m.OutputTokens > most {
				// Nor above what was asked for (max_tokens), or the
				// chunks if more came: a server claiming ten times the
				// tokens it streamed would cut its TPOT tenfold and
				// multiply its tokens/s; N is the most it can be.
				m.OutputTokens, m.UsageAboveAsked = most, true
			}
		} else if ok {
			m.OutputFallback = true
		}
		if !cancelled {
			m.TTFT, m.HasTTFT = r.Chunks[0], true
			m.HasITL = n >= 2
			if r.FirstAnswer >= 0 && r.FirstAnswer < n {
				m.TTFA, m.HasTTFA = r.Chunks[r.FirstAnswer], true
			}
		}
		if r.Usage != nil && r.Usage.ReasoningTokens != nil {
			m.ReasoningTokens = min(*r.Usage.ReasoningTokens, m.OutputTokens)
		}
	}
	m.InputTokens = r.InputTokens
	if r.Usage != nil && r.Usage.PromptTokens > 0 {
		m.InputTokens = r.Usage.PromptTokens
		if r.InputTokens > 0 && !r.InputUnjudged {
			base := min(r.InputBase, r.InputTokens-1)
			m.InputMismatch = !InputWithinTolerance(r.InputTokens-base, m.InputTokens-base)
		}
	} else if ok {
		m.InputFallback = true
	}

	if ok && n > 0 {
		m.E2E, m.HasE2E = r.Chunks[n-1], true
		if n >= 2 {
			m.MaxITL, m.HasMaxITL = MaxGap(r.Chunks), true
			if m.OutputTokens >= 2 {
				m.TPOT, m.HasTPOT = (r.Chunks[n-1]-r.Chunks[0])/time.Duration(m.OutputTokens-1), true
			}
		}
		// Longer than asked always is (the server ignored the maximum);
		// shorter only when ignore_eos asked for the whole length.
		m.OutputMismatch = m.UsageBelowChunks || m.UsageAboveAsked || r.OutputTokens > 0 &&
			(m.OutputTokens > r.OutputTokens || r.IgnoreEOS && m.OutputTokens < r.OutputTokens)
	}

	m.CheckPassed = r.Check != nil && r.Check.Passed
	m.Counted = !cancelled && r.Outcome != OutcomeShutdown
	if !m.Counted {
		return m
	}
	carried := ok && n > 0
	m.Good = carried
	for _, slo := range slos {
		met := carried && metSLO(&m, slo)
		if !met {
			m.Good = false
			m.Missed = append(m.Missed, slo.Name)
		}
	}
	return m
}

// metSLO checks one SLO of an ok request with text; a TPOT or max ITL that
// cannot be measured (fewer than two chunks) counts as met, a reply with
// no answer (reasoning only) misses ttfa.
func metSLO(m *Measurement, slo config.SLO) bool {
	switch slo.Name {
	case "ttft":
		return m.TTFT <= slo.Threshold
	case "ttfa":
		return m.HasTTFA && m.TTFA <= slo.Threshold
	case "tpot":
		return !m.HasTPOT || m.TPOT <= slo.Threshold
	case "e2e":
		return m.E2E <= slo.Threshold
	case "max_itl":
		return !m.HasMaxITL || m.MaxITL <= slo.Threshold
	case config.CheckJSONSchema, config.CheckKnownAnswer, config.CheckToolCall:
		return m.CheckPassed
	}
	return true
}

// Gaps yields the gaps between consecutive offsets: the inter-token
// latencies of a result's Chunks. Every consumer of ITL takes them from
// here.
func Gaps(offsets []time.Duration) iter.Seq[time.Duration] {
	return func(yield func(time.Duration) bool) {
		for i := 1; i < len(offsets); i++ {
			if !yield(offsets[i] - offsets[i-1]) {
				return
			}
		}
	}
}

// MaxGap returns the largest gap between consecutive offsets.
func MaxGap(offsets []time.Duration) time.Duration {
	var g time.Duration
	for d := range Gaps(offsets) {
		g = max(g, d)
	}
	return g
}
