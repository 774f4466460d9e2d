package prober

import (
	"math"
	"sync"
)

// Calibrator learns how many tokens a target counts for the words sloprober
// synthesizes, so that a request for N input tokens is N tokens for the
// server's own tokenizer and chat template. Its model is affine: tokens =
// overhead + perWord * words. Each observation is a prompt's word count and
// the server's count (usage.prompt_tokens of a response, or /tokenize); the
// model is their least-squares line.
//
// Example: a server whose chat template adds 12 tokens and whose tokenizer
// splits a fifth of the words in two reports 12 + 1.2*W tokens for W words;
// after two observations sloprober sends (500 - 12) / 1.2 = 407 words for a
// 500-token request.
//
// A server's counts are not trusted. The model is bounded to plausible
// tokenizers (MinTokensPerWord to MaxTokensPerWord tokens a synthesized
// word, an overhead of at most MaxOverheadTokens), so a prompt is never
// more than 1/MinTokensPerWord = 2 words a requested token. An observation
// the model cannot take (a count below half the words: a server that
// truncates, or reports a constant) is rejected; once the model stands, so
// is a count far off its prediction. After freezeAfter rejections in a row
// the calibration is frozen: it keeps its last sane model and stops
// adapting, until unfreezeAfter counts in a row agree with that model again
// (twice as many every time it freezes again), or counts over varied
// lengths make a plausible model of their own (a changed tokenizer).
//
// Example: llama.cpp started with -c 1024 truncates a 3,000-token prompt
// silently and reports 647 tokens. 647 / 3000 = 0.22 tokens a word is no
// tokenizer: rejected; after five such replies calibration is frozen at one
// word a token, and prompts stay 3,000 words (instead of growing to
// 3000 / 0.22 = 13,900 words, then further with every reply).
type Calibrator struct {
	mu                sync.Mutex
	sums              // accepted observations
	overhead, perWord float64
	context           int // the target's context length in tokens; 0: unknown

	rejectedRun, agreedRun int
	frozen                 bool
	// thawAfter is how many agreeing counts in a row thaw it: it starts at
	// unfreezeAfter and doubles every time calibration freezes again, so a
	// server whose short prompts agree and long ones do not (truncation at
	// a fixed length) does not make the calibration flap.
	thawAfter int
	// shadow holds, while frozen, the counts that only disagree with the
	// kept model: a tokenizer that changed behind the same URL (a model
	// rollout) fits them, and they replace the model once they make a
	// plausible one of their own.
	shadow sums

	// turnOverhead is the template's tokens around a later turn of a
	// conversation (the previous reply's and the new message's wrapping),
	// learned from the counts of later turns; turns counts them.
	turnOverhead float64
	turns        int

	recent                   []bool // the last judged results: within tolerance?
	warnedPersistentMismatch bool
}

// Bounds of the calibration model.
const (
	// MinTokensPerWord and MaxTokensPerWord bound tokens per synthesized
	// word (a three-letter word and a space): one token in the BPE
	// tokenizers of common models, two or three in a byte-level or
	// character tokenizer, never below half a token.
	MinTokensPerWord = 0.5
	MaxTokensPerWord = 4.0
	// MaxOverheadTokens bounds the tokens a chat template adds to a
	// prompt (Llama 3.1's default system prompt is about 25).
	MaxOverheadTokens = 1024
	// MaxPromptWords bounds a synthesized prompt: 2,097,152 words are
	// 8 MiB of text, twice workload's largest length (1,000,000 tokens) at
	// the smallest plausible tokens a word.
	MaxPromptWords = 2 << 20

	// freezeAfter rejected observations in a row freeze the calibration;
	// unfreezeAfter agreeing ones in a row thaw it.
	freezeAfter   = 5
	unfreezeAfter = 10
	// establishedAfter observations, the model stands: a count far off
	// its prediction is rejected instead of bending the model.
	establishedAfter = 10
)

// sums are the least-squares sums of observations.
type sums struct{ n, sx, sy, sxx, sxy float64 }

func (s sums) add(x, y float64) sums {
	return sums{s.n + 1, s.sx + x, s.sy + y, s.sxx + x*x, s.sxy + x*y}
}

// forget is the weight an observation keeps with every later one: the
// model follows the last 20 or so counts (an observation 60 counts old
// weighs 5%), so a server whose tokenizer changes a little (a count 10%
// higher) is followed, not averaged with its past for ever.
const forget = 0.95

func (s sums) decay() sums {
	return sums{s.n * forget, s.sx * forget, s.sy * forget, s.sxx * forget, s.sxy * forget}
}

