package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	// The zones schedule.time_zone names are checked against, and a
	// schedule runs in, are the same wherever the binary runs: a container
	// image without /usr/share/zoneinfo knows UTC only.
	_ "time/tzdata"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v2"
	"golang.org/x/net/http/httpguts"

	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/faults"
	"github.com/sloprober/sloprober/internal/strictyaml"
	"github.com/sloprober/sloprober/workload"
)

var labelValue = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Validate checks the configuration; every error names its key and value.
// It reads no file: the checks against a trace (its timestamps, its rate)
// use the traces Parse read, and are skipped for a trace not read.
func (c *Config) Validate() error {
	return c.validate(nil, nil)
}

// fileKeys is the set of the key paths of src with a value, as
// strictyaml.Keys names them ("targets[0].url"): a key with no value
// (`model:`, or `model: null`) is left out, as if the file did not have
// it. It is empty when src does not parse.
func fileKeys(src []byte) map[string]bool {
	keys := map[string]bool{}
	for p, k := range strictyaml.Keys(src) {
		if !k.Null {
			keys[p] = true
		}
	}
	return keys
}

// readsFiles: validate was given the trace errors of Parse, which reads
// files; Validate reads none (a check's files were read by Parse).
func (v *validation) readsFiles() bool { return v.readErrs != nil }

// validate checks the configuration section by section, in the order of
// the file, and reports each error of readErrs at its key among them.
// src is the file the configuration was decoded from, nil for a Config
// not read from a file: a required key the file leaves out is told so
// ("is required: ..."), one it sets to a bad value is told what is wrong
// with the value. It returns all the errors, joined.
func (c *Config) validate(readErrs traceErrors, src []byte) error {
	v := &validation{readErrs: readErrs, dir: c.dir, src: src}
	v.validateGlobal(c.Global)
	v.validateTargets(c.Targets)
	v.validateScenarios(c.Scenarios)
	v.validateCanary(c)
	v.validateTests(c)
	v.validateTracing(&c.Tracing)
	return errors.Join(v.errs...)
}

// validation is one run of validate: the errors so far, and the targets
// and scenarios by name, which the canary entries and tests refer to.
type validation struct {
	errs      []error
	readErrs  traceErrors
	targets   map[string]*TargetConfig
	scenarios map[string]*ScenarioConfig
	// targetNames and scenarioNames are the valid names defined, in the
	// order of the file: the choices a missing reference is told.
	targetNames, scenarioNames []string
	dir                        string // the configuration file's, for a check's files
	// src is the file, nil for a Config not read from one; keys its key
	// paths, found when first asked for (only a zero value asks).
	src  []byte
	keys map[string]bool
}

// absent reports whether the file leaves out key, whose value is its
// type's zero value: in a Config not read from a file, a zero value is a
// key left out.
func (v *validation) absent(key string) bool {
	if v.src == nil {
		return true
	}
	if v.keys == nil {
		v.keys = fileKeys(v.src)
	}
	return !v.keys[key]
}

// required adds the error of a required key left out: "key: is required:
// what", what saying what the key is, with an example or the choices.
func (v *validation) required(key, what string, args ...any) {
	v.bad(key, "is required: "+what, args...)
}

// maxChoices bounds the names a missing reference is told the choices of.
const maxChoices = 10

// choices writes names as a list, "a, b", at most maxChoices of them.
func choices(names []string) string {
	if len(names) > maxChoices {
		return strings.Join(names[:maxChoices], ", ") + fmt.Sprintf(", ... (%d in all)", len(names))
	}
	return strings.Join(names, ", ")
}

// bad adds the error "key: message", clipped to maxErrorBytes.
func (v *validation) bad(key, format string, args ...any) {
	v.errs = append(v.errs, clipErr(fmt.Errorf("%s: "+format, append([]any{key}, args...)...)))
}

// traceErr is the error of a trace file: a bad file or format, or the
// error of reading it.
func (v *validation) traceErr(tf *TraceFile) error {
	if err := tf.check(); err != nil {
		return err
	}
	return v.readErrs[tf]
}

func (v *validation) validateGlobal(g GlobalConfig) {
	if !(g.MaxRate > 0 && g.MaxRate <= MaxLoadRate) {
		v.bad("global.max_rate", "must be positive and at most %d req/s, got %g", MaxLoadRate, g.MaxRate)
	}
	if g.MaxInFlight <= 0 || g.MaxInFlight > MaxInFlightLimit {
		v.bad("global.max_in_flight", "must be between 1 and %d, got %d", MaxInFlightLimit, g.MaxInFlight)
	}
}

func (v *validation) validateTargets(targets []*TargetConfig) {
	v.targets = map[string]*TargetConfig{}
	for i, t := range targets {
		key := fmt.Sprintf("targets[%d]", i)
		if t == nil {
			v.bad(key, "must not be empty")
			continue
		}
		if t.Name == "" && v.absent(key+".name") {
			v.required(key+".name", "the target's name, its target label value ([a-zA-Z0-9_-]+), e.g. vllm")
		} else if err := checkName(t.Name); err != nil {
			v.bad(key+".name", "%v", err)
		} else if _, dup := v.targets[t.Name]; dup {
			v.bad(key+".name", "duplicate target name %q", t.Name)
		} else {
			v.targetNames = append(v.targetNames, t.Name)
		}
		v.targets[t.Name] = t
		v.validateTarget(key, t)
	}
}

