package prober_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// TestShardArrivalsUnion: N shards of a load's schedule are the schedule:
// over an hour of arrivals, every arrival falls to exactly one shard, at
// the same time and with the same Seq and scenario, and each shard has
// about 1/N of them.
func TestShardArrivalsUnion(t *testing.T) {
	start := time.Unix(1_764_500_000, 0)
	const seed = 0x1234_5678
	processes := map[string]func() prober.Arrivals{
		"constant": func() prober.Arrivals { return prober.NewConstantArrivals(5, seed, start) },
		"poisson":  func() prober.Arrivals { return prober.NewPoissonArrivals(5, seed, start) },
		"gamma":    func() prober.Arrivals { return prober.NewGammaArrivals(5, 0.5, seed, start) },
		"mix": func() prober.Arrivals {
			return prober.NewMixArrivals(prober.NewPoissonArrivals(5, seed, start), seed, []float64{3, 1})
		},
	}
	for name, arrivals := range processes {
		for _, n := range []int{2, 3, 7} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				end := start.Add(time.Hour)
				whole := map[uint64]prober.Arrival{}
				all := arrivals()
				for a := all.Next(); a.Due.Before(end); a = all.Next() {
					whole[a.Seq] = a
				}
				seen := map[uint64]int{}
				for i := range n {
					shard := prober.NewShardArrivals(arrivals(), seed, config.Shard{Index: i, Count: n})
					count := 0
					for a := shard.Next(); a.Due.Before(end); a = shard.Next() {
						w, ok := whole[a.Seq]
						require.True(t, ok, "shard %d sends an arrival the schedule does not have", i)
						require.Equal(t, w, a)
						seen[a.Seq]++
						count++
					}
					share := float64(count) / float64(len(whole))
					require.InDelta(t, 1/float64(n), share, 0.1/float64(n), "shard %d's share", i)
				}
				require.Len(t, seen, len(whole), "every arrival is sent by a shard")
				for seq, c := range seen {
					require.Equal(t, 1, c, "arrival %d sent by %d shards", seq, c)
				}
			})
		}
	}
}

// TestShardedCanary: a process that is shard 1 of 3 runs a third of each
// canary load: its intended rate is its share, and global.max_rate caps its
// share, not the whole load. Tests are not split.
func TestShardedCanary(t *testing.T) {
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	cfg := managerConfig(t, sim.URL, `
global: {max_rate: 50, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: a, input_tokens: 8, output_tokens: 2}]
canary: [{target: sim, scenario: a, rate: 30, arrival: constant}]
`)
	f := newCountingFactory()
	m := prober.NewManager(promslog.NewNopLogger(), f, "sloprober/test")
	defer m.Stop(time.Second)
	m.SetShard(config.Shard{Index: 1, Count: 3})
	require.NoError(t, m.ApplyConfig(cfg))
	canary := config.Key{Target: "sim", Scenario: "a", Test: "canary"}
	require.InDelta(t, 10, f.get(canary).info.Rate, 1e-9, "the shard's intended rate is its share")
	require.NoError(t, m.SetLimits(prober.Limits{MaxRate: 15, MaxInFlight: 100}), "the cap applies to the share")
	require.Error(t, m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 10)}), "a test's load is not split: 10 + 10 > 15")
	require.NoError(t, m.Apply("step", []config.LoadSpec{testSpec(cfg, "step", 5)}))
	step := config.Key{Target: "sim", Scenario: "a", Test: "step"}
	require.InDelta(t, 5, f.get(step).info.Rate, 1e-9)
}
