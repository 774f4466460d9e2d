package config

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/prober/workload"
)

func TestLoadFileGood(t *testing.T) {
	c, err := LoadFile("testdata/good.yml", false)
	require.NoError(t, err)
	require.Len(t, c.Targets, 2)
	local := c.Target("local")
	require.Equal(t, "http://127.0.0.1:8000/v1", local.URL)
	require.Equal(t, model.Duration(2*time.Minute), local.Timeout)
	require.Equal(t, 4.0, *local.CostPerHour)
	abs, err := filepath.Abs("testdata/token.txt")
	require.NoError(t, err)
	require.Equal(t, abs, mustAbs(t, local.HTTPClientConfig.Authorization.CredentialsFile), "relative paths resolve against the config file")
	require.True(t, local.HTTPClientConfig.FollowRedirects, "HTTP client defaults apply")

	legacy := c.Target("legacy")
	require.Equal(t, "completions", legacy.API)
	require.Equal(t, 64, legacy.MaxInFlight, "default")
	require.Nil(t, legacy.CostPerHour)

	short := c.Scenario("short")
	require.Equal(t, workload.FixedLength(256), short.InputTokens, "default")
	require.Equal(t, 0.99, short.Objective, "default")
	require.Equal(t, []SLO{{"ttft", 200 * time.Millisecond}}, short.SLO.List())
	require.Len(t, c.Scenario("chat").SLO.List(), 4)

	require.True(t, c.Canary[0].IsEnabled())
	require.False(t, c.Canary[1].IsEnabled())
	require.Equal(t, []Key{{"local", "chat", "canary"}}, c.Canary[0].Keys())

	require.Contains(t, c.String(), "password: <secret>")
	require.NotContains(t, c.String(), "hunter2")
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	require.NoError(t, err)
	return a
}

func TestLoadFileErrors(t *testing.T) {
	for _, tc := range []struct {
		file string
		want string
	}{
		{"unknown_key.yml", "testdata/unknown_key.yml: line 5: field timout not found"},
		{"bad_duration.yml", `testdata/bad_duration.yml: not a valid duration string: "fast"`},
		{"bad_values.yml", `testdata/bad_values.yml: global.max_rate: must be positive, got 0
global.max_in_flight: must be positive, got -1
targets[0].name: must match [a-zA-Z0-9_-]+, got "my target"
targets[0].url: scheme must be http or https, got "ftp://127.0.0.1/v1"
targets[0].api: must be chat or completions, got "responses"
targets[0].model: must not be empty
targets[0].timeout: must be positive, got 0s
targets[0].max_in_flight: must be positive, got 0
targets[0].max_tokens_field: must be max_tokens or max_completion_tokens, got "tokens"
targets[0].cost_per_hour: must not be negative, got -1
scenarios[0].input_tokens: must be at least 1, got 0
scenarios[0].output_tokens: must be at least 1, got -5
scenarios[0].objective: must be between 0 and 1 (exclusive), got 1
canary[0].target: unknown target "nowhere"
canary[0].scenario: unknown scenario "nothing"
canary[0].rate: must be positive, got 0
canary[0].arrival: must be constant, poisson or gamma, got "bursty"`},
		{"duplicates.yml", `testdata/duplicates.yml: targets[1].name: duplicate target name "local"
scenarios[1].name: duplicate scenario name "chat"
canary[1]: canary[0] and canary[1] both produce target="local" scenario="chat" test="canary"`},
		{"over_rate.yml", "testdata/over_rate.yml: canary: the enabled loads add up to 6 req/s, above global.max_rate 5"},
		{"bad_auth.yml", "testdata/bad_auth.yml: targets[0]: at most one of bearer_token & bearer_token_file must be configured"},
		{"missing.yml", "open testdata/missing.yml: no such file or directory"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := LoadFile(filepath.Join("testdata", tc.file), false)
			require.EqualError(t, err, tc.want)
		})
	}
}

