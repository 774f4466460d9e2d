package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in, host string
		want     Shard
		err      string
	}{
		{in: "0/1", want: Shard{0, 1}},
		{in: "2/3", want: Shard{2, 3}},
		{in: "ordinal/3", host: "sloprober-2", want: Shard{2, 3}},
		{in: "ordinal/4", host: "probe-eu-west-0", want: Shard{0, 4}},
		{in: "3/3", err: `shard "3/3": i must be between 0 and 2`},
		{in: "-1/3", err: `shard "-1/3": i must be between 0 and 2`},
		{in: "1/0", err: `shard "1/0": N must be between 1 and 1000`},
		{in: "1/1001", err: `shard "1/1001": N must be between 1 and 1000`},
		{in: "1", err: `shard "1": must be i/N (e.g. 0/3) or ordinal/N`},
		{in: "ordinal/3", host: "sloprober", err: `shard "ordinal/3": the host name "sloprober" does not end in -<ordinal>`},
		{in: "ordinal/3", host: "sloprober-5", err: `shard "ordinal/3": the host name "sloprober-5" has ordinal 5, not between 0 and 2: run at most 3 replicas, or raise N`},
		{in: "ordinal/3", host: "sloprober-canary", err: `shard "ordinal/3": the host name "sloprober-canary" does not end in -<ordinal>`},
		{in: "x/3", err: `shard "x/3": i must be between 0 and 2`},
	} {
		t.Run(tc.in+" "+tc.host, func(t *testing.T) {
			got, err := ParseShard(tc.in, tc.host)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, 1/float64(tc.want.Count), got.Share())
		})
	}
	require.Equal(t, 1.0, Shard{}.Share(), "the zero shard is the whole load")
	require.False(t, Shard{}.Sharded())
}
