package capacity

import (
	"context"
	"maps"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/version"
	"go.yaml.in/yaml/v2"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// Provenance says what produced a run: the sloprober version and the
// configuration it ran with.
type Provenance struct {
	Version    string `json:"version"`
	Revision   string `json:"revision,omitempty"`
	ConfigHash string `json:"config_hash,omitempty"` // config.Config.Hash
}

// Setup is what a run was asked to do, as it was when it ran: a report is
// built from the stored run alone, and a configuration changed since must
// not change what an old report says.
type Setup struct {
	Target    TargetSetup     `json:"target"`
	Scenarios []ScenarioSetup `json:"scenarios"`
	// Replay is the trace the test's requests came from, if any.
	Replay *TraceSetup `json:"replay,omitempty"`
	// Test is the test's configuration with its defaults, as YAML.
	Test string `json:"test"`
}

// TargetSetup is the target of a run. Its URL carries no credentials and
// no query (where API keys sometimes travel).
type TargetSetup struct {
	Name        string            `json:"name"`
	URL         string            `json:"url"`
	API         string            `json:"api"`
	Model       string            `json:"model"`
	Simulator   bool              `json:"simulator,omitempty"`
	Replicas    int               `json:"replicas"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	CostPerHour *float64          `json:"cost_per_hour,omitempty"`
	Forecast    *ForecastSetup    `json:"forecast,omitempty"`
	TimeoutSecs float64           `json:"timeout_seconds"`
}

// ForecastSetup is the target's forecast peak and spare replicas (N+k).
type ForecastSetup struct {
	PeakRate      float64 `json:"peak_rate"`
	SpareReplicas int     `json:"spare_replicas"`
}

// ScenarioSetup is one scenario of a run's load.
type ScenarioSetup struct {
	Name string `json:"name"`
	// Share is the scenario's share of the requests (its mix weight over
	// the weights' sum); 1 alone.
	Share     float64    `json:"share"`
	Objective float64    `json:"objective"`
	SLOs      []SLOSetup `json:"slos"`
	// Input and Output are the configured lengths, as YAML (a number, or
	// a distribution); LengthsFrom the trace they are drawn from instead.
	Input        string             `json:"input_tokens"`
	Output       string             `json:"output_tokens"`
	LengthsFrom  *TraceSetup        `json:"lengths_from,omitempty"`
	IgnoreEOS    bool               `json:"ignore_eos"`
	Prefix       *PrefixSetup       `json:"prefix,omitempty"`
	Conversation *ConversationSetup `json:"conversation,omitempty"`
	Cancel       *CancelSetup       `json:"cancel,omitempty"`
}

// SLOSetup is one SLO: a request meets it when its value is at most the
// threshold.
type SLOSetup struct {
	Name             string  `json:"name"`
	ThresholdSeconds float64 `json:"threshold_seconds"`
}

// TraceSetup names a trace file (its base name: paths say where a
// machine keeps files, not what they are) and its format.
type TraceSetup struct {
	File   string `json:"file"`
	Format string `json:"format"`
}

// PrefixSetup: a share of the requests begin with one of groups shared
// prompts of tokens tokens.
type PrefixSetup struct {
	Tokens int     `json:"tokens"`
	Share  float64 `json:"share"`
	Groups int     `json:"groups"`
}

// ConversationSetup: every request is a turn of a conversation.
type ConversationSetup struct {
	Turns            int     `json:"turns"`
	ThinkTimeSeconds float64 `json:"think_time_seconds"`
}

// CancelSetup: the client cancels a share of the requests after a time.
type CancelSetup struct {
	Share        float64 `json:"share"`
	AfterSeconds float64 `json:"after_seconds"`
}

// newSetup describes a test's load.
func newSetup(t *config.TestConfig, load *config.LoadSpec) *Setup {
	tg := &load.Target
	s := &Setup{Target: TargetSetup{
		Name: tg.Name, URL: PublicURL(tg.URL), API: tg.API, Model: tg.Model, Simulator: tg.Simulator,
		Replicas: max(tg.Replicas, 1), Metadata: maps.Clone(tg.Metadata), CostPerHour: tg.CostPerHour,
		TimeoutSecs: time.Duration(tg.Timeout).Seconds(),
	}}
	if f := tg.Forecast; f != nil {
		s.Target.Forecast = &ForecastSetup{PeakRate: f.PeakRate, SpareReplicas: f.Spare()}
	}
	total := 0.0
	for _, sc := range load.Scenarios {
		total += sc.Weight
	}
	for _, sc := range load.Scenarios {
		ss := ScenarioSetup{Name: sc.Name, Share: 1, Objective: sc.Objective, Input: flowYAML(sc.InputTokens), Output: flowYAML(sc.OutputTokens), IgnoreEOS: sc.IgnoreEOS}
		if total > 0 {
			ss.Share = sc.Weight / total
		}
		for _, slo := range sc.SLO.List() {
			ss.SLOs = append(ss.SLOs, SLOSetup{Name: slo.Name, ThresholdSeconds: slo.Threshold.Seconds()})
		}
		if f := sc.LengthsFrom; f != nil {
			ss.LengthsFrom = &TraceSetup{File: filepath.Base(f.File), Format: f.Format}
		}
		if p := sc.Prefix; p != nil {
			ss.Prefix = &PrefixSetup{Tokens: p.Tokens, Share: p.Share, Groups: p.Groups}
		}
		if c := sc.Conversation; c != nil {
			ss.Conversation = &ConversationSetup{Turns: c.Turns, ThinkTimeSeconds: time.Duration(c.ThinkTime).Seconds()}
		}
		if c := sc.Cancel; c != nil {
			ss.Cancel = &CancelSetup{Share: c.Share, AfterSeconds: time.Duration(c.After).Seconds()}
		}
		s.Scenarios = append(s.Scenarios, ss)
	}
	if r := load.Replay; r != nil {
		s.Replay = &TraceSetup{File: filepath.Base(r.File), Format: r.Format}
	}
	s.Test = flowYAML(t)
	return s
}

// flowYAML renders v as YAML, trimmed ("" if it cannot).
func flowYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// PublicURL is a target URL fit for a report: scheme, host and path,
// without credentials (user info), query or fragment.
func PublicURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return config.RedactURL(raw)
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// begin fills what every run states before it sends anything: its
// provenance, its setup, and the models the target lists.
func begin(ctx context.Context, run *Run, m *prober.Manager, t *config.TestConfig, load *config.LoadSpec, configHash string) {
	run.Provenance = &Provenance{Version: version.Version, Revision: version.Revision, ConfigHash: configHash}
	run.Setup = newSetup(t, load)
	run.Identity = &Identity{}
	c, err := prober.NewClient(&load.Target, m.UserAgent(), 1)
	if err != nil {
		run.Identity.ModelsError = scrubURL(err.Error(), load.Target.URL)
		return
	}
	defer c.Close()
	models, err := c.Models(ctx)
	if err != nil {
		run.Identity.ModelsError = scrubURL(err.Error(), load.Target.URL)
		return
	}
	run.Identity.Models = models
}

// end adds what the run's replies said of the target.
func end(run *Run, col *Collector) {
	said := col.Identity()
	if run.Identity == nil {
		run.Identity = &Identity{}
	}
	run.Identity.Servers, run.Identity.ReplyModels, run.Identity.Fingerprints = said.Servers, said.ReplyModels, said.Fingerprints
	run.Lengths, run.ScenarioLengths = col.Lengths(), col.ScenarioLengths()
}

// scrubURL replaces the target's URL in an error message (raw, or with
// its password redacted, and its /models) by its public form: a query may
// carry an API key, and a report never shows it.
func scrubURL(msg, raw string) string {
	base := strings.TrimSuffix(raw, "/")
	for _, u := range []string{base + "/models", base} {
		pub := PublicURL(u)
		msg = strings.ReplaceAll(msg, u, pub)
		msg = strings.ReplaceAll(msg, config.RedactURL(u), pub)
	}
	return msg
}
