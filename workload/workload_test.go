package workload

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
		{yaml: "{distribution: normal, mean: 300, stddev: -1}", err: "stddev: must be between 0 and 1000000 tokens, got -1"},
		{yaml: "1e3", want: Distribution{Kind: Fixed, Value: 1000}},
		{yaml: "1000000", want: Distribution{Kind: Fixed, Value: MaxTokens}},
		// Absurd numbers: never a panic, never a pass, the key and value named.
		{yaml: "1000001", err: "must be at most 1000000 tokens, got 1000001"},
		{yaml: "9000000000000000000", err: "must be at most 1000000 tokens, got 9000000000000000000"},
		{yaml: "9223372036854775808", err: "must be at most 1000000 tokens, got 9223372036854775808"},
		{yaml: "1e10", err: "must be at most 1000000 tokens, got 1e+10"},
		{yaml: "1e300", err: "must be at most 1000000 tokens, got 1e+300"},
		{yaml: "-1e300", err: "must be at least 1, got -1e+300"},
		{yaml: "-5", err: "must be at least 1, got -5"},
		{yaml: "2.5", err: "must be a whole number of tokens, got 2.5"},
		{yaml: ".nan", err: "must be a whole number of tokens, got NaN"},
		{yaml: ".inf", err: "must be a whole number of tokens, got +Inf"},
		{yaml: "many", err: `a length is a number or a mapping with a distribution key, got "many"`},
		{yaml: "[1, 2]", err: "a length is a number or a mapping with a distribution key"},
		{yaml: "{distribution: uniform, min: 1, max: 10000000000}", err: "max: must be at most 1000000 tokens, got 10000000000"},
		{yaml: "{distribution: uniform, min: 1, max: 1e300}", err: "line 1: max: cannot unmarshal !!float `1e300` into int"},
		{yaml: "{distribution: uniform, min: -1e300, max: 5}", err: "min: must be at least 1, got -9223372036854775808"},
		{yaml: "{distribution: normal, mean: .nan}", err: "mean: must be positive and at most 1000000 tokens, got NaN"},
		{yaml: "{distribution: normal, mean: 1e7}", err: "mean: must be positive and at most 1000000 tokens, got 1e+07"},
		{yaml: "{distribution: normal, mean: 300, stddev: .inf}", err: "stddev: must be between 0 and 1000000 tokens, got +Inf"},
		{yaml: "{distribution: normal, mean: 300, max: 2000000}", err: "max: must be at most 1000000 tokens, got 2000000"},
		{yaml: "{distribution: lognormal, median: .nan, p90: 5}", err: "median: must be between 1 and 1000000 tokens, got NaN"},
		{yaml: "{distribution: lognormal, median: 600, p90: .inf}", err: "p90: must be at most 1000000 tokens, got +Inf"},
		{yaml: "{distribution: lognormal, median: 600, p90: 1e300}", err: "p90: must be at most 1000000 tokens, got 1e+300"},
		{yaml: "{distribution: lognormal, median: 600, p90: 3000, min: 2000000}", err: "min: must be at most 1000000 tokens, got 2000000"},
		{yaml: "{distribution: empirical, values: [1, 9000000000000000000]}", err: "values[1]: must be at most 1000000 tokens, got 9000000000000000000"},
		{yaml: "{distribution: empirical, values: [1, 2], weights: [1, .nan]}", err: "weights[1]: must be finite and not negative, got NaN"},
		{yaml: "{distribution: empirical, values: [1, 2], weights: [1e308, 1e308]}", err: "weights: must add up to a finite number"},
		{yaml: "{distribution: normal, mean: 300, min: 50, max: 10}", err: "max: must be at least min (50), got 10"},
		{yaml: "{distribution: empirical, values: [1, 2], weights: [3]}", err: "weights: must have one weight per value (2), got 1"},
		{yaml: "{distribution: empirical, values: [1, 0]}", err: "values[1]: must be at least 1, got 0"},
		{yaml: "{distribution: zipf}", err: `distribution: must be uniform, normal, lognormal or empirical, got "zipf"`},
		{yaml: "{median: 5}", err: "a length is a number or a mapping with a distribution key"},
		{yaml: "{distribution: uniform, min: 1, max: 2, mean: 3, extra: 1}", err: "line 1: extra: no such key"},
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

	// Unbounded tails are clipped at MaxTokens: median 1 and p90 1,000,000
	// give sigma = 10.8, so a tenth of the draws are above a million and
	// one in 24,000 is +Inf in floating point (8.5 sigma is not reached
	// here, but 4 sigma, 6e18, is).
	for _, d := range []Distribution{
		{Kind: Lognormal, Median: 1, P90: MaxTokens, Min: 1},
		{Kind: Normal, Mean: MaxTokens, Stddev: MaxTokens, Min: 1},
		{Kind: Normal, Mean: 1, Stddev: MaxTokens, Min: 1, Max: 10},
	} {
		require.NoError(t, d.Validate())
		s := sampleN(d, n)
		require.GreaterOrEqual(t, s[0], 1.0)
		require.LessOrEqual(t, s[n-1], float64(MaxTokens))
		if d.Max == 0 {
			require.Equal(t, float64(MaxTokens), s[n-1], "clipped at MaxTokens")
		} else {
			require.Equal(t, float64(d.Max), s[n-1])
		}
	}

	require.Equal(t, sampleN(Distribution{Kind: Lognormal, Median: 600, P90: 3000, Min: 1}, 100),
		sampleN(Distribution{Kind: Lognormal, Median: 600, P90: 3000, Min: 1}, 100), "the same seed gives the same draws")
}

