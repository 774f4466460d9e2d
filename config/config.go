// Package config holds sloprober's configuration: YAML types with their
// defaults, strict decoding, and validation whose errors name the file, the
// key and the bad value.
package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"

	"github.com/sloprober/sloprober/internal/strictyaml"
	"github.com/sloprober/sloprober/workload"
)

// CanaryTest is the value of the test label of the always-on canary loads.
const CanaryTest = "canary"

// Bounds on what a configuration may ask for. sloprober runs unattended
// against production; a typo must fail `check config` and a reload with an
// error naming the key and value, never start a load that hurts the
// target or the prober. Lengths in tokens are bounded by
// workload.MaxTokens.
const (
	// MaxLoadRate is the highest arrival rate of one load, req/s, and of
	// global.max_rate: 10,000, twenty times the highest rate BENCHMARKS.md
	// measures on 2 vCPUs (493 req/s of 2,000 streams at 0.91 cores).
	// Beyond it a process measures itself rather than the target. For a
	// replay it bounds the trace's mean rate times the speed.
	MaxLoadRate = 10_000
	// MinLoadRate is the lowest arrival rate of one load, req/s: one
	// request in 2 h 47 min. Gaps computed from lower rates (1e-300 gives
	// +Inf ns) leave time.Duration's range.
	MinLoadRate = 0.0001
	// MinReplaySpeed is the slowest replay: 0.01 stretches a trace of
	// workload.MaxTraceSpan (366 days) to 100 years, still inside
	// time.Duration's 292.
	MinReplaySpeed = 0.01
	// MinBurstiness and MaxBurstiness bound the gamma shape: inter-arrival
	// CVs from 10 down to 0.1. A shape of 1e-300 draws gaps of 0 ns for
	// ever (u^(1/shape) underflows), so every arrival would be due at once.
	MinBurstiness = 0.01
	MaxBurstiness = 100
	// MaxInFlightLimit bounds max_in_flight, of a target and global: at
	// the 68 KiB a stream costs in BENCHMARKS.md, 100,000 streams are
	// 6.5 GiB. The prober sizes connection pools from it.
	MaxInFlightLimit = 100_000
	// MaxTurns bounds a conversation's turns. Each turn resends the whole
	// history: 1,000 turns of 1,000 tokens are 1 M tokens of context.
	MaxTurns = 1000
	// MaxConfigFileBytes bounds a configuration file: 4 MiB, about 2,000
	// times the largest shipped example (2.2 KB). A larger file is
	// rejected before it is read whole or parsed: 50 MB took 11 s and
	// 1.6 GB to check, and 4 MiB takes about a second.
	MaxConfigFileBytes = 4 << 20
	// MaxModelNameBytes bounds a target's model: it is sent in every
	// request and is a label value of sloprober_target_info. Model ids,
	// Hugging Face repository ids and served-model names included, are far
	// shorter; a 50 MB model name became a 50 MB label.
	MaxModelNameBytes = 256
	// MaxNameBytes bounds target and scenario names: label values of every
	// series and keys of the landing page.
	MaxNameBytes = 64
)

// Defaults. A canary is meant to run for ever against production, so the
// global caps are low: 50 req/s and 1,000 requests in flight over all loads
// can do no harm to a serving fleet, and a config asking for more says so.
var (
	DefaultGlobalConfig = GlobalConfig{
		MaxRate:     50,
		MaxInFlight: 1000,
	}
	DefaultTargetConfig = TargetConfig{
		API:              "chat",
		Timeout:          model.Duration(2 * time.Minute),
		MaxInFlight:      64,
		MaxTokensField:   "max_tokens",
		HTTPClientConfig: defaultHTTPClientConfig(),
	}
	DefaultScenarioConfig = ScenarioConfig{
		InputTokens:  workload.FixedLength(256),
		OutputTokens: workload.FixedLength(64),
		Objective:    0.99,
	}
	DefaultReplay     = ReplayConfig{Speed: 1}
	DefaultBurstiness = 1.0
	DefaultArrival    = "poisson"
	arrivalProcesses  = []string{"constant", "poisson", "gamma"}
)

