package capacity

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// TestPressure: a request's SLO pressure is its worst latency over that
// SLO's threshold; a failed request, or one without text, is at the
// bound; a scenario without a latency SLO has none.
func TestPressure(t *testing.T) {
	slos := []config.SLO{{Name: "ttft", Threshold: 500 * time.Millisecond}, {Name: "tpot", Threshold: 100 * time.Millisecond}}
	ok := &Record{Outcome: prober.OutcomeOK, HasE2E: true, HasTTFT: true, TTFT: 300 * time.Millisecond, HasTPOT: true, TPOT: 20 * time.Millisecond}
	require.InDelta(t, 0.6, pressure(ok, slos), 1e-12, "TTFT 300 of 500 ms, TPOT 20 of 100")
	ok.TPOT = 90 * time.Millisecond
	require.InDelta(t, 0.9, pressure(ok, slos), 1e-12)
	ok.TTFT = time.Hour
	require.Equal(t, float64(maxPressure), pressure(ok, slos), "bounded")
	require.Equal(t, float64(maxPressure), pressure(&Record{Outcome: prober.OutcomeHTTP5xx}, slos))
	require.Equal(t, float64(maxPressure), pressure(&Record{Outcome: prober.OutcomeOK}, slos), "ok without text")
	require.True(t, math.IsNaN(pressure(ok, []config.SLO{{Name: "json_schema"}})), "no latency SLO")
}