// NewCalibrator returns a calibrator that, until it has observed anything,
// takes one word for one token.
func NewCalibrator() *Calibrator { return &Calibrator{perWord: 1, thawAfter: unfreezeAfter / 2} }

// Observation is what became of one observed count.
type Observation struct {
	// Accepted: the count went into the model.
	Accepted bool
	// Frozen: the calibration is frozen after this observation; Changed:
	// this observation froze or thawed it.
	Frozen, Changed bool
	// Reason says why a count was rejected.
	Reason string
}

// Observe adds a prompt of words words that the server counted as tokens.
func (c *Calibrator) Observe(words, tokens int) Observation {
	if words <= 0 || tokens <= 0 {
		return Observation{Reason: "no count"}
	}
	x, y := float64(words), float64(tokens)
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.frozen
	if c.frozen {
		c.observeFrozen(x, y)
		return Observation{Frozen: c.frozen, Changed: was != c.frozen, Reason: "frozen"}
	}
	reason := c.impossible(x, y)
	switch {
	case reason != "":
	case c.n >= establishedAfter && !c.agrees(x, y):
		reason = "far off the established model"
	case !c.add(x, y):
		reason = "the counts fit no plausible tokenizer"
	}
	if reason != "" {
		c.rejectedRun++
		if c.rejectedRun >= freezeAfter {
			c.frozen, c.agreedRun, c.shadow = true, 0, sums{}
			c.thawAfter = min(2*c.thawAfter, 1<<20)
		}
		return Observation{Frozen: c.frozen, Changed: was != c.frozen, Reason: reason}
	}
	c.rejectedRun = 0
	return Observation{Accepted: true}
}

// observeFrozen takes a count while frozen: nothing adapts, but counts that
// agree with the kept model unfreezeAfter times in a row thaw it, and
// possible counts that make a plausible model of their own (a changed
// tokenizer) replace it. Counts no tokenizer makes (a truncating or
// constant server) do neither.
func (c *Calibrator) observeFrozen(x, y float64) {
	if c.impossible(x, y) != "" {
		c.agreedRun = 0
		return
	}
	if c.agrees(x, y) {
		c.agreedRun++
		if c.agreedRun >= c.thawAfter {
			c.frozen, c.rejectedRun, c.agreedRun = false, 0, 0
		}
		return
	}
	c.agreedRun = 0
	c.shadow = c.shadow.decay().add(x, y)
	if c.shadow.n < unfreezeAfter {
		return
	}
	if overhead, perWord, ok := fit(c.shadow, true); ok {
		c.sums, c.overhead, c.perWord = c.shadow, overhead, perWord
		c.frozen, c.rejectedRun, c.shadow = false, 0, sums{}
	}
}

// impossible returns why a count cannot be a tokenizer's count of words
// synthesized words, or "".
func (c *Calibrator) impossible(x, y float64) string {
	switch {
	case y < MinTokensPerWord*x:
		return "fewer tokens than half the words (a truncating or constant count)"
	case y > MaxTokensPerWord*x+MaxOverheadTokens:
		return "more tokens than any tokenizer makes of the words"
	case c.context > 0 && y > float64(c.context):
		return "more tokens than the target's context"
	}
	return ""
}

// agrees reports whether a count is near the model's prediction: within a
// quarter plus 16 tokens, looser than the 5% a calibrated prompt meets, so
// that only counts calibration cannot follow are rejected.
func (c *Calibrator) agrees(x, y float64) bool {
	pred := c.overhead + c.perWord*x
	return math.Abs(y-pred) <= 0.25*pred+16
}

// add adds an observation and refits; it reports false, and leaves the
// model as it was, when no plausible model fits the observations with it.
func (c *Calibrator) add(x, y float64) bool {
	next := c.sums.decay().add(x, y)
	overhead, perWord, ok := fit(next, false)
	if !ok {
		return false
	}
	c.sums, c.overhead, c.perWord = next, overhead, perWord
	return true
}