// Config is the whole configuration file.
type Config struct {
	Global    GlobalConfig      `yaml:"global"`
	Targets   []*TargetConfig   `yaml:"targets"`
	Scenarios []*ScenarioConfig `yaml:"scenarios"`
	Canary    []*LoadConfig     `yaml:"canary"`

	dir    string                     // relative paths are resolved against it
	traces map[string]*workload.Trace // read once per file and format
}

// GlobalConfig holds the safety caps over all loads.
type GlobalConfig struct {
	// MaxRate caps the sum of the arrival rates of all enabled loads, req/s;
	// a config above it is rejected.
	MaxRate float64 `yaml:"max_rate"`
	// MaxInFlight caps requests in flight over all loads; an arrival beyond
	// it is dropped (reason max_in_flight).
	MaxInFlight int `yaml:"max_in_flight"`
}

// TargetConfig is one OpenAI-compatible endpoint.
type TargetConfig struct {
	// Name is the target label value.
	Name string `yaml:"name"`
	// URL is the OpenAI base URL; /chat/completions, /completions and
	// /models are appended.
	URL string `yaml:"url"`
	// API is chat or completions.
	API   string `yaml:"api"`
	Model string `yaml:"model"`
	// Timeout bounds a whole request, connection set-up included.
	Timeout model.Duration `yaml:"timeout"`
	// MaxInFlight bounds the requests in flight of each load on this target.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxTokensField is the request field the output length is sent in:
	// max_tokens or max_completion_tokens.
	MaxTokensField string `yaml:"max_tokens_field"`
	// CostPerHour is the serving cost of the target, for cost per good request.
	CostPerHour *float64 `yaml:"cost_per_hour,omitempty"`
	// MaxContext is the target's context length in tokens, for a server
	// that does not report one (vLLM's /v1/models max_model_len, llama.cpp's
	// /props n_ctx): no prompt above it is sent. 0 (the default) leaves it
	// to the server's report; at most workload.MaxTokens.
	MaxContext int `yaml:"max_context,omitempty"`

	// HTTPClientConfig is prometheus/common's, with one default changed:
	// follow_redirects is false. A probe must send what it says: net/http
	// turns a POST into a body-less GET on 301, 302 and 303, which a
	// lenient server answers 200, and the round tripper sends the target's
	// credentials wherever a redirect points. A 3xx is a protocol_error
	// naming its Location unless follow_redirects: true is set.
	HTTPClientConfig commoncfg.HTTPClientConfig `yaml:",inline"`
}

// defaultHTTPClientConfig is prometheus/common's default without following
// redirects (see TargetConfig.HTTPClientConfig).
func defaultHTTPClientConfig() commoncfg.HTTPClientConfig {
	c := commoncfg.DefaultHTTPClientConfig
	c.FollowRedirects = false
	return c
}

// ScenarioConfig is a kind of request and the SLOs it must meet.
type ScenarioConfig struct {
	Name string `yaml:"name"`
	// InputTokens is the prompt length to synthesize: a number or a
	// distribution (see workload.Distribution). With a conversation, the
	// length of each turn's new user text.
	InputTokens workload.Distribution `yaml:"input_tokens"`
	// OutputTokens is sent in the target's max_tokens field.
	OutputTokens workload.Distribution `yaml:"output_tokens"`
	// LengthsFrom draws input and output lengths together from a trace,
	// keeping their joint distribution; it overrides input_tokens and
	// output_tokens.
	LengthsFrom *TraceFile `yaml:"lengths_from,omitempty"`
	// Prefix makes a share of requests begin with shared system prompts.
	Prefix *PrefixConfig `yaml:"prefix,omitempty"`
	// Conversation makes requests multi-turn conversations.
	Conversation *ConversationConfig `yaml:"conversation,omitempty"`
	// Cancel makes the client cancel a share of requests.
	Cancel *CancelConfig `yaml:"cancel,omitempty"`
	// IgnoreEOS sends ignore_eos: true (only when true: hosted APIs reject
	// unknown keys).
	IgnoreEOS bool      `yaml:"ignore_eos"`
	SLO       SLOConfig `yaml:"slo"`
	// Objective is the share of requests that must be good, for burn-rate
	// alerts.
	Objective float64 `yaml:"objective"`
}

