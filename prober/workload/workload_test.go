package workload

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/strictyaml"
)

func parseDist(t *testing.T, y string) (Distribution, error) {
	t.Helper()
	var d Distribution
	if err := strictyaml.Unmarshal([]byte(y), &d); err != nil {
		return d, err
	}
	return d, d.Validate()
}

func TestDistributionYAML(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want Distribution
		err  string
	}{
		{yaml: "256", want: Distribution{Kind: Fixed, Value: 256}},
		{yaml: "{distribution: uniform, min: 16, max: 512}", want: Distribution{Kind: Uniform, Min: 16, Max: 512}},
		{yaml: "{distribution: normal, mean: 300, stddev: 50}", want: Distribution{Kind: Normal, Mean: 300, Stddev: 50, Min: 1}},
		{yaml: "{distribution: lognormal, median: 600, p90: 3000, min: 16, max: 16000}", want: Distribution{Kind: Lognormal, Median: 600, P90: 3000, Min: 16, Max: 16000}},
		{yaml: "{distribution: empirical, values: [1, 2], weights: [3, 1]}", want: Distribution{Kind: Empirical, Values: []int{1, 2}, Weights: []float64{3, 1}, Min: 1}},
		{yaml: "0", err: "must be at least 1, got 0"},
		{yaml: "{distribution: uniform, min: 16}", err: "max: must be at least min (16), got 0"},
		{yaml: "{distribution: lognormal, median: 600, p90: 100}", err: "p90: must be greater than median (600), got 100"},
		{yaml: "{distribution: normal, mean: 300, stddev: -1}", err: "stddev: must not be negative, got -1"},
		{yaml: "{distribution: normal, mean: 300, min: 50, max: 10}", err: "max: must be at least min (50), got 10"},
		{yaml: "{distribution: empirical, values: [1, 2], weights: [3]}", err: "weights: must have one weight per value (2), got 1"},
		{yaml: "{distribution: empirical, values: [1, 0]}", err: "values[1]: must be at least 1, got 0"},
		{yaml: "{distribution: zipf}", err: `distribution: must be uniform, normal, lognormal or empirical, got "zipf"`},
		{yaml: "{median: 5}", err: "a length is a number or a mapping with a distribution key"},
		{yaml: "{distribution: uniform, min: 1, max: 2, mean: 3, extra: 1}", err: "line 1: field extra not found"},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			d, err := parseDist(t, tc.yaml)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, d)
		})
	}
}

func sampleN(d Distribution, n int) []float64 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(d.Sample(r))
	}
	sort.Float64s(out)
	return out
}

// TestDistributionSamples: 20,000 draws with a fixed seed. Tolerances are
// about four standard errors.
func TestDistributionSamples(t *testing.T) {
	const n = 20000
	u := sampleN(Distribution{Kind: Uniform, Min: 16, Max: 512}, n)
	require.Equal(t, 16.0, u[0])
	require.Equal(t, 512.0, u[n-1])
	require.InDelta(t, 264, mean(u), 4*143/math.Sqrt(n))

	nd := sampleN(Distribution{Kind: Normal, Mean: 300, Stddev: 50, Min: 1}, n)
	require.InDelta(t, 300, mean(nd), 4*50/math.Sqrt(n))
	require.InDelta(t, 50, stddev(nd, mean(nd)), 2)

	l := sampleN(Distribution{Kind: Lognormal, Median: 600, P90: 3000, Min: 16, Max: 16000}, n)
	require.InEpsilon(t, 600, l[n/2], 0.05)
	require.InEpsilon(t, 3000, l[n*9/10], 0.07)
	require.Equal(t, 16.0, l[0], "clipped at min")
	require.Equal(t, 16000.0, l[n-1], "clipped at max")

	e := sampleN(Distribution{Kind: Empirical, Values: []int{128, 512, 2048}, Weights: []float64{6, 3, 1}}, n)
	counts := map[float64]int{}
	for _, v := range e {
		counts[v]++
	}
	require.InDelta(t, 0.6*n, counts[128], 4*math.Sqrt(n*0.6*0.4))
	require.InDelta(t, 0.3*n, counts[512], 4*math.Sqrt(n*0.3*0.7))
	require.InDelta(t, 0.1*n, counts[2048], 4*math.Sqrt(n*0.1*0.9))

	require.Equal(t, sampleN(Distribution{Kind: Lognormal, Median: 600, P90: 3000, Min: 1}, 100),
		sampleN(Distribution{Kind: Lognormal, Median: 600, P90: 3000, Min: 1}, 100), "the same seed gives the same draws")
}

