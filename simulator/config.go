// Package simulator is a simulated LLM serving engine with an OpenAI-compatible
// HTTP API. It models what makes LLM serving hard (a fixed number of batch
// slots, a FIFO waiting queue, prefill that pauses decoding, decode steps that
// slow down as the batch grows, a prefix cache) and reports the true queue,
// prefill and decode time of every request, so that it can serve as ground
// truth for the prober that measures it.
//
// The package deliberately shares no code with the prober's client: it is the
// reference the client is checked against.
package simulator

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/http/httpguts"

	"github.com/sloprober/sloprober/faults"
	"github.com/sloprober/sloprober/internal/strictyaml"
)

// Duration is a time.Duration read and written as a Go duration string
// ("50us", "5ms", "2s"); the type is the fault schema's (package faults).
type Duration = faults.Duration

// Config is the simulator's configuration. Every field has a default (see
// DefaultConfig), so an empty file is a valid configuration.
type Config struct {
	// Model is the only model name served; requests naming another get 404.
	Model string `yaml:"model" json:"model"`
	// MaxModelLen bounds prompt plus output tokens, as vLLM's --max-model-len.
	MaxModelLen int `yaml:"max_model_len" json:"max_model_len"`
	// Slots is the number of sequences decoded together (continuous batching).
	// 0 switches the engine model off: every request is served on its own
	// with the Fixed timing.
	Slots int `yaml:"slots" json:"slots"`
	// MaxQueue bounds the waiting queue; arrivals beyond it get 429. 0: unbounded.
	MaxQueue     int                `yaml:"max_queue" json:"max_queue"`
	Prefill      PrefillConfig      `yaml:"prefill" json:"prefill"`
	Decode       DecodeConfig       `yaml:"decode" json:"decode"`
	Fixed        FixedConfig        `yaml:"fixed" json:"fixed"`
	PrefixCache  *PrefixCacheConfig `yaml:"prefix_cache,omitempty" json:"prefix_cache,omitempty"`
	OutputTokens Distribution       `yaml:"output_tokens" json:"output_tokens"`
	Tokenizer    TokenizerConfig    `yaml:"tokenizer" json:"tokenizer"`
	Faults       Faults             `yaml:"faults" json:"faults"`
	// Seed seeds the output-length and fault streams, so a run is repeatable.
	Seed uint64 `yaml:"seed" json:"seed"`
	// StampChunks adds "sim_ts", the wall-clock time the chunk was written
	// in Unix nanoseconds, to every token chunk: the truth a client's
	// timestamps are compared with by `sloprober bench`.
	StampChunks bool `yaml:"stamp_chunks,omitempty" json:"stamp_chunks,omitempty"`
	// ReasoningTokens, when set, is the length of the reasoning every reply
	// of the chat, Responses and Messages APIs begins with, drawn per
	// request. Reasoning tokens cost a decode step each, like any token,
	// and count within the request's output limit (max_tokens,
	// max_completion_tokens, max_output_tokens), as on vLLM, OpenAI and
	// Anthropic: a small limit can leave no room for the answer. nil: no
	// reasoning.
	ReasoningTokens *Distribution `yaml:"reasoning_tokens,omitempty" json:"reasoning_tokens,omitempty"`
	// Fingerprint is the system_fingerprint of chat and completions
	// replies; empty: "fp_" and ten hex digits derived from Model, so it
	// is stable across restarts. PUT /sim/identity changes it at run time.
	Fingerprint string `yaml:"fingerprint,omitempty" json:"fingerprint,omitempty"`
	// IdentityHeader, when set, is a header every /v1/ reply carries (a
	// gateway's x-model-version, say); its value can change at run time.
	IdentityHeader *HeaderConfig `yaml:"identity_header,omitempty" json:"identity_header,omitempty"`
}

// HeaderConfig is one HTTP response header.
type HeaderConfig struct {
	Name  string `yaml:"name" json:"name"`
	Value string `yaml:"value" json:"value"`
}

// PrefillConfig: prefill time = Base + PerToken * uncached input tokens.
// With the defaults a 2,000-token prompt takes 5ms + 2000*50us = 105ms.
type PrefillConfig struct {
	Base     Duration `yaml:"base" json:"base"`
	PerToken Duration `yaml:"per_token" json:"per_token"`
}

// DecodeConfig: one decode step = Base + PerSequence * running sequences, and
// every running sequence gets one token per step. With the defaults one
// sequence decodes at 1/(10ms+1ms) = 91 tokens/s, eight at 1/(10ms+8ms) = 56
// tokens/s each, 444 tokens/s in all.
type DecodeConfig struct {
	Base        Duration `yaml:"base" json:"base"`
	PerSequence Duration `yaml:"per_sequence" json:"per_sequence"`
}