// validateTarget checks a target's fields but its name.
func (v *validation) validateTarget(key string, t *TargetConfig) {
	if t.URL == "" {
		v.bad(key+".url", "is required: the endpoint's base URL, e.g. http://127.0.0.1:8000/v1")
	} else if err := validateURL(t.URL); err != nil {
		v.bad(key+".url", "%v, got %q", err, RedactURL(t.URL))
	} else if base, suffix, ok := apiPathSuffix(t.URL); ok {
		// sloprober appends the API's path itself: the URL as copied
		// from a server's documentation would be sent to
		// .../v1/chat/completions/chat/completions.
		v.bad(key+".url", "is the base URL, without the API's path (sloprober appends %q itself): write %q", suffix, RedactURL(base))
	}
	if !slices.Contains(APIs, t.API) {
		v.bad(key+".api", "must be one of %s, got %q", strings.Join(APIs, ", "), t.API)
	}
	if t.Model == "" && v.absent(key+".model") {
		v.required(key+".model", "the model to ask for, as the server names it (its /v1/models), e.g. meta-llama/Llama-3.1-8B-Instruct")
	} else if t.Model == "" {
		v.bad(key+".model", "must not be empty")
	} else if len(t.Model) > MaxModelNameBytes {
		v.bad(key+".model", "must be at most %d bytes, got %d bytes (%q...)", MaxModelNameBytes, len(t.Model), t.Model[:32])
	} else if strings.ContainsFunc(t.Model, unicode.IsControl) {
		v.bad(key+".model", "must not contain control characters, got %q", t.Model)
	}
	if t.Timeout <= 0 {
		v.bad(key+".timeout", "must be positive, got %s", t.Timeout)
	}
	if t.MaxInFlight <= 0 || t.MaxInFlight > MaxInFlightLimit {
		v.bad(key+".max_in_flight", "must be between 1 and %d, got %d", MaxInFlightLimit, t.MaxInFlight)
	}
	if t.IdentityHeader != "" && !httpguts.ValidHeaderFieldName(t.IdentityHeader) {
		v.bad(key+".identity_header", "must be a header name, got %q", t.IdentityHeader)
	}
	if t.MaxTokensField != "max_tokens" && t.MaxTokensField != "max_completion_tokens" {
		v.bad(key+".max_tokens_field", "must be max_tokens or max_completion_tokens, got %q", t.MaxTokensField)
	}
	if t.CostPerHour != nil && !(*t.CostPerHour >= 0 && !math.IsInf(*t.CostPerHour, 0)) {
		v.bad(key+".cost_per_hour", "must be a finite number, not negative, got %g", *t.CostPerHour)
	}
	if t.Replicas < 1 || t.Replicas > MaxReplicas {
		v.bad(key+".replicas", "must be between 1 and %d, got %d", MaxReplicas, t.Replicas)
	}
	if len(t.Metadata) > MaxMetadataKeys {
		v.bad(key+".metadata", "must have at most %d keys, got %d", MaxMetadataKeys, len(t.Metadata))
	}
	for _, k := range slices.Sorted(maps.Keys(t.Metadata)) {
		if val := t.Metadata[k]; len(k) > MaxMetadataBytes || len(val) > MaxMetadataBytes {
			v.bad(key+".metadata."+k, "keys and values must be at most %d bytes, got %d and %d", MaxMetadataBytes, len(k), len(val))
		} else if strings.ContainsFunc(k+val, unicode.IsControl) {
			v.bad(key+".metadata."+k, "must not contain control characters, got %q", val)
		}
	}
	if f := t.Forecast; f != nil {
		if f.PeakRate == 0 && v.absent(key+".forecast.peak_rate") {
			v.required(key+".forecast.peak_rate", "the forecast peak in req/s, e.g. 120")
		} else if !(f.PeakRate > 0) || math.IsInf(f.PeakRate, 0) {
			v.bad(key+".forecast.peak_rate", "must be a positive number of req/s, got %g", f.PeakRate)
		}
		if a := f.AverageRate; a != 0 && (!(a > 0) || math.IsInf(a, 0) || f.PeakRate > 0 && a > f.PeakRate) {
			v.bad(key+".forecast.average_rate", "must be a positive number of req/s at most peak_rate (%g), got %g", f.PeakRate, a)
		}
		if s := f.Spare(); s < 0 || s > MaxReplicas {
			v.bad(key+".forecast.spare_replicas", "must be between 0 and %d, got %d", MaxReplicas, s)
		}
	}
	if t.MaxContext < 0 || t.MaxContext > workload.MaxTokens {
		v.bad(key+".max_context", "must be between 1 and %d tokens (or left out), got %d", workload.MaxTokens, t.MaxContext)
	}
	if err := t.HTTPClientConfig.Validate(); err != nil {
		v.bad(key, "%v", err)
	}
	v.validateHeaderValues(key, &t.HTTPClientConfig)
	v.validateTiming(key, t.Timing)
	v.validateServerMetrics(key, t.ServerMetrics)
	if t.GPU != nil {
		v.validateGPU(key, t)
	}
}

// validateGPU checks a target's gpu section (gpu.Config.Validate), and
// tells a source's url left out as required.
func (v *validation) validateGPU(key string, t *TargetConfig) {
	err := t.GPU.Validate()
	if err == nil {
		return
	}
	var missing string // the key of a source's url left out
	switch g := t.GPU; {
	case g.Prometheus != nil && g.Exporter == nil && g.Prometheus.URL == "":
		missing = "gpu.prometheus.url"
	case g.Exporter != nil && g.Prometheus == nil && g.Exporter.URL == "":
		missing = "gpu.exporter.url"
	}
	if missing != "" && !v.absent(key+"."+missing) {
		missing = ""
	}
	// Each line is "gpu.<key>: <what is wrong>".
	for _, line := range strings.Split(err.Error(), "\n") {
		k, msg, ok := strings.Cut(line, ": ")
		if !ok || !strings.HasPrefix(k, "gpu") || strings.ContainsAny(k, " \t") {
			k, msg = "gpu", line
		}
		switch {
		case k == missing && k == "gpu.prometheus.url":
			v.required(key+"."+k, "the Prometheus server's base URL, e.g. http://127.0.0.1:9090")
		case k == missing:
			v.required(key+"."+k, "the DCGM exporter's metrics URL, e.g. http://127.0.0.1:9400/metrics")
		default:
			v.bad(key+"."+k, "%s", msg)
		}
	}
}

func (v *validation) validateScenarios(scenarios []*ScenarioConfig) {
	v.scenarios = map[string]*ScenarioConfig{}
	for i, s := range scenarios {
		key := fmt.Sprintf("scenarios[%d]", i)
		if s == nil {
			v.bad(key, "must not be empty")
			continue
		}
		if s.Name == "" && v.absent(key+".name") {
			v.required(key+".name", "the scenario's name, its scenario label value ([a-zA-Z0-9_-]+), e.g. chat")
		} else if err := checkName(s.Name); err != nil {
			v.bad(key+".name", "%v", err)
		} else if _, dup := v.scenarios[s.Name]; dup {
			v.bad(key+".name", "duplicate scenario name %q", s.Name)
		} else {
			v.scenarioNames = append(v.scenarioNames, s.Name)
		}
		v.scenarios[s.Name] = s
		v.validateScenario(key, s)
	}
}