// The real traces of ../shared/workloads.
const (
	azureTrace    = "../../../shared/workloads/azure-llm-inference-2023-conv.csv"
	mooncakeTrace = "../../../shared/workloads/mooncake-fast25-conversation.jsonl"
)

func TestRealTraces(t *testing.T) {
	az, err := LoadTrace(azureTrace, FormatAzure)
	require.NoError(t, err)
	require.Len(t, az.Records, 19366)
	require.Equal(t, Record{At: 0, Input: 374, Output: 44}, az.Records[0], "CRLF line ends are read")
	s := ComputeStats(az)
	require.InDelta(t, 58*60+21.7, s.Duration.Seconds(), 0.1)
	require.InDelta(t, 5.53, s.MeanRate, 0.01)
	require.Less(t, s.Correlation, -0.05, "input and output are negatively correlated in the Azure trace")
	require.Equal(t, 1020, s.Input.P50)
	require.Equal(t, 1000, s.Output.Max)
	require.False(t, s.HasBlocks)

	mc, err := LoadTrace(mooncakeTrace, FormatMooncake)
	require.NoError(t, err)
	require.Len(t, mc.Records, 12031)
	require.Len(t, mc.Records[0].HashIDs, 14)
	s = ComputeStats(mc)
	require.InDelta(t, 3536.999, s.Duration.Seconds(), 0.001)
	require.Greater(t, s.InterArrivalCV, 2.0, "bursty")
	require.True(t, s.HasBlocks)
	require.InDelta(t, 0.366, s.BlockRepeatShare, 0.001)
}

func TestSmallTraces(t *testing.T) {
	az, err := LoadTrace("testdata/small.csv", FormatAzure)
	require.NoError(t, err)
	require.Equal(t, []Record{
		{At: 0, Input: 300, Output: 30},
		{At: 500 * time.Millisecond, Input: 100, Output: 10},
		{At: time.Second, Input: 200, Output: 20},
	}, az.Records, "sorted by time, relative to the first")

	mc, err := LoadTrace("testdata/small.jsonl", FormatMooncake)
	require.NoError(t, err)
	require.Equal(t, Record{At: 1500 * time.Millisecond, Input: 600, Output: 5, HashIDs: []int{0, 1}}, mc.Records[2])
	st := ComputeStats(mc)
	require.InDelta(t, 3.0/7, st.BlockRepeatShare, 1e-9, "blocks 0 (twice) and 1 repeat")
	require.InDelta(t, 2/1.5, st.MeanRate, 1e-9)

	l, err := LoadTrace("testdata/lengths.jsonl", FormatJSONL)
	require.NoError(t, err)
	require.False(t, l.Timed)
	require.Equal(t, []Record{{Input: 10, Output: 3}, {Input: 20, Output: 6}}, l.Records)
	require.InDelta(t, 1, ComputeStats(l).Correlation, 1e-9)
}

func TestTraceErrors(t *testing.T) {
	for _, tc := range []struct{ file, format, err string }{
		{"bad_header.csv", FormatAzure, "testdata/bad_header.csv: line 1: header must be TIMESTAMP,ContextTokens,GeneratedTokens, got TIMESTAMP,Context,Generated"},
		{"bad_time.csv", FormatAzure, `testdata/bad_time.csv: line 3: TIMESTAMP "yesterday": want a time like 2023-11-16 18:15:46.6805900`},
		{"negative.csv", FormatAzure, "testdata/negative.csv: line 2: GeneratedTokens: -4 is negative"},
		{"missing_output.jsonl", FormatMooncake, "testdata/missing_output.jsonl: line 2: output_length is missing or negative"},
		{"bad_json.jsonl", FormatJSONL, "testdata/bad_json.jsonl: line 2: invalid character 'o' looking for beginning of object key string"},
		{"lengths.jsonl", FormatMooncake, "testdata/lengths.jsonl: line 1: timestamp is missing"},
		{"small.csv", "parquet", "testdata/small.csv: unknown trace format \"parquet\" (known: azure, mooncake, jsonl)"},
		{"nothing.csv", FormatAzure, "open testdata/nothing.csv: no such file or directory"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := LoadTrace("testdata/"+tc.file, tc.format)
			require.EqualError(t, err, tc.err)
		})
	}
}