// FixedConfig is the timing of every request when Slots is 0: the first token
// TTFT after the request arrives, then one token every ITL, with no
// interference between requests (for benchmarks of the client).
type FixedConfig struct {
	TTFT Duration `yaml:"ttft" json:"ttft"`
	ITL  Duration `yaml:"itl" json:"itl"`
}

// PrefixCacheConfig turns on prefix caching: a prompt is cut into blocks of
// BlockTokens tokens, and a leading run of blocks seen before is not prefilled
// again. Only whole blocks are cached, as in vLLM.
type PrefixCacheConfig struct {
	BlockTokens int `yaml:"block_tokens" json:"block_tokens"`
	// MaxBlocks bounds the cache; the least recently used block is evicted.
	MaxBlocks int `yaml:"max_blocks" json:"max_blocks"`
}

// Distribution is an output length distribution, used when a request does not
// send ignore_eos: the sequence "ends" after a drawn number of tokens.
type Distribution struct {
	// Distribution is fixed, uniform or lognormal.
	Distribution string `yaml:"distribution" json:"distribution"`
	// Value is the length of a fixed distribution.
	Value int `yaml:"value,omitempty" json:"value,omitempty"`
	// Median and P90 shape a lognormal distribution.
	Median float64 `yaml:"median,omitempty" json:"median,omitempty"`
	P90    float64 `yaml:"p90,omitempty" json:"p90,omitempty"`
	// Min and Max clip every draw (uniform draws from [Min, Max]).
	Min int `yaml:"min" json:"min"`
	Max int `yaml:"max" json:"max"`
}

// TokenizerConfig says how text is counted in tokens. No special tokens are
// added, so the count of a chat request is the sum over its messages.
type TokenizerConfig struct {
	// CharsPerToken: a token is this many characters (the last may be shorter).
	CharsPerToken int `yaml:"chars_per_token,omitempty" json:"chars_per_token,omitempty"`
	// Words: a token is a whitespace-separated word instead.
	Words bool `yaml:"words,omitempty" json:"words,omitempty"`
}

// Faults, DegradeConfig and StallConfig are the faults the simulator
// injects; their schema and validation live in the leaf package faults, so
// that the prober's configuration checks a fault plan without linking the
// simulator.
type (
	Faults        = faults.Faults
	DegradeConfig = faults.DegradeConfig
	StallConfig   = faults.StallConfig
)

// DefaultConfig is the configuration used without a file, and the base every
// file is read over.
var DefaultConfig = Config{
	Model:       "sim-model",
	MaxModelLen: 32768,
	Slots:       8,
	MaxQueue:    0,
	Prefill:     PrefillConfig{Base: Duration(5 * time.Millisecond), PerToken: Duration(50 * time.Microsecond)},
	Decode:      DecodeConfig{Base: Duration(10 * time.Millisecond), PerSequence: Duration(time.Millisecond)},
	Fixed:       FixedConfig{TTFT: Duration(80 * time.Millisecond), ITL: Duration(20 * time.Millisecond)},
	OutputTokens: Distribution{
		Distribution: "lognormal", Median: 200, P90: 800, Min: 1, Max: 4096,
	},
	Tokenizer: TokenizerConfig{CharsPerToken: 4},
	Faults:    Faults{Stall: StallConfig{Duration: faults.DefaultStallDuration}},
	Seed:      1,
}

// DefaultPrefixCacheConfig applies when a prefix_cache block is present.
var DefaultPrefixCacheConfig = PrefixCacheConfig{BlockTokens: 512, MaxBlocks: 65536}

// UnmarshalYAML implements yaml.Unmarshaler: keys not given keep their default.
func (c *Config) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultConfig
	type plain Config
	return unmarshal((*plain)(c))
}

// UnmarshalYAML implements yaml.Unmarshaler: a tokenizer block replaces the
// default whole, and one that sets neither key counts four characters a token.
func (t *TokenizerConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*t = TokenizerConfig{}
	type plain TokenizerConfig
	if err := unmarshal((*plain)(t)); err != nil {
		return err
	}
	if !t.Words && t.CharsPerToken == 0 {
		t.CharsPerToken = DefaultConfig.Tokenizer.CharsPerToken
	}
	return nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *PrefixCacheConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultPrefixCacheConfig
	type plain PrefixCacheConfig
	return unmarshal((*plain)(c))
}

// LoadFile reads and validates a configuration file. Errors name the file.
func LoadFile(filename string) (*Config, error) {
	b, err := os.ReadFile(filename)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return c, nil
}

