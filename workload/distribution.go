// Package workload shapes the traffic of a load like production traffic:
// length distributions, joint input/output lengths read from real traces,
// trace replay, shared prompt prefixes and conversations, and the statistics
// of a trace.
package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Distribution kinds.
const (
	Fixed     = "fixed"
	Uniform   = "uniform"
	Normal    = "normal"
	Lognormal = "lognormal"
	Empirical = "empirical"
)

// z90 is the 90th percentile of the standard normal distribution.
const z90 = 1.2815515655446004

// MaxTokens bounds every length sloprober works with, in tokens: a fixed
// length, a distribution's parameters and bounds, a prefix, and the input
// and output lengths of trace records. A million tokens covers the contexts
// that serving engines run in practice (a few models advertise more), and
// its prompt, at about 4 bytes a token, is a 4 MB request body; prompts are
// built in memory, one per request in flight. Without a bound, a typo
// such as `input_tokens: 9000000000000000000` passes as a number and makes
// the prober build a prompt of that size: a panic on a negative buffer size,
// or an out-of-memory kill for 1e10.
const MaxTokens = 1_000_000

// Distribution is a distribution of lengths in tokens. In YAML it is a plain
// number (fixed) or a mapping:
//
//	{distribution: uniform, min: 16, max: 512}
//	{distribution: normal, mean: 300, stddev: 50, min: 16, max: 1000}
//	{distribution: lognormal, median: 600, p90: 3000, min: 16, max: 16000}
//	{distribution: empirical, values: [128, 512, 2048], weights: [6, 3, 1]}
//
// min and max clip normal and lognormal draws (min defaults to 1, max to
// MaxTokens); uniform draws from [min, max]. Every number must be finite and
// at most MaxTokens, so no draw is above MaxTokens either.
type Distribution struct {
	Kind    string    `yaml:"distribution"`
	Value   int       `yaml:"value,omitempty"`
	Min     int       `yaml:"min,omitempty"`
	Max     int       `yaml:"max,omitempty"`
	Mean    float64   `yaml:"mean,omitempty"`
	Stddev  float64   `yaml:"stddev,omitempty"`
	Median  float64   `yaml:"median,omitempty"`
	P90     float64   `yaml:"p90,omitempty"`
	Values  []int     `yaml:"values,omitempty"`
	Weights []float64 `yaml:"weights,omitempty"`
}

// FixedLength returns the distribution that is always n.
func FixedLength(n int) Distribution { return Distribution{Kind: Fixed, Value: n} }

// UnmarshalYAML implements yaml.Unmarshaler: a plain number is fixed. A
// number that is not a whole number of tokens (2.5, 1e300, .nan, a value
// beyond int) is an error here, since yaml v2 would truncate 2.5 to 2 and
// fail on 1e300 naming a Go type.
func (d *Distribution) UnmarshalYAML(unmarshal func(any) error) error {
	var x any
	if err := unmarshal(&x); err == nil {
		switch x := x.(type) {
		case int:
			*d = FixedLength(x)
			return nil
		case int64, uint64:
			return fmt.Errorf("must be at most %d tokens, got %d", MaxTokens, x)
		case float64:
			if x != math.Trunc(x) || math.IsInf(x, 0) {
				return fmt.Errorf("must be a whole number of tokens, got %g", x)
			}
			if x > MaxTokens {
				return fmt.Errorf("must be at most %d tokens, got %g", MaxTokens, x)
			}
			if x < 1 {
				return fmt.Errorf("must be at least 1, got %g", x)
			}
			*d = FixedLength(int(x))
			return nil
		case string:
			return fmt.Errorf("a length is a number or a mapping with a distribution key, got %q", clip(x))
		case []any, bool:
			return errors.New("a length is a number or a mapping with a distribution key")
		}
	}
	type plain Distribution
	*d = Distribution{}
	if err := unmarshal((*plain)(d)); err != nil {
		return err
	}
	if d.Kind == "" {
		return errors.New("a length is a number or a mapping with a distribution key")
	}
	if d.Kind != Uniform && d.Min == 0 {
		d.Min = 1
	}
	return nil
}

// MarshalYAML implements yaml.Marshaler: a fixed length is a plain number.
func (d Distribution) MarshalYAML() (any, error) {
	if d.Kind == Fixed {
		return d.Value, nil
	}
	type plain Distribution
	return plain(d), nil
}