// TraceFile is a trace to read lengths (or arrivals) from.
type TraceFile struct {
	// File is relative to the configuration file.
	File string `yaml:"file"`
	// Format is azure, mooncake or jsonl.
	Format string `yaml:"format"`
	// Trace is the parsed file, read when the configuration is loaded.
	Trace *workload.Trace `yaml:"-"`
}

// PrefixConfig: a share of requests begin with one of several shared system
// prompts, as production traffic does (and as a server's prefix cache sees it).
type PrefixConfig struct {
	// Tokens is the length of each shared prompt; it counts toward the
	// request's input length.
	Tokens int `yaml:"tokens"`
	// Share of requests that begin with a shared prompt; the others share
	// nothing.
	Share float64 `yaml:"share"`
	// Groups is the number of different shared prompts; they differ from
	// their first words on.
	Groups int `yaml:"groups"`
}

// ConversationConfig makes every request a turn of a conversation whose
// history (user messages and the server's real replies) is resent each turn.
type ConversationConfig struct {
	Turns int `yaml:"turns"`
	// ThinkTime is the time from a reply's end to the next turn.
	ThinkTime model.Duration `yaml:"think_time"`
}

// CancelConfig: the client cancels a share of requests a time after sending,
// as a user closing the tab does.
type CancelConfig struct {
	Share float64        `yaml:"share"`
	After model.Duration `yaml:"after"`
}

// ReplayConfig replays a trace's arrival times, lengths and prefix blocks.
type ReplayConfig struct {
	TraceFile `yaml:",inline"`
	// Speed scales time: 2 replays an hour of trace in 30 minutes.
	Speed float64 `yaml:"speed"`
	// Loop starts over at the end (default true), with fresh prefix ids.
	Loop *bool `yaml:"loop,omitempty"`
}

// Loops reports whether the replay starts over at its end (the default).
func (r *ReplayConfig) Loops() bool { return r.Loop == nil || *r.Loop }

// UnmarshalYAML implements yaml.Unmarshaler.
func (r *ReplayConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*r = DefaultReplay
	type plain ReplayConfig
	return unmarshal((*plain)(r))
}

// SLOConfig are upper bounds (inclusive); a nil one is not checked.
type SLOConfig struct {
	TTFT   *model.Duration `yaml:"ttft,omitempty"`
	TPOT   *model.Duration `yaml:"tpot,omitempty"`
	E2E    *model.Duration `yaml:"e2e,omitempty"`
	MaxITL *model.Duration `yaml:"max_itl,omitempty"`
}

// LoadConfig is one open-loop load: requests of one scenario, or of a
// weighted mix of scenarios, sent to one target at a rate.
type LoadConfig struct {
	Target   string `yaml:"target"`
	Scenario string `yaml:"scenario,omitempty"`
	// Mix is a weighted scenario mix, instead of Scenario: each arrival is
	// one scenario's request, drawn by weight.
	Mix map[string]float64 `yaml:"mix,omitempty"`
	// Rate is in requests per second.
	Rate float64 `yaml:"rate,omitempty"`
	// Arrival is constant, poisson (the default) or gamma.
	Arrival string `yaml:"arrival,omitempty"`
	// Burstiness is the shape of gamma arrivals: 1 is Poisson, below 1
	// burstier, above 1 smoother (the inter-arrival CV is 1/sqrt(shape)).
	Burstiness float64 `yaml:"burstiness,omitempty"`
	// Replay takes arrivals, lengths and prefix blocks from a trace; the
	// scenario gives labels and SLOs.
	Replay *ReplayConfig `yaml:"replay,omitempty"`
	// Enabled false pauses the load without deleting its series.
	Enabled *bool `yaml:"enabled,omitempty"`
}

// Process returns the arrival process: constant, poisson or gamma.
func (l *LoadConfig) Process() string {
	if l.Arrival == "" {
		return DefaultArrival
	}
	return l.Arrival
}