func TestExpandEnv(t *testing.T) {
	t.Setenv("SLOPROBER_TEST_URL", "https://127.0.0.1:8443/v1")
	t.Setenv("SLOPROBER_TEST_TOKEN", "s3cret")
	c, err := LoadFile("testdata/env.yml", true)
	require.NoError(t, err)
	require.Equal(t, "https://127.0.0.1:8443/v1", c.Targets[0].URL)
	require.Equal(t, "s3cret", string(c.Targets[0].HTTPClientConfig.Authorization.Credentials))
	require.NotContains(t, c.String(), "s3cret")

	_, err = LoadFile("testdata/env.yml", false)
	require.EqualError(t, err, `testdata/env.yml: targets[0].url: scheme must be http or https, got "${SLOPROBER_TEST_URL}"`)

	t.Setenv("SLOPROBER_TEST_URL", "")
	_, err = Load([]byte("targets: [{name: x, url: '${NOT_SET_ANYWHERE_1}', model: '${NOT_SET_ANYWHERE_2}'}]"), true)
	require.EqualError(t, err, "environment variable NOT_SET_ANYWHERE_1, NOT_SET_ANYWHERE_2 is not set")
}

func TestEmptyConfigIsValid(t *testing.T) {
	c, err := Load(nil, false)
	require.NoError(t, err)
	require.Equal(t, DefaultGlobalConfig, c.Global)
}

func TestWorkloadConfig(t *testing.T) {
	c, err := LoadFile("testdata/workloads.yml", false)
	require.NoError(t, err)
	mix := c.Canary[0]
	names, weights := mix.Scenarios()
	require.Equal(t, []string{"chat", "code", "real-mix"}, names)
	require.Equal(t, []float64{7, 1, 2}, weights)
	require.Equal(t, []float64{1.4, 0.2, 0.4}, c.ScenarioRates(mix), "a mix splits its rate by weight")
	require.Equal(t, "gamma", mix.Process())
	require.Equal(t, 0.5, mix.Shape())
	require.Len(t, mix.Keys(), 3)

	real := c.Scenario("real-mix")
	require.Len(t, real.LengthsFrom.Trace.Records, 2, "trace files are read with the config, relative to it")
	require.Equal(t, &PrefixConfig{Tokens: 1000, Share: 0.8, Groups: 4}, real.Prefix)
	require.Equal(t, 3, real.Conversation.Turns)
	require.Equal(t, model.Duration(500*time.Millisecond), real.Cancel.After)
	require.Equal(t, workload.Distribution{Kind: workload.Empirical, Values: []int{128, 512}, Weights: []float64{1, 3}, Min: 1}, c.Scenario("code").InputTokens)

	replay := c.Canary[1]
	require.Len(t, replay.Replay.Trace.Records, 4)
	require.True(t, replay.Replay.Loops(), "loop defaults to true")
	// 3 gaps in 2s of trace, replayed at double speed: 3 req/s.
	require.InDelta(t, 3, c.LoadRate(replay), 1e-9)
	require.Contains(t, c.String(), "lengths_from:\n    file: traces/lengths.jsonl")
}

func TestWorkloadConfigErrors(t *testing.T) {
	_, err := LoadFile("testdata/bad_workloads.yml", false)
	require.EqualError(t, err, `testdata/bad_workloads.yml: scenarios[0].input_tokens: p90: must be greater than median (600), got 300
scenarios[0].output_tokens: must be at least 1, got 0
scenarios[0].lengths_from: file: open testdata/traces/none.jsonl: no such file or directory
scenarios[0].prefix.tokens: must be at least 1, got 0
scenarios[0].prefix.share: must be between 0 and 1, got 1.5
scenarios[0].prefix.groups: must be at least 1, got 0
scenarios[0].conversation.turns: must be at least 1, got 0
scenarios[0].cancel.share: must be between 0 and 1, got -1
scenarios[0].cancel.after: must be positive, got 0s
scenarios[2].lengths_from: format: must be one of azure, mooncake, jsonl, got "csv"
canary[0]: set either scenario or mix, not both
canary[0]: scenario "b" has conversations, which need a chat target; target "local" has api completions
canary[0]: scenario "b" cancels after 2s, which must be less than target "local"'s timeout 1s
canary[1].mix.c: weight must be positive, got 0
canary[1].mix: unknown scenario "zz"
canary[1].burstiness: applies to arrival: gamma only
canary[1]: scenario "b" has conversations, which need a chat target; target "local" has api completions
canary[1]: scenario "b" cancels after 2s, which must be less than target "local"'s timeout 1s
canary[1]: canary[0] and canary[1] both produce target="local" scenario="b" test="canary"
canary[2].replay: the trace sets the arrivals: leave out rate, arrival and burstiness
canary[2].replay.speed: must be positive, got 0
canary[2].replay.file: traces/lengths.jsonl has no timestamps to replay
canary[2]: canary[1] and canary[2] both produce target="local" scenario="c" test="canary"
canary[3]: set scenario or mix
canary[3].rate: must be positive, got 0`)
}
