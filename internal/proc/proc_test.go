package proc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSelf: the process has a resident set and uses CPU time, which grows
// while it works.
func TestSelf(t *testing.T) {
	require.Positive(t, RSS())
	before := CPU()
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	require.Positive(t, x)
	require.Greater(t, CPU(), before)
}
