package prober

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
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
type Calibrator struct {
	mu                       sync.Mutex
	n, sx, sy, sxx, sxy      float64
	overhead, perWord        float64
	recent                   []bool // the last results: within tolerance?
	warnedPersistentMismatch bool
}

// NewCalibrator returns a calibrator that, until it has observed anything,
// takes one word for one token.
func NewCalibrator() *Calibrator { return &Calibrator{perWord: 1} }

// Observe adds a prompt of words words that the server counted as tokens.
func (c *Calibrator) Observe(words, tokens int) {
	if words <= 0 || tokens <= 0 {
		return
	}
	x, y := float64(words), float64(tokens)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.sx += x
	c.sy += y
	c.sxx += x * x
	c.sxy += x * y
	varX := c.sxx - c.sx*c.sx/c.n
	if c.n >= 2 && varX > 1e-9*c.sxx {
		c.perWord = (c.sxy - c.sx*c.sy/c.n) / varX
		c.overhead = (c.sy - c.perWord*c.sx) / c.n
	} else {
		// One length only: overhead and rate cannot be told apart, and the
		// ratio is right at that length.
		c.perWord, c.overhead = c.sy/c.sx, 0
	}
	if !(c.perWord > 0.05) || math.IsInf(c.perWord, 0) {
		c.perWord, c.overhead = c.sy/c.sx, 0
	}
}

// Words returns the number of words to synthesize for tokens tokens.
func (c *Calibrator) Words(tokens int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(int(math.Round((float64(tokens)-c.overhead)/c.perWord)), 1)
}

// BlockWords returns the number of words of a block of tokens tokens inside
// a longer prompt: the per-word rate, without the overhead.
func (c *Calibrator) BlockWords(tokens int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(int(math.Round(float64(tokens)/c.perWord)), 1)
}

// Model returns the fitted overhead and tokens per word.
func (c *Calibrator) Model() (overhead, perWord float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overhead, c.perWord
}

// mismatchWindow is how many recent results judge a persistent mismatch.
const mismatchWindow = 20

// record notes whether a result's input was within tolerance, and reports
// once, when at least half of a full window was not, that the mismatch is
// persistent (the server counts tokens in a way calibration cannot follow).
func (c *Calibrator) record(within bool) (persistent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recent = append(c.recent, within)
	if len(c.recent) > mismatchWindow {
		c.recent = c.recent[1:]
	}
	if c.warnedPersistentMismatch || len(c.recent) < mismatchWindow || c.n < 10 {
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

// tokenizeURL is the target's /tokenize endpoint (vLLM, SGLang, llama.cpp):
// at the base URL without its /v1 suffix.
func tokenizeURL(base string) string {
	base = strings.TrimSuffix(base, "/")
	return strings.TrimSuffix(base, "/v1") + "/tokenize"
}

// calibrationWords are the prompt lengths sent to /tokenize: two lengths far
// apart tell the overhead from the rate.
var calibrationWords = []int{64, 1024}

// Tokenize asks the target's /tokenize for the count of prompts of
// calibrationWords words, in the form its API sends them, and feeds the
// counts to cal. A target without /tokenize is calibrated from usage only.
func (c *Client) Tokenize(ctx context.Context, cal *Calibrator) error {
	for i, words := range calibrationWords {
		text := SynthesizePrompt(Seed("tokenize"), uint64(i), words)
		body := map[string]any{"model": c.target.Model}
		if c.target.API == "completions" {
			body["prompt"] = text
		} else {
			body["messages"] = []Message{{Role: "user", Content: text}}
		}
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, tokenizeURL(c.target.URL), bytes.NewReader(b))
		if err != nil {
			cancel()
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err != nil {
			cancel()
			return err
		}
		var out struct {
			Count int `json:"count"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", tokenizeURL(c.target.URL), resp.StatusCode)
		}
		if err != nil || out.Count <= 0 {
			return fmt.Errorf("%s: no token count in the reply", tokenizeURL(c.target.URL))
		}
		cal.Observe(words, out.Count)
	}
	return nil
}