// validateScenario checks a scenario's fields but its name.
func (v *validation) validateScenario(key string, s *ScenarioConfig) {
	if err := s.InputTokens.Validate(); err != nil {
		v.bad(key+".input_tokens", "%v", err)
	}
	if err := s.OutputTokens.Validate(); err != nil {
		v.bad(key+".output_tokens", "%v", err)
	}
	if s.LengthsFrom != nil {
		v.validateTraceFile(key+".lengths_from", s.LengthsFrom)
	}
	if p := s.Prefix; p != nil {
		if p.Tokens == 0 && v.absent(key+".prefix.tokens") {
			v.required(key+".prefix.tokens", "the length of each shared prompt in tokens, e.g. 1000")
		} else if p.Tokens < 1 || p.Tokens > workload.MaxTokens {
			v.bad(key+".prefix.tokens", "must be between 1 and %d tokens, got %d", workload.MaxTokens, p.Tokens)
		}
		if !(p.Share >= 0 && p.Share <= 1) {
			v.bad(key+".prefix.share", "must be between 0 and 1, got %g", p.Share)
		}
		if p.Groups == 0 && v.absent(key+".prefix.groups") {
			v.required(key+".prefix.groups", "the number of different shared prompts, e.g. 4")
		} else if p.Groups < 1 {
			v.bad(key+".prefix.groups", "must be at least 1, got %d", p.Groups)
		}
	}
	v.validateTenants(key, s.Tenants)
	if cv := s.Conversation; cv != nil {
		if cv.Turns == 0 && v.absent(key+".conversation.turns") {
			v.required(key+".conversation.turns", "the turns of each conversation, 1 to %d, e.g. 3", MaxTurns)
		} else if cv.Turns < 1 || cv.Turns > MaxTurns {
			v.bad(key+".conversation.turns", "must be between 1 and %d, got %d", MaxTurns, cv.Turns)
		}
	}
	if cn := s.Cancel; cn != nil {
		if !(cn.Share >= 0 && cn.Share <= 1) {
			v.bad(key+".cancel.share", "must be between 0 and 1, got %g", cn.Share)
		}
		if cn.After == 0 && v.absent(key+".cancel.after") {
			v.required(key+".cancel.after", "how long after sending the client cancels, e.g. 500ms")
		} else if cn.After <= 0 {
			v.bad(key+".cancel.after", "must be positive, got %s", cn.After)
		}
	}
	if !(s.Objective > 0 && s.Objective < 1) {
		hint := ""
		if s.Objective > 1 && s.Objective < 100 {
			hint = fmt.Sprintf(" (%g%%? write %g)", s.Objective, s.Objective/100)
		}
		v.bad(key+".objective", "must be between 0 and 1 (exclusive), got %g%s", s.Objective, hint)
	}
	for _, slo := range s.SLO.List() {
		if slo.Threshold <= 0 {
			v.bad(key+".slo."+slo.Name, "must be positive, got %s", model.Duration(slo.Threshold))
		}
	}
	v.validateCheck(key, s, v.dir)
}

// validateCanary checks the canary loads against the targets and scenarios
// (validateTargets and validateScenarios run first), then the sum of the
// enabled loads' rates against global.max_rate.
func (v *validation) validateCanary(c *Config) {
	seen := map[Key]int{}
	rate := 0.0
	for i, l := range c.Canary {
		key := fmt.Sprintf("canary[%d]", i)
		if l == nil {
			v.bad(key, "must not be empty")
			continue
		}
		t := v.validateLoad(key, l)
		v.validateLoadScenarios(i, key, l, t, seen)
		// Summed only while no error has been found so far, in this
		// section or an earlier one: after one, a rate may be bad itself
		// (NaN, +Inf) and the sum means nothing.
		if l.IsEnabled() && len(v.errs) == 0 {
			rate += c.LoadRate(l)
		}
	}
	if c.Global.MaxRate > 0 && rate > c.Global.MaxRate {
		v.bad("canary", "the enabled loads add up to %g req/s, above global.max_rate %g", rate, c.Global.MaxRate)
	}
}

// validateLoad checks a load's target, its scenario or mix, and its
// arrivals: a replay's or its rate's. It returns the load's target, nil if
// unknown.
func (v *validation) validateLoad(key string, l *LoadConfig) *TargetConfig {
	t := v.validateTargetScenarios(key, l.Target, l.Scenario, l.Mix)
	if l.Replay != nil {
		v.validateReplay(key, l)
	} else {
		v.validateArrivals(key, l)
	}
	return t
}