// Validate checks the parameters; errors name the key. Every length and
// every parameter in tokens must be at most MaxTokens, and every number
// finite: YAML reads .nan and .inf as numbers.
func (d *Distribution) Validate() error {
	switch d.Kind {
	case Fixed:
		return checkLength("", d.Value)
	case Uniform:
		if err := checkLength("min: ", d.Min); err != nil {
			return err
		}
		if d.Max < d.Min {
			return fmt.Errorf("max: must be at least min (%d), got %d", d.Min, d.Max)
		}
		return checkLength("max: ", d.Max)
	case Normal:
		if !(d.Mean > 0 && d.Mean <= MaxTokens) {
			return fmt.Errorf("mean: must be positive and at most %d tokens, got %g", MaxTokens, d.Mean)
		}
		if !(d.Stddev >= 0 && d.Stddev <= MaxTokens) {
			return fmt.Errorf("stddev: must be between 0 and %d tokens, got %g", MaxTokens, d.Stddev)
		}
	case Lognormal:
		if !(d.Median >= 1 && d.Median <= MaxTokens) {
			return fmt.Errorf("median: must be between 1 and %d tokens, got %g", MaxTokens, d.Median)
		}
		if !(d.P90 > d.Median) {
			return fmt.Errorf("p90: must be greater than median (%g), got %g", d.Median, d.P90)
		}
		if !(d.P90 <= MaxTokens) {
			return fmt.Errorf("p90: must be at most %d tokens, got %g", MaxTokens, d.P90)
		}
	case Empirical:
		if len(d.Values) == 0 {
			return errors.New("values: must not be empty")
		}
		if len(d.Weights) != 0 && len(d.Weights) != len(d.Values) {
			return fmt.Errorf("weights: must have one weight per value (%d), got %d", len(d.Values), len(d.Weights))
		}
		for i, v := range d.Values {
			if err := checkLength(fmt.Sprintf("values[%d]: ", i), v); err != nil {
				return err
			}
		}
		sum := 0.0
		for i, w := range d.Weights {
			if !(w >= 0) || math.IsInf(w, 0) {
				return fmt.Errorf("weights[%d]: must be finite and not negative, got %g", i, w)
			}
			sum += w
		}
		if len(d.Weights) > 0 && sum <= 0 {
			return errors.New("weights: must not all be 0")
		}
		if math.IsInf(sum, 0) {
			return errors.New("weights: must add up to a finite number")
		}
		return nil
	default:
		return fmt.Errorf("distribution: must be uniform, normal, lognormal or empirical, got %q", clip(d.Kind))
	}
	// Normal and lognormal.
	if err := checkLength("min: ", d.Min); err != nil {
		return err
	}
	if d.Max != 0 {
		if d.Max < d.Min {
			return fmt.Errorf("max: must be at least min (%d), got %d", d.Min, d.Max)
		}
		return checkLength("max: ", d.Max)
	}
	return nil
}

// checkLength checks a length in tokens; key prefixes the error.
func checkLength(key string, n int) error {
	if n < 1 {
		return fmt.Errorf("%smust be at least 1, got %d", key, n)
	}
	if n > MaxTokens {
		return fmt.Errorf("%smust be at most %d tokens, got %d", key, MaxTokens, n)
	}
	return nil
}

// Sample draws a length.
//
// A lognormal with median m and 90th percentile p has mu = ln m and sigma =
// ln(p/m)/z90: median 600 and p90 3000 give sigma = 1.26, so one draw in a
// hundred exceeds 600*e^(2.33*1.26) = 11,300 tokens before clipping. The
// tail is unbounded: median 1 and p90 1,000,000 give sigma = 10.8, and one
// draw in a million is e^(4.75*10.8) = 2e22 (+Inf at 8.5 sigma). Draws are
// therefore clipped to [min, max] in floating point, max defaulting to
// MaxTokens, before they become an int, whose conversion from a float
// beyond its range is undefined in Go.
func (d *Distribution) Sample(r *rand.Rand) int {
	var v float64
	switch d.Kind {
	case Fixed:
		return d.Value
	case Uniform:
		if d.Max <= d.Min {
			return d.Min
		}
		return d.Min + r.IntN(d.Max-d.Min+1)
	case Normal:
		v = d.Mean + d.Stddev*r.NormFloat64()
	case Lognormal:
		v = d.Median * math.Exp(math.Log(d.P90/d.Median)/z90*r.NormFloat64())
	case Empirical:
		if len(d.Weights) == 0 {
			return d.Values[r.IntN(len(d.Values))]
		}
		return d.Values[Pick(d.Weights, r.Float64())]
	}
	hi := MaxTokens
	if d.Max > 0 {
		hi = min(d.Max, MaxTokens)
	}
	lo := min(max(d.Min, 1), hi)
	// max and min of a NaN are NaN; a NaN draw (only from parameters that
	// Validate rejects) becomes lo.
	if !(v >= float64(lo)) {
		return lo
	}
	return int(math.Round(min(v, float64(hi))))
}

// Pick returns the index that u in [0, 1) falls on when [0, 1) is cut in
// proportion to the weights: a weighted draw from one uniform draw.
func Pick(weights []float64, u float64) int {
	sum := 0.0
	for _, w := range weights {
		sum += w
	}
	x := u * sum
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	return len(weights) - 1
}
