package simulator

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadFile(t *testing.T) {
	c, err := LoadFile("testdata/full.yml")
	require.NoError(t, err)
	want := DefaultConfig
	want.PrefixCache = &PrefixCacheConfig{BlockTokens: 512, MaxBlocks: 65536}
	want.Faults.ErrorRate = map[string]float64{"429": 0, "500": 0, "503": 0}
	want.Faults.Degrade = &DegradeConfig{Per: Duration(time.Hour)}
	require.Equal(t, want, *c, "testdata/full.yml spells out the defaults")

	c, err = Parse([]byte("slots: 0\nprefill: {per_token: 1us}\ntokenizer: {words: true}\n"))
	require.NoError(t, err)
	require.Equal(t, 0, c.Slots)
	require.Equal(t, Duration(time.Microsecond), c.Prefill.PerToken)
	require.Equal(t, DefaultConfig.Prefill.Base, c.Prefill.Base, "keys not given keep their default")
	require.Equal(t, TokenizerConfig{Words: true}, c.Tokenizer)
	require.Nil(t, c.PrefixCache)
}

func TestLoadFileErrors(t *testing.T) {
	for file, want := range map[string]string{
		"unknown_key.yml":      "testdata/unknown_key.yml: line 2: field prefil not found",
		"bad_duration.yml":     `testdata/bad_duration.yml: line 1: prefill.base: time: unknown unit " ms" in duration "5 ms"`,
		"negative.yml":         "testdata/negative.yml: max_queue: must not be negative, got -2\nslots: must not be negative, got -1",
		"error_sum.yml":        "testdata/error_sum.yml: faults.error_rate: rates must add up to at most 1, got 1.2",
		"bad_fault.yml":        "testdata/bad_fault.yml: faults.error_rate: key must be an HTTP status from 400 to 599, got \"200\"\nfaults.reset_rate: must be between 0 and 1, got 1.5",
		"bad_degrade.yml":      "testdata/bad_degrade.yml: faults.degrade.decode: must be between 0 and 1000, got 1001\nfaults.degrade.leak: must not be negative, got -1ms\nfaults.degrade.per: must be positive, got 0s\nfaults.degrade.prefill: must be between 0 and 1000, got NaN",
		"bad_lognormal.yml":    "testdata/bad_lognormal.yml: output_tokens.p90: must be greater than median (200), got 100",
		"bad_distribution.yml": `testdata/bad_distribution.yml: output_tokens.distribution: must be fixed, uniform or lognormal, got "zipf"`,
		"tokenizer_both.yml":   "testdata/tokenizer_both.yml: tokenizer: set either chars_per_token or words, not both",
		"bad_type.yml":         "testdata/bad_type.yml: line 1: cannot unmarshal !!str `eight` into int",
		"missing.yml":          "open testdata/missing.yml: no such file or directory",
	} {
		t.Run(file, func(t *testing.T) {
			_, err := LoadFile(filepath.Join("testdata", file))
			require.EqualError(t, err, want)
		})
	}
}
