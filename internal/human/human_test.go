package human

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSeconds(t *testing.T) {
	for s, want := range map[float64]string{
		0.1: "100 ms", 0.0123: "12.3 ms", 2: "2 s", 12.5: "12.5 s", 30: "30 s", 300: "5m0s",
		math.NaN(): "-", math.Inf(1): "-",
	} {
		require.Equal(t, want, Seconds(s), "%g", s)
	}
	require.Equal(t, "2 s", Duration(2*time.Second))
	require.Equal(t, "100 ms", Duration(100*time.Millisecond))
}

// TestSignedPercent: a change as the knee's reason and the comparison
// write it, never "-0%".
func TestSignedPercent(t *testing.T) {
	for x, want := range map[float64]string{1: "+100%", -0.21: "-21%", -0.003: "-0.3%", 0.0004: "0%", 0: "0%", 0.25: "+25%"} {
		require.Equal(t, want, SignedPercent(x), "%g", x)
	}
}
