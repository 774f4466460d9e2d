package simulator

import (
	"container/list"
	"strings"
	"unicode"
)

// tokenizer counts text in tokens the way TokenizerConfig says. It is a model,
// not a real tokenizer: what matters is that counts are stable and close to
// real ones (about four characters per token for English text), and that a
// prompt's leading tokens can be hashed into prefix-cache blocks.
type tokenizer struct {
	charsPerToken int
	words         bool
}

func newTokenizer(c TokenizerConfig) tokenizer {
	return tokenizer{charsPerToken: c.CharsPerToken, words: c.Words}
}

// forEach calls fn with every token of text, in order, without allocating.
func (t tokenizer) forEach(text string, fn func(tok string)) {
	if t.words {
		start := -1
		for i, r := range text {
			if unicode.IsSpace(r) {
				if start >= 0 {
					fn(text[start:i])
					start = -1
				}
			} else if start < 0 {
				start = i
			}
		}
		if start >= 0 {
			fn(text[start:])
		}
		return
	}
	start, n := 0, 0
	for i := range text {
		if n == t.charsPerToken {
			fn(text[start:i])
			start, n = i, 0
		}
		n++
	}
	if n > 0 {
		fn(text[start:])
	}
}

// pieces cuts generated text into the tokens it is sent in, keeping every
// character: chars_per_token characters each, or, counting words, a word
// with the whitespace after it (whitespace before the first word goes with
// it). Each piece counts as one token and the pieces joined count as
// len(pieces), so a reply sent back as history counts right.
func (t tokenizer) pieces(text string) []string {
	var out []string
	start, n := 0, 0
	if t.words {
		word, seen := false, false
		for i, r := range text {
			space := unicode.IsSpace(r)
			if !space && !word && seen {
				out = append(out, text[start:i])
				start = i
			}
			word, seen = !space, seen || !space
		}
	} else {
		for i := range text {
			if n == t.charsPerToken {
				out = append(out, text[start:i])
				start, n = i, 0
			}
			n++
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// tokenID maps a token to a stable id, for POST /tokenize.
func tokenID(tok string) int {
	return int(fnvString(fnvOffset, tok) % 100000)
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// prompt is what the engine needs to know of a request's input.
type prompt struct {
	tokens int
	// blocks are chained hashes of the prompt's whole blocks: blocks[i]
	// identifies tokens [0, (i+1)*blockTokens), so equal hashes mean equal
	// prefixes, as in vLLM's automatic prefix caching.
	blocks []uint64
}

// tokenize counts the tokens of the texts, taken as one sequence, and hashes
// its whole blocks of blockTokens tokens (none when blockTokens is 0).
func (t tokenizer) tokenize(texts []string, blockTokens int) prompt {
	var p prompt
	h, inBlock := uint64(fnvOffset), 0
	for _, text := range texts {
		t.forEach(text, func(tok string) {
			p.tokens++
			if blockTokens == 0 {
				return
			}
			h = fnvString(h, tok)
			h = (h ^ 0xff) * fnvPrime // token separator
			inBlock++
			if inBlock == blockTokens {
				p.blocks = append(p.blocks, h)
				inBlock = 0
			}
		})
	}
	return p
}

// prefixCache remembers prompt blocks by their chained hash and evicts the
// least recently used block beyond maxBlocks. Only the engine goroutine uses it.
type prefixCache struct {
	blockTokens int
	maxBlocks   int
	lru         *list.List // of uint64, most recent first
	index       map[uint64]*list.Element
}

func newPrefixCache(c *PrefixCacheConfig) *prefixCache {
	if c == nil {
		return nil
	}
	return &prefixCache{
		blockTokens: c.BlockTokens,
		maxBlocks:   c.MaxBlocks,
		lru:         list.New(),
		index:       map[uint64]*list.Element{},
	}
}

// lookup returns how many tokens of p's leading blocks are cached.
func (c *prefixCache) lookup(p prompt) int {
	if c == nil {
		return 0
	}
	hit := 0
	for _, b := range p.blocks {
		e, ok := c.index[b]
		if !ok {
			break
		}
		c.lru.MoveToFront(e)
		hit++
	}
	return hit * c.blockTokens
}

// insert adds p's blocks after its prefill.
func (c *prefixCache) insert(p prompt) {
	if c == nil {
		return
	}
	for _, b := range p.blocks {
		if e, ok := c.index[b]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.index[b] = c.lru.PushFront(b)
		for c.lru.Len() > c.maxBlocks {
			old := c.lru.Back()
			delete(c.index, old.Value.(uint64))
			c.lru.Remove(old)
		}
	}
}

// vocabulary returns the texts output tokens are drawn from: each is exactly
// one token for the configured tokenizer (chars_per_token characters, or one
// word followed by a space).
func vocabulary(c TokenizerConfig) []string {
	words := strings.Fields(`the of and to in is was for that on as with by he at from his it an were
		are which this be or has had not but also first one their its new after who they have her
		she two been other when there all during into school time may years more most only over
		city some world would where later up such used many can state about national out known
		university united then made`)
	out := make([]string, len(words))
	for i, w := range words {
		if c.Words {
			out[i] = w + " "
			continue
		}
		k := c.CharsPerToken
		if k == 1 {
			out[i] = w[:1]
			continue
		}
		for len(w) < k-1 {
			w += w
		}
		out[i] = w[:k-1] + " "
	}
	return out
}
