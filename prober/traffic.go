package prober

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/workload"
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

	tenant int // its tenant, 1-based; 0 without tenants

	mu       sync.Mutex
	messages []Message
	tokens   int // tokens of messages: the last prompt and its reply
	prompt   int // tokens of the last prompt, as the server counted it
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
	saltTenant
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
	cfg   config.ScenarioConfig
	key   config.Key
	slos  []config.SLO // cfg.SLOs(), listed once
	seed  uint64
	check *checkExtra // what the scenario's check adds to a prompt, when it has one
	// opts are what the load's spec adds to the scenario (a hot tenant,
	// a cold cache): replaced whole when the load changes in place.
	opts atomic.Pointer[runOpts]
}

// runOpts are a load's options for one of its scenarios.
type runOpts struct {
	// cold: every prompt is salted with a fresh draw (LoadSpec.ColdCache).
	cold bool
	hot  *config.HotTenant
	// cum are the cumulative shares of the tenants (1..n), when the draw
	// is not uniform: a zipf distribution, or a hot tenant.
	cum []float64
}

func newScenarioRun(cfg config.ScenarioConfig, k config.Key) *scenarioRun {
	s := &scenarioRun{cfg: cfg, key: k, slos: cfg.SLOs(), seed: Seed(k.Target, k.Scenario, k.Test)}
	if cfg.Check != nil {
		s.check = &checkExtra{}
	}
	s.setOpts(nil, false)
	return s
}

// setOpts sets the load's options of the scenario: its hot tenant (which
// re-weights the tenant draw, see config.HotTenant) and cold cache.
func (s *scenarioRun) setOpts(hot *config.HotTenant, cold bool) {
	o := &runOpts{cold: cold}
	if t := s.cfg.Tenants; t != nil {
		if hot != nil && hot.Tenant >= 1 && hot.Tenant <= t.Count {
			o.hot = hot
		}
		if t.Zipf() || o.hot != nil {
			o.cum = make([]float64, t.Count)
			sum := 0.0
			for i := range o.cum {
				sum += o.hot.TenantShare(t, i+1)
				o.cum[i] = sum
			}
		}
	}
	s.opts.Store(o)
}

