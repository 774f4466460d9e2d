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

// Distribution is a distribution of lengths in tokens. In YAML it is a plain
// number (fixed) or a mapping:
//
//	{distribution: uniform, min: 16, max: 512}
//	{distribution: normal, mean: 300, stddev: 50, min: 16, max: 1000}
//	{distribution: lognormal, median: 600, p90: 3000, min: 16, max: 16000}
//	{distribution: empirical, values: [128, 512, 2048], weights: [6, 3, 1]}
//
// min and max clip normal and lognormal draws (min defaults to 1, max to no
// bound); uniform draws from [min, max].
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

// UnmarshalYAML implements yaml.Unmarshaler: a plain number is fixed.
func (d *Distribution) UnmarshalYAML(unmarshal func(any) error) error {
	var n int
	if err := unmarshal(&n); err == nil {
		*d = FixedLength(n)
		return nil
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

// Validate checks the parameters; errors name the key.
func (d *Distribution) Validate() error {
	switch d.Kind {
	case Fixed:
		if d.Value < 1 {
			return fmt.Errorf("must be at least 1, got %d", d.Value)
		}
	case Uniform:
		if d.Min < 1 {
			return fmt.Errorf("min: must be at least 1, got %d", d.Min)
		}
		if d.Max < d.Min {
			return fmt.Errorf("max: must be at least min (%d), got %d", d.Min, d.Max)
		}
	case Normal:
		if !(d.Mean > 0) {
			return fmt.Errorf("mean: must be positive, got %g", d.Mean)
		}
		if d.Stddev < 0 {
			return fmt.Errorf("stddev: must not be negative, got %g", d.Stddev)
		}
	case Lognormal:
		if !(d.Median >= 1) {
			return fmt.Errorf("median: must be at least 1, got %g", d.Median)
		}
		if !(d.P90 > d.Median) {
			return fmt.Errorf("p90: must be greater than median (%g), got %g", d.Median, d.P90)
		}
	case Empirical:
		if len(d.Values) == 0 {
			return errors.New("values: must not be empty")
		}
		if len(d.Weights) != 0 && len(d.Weights) != len(d.Values) {
			return fmt.Errorf("weights: must have one weight per value (%d), got %d", len(d.Values), len(d.Weights))
		}
		for i, v := range d.Values {
			if v < 1 {
				return fmt.Errorf("values[%d]: must be at least 1, got %d", i, v)
			}
		}
		sum := 0.0
		for i, w := range d.Weights {
			if !(w >= 0) || math.IsInf(w, 0) {
				return fmt.Errorf("weights[%d]: must not be negative, got %g", i, w)
			}
			sum += w
		}
		if len(d.Weights) > 0 && sum <= 0 {
			return errors.New("weights: must not all be 0")
		}
	default:
		return fmt.Errorf("distribution: must be uniform, normal, lognormal or empirical, got %q", d.Kind)
	}
	if d.Kind == Normal || d.Kind == Lognormal {
		if d.Min < 1 {
			return fmt.Errorf("min: must be at least 1, got %d", d.Min)
		}
		if d.Max != 0 && d.Max < d.Min {
			return fmt.Errorf("max: must be at least min (%d), got %d", d.Min, d.Max)
		}
	}
	return nil
}

// Sample draws a length.
//
// A lognormal with median m and 90th percentile p has mu = ln m and sigma =
// ln(p/m)/z90: median 600 and p90 3000 give sigma = 1.26, so one draw in a
// hundred exceeds 600*e^(2.33*1.26) = 11,300 tokens before clipping.
func (d *Distribution) Sample(r *rand.Rand) int {
	var v float64
	switch d.Kind {
	case Fixed:
		return d.Value
	case Uniform:
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
	n := max(int(math.Round(v)), d.Min)
	if d.Max > 0 {
		n = min(n, d.Max)
	}
	return n
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
