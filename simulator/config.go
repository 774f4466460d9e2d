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
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/http/httpguts"

	"github.com/sloprober/sloprober/internal/strictyaml"
)

// Duration is a time.Duration that reads and writes Go duration strings
// ("50us", "5ms", "2s") in YAML and JSON. Prometheus' model.Duration has no
// unit below a millisecond, and per-token prefill costs are tens of microseconds.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err != nil {
		return err
	}
	return d.set(s)
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"5ms\": %w", err)
	}
	return d.set(s)
}

func (d *Duration) set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d Duration) String() string { return time.Duration(d).String() }

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

// Faults are injected at the given per-request rates; every decision is drawn
// from the seeded fault stream. They can be replaced at run time by
// PUT /sim/faults.
type Faults struct {
	// ErrorRate maps an HTTP status (400-599) to the share of requests
	// answered with it before they reach the engine, in each API's error
	// form; the Messages API answers 503 as Anthropic's overload, 529
	// overloaded_error.
	ErrorRate map[string]float64 `yaml:"error_rate,omitempty" json:"error_rate,omitempty"`
	// ResetRate is the share of streams whose connection is reset (TCP RST)
	// halfway through the output.
	ResetRate float64 `yaml:"reset_rate" json:"reset_rate"`
	// Stall pauses the share Rate of streams for Duration halfway through.
	Stall StallConfig `yaml:"stall" json:"stall"`
	// MalformedRate is the share of streams that get one chunk that is not
	// valid JSON halfway through (the stream then goes on).
	MalformedRate float64 `yaml:"malformed_rate" json:"malformed_rate"`
	// MissingDoneRate is the share of streams that end without "data: [DONE]".
	MissingDoneRate float64 `yaml:"missing_done_rate" json:"missing_done_rate"`
	// StreamErrorRate is the share of streams that fail halfway with the
	// API's in-stream error: a chunk {"error": {...}} (chat, completions),
	// response.failed (Responses), an error event of type
	// overloaded_error (Messages).
	StreamErrorRate float64 `yaml:"stream_error_rate" json:"stream_error_rate"`
	// HeaderDelay delays the response headers of every request.
	HeaderDelay Duration `yaml:"header_delay" json:"header_delay"`
	// WrongToolRate is the share of tool calls that are wrong: every
	// other one, starting with the first, calls a name that is not among
	// the request's tools; the others leave out a required argument
	// (where the tool has none, they too call a wrong name).
	WrongToolRate float64 `yaml:"wrong_tool_rate" json:"wrong_tool_rate"`
	// InvalidJSONRate is the share of structured-output replies (a
	// json_schema or json_object format) that are invalid: every other
	// one, starting with the first, is truncated JSON (the document stops
	// halfway, with a normal stop); the others are valid JSON without a
	// required property (where the schema requires none, they too are
	// truncated).
	InvalidJSONRate float64 `yaml:"invalid_json_rate" json:"invalid_json_rate"`
	// WrongAnswerRate is the share of known-answer questions answered
	// wrong: off by 1 to 10, either way.
	WrongAnswerRate float64 `yaml:"wrong_answer_rate" json:"wrong_answer_rate"`
	// Degrade slows the engine down over time; nil: it does not.
	Degrade *DegradeConfig `yaml:"degrade,omitempty" json:"degrade,omitempty"`
}

// DegradeConfig is a slow degradation, for soak tests: phase times grow
// linearly with the time since the fault was set (at start for the file's
// faults, by PUT /sim/faults otherwise), and every request completed since
// then adds Leak to each decode step, up to LeakMax. With slots: 0 the
// fixed TTFT degrades as prefill and the fixed ITL as a decode step.
type DegradeConfig struct {
	// Prefill and Decode are the fractions by which prefill time and decode
	// step time grow per Per: 0.5 is +50% per Per, linearly.
	Prefill float64  `yaml:"prefill" json:"prefill"`
	Decode  float64  `yaml:"decode" json:"decode"`
	Per     Duration `yaml:"per" json:"per"`
	// Leak is added to every decode step per request completed since the
	// fault was set, up to LeakMax in all.
	Leak    Duration `yaml:"leak" json:"leak"`
	LeakMax Duration `yaml:"leak_max" json:"leak_max"`
}

// StallConfig is a pause mid-stream.
type StallConfig struct {
	Rate     float64  `yaml:"rate" json:"rate"`
	Duration Duration `yaml:"duration" json:"duration"`
}

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
	Faults:    Faults{Stall: StallConfig{Duration: Duration(5 * time.Second)}},
	Seed:      1,
}

