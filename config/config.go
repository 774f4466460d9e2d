// Package config holds sloprober's configuration: YAML types with their
// defaults, strict decoding, and validation whose errors name the file, the
// key and the bad value.
package config

import (
	"maps"
	"slices"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/sloprober/sloprober/gpu"
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
	// MaxReplicas bounds a target's replicas and a forecast's spare ones.
	MaxReplicas = 10_000
	// MaxMetadataKeys and MaxMetadataBytes bound a target's metadata: a
	// report's test object, not a place for documents.
	MaxMetadataKeys  = 32
	MaxMetadataBytes = 256
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
		Replicas:         1,
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
	Tests     []*TestConfig     `yaml:"tests,omitempty"`
	// Tracing sends an OpenTelemetry span of every traced probe; off
	// unless tracing.endpoint is set.
	Tracing TracingConfig `yaml:"tracing,omitempty"`

	dir    string                     // relative paths are resolved against it
	traces map[string]*workload.Trace // read once per file and format
	hash   string
}

// Hash is the SHA-256 of the configuration's bytes as read, before
// environment variables were expanded (a hash of a secret is no business
// of a report), in hex: a run's report names the configuration it ran
// with.
func (c *Config) Hash() string { return c.hash }

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
	// Simulator marks a `sloprober sim`: a soak's fault plan may change
	// its faults (PUT /sim/faults), which no production server takes.
	Simulator bool `yaml:"simulator,omitempty"`
	// URL is the OpenAI base URL; /chat/completions, /completions and
	// /models are appended.
	URL string `yaml:"url"`
	// API is chat, completions, responses (OpenAI's Responses API) or
	// messages (Anthropic's Messages API).
	API   string `yaml:"api"`
	Model string `yaml:"model"`
	// Timeout bounds a whole request, connection set-up included.
	Timeout model.Duration `yaml:"timeout"`
	// MaxInFlight bounds the requests in flight of each load on this target.
	MaxInFlight int `yaml:"max_in_flight"`
	// IdentityHeader names a response header that says which model or
	// build served the reply (e.g. x-model-version), exported with the
	// reply's model and system_fingerprint (sloprober_target_served_info).
	IdentityHeader string `yaml:"identity_header,omitempty"`
	// MaxTokensField is the request field the output length is sent in:
	// max_tokens or max_completion_tokens.
	MaxTokensField string `yaml:"max_tokens_field"`
	// CostPerHour is the serving cost of the target, for cost per good request.
	CostPerHour *float64 `yaml:"cost_per_hour,omitempty"`
	// Replicas is how many serving replicas stand behind the URL: reports
	// divide capacity by it for the capacity per replica (assuming linear
	// scaling). Default 1.
	Replicas int `yaml:"replicas,omitempty"`
	// Metadata is what a report's test object states about the target
	// besides what the server says of itself: hardware, GPU type and
	// count, precision, engine flags. Free-form; shown as given.
	Metadata map[string]string `yaml:"metadata,omitempty"`
	// Forecast is the peak a report plans replicas for.
	Forecast *ForecastConfig `yaml:"forecast,omitempty"`
	// MaxContext is the target's context length in tokens, for a server
	// that does not report one (vLLM's /v1/models max_model_len, llama.cpp's
	// /props n_ctx): no prompt above it is sent. 0 (the default) leaves it
	// to the server's report; at most workload.MaxTokens.
	MaxContext int `yaml:"max_context,omitempty"`
	// Timing says where the phase split of its probes comes from; nil is
	// DefaultTimingConfig (see TimingOf).
	Timing *TimingConfig `yaml:"timing,omitempty"`
	// ServerMetrics, when set, reads the engine's own /metrics.
	ServerMetrics *ServerMetricsConfig `yaml:"server_metrics,omitempty"`
	// GPU, when set, reads the target's GPUs' utilisation and memory
	// (NVIDIA's DCGM exporter, directly or through a Prometheus) over each
	// level and window of a test. Without it a report says "GPU: not
	// measured".
	GPU *gpu.Config `yaml:"gpu,omitempty"`

	// HTTPClientConfig is prometheus/common's, with one default changed:
	// follow_redirects is false. A probe must send what it says: net/http
	// turns a POST into a body-less GET on 301, 302 and 303, which a
	// lenient server answers 200, and the round tripper sends the target's
	// credentials wherever a redirect points. A 3xx is a protocol_error
	// naming its Location unless follow_redirects: true is set.
	HTTPClientConfig commoncfg.HTTPClientConfig `yaml:",inline"`
}

