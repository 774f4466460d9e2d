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
	want.ReasoningTokens = &Distribution{Distribution: "fixed", Value: 256}
	want.IdentityHeader = &HeaderConfig{Name: "x-model-version", Value: "1"}
	require.Equal(t, want, *c, "testdata/full.yml spells out the defaults (and the blocks absent by default)")

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
		"unknown_key.yml":      "testdata/unknown_key.yml: line 2: prefil: no such key (did you mean \"prefill\"?)",
		"bad_duration.yml":     `testdata/bad_duration.yml: line 1: prefill.base: time: unknown unit " ms" in duration "5 ms"`,
		"negative.yml":         "testdata/negative.yml: max_queue: must not be negative, got -2\nslots: must not be negative, got -1",
		"error_sum.yml":        "testdata/error_sum.yml: faults.error_rate: rates must add up to at most 1, got 1.2",
		"bad_fault.yml":        "testdata/bad_fault.yml: faults.error_rate: key must be an HTTP status from 400 to 599, got \"200\"\nfaults.reset_rate: must be between 0 and 1, got 1.5",
		"bad_degrade.yml":      "testdata/bad_degrade.yml: faults.degrade.decode: must be between 0 and 1000, got 1001\nfaults.degrade.leak: must not be negative, got -1ms\nfaults.degrade.per: must be positive, got 0s\nfaults.degrade.prefill: must be between 0 and 1000, got NaN",
		"bad_lognormal.yml":    "testdata/bad_lognormal.yml: output_tokens.p90: must be greater than median (200), got 100",
		"bad_distribution.yml": `testdata/bad_distribution.yml: output_tokens.distribution: must be fixed, uniform or lognormal, got "zipf"`,
		"tokenizer_both.yml":   "testdata/tokenizer_both.yml: tokenizer: set either chars_per_token or words, not both",
		"bad_type.yml":         "testdata/bad_type.yml: line 1: slots: cannot unmarshal !!str `eight` into int",
		"missing.yml":          "open testdata/missing.yml: no such file or directory",
	} {
		t.Run(file, func(t *testing.T) {
			_, err := LoadFile(filepath.Join("testdata", file))
			require.EqualError(t, err, want)
		})
	}
}

// TestQualityConfigErrors: the keys of reasoning, identity and content
// faults are checked strictly, and errors name the key and the value.
func TestQualityConfigErrors(t *testing.T) {
	for body, want := range map[string]string{
		"reasoning_tokens: {distribution: fixed, value: 0}":          "reasoning_tokens.value: must be at least 1, got 0",
		"reasoning_tokens: {distribution: zipf}":                     `reasoning_tokens.distribution: must be fixed, uniform or lognormal, got "zipf"`,
		"reasoning_tokens: {distribution: uniform, min: 10, max: 5}": "reasoning_tokens.max: must be at least min (10), got 5",
		"reasoning_tokens: {distribution: fixed, valeu: 3}":          "line 1: reasoning_tokens.valeu: no such key (did you mean \"value\"?)",
		"fingerprint: \"fp_\\u0007\"":                                `fingerprint: must not contain control characters, got "fp_\a"`,
		"identity_header: {name: \"x model\", value: v}":             `identity_header.name: must be an HTTP header name, got "x model"`,
		"identity_header: {name: x-v, value: \"a\\nb\"}":             `identity_header.value: must be an HTTP header value, got "a\nb"`,
		"identity_header: {name: content-type, value: x}":            "identity_header.name: content-type is set by the simulator itself",
		"identity_header: {value: x}":                                `identity_header.name: must be an HTTP header name, got ""`,
		"faults: {wrong_tool_rate: 1.5}":                             "faults.wrong_tool_rate: must be between 0 and 1, got 1.5",
		"faults: {invalid_json_rate: -0.1}":                          "faults.invalid_json_rate: must be between 0 and 1, got -0.1",
		"faults: {wrong_answer_rate: .nan}":                          "faults.wrong_answer_rate: must be between 0 and 1, got NaN",
		"faults: {stream_error_rate: 2}":                             "faults.stream_error_rate: must be between 0 and 1, got 2",
		"faults: {wrong_answers: 0.1}":                               "line 1: faults.wrong_answers: no such key",
	} {
		_, err := Parse([]byte(body))
		require.EqualError(t, err, want, body)
	}
	f, err := ParseFaults([]byte(`{"wrong_tool_rate": 0.1, "invalid_json_rate": 0.2, "wrong_answer_rate": 0.3, "stream_error_rate": 0.4}`))
	require.NoError(t, err)
	require.Equal(t, Faults{WrongToolRate: 0.1, InvalidJSONRate: 0.2, WrongAnswerRate: 0.3, StreamErrorRate: 0.4,
		Stall: StallConfig{Duration: DefaultConfig.Faults.Stall.Duration}}, f)
}
