package simulator

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseDegrade: a simulator's configuration takes a degrade block
// (the fault schema's own cases are package faults' tests).
func TestParseDegrade(t *testing.T) {
	c, err := Parse([]byte("slots: 0\nfaults: {degrade: {prefill: 1000, leak: 1us, leak_max: 1h}}\n"))
	require.NoError(t, err)
	require.Equal(t, 1000.0, c.Faults.Degrade.Prefill)
	_, err = Parse([]byte("faults: {degrade: {decode: -0.1}}\n"))
	require.EqualError(t, err, "faults.degrade.decode: must be between 0 and 1000, got -0.1")
}

// TestDegradationAt: the factors grow linearly with the time since the
// fault was set, the leak with the requests completed since, up to leak_max.
func TestDegradationAt(t *testing.T) {
	now := time.Now()
	var none *degradation
	p, d, leak := none.at(now)
	require.Equal(t, []any{1.0, 1.0, time.Duration(0)}, []any{p, d, leak})
	require.Equal(t, 7*time.Millisecond, none.prefill(now, 7*time.Millisecond))
	require.Equal(t, 7*time.Millisecond, none.step(now, 7*time.Millisecond))
	none.complete() // no panic

	g := &degradation{cfg: DegradeConfig{Prefill: 0.5, Decode: 1, Per: Duration(2 * time.Second),
		Leak: Duration(3 * time.Millisecond), LeakMax: Duration(10 * time.Millisecond)}, since: now.Add(-3 * time.Second)}
	p, d, leak = g.at(now)
	require.InDelta(t, 1.75, p, 1e-9, "1 + 0.5 * 3s/2s")
	require.InDelta(t, 2.5, d, 1e-9, "1 + 1 * 3s/2s")
	require.Zero(t, leak)
	require.Equal(t, 70*time.Millisecond, g.prefill(now, 40*time.Millisecond))
	require.Equal(t, 50*time.Millisecond, g.step(now, 20*time.Millisecond))
	for n, want := range []time.Duration{0, 3, 6, 9, 10, 10, 10} { // leak_max is not a multiple of leak
		_, _, leak = g.at(now)
		require.Equal(t, want*time.Millisecond, leak, "after %d requests", n)
		g.complete()
	}
	require.Equal(t, 60*time.Millisecond, g.step(now, 20*time.Millisecond), "20ms * 2.5 + 10ms")
	p, _, _ = g.at(now.Add(-time.Hour))
	require.Equal(t, 1.0, p, "never below 1")

	huge := &degradation{cfg: DegradeConfig{Prefill: 1000, Decode: 1000, Per: 1,
		Leak: Duration(math.MaxInt64 / 2), LeakMax: Duration(math.MaxInt64)}, since: now.Add(-24 * time.Hour)}
	for range 3 {
		huge.complete()
	}
	_, _, leak = huge.at(now)
	require.Equal(t, time.Duration(math.MaxInt64), leak)
	require.Equal(t, maxPhase, huge.prefill(now, time.Second), "no overflow")
	require.Equal(t, maxPhase, huge.step(now, time.Second), "no overflow")
}