// Parse reads a configuration strictly (unknown keys are errors) and
// validates it.
func Parse(b []byte) (*Config, error) {
	c := DefaultConfig
	if err := strictyaml.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// ParseFaults reads a faults block, as YAML or JSON, strictly.
func ParseFaults(b []byte) (Faults, error) { return faults.Parse(b) }

// Validate checks every value and names the key of the first bad one.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, key string, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
		}
	}
	check(c.Model != "", "model", "must not be empty")
	check(c.MaxModelLen > 0, "max_model_len", "must be positive, got %d", c.MaxModelLen)
	check(c.Slots >= 0, "slots", "must not be negative, got %d", c.Slots)
	check(c.MaxQueue >= 0, "max_queue", "must not be negative, got %d", c.MaxQueue)
	for key, d := range map[string]Duration{
		"prefill.base": c.Prefill.Base, "prefill.per_token": c.Prefill.PerToken,
		"decode.base": c.Decode.Base, "decode.per_sequence": c.Decode.PerSequence,
		"fixed.ttft": c.Fixed.TTFT, "fixed.itl": c.Fixed.ITL,
	} {
		check(d >= 0, key, "must not be negative, got %s", d)
	}
	if c.PrefixCache != nil {
		check(c.PrefixCache.BlockTokens > 0, "prefix_cache.block_tokens", "must be positive, got %d", c.PrefixCache.BlockTokens)
		check(c.PrefixCache.MaxBlocks > 0, "prefix_cache.max_blocks", "must be positive, got %d", c.PrefixCache.MaxBlocks)
	}
	if err := c.OutputTokens.validate(); err != nil {
		errs = append(errs, fmt.Errorf("output_tokens.%w", err))
	}
	if c.ReasoningTokens != nil {
		if err := c.ReasoningTokens.validate(); err != nil {
			errs = append(errs, fmt.Errorf("reasoning_tokens.%w", err))
		}
	}
	if strings.IndexFunc(c.Fingerprint, unicode.IsControl) >= 0 {
		errs = append(errs, fmt.Errorf("fingerprint: must not contain control characters, got %q", c.Fingerprint))
	}
	if h := c.IdentityHeader; h != nil {
		errs = append(errs, h.validate("identity_header")...)
	}
	switch {
	case c.Tokenizer.Words && c.Tokenizer.CharsPerToken != 0:
		errs = append(errs, errors.New("tokenizer: set either chars_per_token or words, not both"))
	case !c.Tokenizer.Words && c.Tokenizer.CharsPerToken <= 0:
		errs = append(errs, fmt.Errorf("tokenizer.chars_per_token: must be positive, got %d", c.Tokenizer.CharsPerToken))
	}
	errs = append(errs, c.Faults.Errors("faults.")...)
	sortErrors(errs)
	return errors.Join(errs...)
}

func (d Distribution) validate() error {
	switch d.Distribution {
	case "fixed":
		if d.Value < 1 {
			return fmt.Errorf("value: must be at least 1, got %d", d.Value)
		}
		return nil
	case "uniform":
	case "lognormal":
		if d.Median < 1 {
			return fmt.Errorf("median: must be at least 1, got %g", d.Median)
		}
		if d.P90 <= d.Median {
			return fmt.Errorf("p90: must be greater than median (%g), got %g", d.Median, d.P90)
		}
	default:
		return fmt.Errorf("distribution: must be fixed, uniform or lognormal, got %q", d.Distribution)
	}
	if d.Min < 1 {
		return fmt.Errorf("min: must be at least 1, got %d", d.Min)
	}
	if d.Max < d.Min {
		return fmt.Errorf("max: must be at least min (%d), got %d", d.Min, d.Max)
	}
	return nil
}

// validate checks a header's name and value; errors name key.
func (h *HeaderConfig) validate(key string) []error {
	var errs []error
	if !httpguts.ValidHeaderFieldName(h.Name) {
		errs = append(errs, fmt.Errorf("%s.name: must be an HTTP header name, got %q", key, h.Name))
	} else if reservedHeaders[http.CanonicalHeaderKey(h.Name)] {
		errs = append(errs, fmt.Errorf("%s.name: %s is set by the simulator itself", key, h.Name))
	}
	if !httpguts.ValidHeaderFieldValue(h.Value) {
		errs = append(errs, fmt.Errorf("%s.value: must be an HTTP header value, got %q", key, h.Value))
	}
	return errs
}

// reservedHeaders are headers the simulator sets on its replies, which an
// identity header must not replace.
var reservedHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Cache-Control": true, "Server": true,
	"Server-Timing": true, "Retry-After": true, "Transfer-Encoding": true, "Connection": true,
}

// sortErrors orders errors found by ranging over maps, so messages are stable.
func sortErrors(errs []error) { faults.SortErrors(errs) }