// validateTargetScenarios checks the target and the scenario or mix of a
// canary load or a test. It returns the target, nil if unknown.
func (v *validation) validateTargetScenarios(key, target, scenario string, mix map[string]float64) *TargetConfig {
	t, ok := v.targets[target]
	switch {
	case target == "" && v.absent(key+".target"):
		t = nil
		if len(v.targetNames) == 0 {
			v.required(key+".target", "the name of a target under targets: (the file defines none)")
		} else {
			v.required(key+".target", "the name of a target under targets:, one of: %s", choices(v.targetNames))
		}
	case !ok:
		v.bad(key+".target", "unknown target %q%s", target, didYouMean(target, v.targets))
	}
	switch {
	case scenario != "" && len(mix) > 0:
		v.bad(key, "set either scenario or mix, not both")
	case scenario == "" && len(mix) == 0 && v.absent(key+".scenario") && v.absent(key+".mix"):
		if len(v.scenarioNames) == 0 {
			v.required(key+".scenario", "the name of a scenario under scenarios: (the file defines none), or mix: several by weight")
		} else {
			v.required(key+".scenario", "the name of a scenario under scenarios:, one of: %s; or mix: several by weight", choices(v.scenarioNames))
		}
	case scenario == "" && len(mix) == 0:
		v.bad(key, "set scenario or mix")
	case scenario != "":
		if _, ok := v.scenarios[scenario]; !ok {
			v.bad(key+".scenario", "unknown scenario %q%s", scenario, didYouMean(scenario, v.scenarios))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(mix)) {
		if _, ok := v.scenarios[name]; !ok {
			v.bad(key+".mix", "unknown scenario %q%s", name, didYouMean(name, v.scenarios))
		}
		if w := mix[name]; !(w > 0) || math.IsInf(w, 0) {
			v.bad(key+".mix."+name, "weight must be positive, got %g", w)
		}
	}
	return t
}

// didYouMean is " (did you mean \"sim\"?)" when name is most likely a
// typo of a name of known, else "" (strictyaml.Suggest).
func didYouMean[T any](name string, known map[string]T) string {
	if s := strictyaml.Suggest(name, slices.Sorted(maps.Keys(known))); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// validateReplay checks a replay load: its speed, and its trace if read.
func (v *validation) validateReplay(key string, l *LoadConfig) {
	switch {
	case len(l.Mix) > 0:
		v.bad(key+".replay", "a replay takes one scenario, not a mix")
	case l.Rate != 0 || l.Arrival != "" || l.Burstiness != 0:
		v.bad(key+".replay", "the trace sets the arrivals: leave out rate, arrival and burstiness")
	}
	r := l.Replay
	speedOK := r.Speed >= MinReplaySpeed && !math.IsInf(r.Speed, 0)
	if !speedOK {
		v.bad(key+".replay.speed", "must be a finite number of at least %g, got %g", MinReplaySpeed, r.Speed)
	}
	if !v.validateTraceFile(key+".replay", &r.TraceFile) {
		return
	}
	tr := r.Trace
	if tr == nil {
		// Not read (a Config not made by Parse): nothing to check against.
		return
	}
	if !tr.Timed {
		v.bad(key+".replay.file", "%s has no timestamps to replay", r.File)
	} else if mean := workload.MeanRate(tr); mean <= 0 {
		v.bad(key+".replay.file", "%s spans no time (%d records, all at the same time): nothing to replay", r.File, len(tr.Records))
	} else if speedOK && mean*r.Speed > MaxLoadRate {
		v.bad(key+".replay", "%s at speed %g is %.6g req/s (a mean of %.6g req/s), above the maximum of %d req/s",
			r.File, r.Speed, mean*r.Speed, mean, MaxLoadRate)
	}
}

// validateArrivals checks an open-loop load's rate and arrival process.
func (v *validation) validateArrivals(key string, l *LoadConfig) {
	if l.Rate == 0 && v.absent(key+".rate") {
		v.required(key+".rate", "the arrival rate in req/s, between %g and %d, e.g. 1", MinLoadRate, MaxLoadRate)
	} else if !(l.Rate >= MinLoadRate && l.Rate <= MaxLoadRate) {
		v.bad(key+".rate", "must be between %g and %d req/s, got %g", MinLoadRate, MaxLoadRate, l.Rate)
	}
	if !slices.Contains(arrivalProcesses, l.Process()) {
		v.bad(key+".arrival", "must be constant, poisson or gamma, got %q", l.Arrival)
	}
	if l.Burstiness != 0 && l.Process() != "gamma" {
		v.bad(key+".burstiness", "applies to arrival: gamma only")
	}
	if b := l.Burstiness; b != 0 && !(b >= MinBurstiness && b <= MaxBurstiness) {
		v.bad(key+".burstiness", "must be between %g and %d, got %g", MinBurstiness, MaxBurstiness, b)
	}
}

// validateLoadScenarios checks each known scenario of canary[i] against
// its known target t (nil if unknown) and the replay, and that no earlier
// load produces its series: seen holds the index of the load of each Key.
func (v *validation) validateLoadScenarios(i int, key string, l *LoadConfig, t *TargetConfig, seen map[Key]int) {
	names, _ := l.Scenarios()
	for _, name := range names {
		s := v.scenarios[name]
		if s == nil || t == nil {
			continue
		}
		v.validateScenarioOnTarget(key, name, s, t)
		if s.Conversation != nil && l.Replay != nil {
			v.bad(key+".replay", "scenario %q has conversations, which a replay does not make", name)
		}
		k := Key{Target: l.Target, Scenario: name, Test: CanaryTest}
		if j, dup := seen[k]; dup {
			v.bad(key, "canary[%d] and canary[%d] both produce target=%q scenario=%q test=%q", j, i, k.Target, k.Scenario, k.Test)
		}
		seen[k] = i
	}
}

// validateScenarioOnTarget checks that target t can serve scenario s (named
// name) of the load or test at key: conversations need the chat API, and a
// cancellation must come before the target's timeout.
func (v *validation) validateScenarioOnTarget(key, name string, s *ScenarioConfig, t *TargetConfig) {
	if s.Check != nil && s.Check.ToolCall != nil && t.API == "completions" {
		v.bad(key, "scenario %q has a tool_call check, which needs a chat, responses or messages target; target %q has api %s", name, t.Name, t.API)
	}
	if s.Conversation != nil && t.API == "completions" {
		v.bad(key, "scenario %q has conversations, which need a chat, responses or messages target; target %q has api %s", name, t.Name, t.API)
	}
	if s.Cancel != nil && s.Cancel.After >= t.Timeout {
		v.bad(key, "scenario %q cancels after %s, which must be less than target %q's timeout %s", name, s.Cancel.After, t.Name, t.Timeout)
	}
}

// validateTraceFile checks the trace file at key: a file or a format left
// out is required, a bad format or an error of reading the file is told
// at key. It reports whether the file was neither left out nor bad.
func (v *validation) validateTraceFile(key string, tf *TraceFile) bool {
	ok := true
	if tf.File == "" && v.absent(key+".file") {
		v.required(key+".file", "the trace file, relative to the configuration file, e.g. traffic.csv")
		ok = false
	}
	if tf.Format == "" && v.absent(key+".format") {
		v.required(key+".format", "the trace's format, one of: %s", strings.Join(workload.Formats, ", "))
		ok = false
	}
	if !ok {
		return false
	}
	if err := v.traceErr(tf); err != nil {
		v.bad(key, "%v", err)
		return false
	}
	return true
}

// check checks a trace file's name and format, before it is read.
func (tf *TraceFile) check() error {
	if tf.File == "" {
		return errors.New("file: must not be empty")
	}
	if !slices.Contains(workload.Formats, tf.Format) {
		return fmt.Errorf("format: must be one of %s, got %q", strings.Join(workload.Formats, ", "), tf.Format)
	}
	return nil
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

// unexpanded is the error of a credential that still holds a ${VAR}
// reference: `init` writes them for credentials, and without
// --config.expand-env the literal "${SLOPROBER_HEADER_X_API_KEY}" would
// be sent as the credential, every request then failing 401.
const unexpanded = "holds %s, an environment reference not expanded: start sloprober with --config.expand-env (and the variable set), or the literal text is sent as the credential"

// validateHeaderValues checks the inline values that prometheus/common
// sends as header values: the authorization's type and credentials (a
// bearer_token among them), and http_headers' values and secrets. A newline in one
// (a secret pasted with its line end) passed `check config` and then
// failed every request ("invalid header field value"): it is an error
// here, naming the key and never the secret.
func (v *validation) validateHeaderValues(key string, c *commoncfg.HTTPClientConfig) {
	bad := func(s string) bool { return !httpguts.ValidHeaderFieldValue(s) }
	const why = "must not contain a newline or another control character: it is sent as a header value"
	if a := c.Authorization; a != nil {
		if bad(a.Type) {
			v.bad(key+".authorization.type", "%s, got %q", why, a.Type)
		}
		// prometheus/common moves a bearer_token here when it loads.
		if bad(string(a.Credentials)) {
			v.bad(key+".authorization.credentials (or bearer_token)", "%s", why)
		} else if ref := EnvRef.FindString(string(a.Credentials)); ref != "" {
			v.bad(key+".authorization.credentials (or bearer_token)", unexpanded, ref)
		}
	}
	if h := c.HTTPHeaders; h != nil {
		for _, name := range slices.Sorted(maps.Keys(h.Headers)) {
			for i, val := range h.Headers[name].Values {
				if bad(val) {
					v.bad(fmt.Sprintf("%s.http_headers.%s.values[%d]", key, name, i), "%s, got %q", why, val)
				}
			}
			for i, val := range h.Headers[name].Secrets {
				if bad(string(val)) {
					v.bad(fmt.Sprintf("%s.http_headers.%s.secrets[%d]", key, name, i), "%s", why)
				} else if ref := EnvRef.FindString(string(val)); ref != "" {
					v.bad(fmt.Sprintf("%s.http_headers.%s.secrets[%d]", key, name, i), unexpanded, ref)
				}
			}
		}
	}
}

// apiPaths are the generation paths of the APIs, as a URL copied from a
// server's documentation ends: `init` and `probe URL` detect the API from
// them and cut them from the base URL; a configured URL ending in one is
// refused (sloprober appends it itself).
var apiPaths = []struct{ Suffix, API string }{
	{"/chat/completions", "chat"},
	{"/completions", "completions"},
	{"/responses", "responses"},
	{"/messages", "messages"},
}

// CutAPIPath cuts the API's path a URL path ends with (a trailing slash
// aside): the path without it, and the API it names; ok is false when it
// ends in none.
func CutAPIPath(path string) (base, api string, ok bool) {
	path = strings.TrimRight(path, "/")
	for _, p := range apiPaths {
		if b, found := strings.CutSuffix(path, p.Suffix); found {
			return b, p.API, true
		}
	}
	return path, "", false
}

// apiPathSuffix reports whether a target's URL ends in an API's path, and
// the base URL without it.
func apiPathSuffix(s string) (base, suffix string, ok bool) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", false
	}
	b, _, ok := CutAPIPath(u.Path)
	if !ok {
		return "", "", false
	}
	suffix = strings.TrimRight(u.Path, "/")[len(b):]
	u.Path = b
	return u.String(), suffix, true
}

func validateURL(s string) error {
	if !strings.Contains(s, "://") {
		return errors.New("must start with http:// or https://, e.g. http://127.0.0.1:8000/v1")
	}
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
	if u.Fragment != "" || strings.Contains(s, "#") {
		// http://h/v1#x: the fragment is never sent, and the API's path
		// would go after it.
		return errors.New("a #fragment is never sent to a server; remove it")
	}
	return nil
}

// Bounds of the tests section. A test runs against production beside the
// canary, often unattended on a schedule: a typo must fail `check config`,
// never start an endless or unbounded test.
const (
	// MaxBaselineRequests bounds a step test's baseline: one request at a
	// time, so 10,000 requests of 2 s take 5 h 33 min.
	MaxBaselineRequests = 10_000
	// MaxTestLevels bounds the levels of a step test's sweep and the rates
	// of its verification: each is a warm-up and a steady window (2 min 30 s
	// by default), so 64 levels are 2 h 40 min.
	MaxTestLevels = 64
	// MaxRefine bounds a sweep's bisection steps: 10 narrow the gap
	// between the last good and the first bad level 1,024-fold, to one
	// client for any gap up to 1,024 (global.max_in_flight's default is
	// 1,000).
	MaxRefine = 10
	// MaxVerifyRate bounds a verification rate, a fraction of the capacity
	// the sweep found: twice it is well past the knee.
	MaxVerifyRate = 2
	// MaxBurstFactor bounds the burst above a verified rate.
	MaxBurstFactor = 10
	// MinResolution bounds verify.resolution: a bisection to 0.1% of the
	// closed-loop rate is noise.
	MinResolution = 0.001
	// MaxRetries bounds retries.
	MaxRetries = 10
	// MaxLevelSteady bounds window.max_steady: an hour a level.
	MaxLevelSteady = time.Hour
	// MaxSearchDuration bounds verify.max_duration: a day.
	MaxSearchDuration = 24 * time.Hour
	// MaxSoakDuration bounds a soak: a week.
	MaxSoakDuration = 7 * 24 * time.Hour
)

// cronTZ are the prefixes by which robfig/cron takes a time zone inside the
// expression; sloprober takes it from schedule.time_zone.
var cronTZ = []string{"TZ=", "CRON_TZ="}

// cronRef is the time from which a schedule must fire: robfig/cron looks 5
// years ahead, and from 1 January 2000 every day that exists comes within
// them (29 February 2000 included); a day that does not (30 February)
// never comes.
var cronRef = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// validateTests checks the tests against global, the targets and the
// scenarios (validateGlobal, validateTargets and validateScenarios run
// first).
func (v *validation) validateTests(c *Config) {
	names := map[string]bool{}
	for i, t := range c.Tests {
		key := fmt.Sprintf("tests[%d]", i)
		if t == nil {
			v.bad(key, "must not be empty")
			continue
		}
		if t.Name == "" && v.absent(key+".name") {
			v.required(key+".name", "the test's name, its test label value ([a-zA-Z0-9_-]+, not %q), e.g. capacity", CanaryTest)
		} else if err := checkName(t.Name); err != nil {
			v.bad(key+".name", "%v", err)
		} else if t.Name == CanaryTest {
			v.bad(key+".name", "must not be %q: it is the test label of the canary's series, which a test's series would join", CanaryTest)
		} else if names[t.Name] {
			v.bad(key+".name", "duplicate test name %q", t.Name)
		}
		names[t.Name] = true
		if t.Kind == "" && v.absent(key+".kind") {
			v.required(key+".kind", "the kind of test, one of: %s (a capacity search), %s (a fixed rate for hours)", TestStep, TestSoak)
		} else if t.Kind != TestStep && t.Kind != TestSoak {
			v.bad(key+".kind", "must be step or soak, got %q", t.Kind)
		}
		if tg := v.validateTargetScenarios(key, t.Target, t.Scenario, t.Mix); tg != nil {
			scenarios, _ := t.Scenarios()
			for _, name := range scenarios {
				if s := v.scenarios[name]; s != nil {
					v.validateScenarioOnTarget(key, name, s, tg)
				}
			}
		}
		if t.Schedule != nil {
			v.validateSchedule(key+".schedule", t.Schedule)
		}
		if t.Replay != nil {
			v.validateTestReplay(key+".replay", t)
		}
		if t.MaxRate != 0 && !(t.MaxRate >= MinLoadRate && t.MaxRate <= MaxLoadRate) {
			v.bad(key+".max_rate", "must be between %g and %d req/s (or 0: global.max_rate less the canary's rate), got %g", MinLoadRate, MaxLoadRate, t.MaxRate)
		} else if g := c.Global.MaxRate; g > 0 && t.MaxRate > g {
			v.bad(key+".max_rate", "must be at most global.max_rate %g, got %g", g, t.MaxRate)
		}
		if modes := CacheModes(t.Kind); (t.Kind == TestStep || t.Kind == TestSoak) && !slices.Contains(modes, t.Cache) {
			v.bad(key+".cache", "must be one of %s for kind: %s, got %q", strings.Join(modes, ", "), t.Kind, t.Cache)
		}
		switch t.Kind {
		case TestStep:
			v.validateStep(key, t, c.Global)
		case TestSoak:
			v.validateSoak(key, t, c.Global)
		}
	}
}

// validateSchedule checks a test's cron expression and time zone.
func (v *validation) validateSchedule(key string, s *ScheduleConfig) {
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		v.bad(key+".time_zone", "must be a time zone name such as UTC or Europe/Paris, got %q", s.TimeZone)
		loc = time.UTC
	}
	switch {
	case s.Cron == "" && v.absent(key+".cron"):
		v.required(key+".cron", `when the test runs: 5 fields (minute hour day month weekday) or a descriptor, e.g. "0 3 * * *" or "@daily" (leave out schedule to run the test on demand only)`)
	case s.Cron == "":
		v.bad(key+".cron", "must not be empty (leave out schedule to run the test on demand only)")
	case slices.ContainsFunc(cronTZ, func(p string) bool { return strings.HasPrefix(strings.TrimSpace(s.Cron), p) }):
		// Also robfig/cron v3.0.1 panics on "TZ=UTC" without a space.
		v.bad(key+".cron", "must not set a time zone (set schedule.time_zone), got %q", s.Cron)
	default:
		sched, err := cron.ParseStandard(s.Cron)
		if err != nil {
			v.bad(key+".cron", "must be 5 fields (minute hour day month weekday) or a descriptor such as @daily, got %q (%v)", s.Cron, err)
			return
		}
		if spec, ok := sched.(*cron.SpecSchedule); ok {
			spec.Location = loc
		}
		if sched.Next(cronRef.In(loc)).IsZero() {
			v.bad(key+".cron", "never fires (no such day), got %q", s.Cron)
		}
	}
}

