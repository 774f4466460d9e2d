// Package config holds sloprober's configuration: YAML types with their
// defaults, strict decoding, and validation whose errors name the file, the
// key and the bad value.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"

	"github.com/sloprober/sloprober/internal/strictyaml"
)

// CanaryTest is the value of the test label of the always-on canary loads.
const CanaryTest = "canary"

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
		HTTPClientConfig: commoncfg.DefaultHTTPClientConfig,
	}
	DefaultScenarioConfig = ScenarioConfig{
		InputTokens:  256,
		OutputTokens: 64,
		Objective:    0.99,
	}
	DefaultLoadConfig = LoadConfig{
		Arrival: "poisson",
	}
)

// Config is the whole configuration file.
type Config struct {
	Global    GlobalConfig      `yaml:"global"`
	Targets   []*TargetConfig   `yaml:"targets"`
	Scenarios []*ScenarioConfig `yaml:"scenarios"`
	Canary    []*LoadConfig     `yaml:"canary"`
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

	HTTPClientConfig commoncfg.HTTPClientConfig `yaml:",inline"`
}

// ScenarioConfig is a kind of request and the SLOs it must meet.
type ScenarioConfig struct {
	Name string `yaml:"name"`
	// InputTokens is the prompt length to synthesize.
	InputTokens int `yaml:"input_tokens"`
	// OutputTokens is sent in the target's max_tokens field.
	OutputTokens int `yaml:"output_tokens"`
	// IgnoreEOS sends ignore_eos: true (only when true: hosted APIs reject
	// unknown keys).
	IgnoreEOS bool      `yaml:"ignore_eos"`
	SLO       SLOConfig `yaml:"slo"`
	// Objective is the share of requests that must be good, for burn-rate
	// alerts.
	Objective float64 `yaml:"objective"`
}

// SLOConfig are upper bounds (inclusive); a nil one is not checked.
type SLOConfig struct {
	TTFT   *model.Duration `yaml:"ttft,omitempty"`
	TPOT   *model.Duration `yaml:"tpot,omitempty"`
	E2E    *model.Duration `yaml:"e2e,omitempty"`
	MaxITL *model.Duration `yaml:"max_itl,omitempty"`
}

// LoadConfig is one open-loop load: requests of one scenario sent to one
// target at a rate.
type LoadConfig struct {
	Target   string  `yaml:"target"`
	Scenario string  `yaml:"scenario"`
	Rate     float64 `yaml:"rate"`
	// Arrival is constant or poisson.
	Arrival string `yaml:"arrival"`
	// Enabled false pauses the load without deleting its series.
	Enabled *bool `yaml:"enabled,omitempty"`
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

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *LoadConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*c = DefaultLoadConfig
	type plain LoadConfig
	return unmarshal((*plain)(c))
}

// LoadFile reads, decodes and validates a configuration file. With expandEnv,
// ${VAR} references are replaced by environment variables first. Relative
// file paths in the configuration are resolved against the file's directory.
// Every error names the file.
func LoadFile(filename string, expandEnv bool) (*Config, error) {
	b, err := os.ReadFile(filename)
	if err != nil {
		return nil, err
	}
	c, err := Load(b, expandEnv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	for _, t := range c.Targets {
		t.HTTPClientConfig.SetDirectory(filepath.Dir(filename))
	}
	return c, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Load decodes a configuration strictly and validates it.
func Load(b []byte, expandEnv bool) (*Config, error) {
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
	}
	c := &Config{Global: DefaultGlobalConfig}
	if err := strictyaml.Unmarshal(b, c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
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
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if c.Global.MaxRate <= 0 {
		bad("global.max_rate", "must be positive, got %g", c.Global.MaxRate)
	}
	if c.Global.MaxInFlight <= 0 {
		bad("global.max_in_flight", "must be positive, got %d", c.Global.MaxInFlight)
	}

	targets := map[string]*TargetConfig{}
	for i, t := range c.Targets {
		key := fmt.Sprintf("targets[%d]", i)
		if t == nil {
			bad(key, "must not be empty")
			continue
		}
		if !labelValue.MatchString(t.Name) {
			bad(key+".name", "must match [a-zA-Z0-9_-]+, got %q", t.Name)
		} else if _, dup := targets[t.Name]; dup {
			bad(key+".name", "duplicate target name %q", t.Name)
		}
		targets[t.Name] = t
		if err := validateURL(t.URL); err != nil {
			bad(key+".url", "%v, got %q", err, t.URL)
		}
		if t.API != "chat" && t.API != "completions" {
			bad(key+".api", "must be chat or completions, got %q", t.API)
		}
		if t.Model == "" {
			bad(key+".model", "must not be empty")
		}
		if t.Timeout <= 0 {
			bad(key+".timeout", "must be positive, got %s", t.Timeout)
		}
		if t.MaxInFlight <= 0 {
			bad(key+".max_in_flight", "must be positive, got %d", t.MaxInFlight)
		}
		if t.MaxTokensField != "max_tokens" && t.MaxTokensField != "max_completion_tokens" {
			bad(key+".max_tokens_field", "must be max_tokens or max_completion_tokens, got %q", t.MaxTokensField)
		}
		if t.CostPerHour != nil && *t.CostPerHour < 0 {
			bad(key+".cost_per_hour", "must not be negative, got %g", *t.CostPerHour)
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
		if !labelValue.MatchString(s.Name) {
			bad(key+".name", "must match [a-zA-Z0-9_-]+, got %q", s.Name)
		} else if _, dup := scenarios[s.Name]; dup {
			bad(key+".name", "duplicate scenario name %q", s.Name)
		}
		scenarios[s.Name] = s
		if s.InputTokens < 1 {
			bad(key+".input_tokens", "must be at least 1, got %d", s.InputTokens)
		}
		if s.OutputTokens < 1 {
			bad(key+".output_tokens", "must be at least 1, got %d", s.OutputTokens)
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
		if _, ok := targets[l.Target]; !ok {
			bad(key+".target", "unknown target %q", l.Target)
		}
		if _, ok := scenarios[l.Scenario]; !ok {
			bad(key+".scenario", "unknown scenario %q", l.Scenario)
		}
		if !(l.Rate > 0) {
			bad(key+".rate", "must be positive, got %g", l.Rate)
		}
		if l.Arrival != "constant" && l.Arrival != "poisson" {
			bad(key+".arrival", "must be constant or poisson, got %q", l.Arrival)
		}
		k := l.Key()
		if j, dup := seen[k]; dup {
			bad(key, "canary[%d] and canary[%d] both produce target=%q scenario=%q test=%q", j, i, k.Target, k.Scenario, k.Test)
		}
		seen[k] = i
		if l.IsEnabled() && l.Rate > 0 {
			rate += l.Rate
		}
	}
	if c.Global.MaxRate > 0 && rate > c.Global.MaxRate {
		bad("canary", "the enabled loads add up to %g req/s, above global.max_rate %g", rate, c.Global.MaxRate)
	}
	return errors.Join(errs...)
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

// Key returns the label set of a canary load.
func (l *LoadConfig) Key() Key {
	return Key{Target: l.Target, Scenario: l.Scenario, Test: CanaryTest}
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

// String renders the configuration as YAML, secrets replaced by <secret>.
func (c *Config) String() string {
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Sprintf("<error creating config string: %s>", err)
	}
	return string(b)
}