// The real traces of examples/traces.
const (
	azureTrace    = "../examples/traces/azure-llm-inference-2023-conv.csv"
	mooncakeTrace = "../examples/traces/mooncake-fast25-conversation.jsonl"
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

// TestTraceErrors: every bad file says what is wrong in the form
// "FILE: line N: what", never a Go type, and never panics.
func TestTraceErrors(t *testing.T) {
	for _, tc := range []struct{ file, format, err string }{
		{"bad_header.csv", FormatAzure, "testdata/bad_header.csv: line 1: header must be TIMESTAMP,ContextTokens,GeneratedTokens, got \"TIMESTAMP,Context,Generated\""},
		{"short_header.csv", FormatAzure, "testdata/short_header.csv: line 1: header must be TIMESTAMP,ContextTokens,GeneratedTokens, got \"TIMESTAMP,ContextTokens\""},
		{"long_header.csv", FormatAzure, "testdata/long_header.csv: line 1: header must be TIMESTAMP,ContextTokens,GeneratedTokens, got \"TIMESTAMP,ContextTokens,GeneratedTokens,Extra\""},
		{"cr_only.csv", FormatAzure, `testdata/cr_only.csv: line 1: header must be TIMESTAMP,ContextTokens,GeneratedTokens, got "TIMESTAMP,ContextTokens,GeneratedTokens\r2023-11-16 18:15:46.5,10..."`},
		{"empty.csv", FormatAzure, "testdata/empty.csv: the file is empty"},
		{"header_only.csv", FormatAzure, "testdata/header_only.csv: the trace has no records"},
		{"fields.csv", FormatAzure, "testdata/fields.csv: line 3: want 3 fields (TIMESTAMP,ContextTokens,GeneratedTokens)"},
		{"bare_quote.csv", FormatAzure, `testdata/bare_quote.csv: line 2, column 25: bare " in non-quoted-field`},
		{"bad_time.csv", FormatAzure, `testdata/bad_time.csv: line 3: TIMESTAMP "yesterday": want a time like 2023-11-16 18:15:46.6805900`},
		{"negative.csv", FormatAzure, "testdata/negative.csv: line 2: GeneratedTokens: must not be negative, got -4"},
		{"huge_tokens.csv", FormatAzure, "testdata/huge_tokens.csv: line 2: ContextTokens: must be at most 1000000 tokens, got 9000000000000000000"},
		{"overflow.csv", FormatAzure, "testdata/overflow.csv: line 2: GeneratedTokens: must be at most 1000000 tokens, got 99999999999999999999"},
		{"not_number.csv", FormatAzure, `testdata/not_number.csv: line 2: ContextTokens: must be a whole number, got "1e5"`},
		{"zero.csv", FormatAzure, "testdata/zero.csv: line 3: ContextTokens and GeneratedTokens are both 0"},
		{"span.csv", FormatAzure, "testdata/span.csv: line 4: TIMESTAMP: 2024-12-16 18:15:46.5 is more than 366 days after line 2's 2023-11-16 18:15:46.5: a trace spans at most 366 days"},
		{"span_before.csv", FormatAzure, "testdata/span_before.csv: line 3: TIMESTAMP: 0001-01-01 00:00:00 is more than 366 days before line 2's 2023-11-16 18:15:46.5: a trace spans at most 366 days"},
		{"far_future.csv", FormatAzure, "testdata/far_future.csv: line 3: TIMESTAMP: 2023-11-16 18:15:46.5 is more than 366 days before line 2's 9999-12-31 23:59:59.9999999: a trace spans at most 366 days"},

		{"empty.jsonl", FormatMooncake, "testdata/empty.jsonl: the file is empty"},
		{"blank.jsonl", FormatJSONL, "testdata/blank.jsonl: the trace has no records"},
		{"missing_output.jsonl", FormatMooncake, "testdata/missing_output.jsonl: line 2: output_length is missing"},
		{"bad_json.jsonl", FormatJSONL, "testdata/bad_json.jsonl: line 2: invalid character 'o' looking for beginning of object key string"},
		{"lengths.jsonl", FormatMooncake, "testdata/lengths.jsonl: line 1: timestamp is missing"},
		{"type_error.jsonl", FormatMooncake, "testdata/type_error.jsonl: line 4: input_length: must be an integer, got 1e30"},
		{"string_length.jsonl", FormatMooncake, "testdata/string_length.jsonl: line 1: input_length: must be an integer, got a string"},
		{"inf_timestamp.jsonl", FormatMooncake, "testdata/inf_timestamp.jsonl: line 1: timestamp: must be a finite number, got 1e400"},
		{"huge_timestamp.jsonl", FormatMooncake, "testdata/huge_timestamp.jsonl: line 2: timestamp: 1e+300 is more than 366 days after line 1's 0: a trace spans at most 366 days"},
		{"span_before.jsonl", FormatMooncake, "testdata/span_before.jsonl: line 2: timestamp: 0 is more than 366 days before line 1's 31708800000: a trace spans at most 366 days"},
		{"negative_timestamp.jsonl", FormatMooncake, "testdata/negative_timestamp.jsonl: line 2: timestamp: must not be negative, got -5"},
		{"huge_length.jsonl", FormatMooncake, "testdata/huge_length.jsonl: line 1: input_length: must be at most 1000000 tokens, got 9000000000000000000"},
		{"negative_length.jsonl", FormatJSONL, "testdata/negative_length.jsonl: line 2: input_tokens: must not be negative, got -3"},
		{"zero.jsonl", FormatJSONL, "testdata/zero.jsonl: line 2: input_tokens and output_tokens are both 0"},
		{"hash_ids.jsonl", FormatMooncake, "testdata/hash_ids.jsonl: line 2: hash_ids: input_length 7000 has at most 14 blocks of 512 tokens, got 15 hash ids"},
		{"hash_id_type.jsonl", FormatMooncake, "testdata/hash_id_type.jsonl: line 1: hash_ids: must be a list of integers, got a string"},
		{"array.jsonl", FormatMooncake, "testdata/array.jsonl: line 1: a record must be a JSON object, got an array"},
		{"null.jsonl", FormatJSONL, "testdata/null.jsonl: line 2: input_tokens is missing"},

		{"small.csv", "parquet", "testdata/small.csv: unknown trace format \"parquet\" (known: azure, mooncake, jsonl)"},
		{"nothing.csv", FormatAzure, "open testdata/nothing.csv: no such file or directory"},
		{".", FormatAzure, "testdata/.: not a regular file (a directory)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := LoadTrace("testdata/"+tc.file, tc.format)
			require.EqualError(t, err, tc.err)
		})
	}
}

