package prober

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// chunk is what sloprober reads of a streamed completion chunk. parseChunk
// fills it in one pass over the JSON, validating the whole text and
// allocating nothing for the common chunk (a delta with some text): a full
// encoding/json decode per chunk cost about 3 µs and several allocations,
// a quarter of the prober's CPU at 50,000 chunks/s.
type chunk struct {
	text bool // some choice carries generated text: content, reasoning or a tool call
	// answer: the generated text includes answer text (content, or a
	// tool call's name or arguments), not only reasoning.
	answer bool
	// done: the event ends the stream (the Responses API's
	// response.completed, the Messages API's message_stop); chat and
	// completions streams end with "data: [DONE]" instead.
	done   bool
	finish []byte // the last non-empty finish_reason
	// The usage counts the event reports, each with whether it was sent:
	// the Messages API sends the prompt's in message_start and the
	// output's in message_delta.
	prompt, complete, cached, reasoning             int
	hasPrompt, hasComplete, hasCached, hasReasoning bool
	timings                                         []byte // the raw "timings" object
	errRaw                                          []byte // the raw "error" value, when not null
	object                                          []byte // "object" (a string's raw contents)
	message                                         []byte // "message"
	simTS                                           int64

	// promptParts: the event is the Messages API's, whose prompt count
	// comes in parts: prompt is its input_tokens (the uncached part),
	// cached its cache_read_input_tokens and cacheWrite its
	// cache_creation_input_tokens. The prompt is their sum, each part the
	// last one sent (mergeUsage): an event may send some parts only.
	promptParts   bool
	cacheWrite    int
	hasCacheWrite bool

	// model and fingerprint are the reply's "model" and
	// "system_fingerprint" (raw string contents): who the server says
	// it is, for a report's test object.
	model, fingerprint []byte
	// contents are the raw (still escaped) delta.content and text strings,
	// for a conversation's reply or a quality check; only collected when
	// asked for.
	contents [][]byte
	// calls are the tool-call deltas (raw strings), likewise.
	calls []toolDelta
}

// toolDelta is one piece of a tool call: its index in the reply (the
// API's index of the call or of its output item or content block), and a
// piece of its name or arguments.
type toolDelta struct {
	index      int64
	name, args []byte
}

var errChunkSyntax = errors.New("invalid JSON")

// chunkParser is a small JSON scanner over one chunk.
type chunkParser struct {
	b        []byte
	i        int
	c        *chunk
	contents bool
}

// parseChunk parses data into c. With contents, the content strings of the
// choices are kept.
func parseChunk(data []byte, c *chunk, contents bool) error {
	*c = chunk{contents: c.contents[:0], calls: c.calls[:0]}
	p := chunkParser{b: data, c: c, contents: contents}
	p.ws()
	if err := p.object(p.top); err != nil {
		return err
	}
	p.ws()
	if p.i != len(p.b) {
		return p.fail("after the top-level object")
	}
	return nil
}

func (p *chunkParser) fail(what string) error {
	return fmt.Errorf("%w at offset %d: unexpected %s", errChunkSyntax, p.i, what)
}

func (p *chunkParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *chunkParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// object parses an object, calling field for each key with the parser at
// its value; field must consume the value.
func (p *chunkParser) object(field func(key []byte) error) error {
	if p.peek() != '{' {
		return p.fail("value where an object was expected")
	}
	p.i++
	p.ws()
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		key, err := p.str()
		if err != nil {
			return err
		}
		p.ws()
		if p.peek() != ':' {
			return p.fail("character where ':' was expected")
		}
		p.i++
		p.ws()
		if err := field(key); err != nil {
			return err
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
			p.ws()
		case '}':
			p.i++
			return nil
		default:
			return p.fail("character where ',' or '}' was expected")
		}
	}
}

// array parses an array, calling elem with the parser at each element.
func (p *chunkParser) array(elem func() error) error {
	if p.peek() != '[' {
		return p.fail("value where an array was expected")
	}
	p.i++
	p.ws()
	if p.peek() == ']' {
		p.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
			p.ws()
		case ']':
			p.i++
			return nil
		default:
			return p.fail("character where ',' or ']' was expected")
		}
	}
}