// Shape returns the gamma shape.
func (l *LoadConfig) Shape() float64 {
	if l.Burstiness == 0 {
		return DefaultBurstiness
	}
	return l.Burstiness
}

// Scenarios returns the load's scenarios with their weights, sorted by name.
func (l *LoadConfig) Scenarios() ([]string, []float64) {
	if len(l.Mix) == 0 {
		return []string{l.Scenario}, []float64{1}
	}
	names := make([]string, 0, len(l.Mix))
	for n := range l.Mix {
		names = append(names, n)
	}
	sort.Strings(names)
	weights := make([]float64, len(names))
	for i, n := range names {
		weights[i] = l.Mix[n]
	}
	return names, weights
}

// IsEnabled reports whether the load runs (the default).
func (l *LoadConfig) IsEnabled() bool { return l.Enabled == nil || *l.Enabled }

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *GlobalConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultGlobalConfig
	type plain GlobalConfig
	return unmarshal((*plain)(c))
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *TargetConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultTargetConfig
	type plain TargetConfig
	return unmarshal((*plain)(c))
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *ScenarioConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultScenarioConfig
	type plain ScenarioConfig
	return unmarshal((*plain)(c))
}

// LoadFile reads, decodes and validates a configuration file. With expandEnv,
// ${VAR} references are replaced by environment variables first. Relative
// file paths in the configuration (trace files, TLS files, credentials) are
// resolved against the file's directory. Every error names the file. A
// file above MaxConfigFileBytes is rejected after reading one byte more
// than the limit, not the whole file.
func LoadFile(filename string, expandEnv bool) (*Config, error) {
	f, err := os.Open(filename)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	c, err := Parse(b, expandEnv, filepath.Dir(filename))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return c, nil
}

// Load decodes a configuration strictly and validates it; relative paths
// are taken from the working directory.
func Load(b []byte, expandEnv bool) (*Config, error) {
	return Parse(b, expandEnv, "")
}

