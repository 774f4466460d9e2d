package prober

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTokenizeReply(t *testing.T) {
	for _, tc := range []struct {
		name          string
		reply         string
		count, maxLen int
		err           string
	}{
		{"vLLM", `{"count":3,"max_model_len":4096,"tokens":[1,2,3]}`, 3, 4096, ""},
		{"llama.cpp", `{"tokens":[1,2,3,4]}`, 4, 0, ""},
		{"llama.cpp with pieces", `{"tokens":[{"id":1,"piece":"a"},{"id":2,"piece":"b"}]}`, 2, 0, ""},
		{"empty list: not this form", `{"tokens":[]}`, 0, 0, "no token count"},
		{"zero count", `{"count":0}`, 0, 0, "no token count"},
		{"negative count", `{"count":-3}`, 0, 0, "no token count"},
		{"absurd count", `{"count":1000000000000}`, 0, 0, "no token count"},
		{"absurd context", `{"count":3,"max_model_len":-1}`, 3, 0, ""},
		{"count of the wrong type", `{"count":"3"}`, 0, 0, "not a tokenize reply"},
		{"not JSON", `<html>`, 0, 0, "not a tokenize reply"},
		{"null", `null`, 0, 0, "no token count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, ml, err := parseTokenizeReply([]byte(tc.reply))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.count, n)
			require.Equal(t, tc.maxLen, ml)
		})
	}
}

func TestContextReplies(t *testing.T) {
	require.Equal(t, 8192, parseModelsContext([]byte(`{"data":[{"id":"a","max_model_len":4096},{"id":"m","max_model_len":8192}]}`), "m"))
	require.Equal(t, 4096, parseModelsContext([]byte(`{"data":[{"id":"other","max_model_len":4096}]}`), "m"), "the only model")
	require.Zero(t, parseModelsContext([]byte(`{"data":[{"id":"a"},{"id":"b"}]}`), "m"))
	require.Zero(t, parseModelsContext([]byte(`[1,2]`), "m"))
	require.Equal(t, 1024, parsePropsContext([]byte(`{"default_generation_settings":{"n_ctx":1024}}`)))
	require.Equal(t, 2048, parsePropsContext([]byte(`{"n_ctx":2048}`)))
	require.Zero(t, parsePropsContext([]byte(`{"n_ctx":"big"}`)))
}

// FuzzParseTokenizeReply: any reply gives a count in (0, maxReportedTokens]
// and a context in [0, maxReportedTokens], or an error; never a panic.
func FuzzParseTokenizeReply(f *testing.F) {
	for _, s := range []string{`{"count":3,"max_model_len":4096,"tokens":[1,2,3]}`, `{"tokens":[1,2]}`, `{"tokens":[]}`, `null`, `{"count":1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ml, err := parseTokenizeReply(b)
		if err != nil {
			return
		}
		if n <= 0 || n > maxReportedTokens || ml < 0 || ml > maxReportedTokens {
			t.Fatalf("%q: count %d, context %d", b, n, ml)
		}
		_ = parseModelsContext(b, "m")
		_ = parsePropsContext(b)
	})
}

func TestCalibrationLengthsWithinContext(t *testing.T) {
	for _, tc := range []struct {
		context int
		want    []int
	}{
		{0, []int{64, 1024}},
		{32768, []int{64, 1024}},
		{8192, []int{64, 1024}},
		{4096, []int{64, 512}},
		{1024, []int{16, 128}},
		{256, []int{4, 32}},
		{10, []int{1, 8}},
	} {
		got := calibrationLengths(tc.context)
		require.Equal(t, tc.want, got, "context %d", tc.context)
		if tc.context > 0 {
			require.LessOrEqual(t, float64(got[1])*MaxTokensPerWord, float64(max(tc.context, 64)), "the longer prompt fits the context whatever the tokenizer")
		}
	}
}
