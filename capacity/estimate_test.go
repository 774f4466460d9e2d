package capacity

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
)

// profileTest is a profile's step test, as `init` writes it, with its
// defaults applied.
func profileTest(t *testing.T, profile string) *config.TestConfig {
	t.Helper()
	cfg, err := config.Load([]byte(`
targets: [{name: t, url: "http://127.0.0.1:1/v1", model: m}]
scenarios: [{name: s, input_tokens: 16, output_tokens: 16, objective: 0.95, slo: {ttft: 1s}}]
tests:
  - name: capacity
    kind: step
    target: t
    scenario: s
`+config.StepProfile(profile)), false)
	require.NoError(t, err)
	return cfg.Tests[0]
}

// TestEstimateStep: a typical run of the first-look profile: 10 baseline
// requests of 2 s, five sweep levels of 5 s + 35% of 60 s + 2 s, four
// open-loop levels of 5 s + 80% of 60 s + 2 s, a burst of 5 s + 10 s + a
// third of 30 s: 20 s + 140 s + 220 s + 25 s = 6m45s; at most every level
// to 60 s, three times (retries 2).
func TestEstimateStep(t *testing.T) {
	e := EstimateStep(profileTest(t, config.ProfileFirstLook))
	require.Equal(t, 6*time.Minute+45*time.Second, e.Typical)
	require.Equal(t, 20*time.Second+time.Duration(9*3)*67*time.Second+25*time.Second, e.Most)
	require.Equal(t, "about 6m50s (at most 31m)", e.String())
	sign := EstimateStep(profileTest(t, config.ProfileSign))
	require.Greater(t, sign.Typical, 3*e.Typical, "a number to sign takes several times a first look")
}

// TestTimeLeft: the time left learns from the levels that ran, each
// stage's blended with its estimate before it as if that were two
// levels.
func TestTimeLeft(t *testing.T) {
	s := &Step{Test: profileTest(t, config.ProfileFirstLook)}
	// Before anything ran: the typical run less nothing.
	require.Equal(t, EstimateStep(s.Test).Typical, s.timeLeft("baseline"))
	// The sweep done (five levels of 20 s), one open-loop level that
	// stopped after 15 s: the next three are (2 x 55 s + 15 s) / 3 each,
	// and the burst.
	s.took = map[string][]time.Duration{"baseline": {20 * time.Second}, "sweep": {20 * time.Second, 20 * time.Second, 20 * time.Second, 20 * time.Second, 20 * time.Second},
		"verify": {15 * time.Second}}
	verify := (2*55*time.Second + 15*time.Second) / 3
	require.Equal(t, 3*verify+25*time.Second, s.timeLeft("verify"))
	// A cache: both test's cold pass: the production pass after it is
	// about as long again.
	s.passesLeft, s.passStart = 1, time.Now().Add(-4*time.Minute)
	left := s.timeLeft("verify")
	require.InDelta(t, (4*time.Minute + 2*(3*verify+25*time.Second)).Seconds(), left.Seconds(), 1)
}