// TestTraceLongLines: a line over MaxTraceLineBytes is named with the
// limit, in every format, without reading the rest of the file; a line
// just at the limit is read. The files are written here, not kept in
// testdata: they are megabytes.
func TestTraceLongLines(t *testing.T) {
	pad := func(n int) string { return strings.Repeat(" ", n) }
	rec := `{"timestamp": 0, "input_length": 100, "output_length": 10, "input_tokens": 100, "output_tokens": 10}`
	csvHead := "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	csvRow := "2023-11-16 18:15:46.5,100,10"
	for _, tc := range []struct {
		name, format, body, err string
	}{
		{"jsonl at the limit", FormatJSONL, rec + "\n" + rec + pad(MaxTraceLineBytes-len(rec)) + "\r\n", ""},
		{"jsonl over the limit", FormatJSONL, rec + "\n" + rec + pad(MaxTraceLineBytes-len(rec)+1) + "\n" + rec, "line 2: longer than 1048576 bytes"},
		{"mooncake endless line", FormatMooncake, rec + "\n\n" + pad(16<<20), "line 3: longer than 1048576 bytes"},
		{"azure at the limit", FormatAzure, csvHead + csvRow + pad(MaxTraceLineBytes-len(csvRow)) + "\r\n", ""},
		{"azure over the limit", FormatAzure, csvHead + csvRow + "\n" + csvRow + pad(MaxTraceLineBytes-len(csvRow)+1) + "\n", "line 3: longer than 1048576 bytes"},
		{"azure CR line ends", FormatAzure, csvHead + strings.Repeat(csvRow+"\r", MaxTraceLineBytes/len(csvRow)+1), "line 2: longer than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tc.body), tc.format)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.err)
		})
	}
}

// TestTraceBounds: records at the bounds are read.
func TestTraceBounds(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(`{"timestamp": 31622400000, "input_length": 1000000, "output_length": 0, "hash_ids": [`+
		strings.TrimSuffix(strings.Repeat("7, ", 1954), ", ")+`]}
{"timestamp": 0, "input_length": 0, "output_length": 1000000}
`), FormatMooncake)
	require.NoError(t, err)
	require.Equal(t, MaxTraceSpan, tr.Records[1].At, "366 days, sorted")
	require.Len(t, tr.Records[1].HashIDs, 1954)

	tr, err = ReadTrace(strings.NewReader("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-12-31 00:00:00,1000000,0\n2024-01-01 00:00:00,0,1\n"), FormatAzure)
	require.NoError(t, err)
	require.Equal(t, MaxTraceSpan-24*time.Hour, tr.Records[1].At, "2024 is a leap year: 365 days from Jan 1 to Dec 31")
}

// TestTraceFileTooLarge: a trace file above MaxTraceFileBytes is refused
// before it is read (a sparse file: nothing is written).
func TestTraceFileTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxTraceFileBytes+1))
	require.NoError(t, f.Close())
	_, err = LoadTrace(path, FormatJSONL)
	require.ErrorContains(t, err, "larger than the limit of 1073741824 bytes (1 GiB)")
}