// str parses a string and returns its raw contents, escapes unresolved.
func (p *chunkParser) str() ([]byte, error) {
	if p.peek() != '"' {
		return nil, p.fail("value where a string was expected")
	}
	p.i++
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, nil
		case c == '\\':
			p.i++
			if p.i >= len(p.b) {
				return nil, p.fail("end in a string")
			}
			switch p.b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if p.i+5 > len(p.b) {
					return nil, p.fail("end in a \\u escape")
				}
				for _, h := range p.b[p.i+1 : p.i+5] {
					if !isHex(h) {
						return nil, p.fail("character in a \\u escape")
					}
				}
				p.i += 5
			default:
				return nil, p.fail("escape in a string")
			}
		case c < 0x20:
			return nil, p.fail("control character in a string")
		default:
			p.i++
		}
	}
	return nil, p.fail("end in a string")
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number parses a number and returns its text.
func (p *chunkParser) number() ([]byte, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	switch c := p.peek(); {
	case c == '0':
		p.i++
	case '1' <= c && c <= '9':
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
		}
	default:
		return nil, p.fail("character in a number")
	}
	if p.peek() == '.' {
		p.i++
		if d := p.digits(); d == 0 {
			return nil, p.fail("character after a decimal point")
		}
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		p.i++
		if c := p.peek(); c == '+' || c == '-' {
			p.i++
		}
		if d := p.digits(); d == 0 {
			return nil, p.fail("character in an exponent")
		}
	}
	return p.b[start:p.i], nil
}

func (p *chunkParser) digits() int {
	n := 0
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// literal parses true, false or null.
func (p *chunkParser) literal() error {
	for _, lit := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
			p.i += len(lit)
			return nil
		}
	}
	return p.fail("character where a value was expected")
}

// skip parses and discards any value.
func (p *chunkParser) skip() error {
	switch c := p.peek(); {
	case c == '{':
		return p.object(func([]byte) error { return p.skip() })
	case c == '[':
		return p.array(p.skip)
	case c == '"':
		_, err := p.str()
		return err
	case c == '-' || '0' <= c && c <= '9':
		_, err := p.number()
		return err
	default:
		return p.literal()
	}
}

// raw parses any value and returns its text.
func (p *chunkParser) raw() ([]byte, error) {
	start := p.i
	err := p.skip()
	return p.b[start:p.i], err
}

// integer parses a number as a whole number; another value counts as 0.
func (p *chunkParser) integer() (int64, error) {
	if c := p.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, p.skip()
	}
	n, err := p.number()
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(n), 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange):
			return 0, p.fail("number")
		case f >= -(1<<62) && f <= 1<<62:
			v = int64(f)
		default: // beyond int64: no count a server could mean
			v = -1
		}
	}
	return v, nil
}

// reportedCount converts a count a server reported to an int: negative
// values and values beyond maxReportedTokens are no count a server could
// mean, and read as 0 (not reported).
func reportedCount(v int64) int {
	if v < 0 || v > maxReportedTokens {
		return 0
	}
	return int(v)
}

// is reports whether the next value starts with c. Fields of an unexpected
// type (valid JSON all the same) are skipped, not errors.
func (p *chunkParser) is(c byte) bool { return p.peek() == c }

func (p *chunkParser) top(key []byte) error {
	switch string(key) {
	case "choices":
		if !p.is('[') {
			return p.skip()
		}
		return p.array(func() error {
			if !p.is('{') {
				return p.skip()
			}
			return p.object(p.choice)
		})
	case "usage":
		if !p.is('{') {
			return p.skip()
		}
		return p.object(p.usage)
	case "object", "message":
		if !p.is('"') {
			return p.skip()
		}
		s, err := p.str()
		if string(key) == "object" {
			p.c.object = s
		} else {
			p.c.message = s
		}
		return err
	case "model", "system_fingerprint":
		// The last value of a repeated key counts, as in encoding/json;
		// one that is not a string unsets it.
		var s []byte
		var err error
		if p.is('"') {
			s, err = p.str()
		} else {
			err = p.skip()
		}
		if string(key) == "model" {
			p.c.model = s
		} else {
			p.c.fingerprint = s
		}
		return err
	}
	return p.eventField(key) // error, timings, sim_ts, or skipped
}

func (p *chunkParser) choice(key []byte) error {
	switch string(key) {
	case "delta":
		if !p.is('{') {
			return p.skip()
		}
		return p.object(func(k []byte) error {
			switch string(k) {
			case "content", "reasoning_content", "reasoning":
				return p.textField(string(k) == "content")
			case "tool_calls":
				return p.toolCalls()
			}
			return p.skip()
		})
	case "text":
		return p.textField(true)
	case "finish_reason":
		if !p.is('"') {
			return p.skip()
		}
		s, err := p.str()
		if len(s) > 0 {
			p.c.finish = s
		}
		return err
	}
	return p.skip()
}