// validateStep checks the keys of a step test, and that it sets no key of
// a soak.
func (v *validation) validateStep(key string, t *TestConfig, g GlobalConfig) {
	if n := t.Baseline.Requests; n < 1 || n > MaxBaselineRequests {
		v.bad(key+".baseline.requests", "must be between 1 and %d, got %d", MaxBaselineRequests, n)
	}
	levels := t.Sweep.Concurrency
	switch {
	case len(levels) == 0:
		v.bad(key+".sweep.concurrency", "must not be empty")
	case len(levels) > MaxTestLevels:
		v.bad(key+".sweep.concurrency", "must have at most %d levels, got %d", MaxTestLevels, len(levels))
	default:
		ok := true
		for j, n := range levels {
			switch {
			case n < 1:
				v.bad(fmt.Sprintf("%s.sweep.concurrency[%d]", key, j), "must be at least 1, got %d", n)
				ok = false
			case j > 0 && n <= levels[j-1]:
				v.bad(fmt.Sprintf("%s.sweep.concurrency[%d]", key, j), "must be greater than the level before it (%d), got %d", levels[j-1], n)
				ok = false
			}
		}
		if top := levels[len(levels)-1]; ok && g.MaxInFlight > 0 && top > g.MaxInFlight {
			v.bad(key+".sweep.concurrency", "the highest level %d is above global.max_in_flight %d", top, g.MaxInFlight)
		}
	}
	if r := t.Sweep.Refine; r < 0 || r > MaxRefine {
		v.bad(key+".sweep.refine", "must be between 0 and %d, got %d", MaxRefine, r)
	}
	v.validateStepWindow(key+".window", t.Window)
	rates := t.Verify.Rates
	switch {
	case len(rates) == 0:
		v.bad(key+".verify.rates", "must not be empty")
	case len(rates) > MaxTestLevels:
		v.bad(key+".verify.rates", "must have at most %d rates, got %d", MaxTestLevels, len(rates))
	default:
		for j, r := range rates {
			switch {
			case !validVerifyRate(r):
				v.bad(fmt.Sprintf("%s.verify.rates[%d]", key, j), "must be above 0 and at most %d (fractions of the capacity found), got %g", MaxVerifyRate, r)
			case j > 0 && validVerifyRate(rates[j-1]) && r <= rates[j-1]:
				v.bad(fmt.Sprintf("%s.verify.rates[%d]", key, j), "must be greater than the rate before it (%g), got %g", rates[j-1], r)
			}
		}
	}
	if f := t.Verify.Burst.Factor; !(f >= 1 && f <= MaxBurstFactor) {
		v.bad(key+".verify.burst.factor", "must be between 1 (no burst) and %d, got %g", MaxBurstFactor, f)
	}
	if d := t.Verify.Burst.For; d < 0 {
		v.bad(key+".verify.burst.for", "must not be negative, got %s", d)
	}
	if d := t.Verify.DrainWithin; d <= 0 {
		v.bad(key+".verify.drain_within", "must be positive, got %s", d)
	}
	if r := t.Verify.Resolution; !(r >= MinResolution && r <= 1) {
		v.bad(key+".verify.resolution", "must be between %g and 1 (a fraction of the closed-loop rate), got %g", MinResolution, r)
	}
	for _, m := range []struct {
		name string
		d    model.Duration
	}{{"forecast_max_steady", t.Verify.ForecastMaxSteady}, {"max_steady", t.Verify.MaxSteady}} {
		if m.d != 0 && (m.d < t.Window.Steady || time.Duration(m.d) > MaxLevelSteady) {
			v.bad(key+".verify."+m.name, "must be at least window.steady (%s) and at most %s, got %s", t.Window.Steady, model.Duration(MaxLevelSteady), m.d)
		}
	}
	if d := t.Verify.MaxDuration; d != 0 && (time.Duration(d) < t.VerifyMaxSteady() || time.Duration(d) > MaxSearchDuration) {
		v.bad(key+".verify.max_duration", "must be 0 (no limit) or between the search's longest level (verify.max_steady or window.max_steady: %s) and %s, got %s",
			model.Duration(t.VerifyMaxSteady()), model.Duration(MaxSearchDuration), d)
	}
	if n := t.Verify.MaxLevels; n != 0 && (n < len(t.Verify.Rates) || n > MaxTestLevels) {
		v.bad(key+".verify.max_levels", "must be between the number of verify.rates (%d) and %d, got %d", len(t.Verify.Rates), MaxTestLevels, n)
	}
	if h := t.Verify.HotTenant; h != nil {
		v.validateHotTenant(key+".verify.hot_tenant", t, h)
	}
	if r := t.Retries; r < 0 || r > MaxRetries {
		v.bad(key+".retries", "must be between 0 and %d, got %d", MaxRetries, r)
	}
	v.validateStop(key+".stop", t.Stop)
	for _, k := range soakKeys(t) {
		v.bad(key+"."+k, "applies to kind: soak only")
	}
}

