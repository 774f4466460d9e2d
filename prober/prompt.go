package prober

import (
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// promptWords are common three-letter English words. Each is one token, with
// its leading space, in the BPE tokenizers of common models (GPT, Llama,
// Qwen, Mistral), and four characters, one token, for the simulator's
// default tokenizer: a prompt of N words is about N tokens everywhere.
var promptWords = strings.Fields(`the and for are but not you all any can had her was one our out day get
	has him his how man new now old see two way who boy did its let put say she too use act add age
	ago aid aim air art ask bad bag bar bed big bit box bus buy car cat cup cut dog dry due ear eat
	egg end eye far few fit fix fly fun gas god gun guy hat hit hot ice job key kid lab law lay leg
	lie lot low map may mix net nor oil own pay per pen pop pot raw red row run sad sea set sit six
	sky son sum sun tax tea ten tie tip top toy try war web wet win yes yet zoo arm bet bid cow den
	fan fee fog gap hid hop hug inn jam jar jaw joy lip log mad mud nut odd pad pan pet pie pin pit
	rag rat rib rid rim rod rug sap saw sew shy sip tag tin tub van vet wax wig yak`)

// prefixWords is how many leading words encode the request's identity, so
// that every request differs from the first word on: with 190 words, two
// requests share their first four words with probability 1 in 1.3 billion.
const prefixWords = 4

// SynthesizePrompt returns a prompt of about tokens tokens, the same for the
// same seed and sequence number, different for different ones from the first
// word on, and varied throughout (drawn from a seeded stream of common words,
// never one word repeated). It has at most MaxPromptWords words (8 MiB).
func SynthesizePrompt(seed, seq uint64, tokens int) string {
	if tokens < 1 {
		return ""
	}
	tokens = min(tokens, MaxPromptWords)
	var b strings.Builder
	b.Grow(tokens * 4)
	h := fnv.New64a()
	var buf [16]byte
	for i := range 8 {
		buf[i] = byte(seed >> (8 * i))
		buf[8+i] = byte(seq >> (8 * i))
	}
	_, _ = h.Write(buf[:])
	id := h.Sum64()
	rng := rand.New(rand.NewPCG(seed, seq))
	n := uint64(len(promptWords))
	for i := range tokens {
		var w string
		if i < prefixWords {
			w = promptWords[id%n]
			id /= n
		} else {
			w = promptWords[rng.IntN(len(promptWords))]
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	return b.String()
}