// tenant draws the tenant of a first turn (1-based), 0 without tenants:
// seeded by the arrival, as every draw of a request.
func (s *scenarioRun) tenant(o *runOpts, seq uint64) int {
	t := s.cfg.Tenants
	if t == nil || t.Count < 1 {
		return 0
	}
	u := unitFloat(s.seed, seq, saltTenant)
	if o.cum == nil {
		return min(int(u*float64(t.Count)), t.Count-1) + 1
	}
	x := u * o.cum[len(o.cum)-1]
	return min(sort.Search(len(o.cum), func(i int) bool { return o.cum[i] > x }), len(o.cum)-1) + 1
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
	o := s.opts.Load()
	tenant := 0
	if a.Turn != nil {
		tenant = a.Turn.Conv.tenant // a conversation keeps its tenant
	} else {
		tenant = s.tenant(o, a.Seq)
	}
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
	if h := o.hot; h != nil && tenant == h.Tenant && h.InputTokens != nil {
		in = h.InputTokens.Sample(rng) // after the scenario's draws, which stay the same
	}
	in, out = min(max(in, 1), workload.MaxTokens), min(max(out, 1), workload.MaxTokens)

	req := &Request{
		ID:           fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()),
		InputTokens:  in,
		OutputTokens: out,
		IgnoreEOS:    s.cfg.IgnoreEOS,
		calibrated:   cal.Calibrated(),
	}
	if tenant > 0 {
		req.Tenant, req.TenantHeader = s.cfg.Tenants.Name(tenant), s.cfg.Tenants.Header
	}
	// A cold cache salts the prompt with a fresh draw (not the load's
	// seed, which is the same in every run of a test): its text, from the
	// first word on, is no earlier request's.
	seed := s.seed
	if o.cold {
		seed = rand.Uint64()
	}
	if c := s.cfg.Cancel; c != nil && unitFloat(s.seed, a.Seq, saltCancel) < c.Share {
		req.CancelAfter = time.Duration(c.After)
	}
	if a.Turn != nil {
		s.laterTurn(req, a, cal, seed)
		return req
	}

	// A request never goes above the target's context, less a margin for
	// the calibration's error: one asking for more is cut to fit (and its
	// input counted as a mismatch), since vLLM rejects it and llama.cpp
	// truncates it; an output that alone fills the context gets half.
	if avail := usableContext(cal.Context()); avail > 0 && in+out > avail {
		if out >= avail {
			out = max(avail/2, 1)
			req.OutputTokens = out
		}
		in = max(avail-out, 1)
		req.CutToContext = true
	}
	// The whole prompt carries the server's fixed overhead (a chat
	// template) once; its parts (blocks, a prefix) count at the per-word
	// rate.
	words := cal.Words(in)
	if req.CutToContext && (!cal.Calibrated() || cal.Frozen()) {
		// Without a model to trust, a prompt cut to the context takes
		// the fewest words that can make its tokens at the most tokens a
		// word: it stays within the context whatever the tokenizer.
		words = max(int(float64(in)/MaxTokensPerWord), 1)
	}
	switch p := s.cfg.Prefix; {
	case a.Record != nil && len(a.Record.HashIDs) > 0:
		bs := blockSeed(a.Pass)
		if o.cold {
			bs = seed // every block the request's own
		}
		req.Prompt = blockPromptSeeded(a.Record.HashIDs, bs, cal.BlockWords(workload.MooncakeBlockTokens), words)
	case p != nil && unitFloat(s.seed, a.Seq, saltPrefix) < p.Share:
		g := int(unitFloat(s.seed, a.Seq, saltGroup) * float64(p.Groups))
		pw := min(cal.BlockWords(p.Tokens), words)
		own := max(words-pw, 1)
		prefixSeed := Seed("prefix", s.cfg.Name)
		if o.cold {
			prefixSeed = seed + 1 // the group's prompt becomes the request's own text
		}
		req.Prompt = SynthesizePrompt(prefixSeed, uint64(g), pw) + " " + SynthesizePrompt(seed, a.Seq, own)
		words = pw + own
		req.InputTokens = max(req.InputTokens, p.Tokens+1)
	default:
		req.Prompt = SynthesizePrompt(seed, a.Seq, words)
	}
	req.Words, req.calibrate = words, !req.CutToContext
	if s.cfg.Check != nil {
		s.withCheck(req, rng, cal)
		return req
	}
	if s.cfg.Conversation != nil {
		conv := &Conversation{ID: a.Seq, Turns: s.cfg.Conversation.Turns, tenant: tenant}
		req.Messages = []Message{{Role: "user", Content: req.Prompt}}
		req.KeepReply = conv.Turns > 1
		req.turn = &Turn{Conv: conv, N: 1}
	}
	return req
}

// withCheck makes req a request of the scenario's quality check: the
// check's question follows the prompt, which is filler for the input
// length (so latency and quality are measured on the same request), in a
// message of its own before it (a system message; the Messages API's
// system field), or before it in a completions prompt. What the check adds
// by design (the question, its message, the schema or tool definitions the
// server's template renders) is measured from earlier replies (checkExtra)
// and the filler shortened by it: filler and additions make the requested
// length, which the server's count is judged against. Until an addition
// has been measured, the filler gives way to the question's words only and
// the request's input is not judged (Result.InputUnjudged). It teaches
// calibration nothing, since its form is not the calibrated one.
func (s *scenarioRun) withCheck(req *Request, rng *rand.Rand, cal *Calibrator) {
	req.Check = checkRequest(s.cfg.Check, rng)
	q := req.Check.Question
	filler := strings.Fields(req.Prompt)
	keep := len(filler)
	extra, measured := 0, false
	if s.check != nil {
		extra, measured = s.check.tokens()
	}
	switch qw := len(strings.Fields(q)); {
	case measured:
		keep = min(cal.Words(max(req.InputTokens-extra, 1)), keep)
	case req.Words > qw+1:
		keep = max(len(filler)-qw, 1)
	}
	keep = max(keep, 1)
	req.Prompt = strings.Join(filler[:keep], " ")
	req.Words, req.fillerWords = keep+len(strings.Fields(q)), keep
	req.inputUnjudged = !measured
	req.Messages = []Message{{Role: "system", Content: req.Prompt}, {Role: "user", Content: q}}
	req.KeepReply, req.calibrate = true, false
}

// observeCheck measures what the check of a request added to its prompt,
// from the server's count (see checkExtra).
func (s *scenarioRun) observeCheck(req *Request, counted int, cal *Calibrator) {
	if s.check == nil || req.Check == nil || req.fillerWords == 0 || req.CutToContext {
		return
	}
	s.check.observe(counted, cal.Tokens(req.fillerWords))
}

