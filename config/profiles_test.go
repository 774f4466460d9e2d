package config

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProfiles: each profile's test loads, and its target's max_in_flight
// is twice its sweep's most clients (at least the default), so that its
// open-loop levels near the capacity are not cut by the cap.
func TestProfiles(t *testing.T) {
	for _, p := range Profiles {
		t.Run(p, func(t *testing.T) {
			cfg, err := Load([]byte(`
targets: [{name: t, url: "http://127.0.0.1:1/v1", model: m}]
scenarios: [{name: s, input_tokens: 16, output_tokens: 16, objective: 0.95, slo: {ttft: 1s}}]
tests:
  - name: capacity
    kind: step
    target: t
    scenario: s
`+StepProfile(p)), false)
			require.NoError(t, err)
			most := slices.Max(cfg.Tests[0].Sweep.Concurrency)
			require.Equal(t, max(2*most, DefaultTargetConfig.MaxInFlight), ProfileMaxInFlight(p))
		})
	}
	require.Equal(t, 128, ProfileMaxInFlight(ProfileSign))
	require.Empty(t, StepProfile("soak"))
}