// MaxHotTenantFactor bounds verify.hot_tenant.factor: a tenant at 100
// times its share is already most of a load of 50 tenants (67%).
const MaxHotTenantFactor = 100

// validateHotTenant checks a step test's hot tenant: a factor above 1,
// a window that is not negative, and scenarios that have tenants.
func (v *validation) validateHotTenant(key string, t *TestConfig, h *HotTenantConfig) {
	if h.Factor == 0 && v.absent(key+".factor") {
		v.required(key+".factor", "how many times its share the hot tenant sends, above 1 and at most %d, e.g. 10", MaxHotTenantFactor)
	} else if !(h.Factor > 1 && h.Factor <= MaxHotTenantFactor) {
		v.bad(key+".factor", "must be above 1 and at most %d (times the tenant's share), got %g", MaxHotTenantFactor, h.Factor)
	}
	if h.For < 0 || time.Duration(h.For) > MaxLevelSteady {
		v.bad(key+".for", "must be between 0 (window.steady) and %s, got %s", model.Duration(MaxLevelSteady), h.For)
	}
	if h.InputTokens != nil {
		if err := h.InputTokens.Validate(); err != nil {
			v.bad(key+".input_tokens", "%v", err)
		}
	}
	names, _ := t.Scenarios()
	for _, n := range names {
		if sc := v.scenarios[n]; sc != nil && sc.Tenants == nil {
			v.bad(key, "scenario %q has no tenants: a hot tenant needs scenarios with tenants (scenarios[].tenants)", n)
		}
	}
}