// fit returns the least-squares line of the sums when the lengths vary
// (a spread over a tenth of the mean). When they do not, overhead and rate
// cannot be told apart: the rate is the ratio, bounded to plausible
// tokenizers, and the overhead what is left (a 30-token template on
// 8-word prompts is 38 tokens: 4 a word and 6 of overhead). ok is false
// when the model is not plausible. Unless strict, an implausible line
// falls back to the model of equal lengths; strict, equal lengths make no
// model at all: a truncating server's counts at one length look like a
// tokenizer, and only varied lengths show their slope of 0.
func fit(s sums, strict bool) (overhead, perWord float64, ok bool) {
	plausible := func(o, p float64) bool {
		return p >= MinTokensPerWord && p <= MaxTokensPerWord && o >= 0 && o <= MaxOverheadTokens
	}
	if !(s.n > 0 && s.sx > 0) {
		return 0, 0, false
	}
	mean, meanY := s.sx/s.n, s.sy/s.n
	varX := s.sxx/s.n - mean*mean
	if s.n > 1 && varX > 0.01*mean*mean { // more than one observation, decayed
		perWord = (s.sxy - s.sx*s.sy/s.n) / (s.sxx - s.sx*s.sx/s.n)
		overhead = meanY - perWord*mean
		if plausible(overhead, perWord) || strict {
			return overhead, perWord, plausible(overhead, perWord)
		}
	}
	if strict {
		return 0, 0, false
	}
	switch perWord = meanY / mean; {
	case perWord > MaxTokensPerWord: // the rest is overhead
		perWord, overhead = MaxTokensPerWord, meanY-MaxTokensPerWord*mean
	case perWord < MinTokensPerWord: // no tokenizer: not plausible
	default:
		overhead = 0
	}
	return overhead, perWord, plausible(overhead, perWord)
}

// ObserveTurn learns the template's tokens around a later turn of a
// conversation: the server counted tokens for the part of the prompt after
// the previous one, which holds the previous reply (reply tokens) and the
// new text (words words). It is a running mean over the last 20 turns or
// so, bounded to [0, MaxOverheadTokens]; nothing is learned while frozen.
func (c *Calibrator) ObserveTurn(words, reply, tokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen || words <= 0 || tokens <= 0 {
		return
	}
	sample := float64(tokens-reply) - c.perWord*float64(words)
	sample = min(max(sample, 0), MaxOverheadTokens)
	c.turns++
	c.turnOverhead += (sample - c.turnOverhead) / float64(min(c.turns, 20))
}

// TurnTokens returns the model's count of the new part of a later turn of
// a conversation: words words of new text plus the template around a turn
// (learned by ObserveTurn; until then, the whole prompt's overhead).
func (c *Calibrator) TurnTokens(words int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	overhead := c.overhead
	if c.turns > 0 {
		overhead = c.turnOverhead
	}
	return int(math.Round(overhead + c.perWord*float64(words)))
}

// Words returns the number of words to synthesize for tokens tokens: at
// least 1, at most 1/MinTokensPerWord words a token and MaxPromptWords.
func (c *Calibrator) Words(tokens int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return clampWords((float64(tokens)-c.overhead)/c.perWord, tokens)
}

// BlockWords returns the number of words of a block of tokens tokens inside
// a longer prompt: the per-word rate, without the overhead.
func (c *Calibrator) BlockWords(tokens int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return clampWords(float64(tokens)/c.perWord, tokens)
}

func clampWords(w float64, tokens int) int {
	limit := min(float64(tokens)/MinTokensPerWord, MaxPromptWords)
	return max(int(math.Round(min(w, limit))), 1)
}

// Tokens returns the model's count of a prompt of words words, its
// template overhead included.
func (c *Calibrator) Tokens(words int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(math.Round(c.overhead + c.perWord*float64(words)))
}

// Model returns the fitted overhead and tokens per word.
func (c *Calibrator) Model() (overhead, perWord float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overhead, c.perWord
}

// Calibrated reports whether the model comes from at least one count.
func (c *Calibrator) Calibrated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > 0
}

// Frozen reports whether the calibration has stopped adapting.
func (c *Calibrator) Frozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen
}

// SetContext sets the target's context length in tokens (0: unknown).
func (c *Calibrator) SetContext(tokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.context = max(tokens, 0)
}

// Context returns the target's context length in tokens, 0 if unknown.
func (c *Calibrator) Context() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.context
}

// mismatchWindow is how many recent results judge a persistent mismatch.
const mismatchWindow = 20

// record notes whether a result's input was within tolerance, and reports
// once, when at least half of a full window was not, that the mismatch is
// persistent (the server counts tokens in a way calibration cannot follow).
// Only requests built from a calibrated model are recorded: those sent
// before the first count came back were not meant to match.
func (c *Calibrator) record(within bool) (persistent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recent = append(c.recent, within)
	if len(c.recent) > mismatchWindow {
		c.recent = c.recent[1:]
	}
	if c.warnedPersistentMismatch || len(c.recent) < mismatchWindow {
		return false
	}
	bad := 0
	for _, ok := range c.recent {
		if !ok {
			bad++
		}
	}
	if 2*bad >= len(c.recent) {
		c.warnedPersistentMismatch = true
		return true
	}
	return false
}