// DefaultPrefixCacheConfig applies when a prefix_cache block is present.
var DefaultPrefixCacheConfig = PrefixCacheConfig{BlockTokens: 512, MaxBlocks: 65536}

// DefaultDegradeConfig applies when a degrade block is present.
var DefaultDegradeConfig = DegradeConfig{Per: Duration(time.Hour)}

// maxDegradeFraction bounds degrade.prefill and degrade.decode.
const maxDegradeFraction = 1000

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

// UnmarshalYAML implements yaml.Unmarshaler: keys not given are 0, except
// per, which defaults to 1h.
func (d *DegradeConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*d = DefaultDegradeConfig
	type plain DegradeConfig
	return unmarshal((*plain)(d))
}

// UnmarshalYAML implements yaml.Unmarshaler. A faults block replaces the
// current faults whole: keys it omits are 0, except the stall duration,
// which keeps its default of 5s so that "stall: {rate: 0.1}" works.
func (f *Faults) UnmarshalYAML(unmarshal func(any) error) error {
	*f = Faults{Stall: StallConfig{Duration: DefaultConfig.Faults.Stall.Duration}}
	type plain Faults
	return unmarshal((*plain)(f))
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
func ParseFaults(b []byte) (Faults, error) {
	var f Faults
	if err := strictyaml.Unmarshal(b, &f); err != nil {
		return Faults{}, err
	}
	if errs := f.validate("faults."); len(errs) > 0 {
		sortErrors(errs)
		return Faults{}, errors.Join(errs...)
	}
	return f, nil
}

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
	errs = append(errs, c.Faults.validate("faults.")...)
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

// Validate checks the fault rates; errors name the key below "faults".
func (f *Faults) Validate() error {
	errs := f.validate("")
	sortErrors(errs)
	return errors.Join(errs...)
}

func (f *Faults) validate(prefix string) []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s%s: "+format, append([]any{prefix, key}, args...)...))
	}
	sum := 0.0
	for code, rate := range f.ErrorRate {
		n, err := strconv.Atoi(code)
		if err != nil || n < 400 || n > 599 {
			bad("error_rate", "key must be an HTTP status from 400 to 599, got %q", code)
			continue
		}
		if !validRate(rate) {
			bad("error_rate."+code, "must be between 0 and 1, got %g", rate)
		}
		sum += rate
	}
	if len(errs) == 0 && sum > 1+1e-9 {
		bad("error_rate", "rates must add up to at most 1, got %g", sum)
	}
	for key, rate := range map[string]float64{
		"reset_rate": f.ResetRate, "stall.rate": f.Stall.Rate,
		"malformed_rate": f.MalformedRate, "missing_done_rate": f.MissingDoneRate,
		"stream_error_rate": f.StreamErrorRate, "wrong_tool_rate": f.WrongToolRate,
		"invalid_json_rate": f.InvalidJSONRate, "wrong_answer_rate": f.WrongAnswerRate,
	} {
		if !validRate(rate) {
			bad(key, "must be between 0 and 1, got %g", rate)
		}
	}
	if f.Stall.Duration < 0 {
		bad("stall.duration", "must not be negative, got %s", f.Stall.Duration)
	}
	if f.HeaderDelay < 0 {
		bad("header_delay", "must not be negative, got %s", f.HeaderDelay)
	}
	if d := f.Degrade; d != nil {
		for key, v := range map[string]float64{"degrade.prefill": d.Prefill, "degrade.decode": d.Decode} {
			if !(v >= 0 && v <= maxDegradeFraction) { // false for NaN too
				bad(key, "must be between 0 and %d, got %g", maxDegradeFraction, v)
			}
		}
		if d.Per <= 0 {
			bad("degrade.per", "must be positive, got %s", d.Per)
		}
		if d.Leak < 0 {
			bad("degrade.leak", "must not be negative, got %s", d.Leak)
		}
		switch {
		case d.LeakMax < 0:
			bad("degrade.leak_max", "must not be negative, got %s", d.LeakMax)
		case d.Leak > 0 && d.LeakMax == 0:
			bad("degrade.leak_max", "must be positive when degrade.leak is set (a leak must be bounded)")
		}
	}
	return errs
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

func validRate(r float64) bool { return r >= 0 && r <= 1 && !math.IsNaN(r) }

// sortErrors orders errors found by ranging over maps, so messages are stable.
func sortErrors(errs []error) {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
}