func validVerifyRate(r float64) bool { return r > 0 && r <= MaxVerifyRate }

// validateStepWindow checks a step test's level window.
func (v *validation) validateStepWindow(key string, w WindowConfig) {
	if w.Warmup < 0 {
		v.bad(key+".warmup", "must not be negative, got %s", w.Warmup)
	}
	if w.Steady <= 0 {
		v.bad(key+".steady", "must be positive, got %s", w.Steady)
	}
	if w.MinRequests < 1 {
		v.bad(key+".min_requests", "must be at least 1, got %d", w.MinRequests)
	}
	if m := w.MaxSteady; m != 0 && w.Steady > 0 && (m < w.Steady || time.Duration(m) > MaxLevelSteady) {
		v.bad(key+".max_steady", "must be at least steady (%s) and at most %s, got %s", w.Steady, model.Duration(MaxLevelSteady), m)
	}
}

// validateSoak checks the keys of a soak test, and that it sets no key of
// a step test.
func (v *validation) validateSoak(key string, t *TestConfig, g GlobalConfig) {
	if t.Rate == 0 && v.absent(key+".rate") {
		v.required(key+".rate", "the soak's arrival rate in req/s, between %g and %d, e.g. 2", MinLoadRate, MaxLoadRate)
	} else if !(t.Rate >= MinLoadRate && t.Rate <= MaxLoadRate) {
		v.bad(key+".rate", "must be between %g and %d req/s, got %g", MinLoadRate, MaxLoadRate, t.Rate)
	} else if t.MaxRate > 0 && t.Rate > t.MaxRate {
		v.bad(key+".rate", "must be at most max_rate %g, got %g", t.MaxRate, t.Rate)
	} else if g.MaxRate > 0 && t.Rate > g.MaxRate {
		v.bad(key+".rate", "must be at most global.max_rate %g, got %g", g.MaxRate, t.Rate)
	}
	d := t.Duration
	durationOK := d > 0 && time.Duration(d) <= MaxSoakDuration
	switch {
	case d == 0 && v.absent(key+".duration"):
		v.required(key+".duration", "how long the soak runs, at most 7d, e.g. 2h")
	case !durationOK:
		v.bad(key+".duration", "must be positive and at most 7d, got %s", d)
	}
	w := t.Window
	if w.Warmup < 0 {
		v.bad(key+".window.warmup", "must not be negative, got %s", w.Warmup)
	}
	switch {
	case w.Steady <= 0 || durationOK && w.Steady > d:
		v.bad(key+".window.steady", "must be positive and at most duration (%s), got %s", d, w.Steady)
	case durationOK && w.Warmup >= 0 && w.Warmup+w.Steady > d:
		v.bad(key+".window", "warmup %s and steady %s add up to more than duration %s: no window would be measured", w.Warmup, w.Steady, d)
	}
	if w.MinRequests < 0 {
		v.bad(key+".window.min_requests", "must not be negative, got %d", w.MinRequests)
	}
	if w.MaxSteady != 0 {
		v.bad(key+".window.max_steady", "applies to kind: step only (a soak's windows are its duration's)")
	}
	if p := t.Drift.P99Growth; !(p > 0) || math.IsInf(p, 0) {
		v.bad(key+".drift.p99_growth", "must be positive and finite, got %g", p)
	}
	if p := t.Drift.GoodputDrop; !(p > 0 && p < 1) {
		v.bad(key+".drift.goodput_drop", "must be between 0 and 1 (exclusive), got %g", p)
	}
	v.validateStop(key+".stop", t.Stop)
	v.validateFaultPlan(key+".faults", t, durationOK)
	for _, k := range stepKeys(t) {
		v.bad(key+"."+k, "applies to kind: step only")
	}
}

