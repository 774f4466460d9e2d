// Package faults is the schema of the faults the simulator injects: the
// faults block of its configuration, the body of PUT /sim/faults and each
// step of a soak test's fault plan. It is a leaf package, apart from the
// engine, so that the prober's configuration can check a fault plan
// without linking the simulator: the prober never carries the ground
// truth it is measured against.
package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/sloprober/sloprober/internal/strictyaml"
)

// Duration is a time.Duration that reads and writes Go duration strings
// ("50us", "5ms", "2s") in YAML and JSON. Prometheus' model.Duration has no
// unit below a millisecond, and per-token prefill costs are tens of
// microseconds.
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

// Faults are injected at the given per-request rates; every decision is drawn
// from the simulator's seeded fault stream. They can be replaced at run time
// by PUT /sim/faults.
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

// DefaultStallDuration is how long a stall pauses a stream when a faults
// block sets its rate alone: "stall: {rate: 0.1}" pauses for 5s.
const DefaultStallDuration = Duration(5 * time.Second)

// DefaultDegradeConfig applies when a degrade block is present.
var DefaultDegradeConfig = DegradeConfig{Per: Duration(time.Hour)}

// maxDegradeFraction bounds degrade.prefill and degrade.decode.
const maxDegradeFraction = 1000

// UnmarshalYAML implements yaml.Unmarshaler. A faults block replaces the
// current faults whole: keys it omits are 0, except the stall duration,
// which keeps its default of 5s so that "stall: {rate: 0.1}" works.
func (f *Faults) UnmarshalYAML(unmarshal func(any) error) error {
	*f = Faults{Stall: StallConfig{Duration: DefaultStallDuration}}
	type plain Faults
	return unmarshal((*plain)(f))
}

// UnmarshalYAML implements yaml.Unmarshaler: keys not given are 0, except
// per, which defaults to 1h.
func (d *DegradeConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*d = DefaultDegradeConfig
	type plain DegradeConfig
	return unmarshal((*plain)(d))
}

// Parse reads a faults block, as YAML or JSON, strictly (unknown keys are
// errors), and validates it; errors name the key below "faults.".
func Parse(b []byte) (Faults, error) {
	var f Faults
	if err := strictyaml.Unmarshal(b, &f); err != nil {
		return Faults{}, err
	}
	if errs := f.Errors("faults."); len(errs) > 0 {
		return Faults{}, errors.Join(errs...)
	}
	return f, nil
}

// Validate checks the fault rates; errors name the key below "faults".
func (f *Faults) Validate() error { return errors.Join(f.Errors("")...) }

// Errors lists every bad value, each error naming its key after prefix
// ("faults." in a simulator's configuration), sorted.
func (f *Faults) Errors(prefix string) []error {
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
		if !ValidRate(rate) {
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
		if !ValidRate(rate) {
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
	SortErrors(errs)
	return errs
}

// ValidRate reports whether r is a share: from 0 to 1, not NaN.
func ValidRate(r float64) bool { return r >= 0 && r <= 1 && !math.IsNaN(r) }

// SortErrors orders errors found by ranging over maps, so that messages
// are stable.
func SortErrors(errs []error) {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
}
