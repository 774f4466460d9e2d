package faults

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParse: a faults block reads as YAML or JSON, a stall's duration and a
// degradation's period keep their defaults, and bad values are errors that
// name the key.
func TestParse(t *testing.T) {
	f, err := Parse([]byte(`{"degrade": {"prefill": 0.5, "decode": 1, "per": "2s", "leak": "1ms", "leak_max": "5ms"}}`))
	require.NoError(t, err)
	require.Equal(t, &DegradeConfig{Prefill: 0.5, Decode: 1, Per: Duration(2 * time.Second),
		Leak: Duration(time.Millisecond), LeakMax: Duration(5 * time.Millisecond)}, f.Degrade)

	f, err = Parse([]byte("degrade: {decode: 0.5}\n"))
	require.NoError(t, err)
	require.Equal(t, &DegradeConfig{Decode: 0.5, Per: Duration(time.Hour)}, f.Degrade, "per defaults to 1h")

	f, err = Parse([]byte("reset_rate: 0.1\nstall: {rate: 0.2}\n"))
	require.NoError(t, err)
	require.Nil(t, f.Degrade, "no degrade block, no degradation")
	require.Equal(t, StallConfig{Rate: 0.2, Duration: DefaultStallDuration}, f.Stall)

	f, err = Parse([]byte(`{"error_rate": {"503": 0.2, "429": 0.3}, "header_delay": "50ms"}`))
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"503": 0.2, "429": 0.3}, f.ErrorRate)
	require.Equal(t, Duration(50*time.Millisecond), f.HeaderDelay)

	for body, want := range map[string]string{
		"degrade: {decode: -0.1}":                          "faults.degrade.decode: must be between 0 and 1000, got -0.1",
		"degrade: {prefill: .inf}":                         "faults.degrade.prefill: must be between 0 and 1000, got +Inf",
		"degrade: {prefill: 1000.5}":                       "faults.degrade.prefill: must be between 0 and 1000, got 1000.5",
		"degrade: {per: -1s}":                              "faults.degrade.per: must be positive, got -1s",
		"degrade: {leak: 1ms}":                             "faults.degrade.leak_max: must be positive when degrade.leak is set (a leak must be bounded)",
		"degrade: {leak_max: -1ms}":                        "faults.degrade.leak_max: must not be negative, got -1ms",
		`{"degrade": {"leak": "-1ms", "leak_max": "1ms"}}`: "faults.degrade.leak: must not be negative, got -1ms",
		"degrade: {rate: 1}":                               "line 1: degrade.rate: no such key",
		`{"degrade": {"decode": "fast"}}`:                  "line 1: degrade.decode: cannot unmarshal !!str `fast` into float64",
		`{"error_rate": {"200": 0.1}}`:                     `faults.error_rate: key must be an HTTP status from 400 to 599, got "200"`,
		`{"error_rate": {"503": 0.75, "500": 0.5}}`:        "faults.error_rate: rates must add up to at most 1, got 1.25",
		"reset_rate: 1.5\nstall: {rate: -1}":               "faults.reset_rate: must be between 0 and 1, got 1.5\nfaults.stall.rate: must be between 0 and 1, got -1",
		`{"header_delay": 5}`:                              `line 1: header_delay: time: missing unit in duration "5": a duration needs its unit: "5s", "5ms"?`,
	} {
		_, err := Parse([]byte(body))
		require.EqualError(t, err, want, body)
	}
}
