package capacity

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// TestPressure: a request's SLO pressure on each latency SLO is its
// latency over that SLO's threshold; a failed request, or one without
// text, is at the bound on each; an SLO the scenario does not set has
// none.
func TestPressure(t *testing.T) {
	slos := []config.SLO{{Name: "ttft", Threshold: 500 * time.Millisecond}, {Name: "tpot", Threshold: 100 * time.Millisecond}, {Name: "json_schema"}}
	ok := &Record{Outcome: prober.OutcomeOK, HasE2E: true, HasTTFT: true, TTFT: 300 * time.Millisecond, HasTPOT: true, TPOT: 20 * time.Millisecond}
	p := pressure(ok, slos)
	require.InDelta(t, 0.6, p[0], 1e-12, "TTFT 300 of 500 ms")
	require.InDelta(t, 0.2, p[1], 1e-12, "TPOT 20 of 100 ms")
	require.True(t, math.IsNaN(p[2]), "no e2e SLO")
	ok.TTFT = time.Hour
	require.Equal(t, float64(maxPressure), pressure(ok, slos)[0], "bounded")
	failed := pressure(&Record{Outcome: prober.OutcomeHTTP5xx}, slos)
	require.Equal(t, []float64{maxPressure, maxPressure}, failed[:2])
	require.Equal(t, float64(maxPressure), pressure(&Record{Outcome: prober.OutcomeOK}, slos)[1], "ok without text")
	ok.HasTPOT = false
	require.Zero(t, pressure(ok, slos)[1], "a TPOT that cannot be measured is met")
	for _, v := range pressure(ok, []config.SLO{{Name: "json_schema"}}) {
		require.True(t, math.IsNaN(v), "no latency SLO")
	}
}