// textField parses a string (or null) of generated text: answer text
// (content) or reasoning.
func (p *chunkParser) textField(isContent bool) error {
	if !p.is('"') {
		return p.skip()
	}
	s, err := p.str()
	p.generated(s, isContent, isContent)
	return err
}

// generated notes a delta of generated text s: answer text or not, kept
// for the reply when keep (and contents are asked for).
func (p *chunkParser) generated(s []byte, answer, keep bool) {
	if len(s) == 0 {
		return
	}
	p.c.text = true
	p.c.answer = p.c.answer || answer
	if p.contents && keep {
		p.c.contents = append(p.c.contents, s)
	}
}

// toolCalls parses a chat delta's tool_calls: a call's name or a piece of
// its arguments is generated answer text, as content is (the contract's
// "Amendments": a tool-call-only reply carried generated text).
func (p *chunkParser) toolCalls() error {
	if !p.is('[') {
		return p.skip()
	}
	return p.array(func() error {
		if !p.is('{') {
			return p.skip()
		}
		var d toolDelta
		err := p.object(func(k []byte) error {
			switch string(k) {
			case "index":
				v, err := p.integer()
				d.index = v
				return err
			case "function":
				return p.objectField(func(k []byte) error {
					switch string(k) {
					case "name":
						return p.stringInto(&d.name)
					case "arguments":
						return p.stringInto(&d.args)
					}
					return p.skip()
				})
			}
			return p.skip()
		})
		p.toolCall(d)
		return err
	})
}

// toolCall notes a tool-call delta: its name or arguments are generated
// answer text; it is kept when contents are asked for.
func (p *chunkParser) toolCall(d toolDelta) {
	p.generated(d.name, true, false)
	p.generated(d.args, true, false)
	if p.contents && (len(d.name) > 0 || len(d.args) > 0) {
		p.c.calls = append(p.c.calls, d)
	}
}

// usage parses a usage object of any of the APIs: chat's prompt_tokens,
// completion_tokens and their details, the Responses API's input_tokens and
// output_tokens and theirs. (The Messages API's, whose input excludes the
// cached part, has its own, in parseMessagesEvent.)
func (p *chunkParser) usage(key []byte) error {
	switch string(key) {
	case "prompt_tokens", "input_tokens":
		return p.count(&p.c.prompt, &p.c.hasPrompt)
	case "completion_tokens", "output_tokens":
		return p.count(&p.c.complete, &p.c.hasComplete)
	case "prompt_tokens_details", "input_tokens_details":
		return p.details("cached_tokens", &p.c.cached, &p.c.hasCached)
	case "completion_tokens_details", "output_tokens_details":
		return p.details("reasoning_tokens", &p.c.reasoning, &p.c.hasReasoning)
	}
	return p.skip()
}

// count parses a token count a server reported into v (reportedCount's
// bounds) and notes that it was sent; a null or a value of another type
// counts as not sent.
func (p *chunkParser) count(v *int, sent *bool) error {
	if c := p.peek(); c != '-' && (c < '0' || c > '9') {
		return p.skip()
	}
	n, err := p.integer()
	*v, *sent = reportedCount(n), true
	return err
}

// details parses a usage details object for its count named key.
func (p *chunkParser) details(key string, v *int, sent *bool) error {
	if !p.is('{') {
		return p.skip()
	}
	return p.object(func(k []byte) error {
		if string(k) == key {
			return p.count(v, sent)
		}
		return p.skip()
	})
}

// errorMessage returns the message of an error in the chunk, or "": an
// "error" value ({"error": {...}} in OpenAI's and vLLM's streams, or a
// string) or an object of type "error", at most MaxServerMessageBytes.
func (c *chunk) errorMessage() string {
	if c.errRaw != nil {
		if msg := errorValueMessage(c.errRaw); msg != "" {
			return boundMessage(msg)
		}
		return boundMessage(string(c.errRaw))
	}
	if string(c.object) == "error" {
		if msg := boundMessage(unquote(c.message)); msg != "" {
			return msg
		}
		return "(no message)"
	}
	return ""
}

// decodeString decodes a raw JSON string's contents as encoding/json does:
// escapes resolved, invalid UTF-8 replaced by U+FFFD byte by byte.
func decodeString(raw []byte) string {
	if utf8.Valid(raw) {
		return unquote(raw)
	}
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	if json.Unmarshal(q, &s) != nil {
		return strings.ToValidUTF8(string(raw), "\uFFFD")
	}
	return s
}

// unquote resolves the escapes of a raw JSON string's contents.
func unquote(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	if json.Unmarshal(q, &s) != nil {
		return string(raw)
	}
	return s
}
