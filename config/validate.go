package config

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/common/model"

	"github.com/sloprober/sloprober/workload"
)

var labelValue = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Validate checks the configuration; every error names its key and value.
// It reads no file: the checks against a trace (its timestamps, its rate)
// use the traces Parse read, and are skipped for a trace not read.
func (c *Config) Validate() error {
	return c.validate(nil)
}

// validate checks the configuration section by section, in the order of
// the file, and reports each error of readErrs at its key among them. It
// returns all the errors, joined.
func (c *Config) validate(readErrs traceErrors) error {
	v := &validation{readErrs: readErrs}
	v.validateGlobal(c.Global)
	v.validateTargets(c.Targets)
	v.validateScenarios(c.Scenarios)
	v.validateCanary(c)
	return errors.Join(v.errs...)
}

// validation is one run of validate: the errors so far, and the targets
// and scenarios by name, which the canary entries refer to.
type validation struct {
	errs      []error
	readErrs  traceErrors
	targets   map[string]*TargetConfig
	scenarios map[string]*ScenarioConfig
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
		if err := checkName(t.Name); err != nil {
			v.bad(key+".name", "%v", err)
		} else if _, dup := v.targets[t.Name]; dup {
			v.bad(key+".name", "duplicate target name %q", t.Name)
		}
		v.targets[t.Name] = t
		v.validateTarget(key, t)
	}
}

// validateTarget checks a target's fields but its name.
func (v *validation) validateTarget(key string, t *TargetConfig) {
	if err := validateURL(t.URL); err != nil {
		v.bad(key+".url", "%v, got %q", err, RedactURL(t.URL))
	}
	if t.API != "chat" && t.API != "completions" {
		v.bad(key+".api", "must be chat or completions, got %q", t.API)
	}
	if t.Model == "" {
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
	if t.MaxTokensField != "max_tokens" && t.MaxTokensField != "max_completion_tokens" {
		v.bad(key+".max_tokens_field", "must be max_tokens or max_completion_tokens, got %q", t.MaxTokensField)
	}
	if t.CostPerHour != nil && !(*t.CostPerHour >= 0 && !math.IsInf(*t.CostPerHour, 0)) {
		v.bad(key+".cost_per_hour", "must be a finite number, not negative, got %g", *t.CostPerHour)
	}
	if t.MaxContext < 0 || t.MaxContext > workload.MaxTokens {
		v.bad(key+".max_context", "must be between 1 and %d tokens (or left out), got %d", workload.MaxTokens, t.MaxContext)
	}
	if err := t.HTTPClientConfig.Validate(); err != nil {
		v.bad(key, "%v", err)
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
		if err := checkName(s.Name); err != nil {
			v.bad(key+".name", "%v", err)
		} else if _, dup := v.scenarios[s.Name]; dup {
			v.bad(key+".name", "duplicate scenario name %q", s.Name)
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
		if err := v.traceErr(s.LengthsFrom); err != nil {
			v.bad(key+".lengths_from", "%v", err)
		}
	}
	if p := s.Prefix; p != nil {
		if p.Tokens < 1 || p.Tokens > workload.MaxTokens {
			v.bad(key+".prefix.tokens", "must be between 1 and %d tokens, got %d", workload.MaxTokens, p.Tokens)
		}
		if !(p.Share >= 0 && p.Share <= 1) {
			v.bad(key+".prefix.share", "must be between 0 and 1, got %g", p.Share)
		}
		if p.Groups < 1 {
			v.bad(key+".prefix.groups", "must be at least 1, got %d", p.Groups)
		}
	}
	if cv := s.Conversation; cv != nil {
		if cv.Turns < 1 || cv.Turns > MaxTurns {
			v.bad(key+".conversation.turns", "must be between 1 and %d, got %d", MaxTurns, cv.Turns)
		}
	}
	if cn := s.Cancel; cn != nil {
		if !(cn.Share >= 0 && cn.Share <= 1) {
			v.bad(key+".cancel.share", "must be between 0 and 1, got %g", cn.Share)
		}
		if cn.After <= 0 {
			v.bad(key+".cancel.after", "must be positive, got %s", cn.After)
		}
	}
	if !(s.Objective > 0 && s.Objective < 1) {
		v.bad(key+".objective", "must be between 0 and 1 (exclusive), got %g", s.Objective)
	}
	for _, slo := range s.SLO.List() {
		if slo.Threshold <= 0 {
			v.bad(key+".slo."+slo.Name, "must be positive, got %s", model.Duration(slo.Threshold))
		}
	}
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
	t, ok := v.targets[l.Target]
	if !ok {
		v.bad(key+".target", "unknown target %q", l.Target)
	}
	switch {
	case l.Scenario != "" && len(l.Mix) > 0:
		v.bad(key, "set either scenario or mix, not both")
	case l.Scenario == "" && len(l.Mix) == 0:
		v.bad(key, "set scenario or mix")
	case l.Scenario != "":
		if _, ok := v.scenarios[l.Scenario]; !ok {
			v.bad(key+".scenario", "unknown scenario %q", l.Scenario)
		}
	}
	for _, name := range sortedKeys(l.Mix) {
		if _, ok := v.scenarios[name]; !ok {
			v.bad(key+".mix", "unknown scenario %q", name)
		}
		if w := l.Mix[name]; !(w > 0) || math.IsInf(w, 0) {
			v.bad(key+".mix."+name, "weight must be positive, got %g", w)
		}
	}
	if l.Replay != nil {
		v.validateReplay(key, l)
	} else {
		v.validateArrivals(key, l)
	}
	return t
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
	if err := v.traceErr(&r.TraceFile); err != nil {
		v.bad(key+".replay", "%v", err)
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
	if !(l.Rate >= MinLoadRate && l.Rate <= MaxLoadRate) {
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
		if s.Conversation != nil && t.API != "chat" {
			v.bad(key, "scenario %q has conversations, which need a chat target; target %q has api %s", name, t.Name, t.API)
		}
		if s.Cancel != nil && s.Cancel.After >= t.Timeout {
			v.bad(key, "scenario %q cancels after %s, which must be less than target %q's timeout %s", name, s.Cancel.After, t.Name, t.Timeout)
		}
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
