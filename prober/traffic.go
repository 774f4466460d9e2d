package prober

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/sloprober/sloprober/prober/config"
	"github.com/sloprober/sloprober/prober/workload"
)

// Message is one chat message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Conversation is one multi-turn conversation: the history resent with
// every turn, the server's real replies included.
type Conversation struct {
	// ID is the Seq of the conversation's first turn.
	ID    uint64
	Turns int

	mu       sync.Mutex
	messages []Message
	tokens   int // estimated tokens of messages
}

// Turn is a later turn (2 and on) of a conversation: a dependent arrival.
type Turn struct {
	Conv *Conversation
	N    int
}

// Salts of the per-arrival decisions drawn with unitFloat.
const (
	saltPrefix = iota + 1
	saltGroup
	saltCancel
)

// scenarioRun is a scenario as a load runs it: it turns arrivals into
// requests. Every draw of a request is seeded from the load's seed and the
// arrival's Seq, so a request is the same on every replica and after a
// restart.
//
// The shared prompts of prefix groups are the same for every load of a
// scenario (they are an application's system prompts, not a load's): each
// is synthesized from the scenario's name and the group's number.
type scenarioRun struct {
	cfg  config.ScenarioConfig
	seed uint64
}

func newScenarioRun(cfg config.ScenarioConfig, k config.Key) *scenarioRun {
	return &scenarioRun{cfg: cfg, seed: Seed(k.Target, k.Scenario, k.Test)}
}

// turns returns the number of requests a conversation of the scenario makes.
func (s *scenarioRun) turns() int {
	if s.cfg.Conversation == nil {
		return 1
	}
	return s.cfg.Conversation.Turns
}

// request builds the request of an arrival. Lengths are in the server's
// tokens: cal converts them to words of synthesized text.
func (s *scenarioRun) request(a Arrival, cal *Calibrator) *Request {
	rng := rand.New(rand.NewPCG(s.seed, a.Seq))
	var in, out int
	switch {
	case a.Record != nil:
		in, out = a.Record.Input, a.Record.Output
	case s.cfg.LengthsFrom != nil:
		recs := s.cfg.LengthsFrom.Trace.Records
		rec := recs[rng.IntN(len(recs))] // input and output drawn together
		in, out = rec.Input, rec.Output
	default:
		in, out = s.cfg.InputTokens.Sample(rng), s.cfg.OutputTokens.Sample(rng)
	}
	in, out = max(in, 1), max(out, 1)

	req := &Request{
		ID:           fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()),
		InputTokens:  in,
		OutputTokens: out,
		IgnoreEOS:    s.cfg.IgnoreEOS,
	}
	// The whole prompt carries the server's fixed overhead (a chat
	// template) once; its parts (blocks, a prefix) count at the per-word
	// rate.
	words := cal.Words(in)
	switch p := s.cfg.Prefix; {
	case a.Record != nil && len(a.Record.HashIDs) > 0:
		req.Prompt = blockPrompt(a.Record.HashIDs, a.Pass, cal.BlockWords(workload.MooncakeBlockTokens), words)
	case p != nil && unitFloat(s.seed, a.Seq, saltPrefix) < p.Share:
		g := int(unitFloat(s.seed, a.Seq, saltGroup) * float64(p.Groups))
		pw := cal.BlockWords(p.Tokens)
		own := max(words-pw, 1)
		req.Prompt = SynthesizePrompt(Seed("prefix", s.cfg.Name), uint64(g), pw) + " " + SynthesizePrompt(s.seed, a.Seq, own)
		words = pw + own
		req.InputTokens = max(in, p.Tokens+1)
	default:
		req.Prompt = SynthesizePrompt(s.seed, a.Seq, words)
	}
	req.Words, req.calibrate = words, true
	if c := s.cfg.Cancel; c != nil && unitFloat(s.seed, a.Seq, saltCancel) < c.Share {
		req.CancelAfter = time.Duration(c.After)
	}
	if s.cfg.Conversation != nil {
		turn := a.Turn
		if turn == nil {
			turn = &Turn{Conv: &Conversation{ID: a.Seq, Turns: s.cfg.Conversation.Turns}, N: 1}
		} else {
			// A later turn's new text adds no template of its own.
			req.Prompt = SynthesizePrompt(s.seed, a.Seq, cal.BlockWords(in))
			req.calibrate = false
		}
		c := turn.Conv
		c.mu.Lock()
		req.Messages = append(append([]Message(nil), c.messages...), Message{Role: "user", Content: req.Prompt})
		req.InputTokens += c.tokens
		c.mu.Unlock()
		req.KeepReply = turn.N < c.Turns
		req.turn = turn
	}
	return req
}

// next returns the next turn of a conversation after a reply, or nil when
// the conversation is over: after its last turn, or after a turn that did
// not end ok.
func (s *scenarioRun) next(req *Request, r *Result, now time.Time, scenario int) (Arrival, bool) {
	t := req.turn
	if t == nil || t.N >= t.Conv.Turns || r.Outcome != OutcomeOK {
		return Arrival{}, false
	}
	c := t.Conv
	c.mu.Lock()
	c.messages = append(req.Messages, Message{Role: "assistant", Content: r.Reply})
	c.tokens = req.InputTokens + Measure(r, nil).OutputTokens
	c.mu.Unlock()
	return Arrival{
		Due:      now.Add(time.Duration(s.cfg.Conversation.ThinkTime)),
		Seq:      c.ID + uint64(t.N)*0x9e3779b97f4a7c15,
		Scenario: scenario,
		Turn:     &Turn{Conv: c, N: t.N + 1},
	}, true
}

// blockPrompt builds a prompt of words words from Mooncake hash ids: every
// id is the same block of blockWords words (512 of the server's tokens)
// wherever it appears, so equal ids make a real shared prefix and a server's
// prefix cache sees the trace's hit pattern. Every word of a block is
// followed by a space, so a block's text (and its tokens, in a tokenizer of
// four characters a token) is the same whatever follows it. Each pass of a
// looping replay salts the ids, so a second pass does not hit what the
// first one cached. The last block is cut to the prompt's length.
func blockPrompt(ids []int, pass, blockWords, words int) string {
	var b strings.Builder
	b.Grow(words * 4)
	salt := Seed("block", fmt.Sprint(pass))
	left := words
	for _, id := range ids {
		if left <= 0 {
			break
		}
		n := min(left, blockWords)
		b.WriteString(SynthesizePrompt(salt, uint64(id), blockWords)[:wordsLen(n)])
		b.WriteByte(' ')
		left -= n
	}
	if left > 0 { // more input than blocks: the rest is the request's own
		b.WriteString(SynthesizePrompt(salt, uint64(len(ids))<<32|uint64(words), left))
	}
	return b.String()
}

// wordsLen is the length of the first n words of a synthesized prompt: every
// word has three letters and a space between.
func wordsLen(n int) int { return 4*n - 1 }