// validateTestReplay checks a test's trace: one scenario without
// conversations (a trace's requests stand alone), a trace that was read,
// with timestamps for the open-loop stages to replay.
func (v *validation) validateTestReplay(key string, t *TestConfig) {
	if len(t.Mix) > 0 {
		v.bad(key, "a replay takes one scenario, not a mix")
	} else if s := v.scenarios[t.Scenario]; s != nil && s.Conversation != nil {
		v.bad(key, "scenario %q has conversations, which a replay does not make", t.Scenario)
	}
	if !v.validateTraceFile(key, &t.Replay.TraceFile) {
		return
	}
	tr := t.Replay.Trace
	if tr == nil {
		return
	}
	if !tr.Timed {
		v.bad(key+".file", "%s has no timestamps to replay", t.Replay.File)
	} else if workload.MeanRate(tr) <= 0 {
		v.bad(key+".file", "%s spans no time (%d records, all at the same time): nothing to replay", t.Replay.File, len(tr.Records))
	}
}

// MaxFaultSteps bounds a soak's fault plan.
const MaxFaultSteps = 64

// validateFaultPlan checks a soak's fault plan: steps in order within the
// soak, each either a valid faults block of a simulator target (set) or a
// valid fault action.
func (v *validation) validateFaultPlan(key string, t *TestConfig, durationOK bool) {
	if len(t.Faults) == 0 {
		return
	}
	if len(t.Faults) > MaxFaultSteps {
		v.bad(key, "must have at most %d steps, got %d", MaxFaultSteps, len(t.Faults))
		return
	}
	var end model.Duration
	for i, f := range t.Faults {
		k := fmt.Sprintf("%s[%d]", key, i)
		switch {
		case f.At < 0:
			v.bad(k+".at", "must not be negative, got %s", f.At)
		case i > 0 && f.At < end:
			v.bad(k+".at", "must be at or after the end of the step before (%s), got %s", end, f.At)
		}
		if f.For == 0 && v.absent(k+".for") {
			v.required(k+".for", "how long the fault lasts, e.g. 5m")
		} else if f.For <= 0 {
			v.bad(k+".for", "must be positive, got %s", f.For)
		} else if durationOK && f.At >= 0 && f.At+f.For > t.Duration {
			v.bad(k, "ends at %s, after the soak's duration %s", f.At+f.For, t.Duration)
		}
		end = f.At + f.For
		action := f.Action.Kind() != ""
		switch {
		case f.Set != nil && action:
			v.bad(k, "must set either simulator faults (set) or one fault action (http, kubernetes, exec), not both")
			continue
		case action:
			if !v.actionRequired(k, &f.Action) {
				if err := f.Action.Validate(); err != nil {
					v.bad(k, "%v", err)
				}
			}
			continue
		case f.Set == nil:
			v.bad(k, "must set simulator faults (set) or one fault action (http, kubernetes, exec)")
			continue
		case len(f.Set) == 0:
			v.bad(k+".set", "must set some faults")
			continue
		}
		if tg := v.targets[t.Target]; tg != nil && !tg.Simulator {
			v.bad(k+".set", "sets a simulator's faults: target %q is not marked simulator: true (use an http, kubernetes or exec action against a real target)", t.Target)
		}
		b, err := yaml.Marshal(f.Set)
		if err == nil {
			_, err = faults.Parse(b)
		}
		if err != nil {
			v.bad(k+".set", "%v", err)
		}
	}
}

// actionRequired tells each required key a fault action at key leaves out
// (faultaction.Action.Validate tells the first error only, in its own
// words), and reports whether there was one.
func (v *validation) actionRequired(key string, a *faultaction.Action) bool {
	n := len(v.errs)
	switch {
	case a.HTTP != nil && a.Kubernetes == nil && a.Exec == nil:
		if a.HTTP.URL == "" && v.absent(key+".http.url") {
			v.required(key+".http.url", "the URL the fault's request is sent to, e.g. http://127.0.0.1:8080/fault")
		}
	case a.Kubernetes != nil && a.HTTP == nil && a.Exec == nil:
		if a.Kubernetes.Namespace == "" && v.absent(key+".kubernetes.namespace") {
			v.required(key+".kubernetes.namespace", "the namespace of the pods to delete one of, e.g. inference")
		}
		if a.Kubernetes.Selector == "" && v.absent(key+".kubernetes.selector") {
			v.required(key+".kubernetes.selector", "the label selector of the pods to delete one of, e.g. app=vllm")
		}
	case a.Exec != nil && a.HTTP == nil && a.Kubernetes == nil:
		if a.Exec.Command == nil && v.absent(key+".exec.command") {
			v.required(key+".exec.command", `the command to run, an argv list, e.g. ["/usr/local/bin/chaos", "--kill"]`)
		}
	}
	return len(v.errs) > n
}

// validateStop checks a test's stop rules.
func (v *validation) validateStop(key string, s StopConfig) {
	if r := s.ErrorRatio; !(r > 0 && r <= 1) {
		v.bad(key+".error_ratio", "must be above 0 and at most 1, got %g", r)
	}
	if s.TTFTOver <= 0 {
		v.bad(key+".ttft_over", "must be positive, got %s", s.TTFTOver)
	}
}

// soakKeys returns the keys of a soak that t sets.
func soakKeys(t *TestConfig) []string {
	var keys []string
	if t.Rate != 0 {
		keys = append(keys, "rate")
	}
	if t.Duration != 0 {
		keys = append(keys, "duration")
	}
	if t.Drift != (DriftConfig{}) {
		keys = append(keys, "drift")
	}
	if len(t.Faults) > 0 {
		keys = append(keys, "faults")
	}
	return keys
}

// stepKeys returns the keys of a step test that t sets.
func stepKeys(t *TestConfig) []string {
	var keys []string
	if t.Baseline != (BaselineConfig{}) {
		keys = append(keys, "baseline")
	}
	if len(t.Sweep.Concurrency) > 0 || t.Sweep.Refine != 0 {
		keys = append(keys, "sweep")
	}
	if len(t.Verify.Rates) > 0 || t.Verify.Burst != (BurstConfig{}) || t.Verify.DrainWithin != 0 || t.Verify.Resolution != 0 || t.Verify.MaxLevels != 0 || t.Verify.ForecastMaxSteady != 0 || t.Verify.MaxSteady != 0 || t.Verify.HotTenant != nil {
		keys = append(keys, "verify")
	}
	if t.Retries != 0 {
		keys = append(keys, "retries")
	}
	return keys
}
