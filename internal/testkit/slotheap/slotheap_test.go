package slotheap

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReplaceMin: the heap's minimum is always the earliest of the times
// it holds, as a sorted list of the same times says.
func TestReplaceMin(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []int{1, 2, 3, 8, 32} {
		h := New(c, 0)
		want := make([]float64, c)
		for range 10_000 {
			require.Equal(t, want[0], h.Min(), "%d slots", c)
			x := h.Min() + r.Float64()
			h.ReplaceMin(x)
			want[0] = x
			slices.Sort(want)
		}
		got := slices.Clone([]float64(h))
		slices.Sort(got)
		require.Equal(t, want, got)
	}
}