// errTooLarge is the error of a configuration above MaxConfigFileBytes.
var errTooLarge = fmt.Errorf("larger than the limit of %d bytes (4 MiB)", MaxConfigFileBytes)

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Parse decodes a configuration strictly, resolves relative paths against
// dir, reads the trace files it names, and validates it.
func Parse(b []byte, expandEnv bool, dir string) (*Config, error) {
	if len(b) > MaxConfigFileBytes {
		return nil, errTooLarge
	}
	if expandEnv {
		var missing []string
		b = envRef.ReplaceAllFunc(b, func(ref []byte) []byte {
			name := string(ref[2 : len(ref)-1])
			v, ok := os.LookupEnv(name)
			if !ok {
				missing = append(missing, name)
			}
			return []byte(v)
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("environment variable %s is not set", strings.Join(missing, ", "))
		}
		if len(b) > MaxConfigFileBytes {
			return nil, fmt.Errorf("with environment variables expanded: %w", errTooLarge)
		}
	}
	c := &Config{Global: DefaultGlobalConfig}
	if err := strictyaml.Unmarshal(b, c); err != nil {
		return nil, redactErr(err)
	}
	for _, t := range c.Targets {
		if t != nil {
			t.HTTPClientConfig.SetDirectory(dir)
		}
	}
	c.dir = dir
	if err := c.Validate(); err != nil {
		return nil, redactErr(err)
	}
	return c, nil
}

// userinfoPassword matches the password of a URL's userinfo in a text, up
// to the last @ of the authority, as RedactURL takes it.
var userinfoPassword = regexp.MustCompile(`(//[^\s/?#@:"]*:)[^\s/?#"]*@`)

// redactErr redacts URL passwords in an error's text: errors of other
// packages quote the URL they failed on (prometheus/common's proxy_url:
// parse "http://user:s3cr3t@a b": invalid character " " in host name).
func redactErr(err error) error {
	msg := err.Error()
	if red := userinfoPassword.ReplaceAllString(msg, "${1}"+redactedPassword+"@"); red != msg {
		return errors.New(red)
	}
	return err
}

var labelValue = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Key identifies the series of a load: its target, scenario and test labels.
type Key struct {
	Target, Scenario, Test string
}

func (k Key) String() string { return k.Target + "/" + k.Scenario + "/" + k.Test }

// Validate checks the configuration; every error names its key and value.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, clipErr(fmt.Errorf("%s: "+format, append([]any{key}, args...)...)))
	}
	if !(c.Global.MaxRate > 0 && c.Global.MaxRate <= MaxLoadRate) {
		bad("global.max_rate", "must be positive and at most %d req/s, got %g", MaxLoadRate, c.Global.MaxRate)
	}
	if c.Global.MaxInFlight <= 0 || c.Global.MaxInFlight > MaxInFlightLimit {
		bad("global.max_in_flight", "must be between 1 and %d, got %d", MaxInFlightLimit, c.Global.MaxInFlight)
	}

	targets := map[string]*TargetConfig{}
	for i, t := range c.Targets {
		key := fmt.Sprintf("targets[%d]", i)
		if t == nil {
			bad(key, "must not be empty")
			continue
		}
		if err := checkName(t.Name); err != nil {
			bad(key+".name", "%v", err)
		} else if _, dup := targets[t.Name]; dup {
			bad(key+".name", "duplicate target name %q", t.Name)
		}
		targets[t.Name] = t
		if err := validateURL(t.URL); err != nil {
			bad(key+".url", "%v, got %q", err, RedactURL(t.URL))
		}
		if t.API != "chat" && t.API != "completions" {
			bad(key+".api", "must be chat or completions, got %q", t.API)
		}
		if t.Model == "" {
			bad(key+".model", "must not be empty")
		} else if len(t.Model) > MaxModelNameBytes {
			bad(key+".model", "must be at most %d bytes, got %d bytes (%q...)", MaxModelNameBytes, len(t.Model), t.Model[:32])
		} else if strings.ContainsFunc(t.Model, unicode.IsControl) {
			bad(key+".model", "must not contain control characters, got %q", t.Model)
		}
		if t.Timeout <= 0 {
			bad(key+".timeout", "must be positive, got %s", t.Timeout)
		}
		if t.MaxInFlight <= 0 || t.MaxInFlight > MaxInFlightLimit {
			bad(key+".max_in_flight", "must be between 1 and %d, got %d", MaxInFlightLimit, t.MaxInFlight)
		}
		if t.MaxTokensField != "max_tokens" && t.MaxTokensField != "max_completion_tokens" {
			bad(key+".max_tokens_field", "must be max_tokens or max_completion_tokens, got %q", t.MaxTokensField)
		}
		if t.CostPerHour != nil && !(*t.CostPerHour >= 0 && !math.IsInf(*t.CostPerHour, 0)) {
			bad(key+".cost_per_hour", "must be a finite number, not negative, got %g", *t.CostPerHour)
		}
		if t.MaxContext < 0 || t.MaxContext > workload.MaxTokens {
			bad(key+".max_context", "must be between 1 and %d tokens (or left out), got %d", workload.MaxTokens, t.MaxContext)
		}
		if err := t.HTTPClientConfig.Validate(); err != nil {
			bad(key, "%v", err)
		}
	}

	scenarios := map[string]*ScenarioConfig{}
	for i, s := range c.Scenarios {
		key := fmt.Sprintf("scenarios[%d]", i)
		if s == nil {
			bad(key, "must not be empty")
			continue
		}
		if err := checkName(s.Name); err != nil {
			bad(key+".name", "%v", err)
		} else if _, dup := scenarios[s.Name]; dup {
			bad(key+".name", "duplicate scenario name %q", s.Name)
		}
		scenarios[s.Name] = s
		if err := s.InputTokens.Validate(); err != nil {
			bad(key+".input_tokens", "%v", err)
		}
		if err := s.OutputTokens.Validate(); err != nil {
			bad(key+".output_tokens", "%v", err)
		}
		if s.LengthsFrom != nil {
			if err := c.readTrace(s.LengthsFrom); err != nil {
				bad(key+".lengths_from", "%v", err)
			}
		}
		if p := s.Prefix; p != nil {
			if p.Tokens < 1 || p.Tokens > workload.MaxTokens {
				bad(key+".prefix.tokens", "must be between 1 and %d tokens, got %d", workload.MaxTokens, p.Tokens)
			}
			if !(p.Share >= 0 && p.Share <= 1) {
				bad(key+".prefix.share", "must be between 0 and 1, got %g", p.Share)
			}
			if p.Groups < 1 {
				bad(key+".prefix.groups", "must be at least 1, got %d", p.Groups)
			}
		}
		if cv := s.Conversation; cv != nil {
			if cv.Turns < 1 || cv.Turns > MaxTurns {
				bad(key+".conversation.turns", "must be between 1 and %d, got %d", MaxTurns, cv.Turns)
			}
		}
		if cn := s.Cancel; cn != nil {
			if !(cn.Share >= 0 && cn.Share <= 1) {
				bad(key+".cancel.share", "must be between 0 and 1, got %g", cn.Share)
			}
			if cn.After <= 0 {
				bad(key+".cancel.after", "must be positive, got %s", cn.After)
			}
		}
		if !(s.Objective > 0 && s.Objective < 1) {
			bad(key+".objective", "must be between 0 and 1 (exclusive), got %g", s.Objective)
		}
		for _, slo := range s.SLO.List() {
			if slo.Threshold <= 0 {
				bad(key+".slo."+slo.Name, "must be positive, got %s", model.Duration(slo.Threshold))
			}
		}
	}

	seen := map[Key]int{}
	rate := 0.0
	for i, l := range c.Canary {
		key := fmt.Sprintf("canary[%d]", i)
		if l == nil {
			bad(key, "must not be empty")
			continue
		}
		t, ok := targets[l.Target]
		if !ok {
			bad(key+".target", "unknown target %q", l.Target)
		}
		switch {
		case l.Scenario != "" && len(l.Mix) > 0:
			bad(key, "set either scenario or mix, not both")
		case l.Scenario == "" && len(l.Mix) == 0:
			bad(key, "set scenario or mix")
		case l.Scenario != "":
			if _, ok := scenarios[l.Scenario]; !ok {
				bad(key+".scenario", "unknown scenario %q", l.Scenario)
			}
		}
		for _, name := range sortedKeys(l.Mix) {
			if _, ok := scenarios[name]; !ok {
				bad(key+".mix", "unknown scenario %q", name)
			}
			if w := l.Mix[name]; !(w > 0) || math.IsInf(w, 0) {
				bad(key+".mix."+name, "weight must be positive, got %g", w)
			}
		}
		if l.Replay != nil {
			switch {
			case len(l.Mix) > 0:
				bad(key+".replay", "a replay takes one scenario, not a mix")
			case l.Rate != 0 || l.Arrival != "" || l.Burstiness != 0:
				bad(key+".replay", "the trace sets the arrivals: leave out rate, arrival and burstiness")
			}
			speedOK := l.Replay.Speed >= MinReplaySpeed && !math.IsInf(l.Replay.Speed, 0)
			if !speedOK {
				bad(key+".replay.speed", "must be a finite number of at least %g, got %g", MinReplaySpeed, l.Replay.Speed)
			}
			if err := c.readTrace(&l.Replay.TraceFile); err != nil {
				bad(key+".replay", "%v", err)
			} else if tr := l.Replay.Trace; !tr.Timed {
				bad(key+".replay.file", "%s has no timestamps to replay", l.Replay.File)
			} else if mean := workload.MeanRate(tr); mean <= 0 {
				bad(key+".replay.file", "%s spans no time (%d records, all at the same time): nothing to replay", l.Replay.File, len(tr.Records))
			} else if speedOK && mean*l.Replay.Speed > MaxLoadRate {
				bad(key+".replay", "%s at speed %g is %.6g req/s (a mean of %.6g req/s), above the maximum of %d req/s",
					l.Replay.File, l.Replay.Speed, mean*l.Replay.Speed, mean, MaxLoadRate)
			}
		} else {
			if !(l.Rate >= MinLoadRate && l.Rate <= MaxLoadRate) {
				bad(key+".rate", "must be between %g and %d req/s, got %g", MinLoadRate, MaxLoadRate, l.Rate)
			}
			if !slices.Contains(arrivalProcesses, l.Process()) {
				bad(key+".arrival", "must be constant, poisson or gamma, got %q", l.Arrival)
			}
			if l.Burstiness != 0 && l.Process() != "gamma" {
				bad(key+".burstiness", "applies to arrival: gamma only")
			}
			if b := l.Burstiness; b != 0 && !(b >= MinBurstiness && b <= MaxBurstiness) {
				bad(key+".burstiness", "must be between %g and %d, got %g", MinBurstiness, MaxBurstiness, b)
			}
		}
		names, _ := l.Scenarios()
		for _, name := range names {
			s := scenarios[name]
			if s == nil || t == nil {
				continue
			}
			if s.Conversation != nil && t.API != "chat" {
				bad(key, "scenario %q has conversations, which need a chat target; target %q has api %s", name, t.Name, t.API)
			}
			if s.Cancel != nil && s.Cancel.After >= t.Timeout {
				bad(key, "scenario %q cancels after %s, which must be less than target %q's timeout %s", name, s.Cancel.After, t.Name, t.Timeout)
			}
			if s.Conversation != nil && l.Replay != nil {
				bad(key+".replay", "scenario %q has conversations, which a replay does not make", name)
			}
			k := Key{Target: l.Target, Scenario: name, Test: CanaryTest}
			if j, dup := seen[k]; dup {
				bad(key, "canary[%d] and canary[%d] both produce target=%q scenario=%q test=%q", j, i, k.Target, k.Scenario, k.Test)
			}
			seen[k] = i
		}
		if l.IsEnabled() && len(errs) == 0 {
			rate += c.LoadRate(l)
		}
	}
	if c.Global.MaxRate > 0 && rate > c.Global.MaxRate {
		bad("canary", "the enabled loads add up to %g req/s, above global.max_rate %g", rate, c.Global.MaxRate)
	}
	return errors.Join(errs...)
}

