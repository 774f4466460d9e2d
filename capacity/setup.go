package capacity

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/version"
	"go.yaml.in/yaml/v2"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/prober"
)

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
	s.Test = flowYAML(redactedTest(t))
	return s
}

// redactedTest is t as a run states it: its fault actions' URLs public
// (PublicURL: no credentials or query), their bodies and exec commands
// replaced by their size. A gateway's admin token may be in any of them,
// and a run is served by the always-on GET /api/v1/runs/{id}; header
// values are config secrets already.
func redactedTest(t *config.TestConfig) *config.TestConfig {
	if len(t.Faults) == 0 {
		return t
	}
	c := *t
	c.Faults = make([]config.FaultStep, len(t.Faults))
	for i, f := range t.Faults {
		if h := f.HTTP; h != nil {
			hc := *h
			hc.HTTPRequest = redactedRequest(h.HTTPRequest)
			if h.Undo != nil {
				u := redactedRequest(*h.Undo)
				hc.Undo = &u
			}
			f.HTTP = &hc
		}
		if e := f.Exec; e != nil {
			ec := *e
			ec.Command, ec.Undo = redactedArgv(e.Command), redactedArgv(e.Undo)
			f.Exec = &ec
		}
		c.Faults[i] = f
	}
	return &c
}

func redactedRequest(r faultaction.HTTPRequest) faultaction.HTTPRequest {
	r.URL = PublicURL(r.URL)
	if r.Body != "" {
		r.Body = fmt.Sprintf("<%d bytes>", len(r.Body))
	}
	return r
}

// redactedArgv keeps a command's name and says how many arguments follow.
func redactedArgv(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	return []string{filepath.Base(argv[0]), fmt.Sprintf("<%d arguments>", len(argv)-1)}
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
	if load.Target.Simulator {
		// Unstated when it cannot be read: compared as unknown.
		run.Identity.SimulatorConfig, _ = c.SimulatorConfig(ctx)
	}
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