// usableContext is the part of a context of ctx tokens a request may
// fill: all but a margin of 5% (at least 16 tokens) for the error of the
// calibration; 0 when the context is unknown.
func usableContext(ctx int) int {
	if ctx <= 0 {
		return 0
	}
	return max(ctx-max(ctx/20, 16), 1)
}

// laterTurn builds a later turn of a conversation (req has its lengths): it
// resends the history, the server's replies included, and new text. It is
// expected to count the previous prompt as the server counted it, the
// reply, and the new text with the template's wrapping around a turn; only
// the part after the previous prompt is judged. When the history leaves no
// room in the context or the byte bound even for one word, the turn is not
// sent: it ends cancelled (the conversation is over). seed is the new
// text's: the load's, or a cold cache's fresh one.
func (s *scenarioRun) laterTurn(req *Request, a Arrival, cal *Calibrator, seed uint64) {
	turn := a.Turn
	c := turn.Conv
	c.mu.Lock()
	defer c.mu.Unlock()
	req.turn = turn
	req.KeepReply = turn.N < c.Turns
	words := cal.BlockWords(req.InputTokens)
	if avail := usableContext(cal.Context()); avail > 0 && c.tokens+req.InputTokens+req.OutputTokens > avail {
		room := avail - c.tokens - req.OutputTokens
		if room < 1 {
			req.OutputTokens = max(avail-c.tokens-1, 0)
			room = 1
		}
		words = max(min(words, int(float64(room)/MaxTokensPerWord)), 1)
		req.CutToContext = true
	}
	historyBytes := 0
	for _, m := range c.messages {
		historyBytes += len(m.Content)
	}
	words = min(words, (maxHistoryBytes-historyBytes)/4)
	if words < 1 || req.OutputTokens < 1 {
		req.Skip = ErrConversationFull
		req.OutputTokens = max(req.OutputTokens, 1)
		return
	}
	req.Words = words
	req.Prompt = SynthesizePrompt(seed, a.Seq, words)
	req.InputTokens = c.tokens + cal.TurnTokens(words)
	req.Messages = append(append([]Message(nil), c.messages...), Message{Role: "user", Content: req.Prompt})
	req.InputBase = c.prompt
	req.TurnReply = c.tokens - c.prompt
}

// maxHistoryBytes bounds the text a conversation resends, the new text
// included: 8 MiB, as a prompt (MaxPromptWords).
const maxHistoryBytes = 4 * MaxPromptWords

// next returns the next turn of a conversation after a reply, or nil when
// the conversation is over: after its last turn, after a turn that did not
// end ok, or when the next turn would not fit the target's context or the
// history's byte bound.
func (s *scenarioRun) next(req *Request, r *Result, cal *Calibrator, now time.Time, scenario int) (Arrival, bool) {
	t := req.turn
	if t == nil || t.N >= t.Conv.Turns || r.Outcome != OutcomeOK {
		return Arrival{}, false
	}
	c := t.Conv
	m := Measure(r, nil)
	// The next turn resends everything: it must fit the context with a
	// turn of the scenario's largest lengths, and the history must stay
	// within a prompt's byte bound. A conversation that would not is over.
	bytes := len(r.Reply)
	for _, msg := range req.Messages {
		bytes += len(msg.Content)
	}
	// The next turn resends all this; it is not made when a turn like
	// this one (as much again as this turn added to the previous prompt,
	// with its output) would not fit: laterTurn cuts what is left over.
	next := m.InputTokens + m.OutputTokens + (m.InputTokens - req.InputBase) + req.OutputTokens
	if avail := usableContext(cal.Context()); avail > 0 && next > avail || bytes > maxHistoryBytes {
		return Arrival{}, false
	}
	c.mu.Lock()
	c.messages = append(req.Messages, Message{Role: "assistant", Content: r.Reply})
	c.prompt = m.InputTokens // the server's count where it sent one
	c.tokens = m.InputTokens + m.OutputTokens
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
	return blockPromptSeeded(ids, blockSeed(pass), blockWords, words)
}

// blockSeed is the seed of the blocks of a replay's pass.
func blockSeed(pass int) uint64 { return Seed("block", fmt.Sprint(pass)) }

// blockPromptSeeded is blockPrompt with the blocks' seed (salt) given: a
// cold cache's fresh one makes every block the request's own, at the
// same lengths.
func blockPromptSeeded(ids []int, salt uint64, blockWords, words int) string {
	var b strings.Builder
	b.Grow(words * 4)
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