// maxErrorBytes bounds one validation error: values are quoted in them,
// and a value can be as long as the file (a 4 MiB URL). Errors are logged
// and shown on the landing page.
const maxErrorBytes = 512

// clipErr shortens an error's text to maxErrorBytes, on a rune boundary.
func clipErr(err error) error {
	msg := err.Error()
	if len(msg) <= maxErrorBytes {
		return err
	}
	i := maxErrorBytes
	for i > 0 && !utf8.RuneStart(msg[i]) {
		i--
	}
	return errors.New(msg[:i] + "...")
}

// checkName checks a target or scenario name, a label value.
func checkName(name string) error {
	if len(name) > MaxNameBytes {
		return fmt.Errorf("must be at most %d bytes, got %d bytes (%q...)", MaxNameBytes, len(name), name[:32])
	}
	if !labelValue.MatchString(name) {
		return fmt.Errorf("must match [a-zA-Z0-9_-]+, got %q", name)
	}
	return nil
}

func validateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("invalid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("scheme must be http or https")
	}
	if u.Host == "" {
		return errors.New("host is missing")
	}
	return nil
}

// Keys returns the label sets of a canary load, one per scenario, in the
// order of Scenarios.
func (l *LoadConfig) Keys() []Key {
	names, _ := l.Scenarios()
	keys := make([]Key, len(names))
	for i, n := range names {
		keys[i] = Key{Target: l.Target, Scenario: n, Test: CanaryTest}
	}
	return keys
}