// ForecastConfig is the load a target must carry: a report's scaling
// basis says how many replicas carry PeakRate at the verified capacity per
// replica with SpareReplicas to spare (N+k), and what is left after
// losing one.
type ForecastConfig struct {
	// PeakRate is the forecast peak, req/s.
	PeakRate float64 `yaml:"peak_rate"`
	// AverageRate is the forecast average, req/s; 0: not given. A step
	// test verifies it per replica beside the peak.
	AverageRate float64 `yaml:"average_rate,omitempty"`
	// SpareReplicas is k of N+k: replicas beyond those the peak needs.
	// Default 1.
	SpareReplicas *int `yaml:"spare_replicas,omitempty"`
}

// Spare returns SpareReplicas, 1 when not given.
func (f *ForecastConfig) Spare() int {
	if f.SpareReplicas == nil {
		return 1
	}
	return *f.SpareReplicas
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
	// Tenants makes every request one of several tenants' (see
	// TenantsConfig).
	Tenants *TenantsConfig `yaml:"tenants,omitempty"`
	// IgnoreEOS sends ignore_eos: true (only when true: hosted APIs reject
	// unknown keys).
	IgnoreEOS bool      `yaml:"ignore_eos"`
	SLO       SLOConfig `yaml:"slo"`
	// Check is an optional quality check every reply must pass, counted
	// as an SLO named after it (json_schema, known_answer, tool_call).
	Check *CheckConfig `yaml:"check,omitempty"`
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
	// TTFA bounds the time to the first answer token: the first content
	// or tool-call delta, after any reasoning.
	TTFA *model.Duration `yaml:"ttfa,omitempty"`
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
func (l *LoadConfig) Scenarios() ([]string, []float64) { return weighted(l.Scenario, l.Mix) }

// weighted returns a scenario alone with weight 1, or a mix's scenarios
// sorted by name with their weights.
func weighted(scenario string, mix map[string]float64) ([]string, []float64) {
	if len(mix) == 0 {
		return []string{scenario}, []float64{1}
	}
	names := slices.Sorted(maps.Keys(mix))
	weights := make([]float64, len(names))
	for i, n := range names {
		weights[i] = mix[n]
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

// Key identifies the series of a load: its target, scenario and test labels.
type Key struct {
	Target, Scenario, Test string
}

func (k Key) String() string { return k.Target + "/" + k.Scenario + "/" + k.Test }

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
// a replay the trace's mean rate times the speed. A replay whose trace was
// not read (reading failed, or the Config was not made by Parse) gets its
// rate field, which validation requires to be 0.
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

// SLO is one configured threshold.
type SLO struct {
	Name      string // the slo label value: ttft, tpot, e2e, max_itl or ttfa
	Threshold time.Duration
}

// APIs are the target APIs sloprober speaks: OpenAI's chat completions,
// completions and Responses APIs, and Anthropic's Messages API.
var APIs = []string{"chat", "completions", "responses", "messages"}

// SLONames lists every SLO in the order they are checked and reported.
var SLONames = []string{"ttft", "tpot", "e2e", "max_itl", "ttfa"}

// List returns the SLOs that are set, in the order of SLONames.
func (s SLOConfig) List() []SLO {
	var out []SLO
	for i, d := range []*model.Duration{s.TTFT, s.TPOT, s.E2E, s.MaxITL, s.TTFA} {
		if d != nil {
			out = append(out, SLO{Name: SLONames[i], Threshold: time.Duration(*d)})
		}
	}
	return out
}

// SLOs returns the scenario's SLOs: the latency bounds that are set (in
// the order of SLONames), then its quality check's, with no threshold.
func (s *ScenarioConfig) SLOs() []SLO {
	out := s.SLO.List()
	if name := s.Check.Name(); name != "" {
		out = append(out, SLO{Name: name})
	}
	return out
}

// IsQuality reports whether an SLO is a quality check's.
func (s SLO) IsQuality() bool {
	return s.Name == CheckJSONSchema || s.Name == CheckKnownAnswer || s.Name == CheckToolCall
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