// LoadRate is the intended request rate of a load, req/s: its rate, or for
// a replay the trace's mean rate times the speed.
func (c *Config) LoadRate(l *LoadConfig) float64 {
	if l.Replay != nil && l.Replay.Trace != nil {
		return workload.MeanRate(l.Replay.Trace) * l.Replay.Speed
	}
	return l.Rate
}

// ScenarioRates splits a load's intended rate over its scenarios by weight,
// in the order of Scenarios.
func (c *Config) ScenarioRates(l *LoadConfig) []float64 {
	_, weights := l.Scenarios()
	sum := 0.0
	for _, w := range weights {
		sum += w
	}
	rates := make([]float64, len(weights))
	for i, w := range weights {
		rates[i] = c.LoadRate(l) * w / sum
	}
	return rates
}

// readTrace reads a trace file once per configuration.
func (c *Config) readTrace(tf *TraceFile) error {
	if tf.File == "" {
		return errors.New("file: must not be empty")
	}
	if !slices.Contains(workload.Formats, tf.Format) {
		return fmt.Errorf("format: must be one of %s, got %q", strings.Join(workload.Formats, ", "), tf.Format)
	}
	path := commoncfg.JoinDir(c.dir, tf.File)
	id := tf.Format + "\x00" + path
	if t, ok := c.traces[id]; ok {
		tf.Trace = t
		return nil
	}
	t, err := workload.LoadTrace(path, tf.Format)
	if err != nil {
		return fmt.Errorf("file: %w", err)
	}
	if c.traces == nil {
		c.traces = map[string]*workload.Trace{}
	}
	c.traces[id] = t
	tf.Trace = t
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// SLO is one configured threshold.
type SLO struct {
	Name      string // the slo label value: ttft, tpot, e2e or max_itl
	Threshold time.Duration
}

// SLONames lists every SLO in the order they are checked and reported.
var SLONames = []string{"ttft", "tpot", "e2e", "max_itl"}

// List returns the SLOs that are set, in the order of SLONames.
func (s SLOConfig) List() []SLO {
	var out []SLO
	for i, d := range []*model.Duration{s.TTFT, s.TPOT, s.E2E, s.MaxITL} {
		if d != nil {
			out = append(out, SLO{Name: SLONames[i], Threshold: time.Duration(*d)})
		}
	}
	return out
}

// Target returns the target of that name, or nil.
func (c *Config) Target(name string) *TargetConfig {
	for _, t := range c.Targets {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Scenario returns the scenario of that name, or nil.
func (c *Config) Scenario(name string) *ScenarioConfig {
	for _, s := range c.Scenarios {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// String renders the configuration as YAML, secrets replaced by <secret>
// and the passwords of URLs by xxxxx (RedactURL): target URLs and OAuth2
// token URLs here, proxy URLs by prometheus/common.
func (c *Config) String() string {
	cc := *c
	cc.Targets = make([]*TargetConfig, len(c.Targets))
	for i, t := range c.Targets {
		if t != nil {
			tc := *t
			tc.URL = RedactURL(t.URL)
			if o := t.HTTPClientConfig.OAuth2; o != nil {
				oc := *o
				oc.TokenURL = RedactURL(o.TokenURL)
				tc.HTTPClientConfig.OAuth2 = &oc
			}
			t = &tc
		}
		cc.Targets[i] = t
	}
	b, err := yaml.Marshal(&cc)
	if err != nil {
		return fmt.Sprintf("<error creating config string: %s>", err)
	}
	return string(b)
}

// redactedPassword replaces a URL's password where it is shown. It is what
// net/url's URL.Redacted writes, so every output of sloprober, logs
// included, looks the same.
const redactedPassword = "xxxxx"

// RedactURL returns s with the password of its userinfo replaced by xxxxx:
// http://user:s3cr3t@host/v1 becomes http://user:xxxxx@host/v1. Use it
// wherever a URL from a configuration or a server is shown (the /config
// page, the landing page, logs, errors, `probe`). A user name alone is
// kept: it is how a target is told apart. A string that net/url cannot
// parse is redacted from its text, "scheme://user:password@": an error
// about a bad URL must not show the password either.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redactedPassword)
			return u.String()
		}
		if u.User != nil || !strings.Contains(s, "@") {
			return s
		}
	}
	// Unparsable, or parsed without userinfo although it has an @
	// ("user:pass@host/v1" parses as scheme "user"): the authority runs
	// from after "//" (or the start) to the first /, ? or #, and its
	// userinfo up to the last @ in it.
	start := 0
	if i := strings.Index(s, "//"); i >= 0 {
		start = i + 2
	}
	auth := s[start:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	at := strings.LastIndex(auth, "@")
	colon := strings.Index(auth, ":")
	if at < 0 || colon < 0 || colon > at {
		return s
	}
	return s[:start+colon+1] + redactedPassword + s[start+at:]
}
