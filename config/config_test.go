package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/workload"
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
	require.True(t, local.HTTPClientConfig.EnableHTTP2, "HTTP client defaults apply")
	require.False(t, local.HTTPClientConfig.FollowRedirects, "probes do not follow redirects by default")
	require.Equal(t, 32768, local.MaxContext)

	legacy := c.Target("legacy")
	require.Equal(t, "completions", legacy.API)
	require.Equal(t, 64, legacy.MaxInFlight, "default")
	require.Nil(t, legacy.CostPerHour)
	require.True(t, legacy.HTTPClientConfig.FollowRedirects, "follow_redirects: true is kept")
	require.Zero(t, legacy.MaxContext, "left to the server's report")

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

// TestLoadFileErrors: every bad file is rejected with errors that name the
// file, the key and the value (and the line, where the YAML decoder fails),
// never with a panic.
func TestLoadFileErrors(t *testing.T) {
	for _, tc := range []struct {
		file string
		want string
	}{
		// Every error of the file at once, each with its line and key;
		// a typo is told the key it is likely of.
		{"several_errors.yml", `testdata/several_errors.yml: line 5: targets[0].timout: no such key (did you mean "timeout"?)
line 9: scenarios[0].input_tokens: a length is a number or a mapping with a distribution key, got "abc"
line 10: scenarios[0].objectve: no such key (did you mean "objective"?)
line 12: test: no such key (did you mean "tests"?)`},
		// Ten mistakes, the decoding errors and those of what decodes of
		// the rest told together (a misspelled reference beside a bad
		// duration), each with what was meant where it can be guessed.
		{"ten_mistakes.yml", `testdata/ten_mistakes.yml: line 2: global.max_rate: must be positive and at most 10000 req/s, got 0
line 4: targets[0].url: is required: the endpoint's base URL, e.g. http://127.0.0.1:8000/v1
line 6: targets[0].timout: no such key (did you mean "timeout"?)
line 8: targets[1].url: must start with http:// or https://, e.g. http://127.0.0.1:8000/v1, got "127.0.0.1:30000/v1"
line 14: scenarios[0].slo.ttft: not a valid duration string: "2": a duration needs its unit: "2s", "2ms"?
line 15: scenarios[0].objective: must be between 0 and 1 (exclusive), got 95 (95%? write 0.95)
line 17: canary[0].target: unknown target "vlm" (did you mean "vllm"?)
line 21: canary[1].scenario: unknown scenario "chta" (did you mean "chat"?)
line 23: canary[1].arrival: must be constant, poisson or gamma, got "bursty"
line 24: test: no such key (did you mean "tests"?)`},
		// Every required key left out is named, with what it is, at the
		// line of its entry: a target's, a scenario's, a canary load's
		// (with the names it may be) and a test's.
		{"missing_target_keys.yml", `testdata/missing_target_keys.yml: line 4: targets[0].name: is required: the target's name, its target label value ([a-zA-Z0-9_-]+), e.g. vllm
line 4: targets[0].model: is required: the model to ask for, as the server names it (its /v1/models), e.g. meta-llama/Llama-3.1-8B-Instruct
line 5: targets[1].url: is required: the endpoint's base URL, e.g. http://127.0.0.1:8000/v1
line 10: targets[2].forecast.peak_rate: is required: the forecast peak in req/s, e.g. 120
line 11: targets[2].server_metrics.url: is required: the engine's metrics endpoint, e.g. http://127.0.0.1:8000/metrics
line 15: targets[3].gpu.prometheus.url: is required: the Prometheus server's base URL, e.g. http://127.0.0.1:9090
line 19: targets[4].gpu.exporter.url: is required: the DCGM exporter's metrics URL, e.g. http://127.0.0.1:9400/metrics`},
		{"missing_scenario_keys.yml", `testdata/missing_scenario_keys.yml: line 4: scenarios[0].name: is required: the scenario's name, its scenario label value ([a-zA-Z0-9_-]+), e.g. chat
line 6: scenarios[1].lengths_from.file: is required: the trace file, relative to the configuration file, e.g. traffic.csv
line 6: scenarios[1].lengths_from.format: is required: the trace's format, one of: azure, mooncake, jsonl
line 8: scenarios[2].prefix.tokens: is required: the length of each shared prompt in tokens, e.g. 1000
line 8: scenarios[2].prefix.groups: is required: the number of different shared prompts, e.g. 4
line 10: scenarios[3].tenants.count: is required: the number of tenants, 1 to 100000, e.g. 50
line 12: scenarios[4].conversation.turns: is required: the turns of each conversation, 1 to 1000, e.g. 3
line 14: scenarios[5].cancel.after: is required: how long after sending the client cancels, e.g. 500ms
line 16: scenarios[6].check.tool_call.prompt: is required: the user's request the tools answer, e.g. "What is the weather in Paris?"
line 16: scenarios[6].check.tool_call.tools: is required: the functions offered, a list of 1 to 128, e.g. [{name: get_weather, parameters: {type: object}}]
line 21: scenarios[7].check.tool_call.tools[0].name: is required: the function's name (^[a-zA-Z0-9_-]{1,64}$), e.g. get_weather`},
		{"missing_canary_keys.yml", `testdata/missing_canary_keys.yml: line 11: canary[0].target: is required: the name of a target under targets:, one of: a, b
line 12: canary[1].scenario: is required: the name of a scenario under scenarios:, one of: chat, code; or mix: several by weight
line 13: canary[2].rate: is required: the arrival rate in req/s, between 0.0001 and 10000, e.g. 1
line 14: canary[3].replay.file: is required: the trace file, relative to the configuration file, e.g. traffic.csv
line 14: canary[3].replay.format: is required: the trace's format, one of: azure, mooncake, jsonl`},
		{"missing_test_keys.yml", `testdata/missing_test_keys.yml: line 11: tests[0].name: is required: the test's name, its test label value ([a-zA-Z0-9_-]+, not "canary"), e.g. capacity
line 12: tests[1].kind: is required: the kind of test, one of: step (a capacity search), soak (a fixed rate for hours)
line 13: tests[2].target: is required: the name of a target under targets:, one of: a, sim
line 14: tests[3].scenario: is required: the name of a scenario under scenarios:, one of: chat, tenants; or mix: several by weight
line 15: tests[4].schedule.cron: is required: when the test runs: 5 fields (minute hour day month weekday) or a descriptor, e.g. "0 3 * * *" or "@daily" (leave out schedule to run the test on demand only)
line 16: tests[5].replay.format: is required: the trace's format, one of: azure, mooncake, jsonl
line 17: tests[6].verify.hot_tenant.factor: is required: how many times its share the hot tenant sends, above 1 and at most 100, e.g. 10
line 18: tests[7].rate: is required: the soak's arrival rate in req/s, between 0.0001 and 10000, e.g. 2
line 18: tests[7].duration: is required: how long the soak runs, at most 7d, e.g. 2h
line 26: tests[8].faults[0].for: is required: how long the fault lasts, e.g. 5m
line 27: tests[8].faults[1].http.url: is required: the URL the fault's request is sent to, e.g. http://127.0.0.1:8080/fault
line 28: tests[8].faults[2].kubernetes.namespace: is required: the namespace of the pods to delete one of, e.g. inference
line 28: tests[8].faults[2].kubernetes.selector: is required: the label selector of the pods to delete one of, e.g. app=vllm
line 29: tests[8].faults[3].exec.command: is required: the command to run, an argv list, e.g. ["/usr/local/bin/chaos", "--kill"]`},
		// A key of another tool's, too far from the known one for a typo,
		// is told the key it means; the kind it then lacks is left to that
		// error.
		{"type_for_kind.yml", `testdata/type_for_kind.yml: line 5: targets[0].base_url: no such key (did you mean "url"?)
line 5: targets[0].model_name: no such key (did you mean "model"?)
line 9: canary[0].qps: no such key (did you mean "rate"?)
line 12: tests[0].type: no such key (did you mean "kind"?)`},
		{"unknown_key.yml", "testdata/unknown_key.yml: line 5: targets[0].timout: no such key (did you mean \"timeout\"?)"},
		{"bad_duration.yml", `testdata/bad_duration.yml: line 3: scenarios[0].slo.ttft: not a valid duration string: "fast"`},
		{"bad_timeout.yml", `testdata/bad_timeout.yml: line 5: targets[0].timeout: not a valid duration string: "five"`},
		{"bad_think_time.yml", `testdata/bad_think_time.yml: line 8: scenarios[1].conversation.think_time: unknown unit " seconds" in duration "5 seconds"`},
		{"bad_values.yml", `testdata/bad_values.yml: line 1: global.max_rate: must be positive and at most 10000 req/s, got 0
line 1: global.max_in_flight: must be between 1 and 100000, got -1
line 3: targets[0].name: must match [a-zA-Z0-9_-]+, got "my target"
line 4: targets[0].url: scheme must be http or https, got "ftp://127.0.0.1/v1"
line 5: targets[0].api: must be one of chat, completions, responses, messages, got "grpc"
line 6: targets[0].model: must not be empty
line 7: targets[0].timeout: must be positive, got 0s
line 8: targets[0].max_in_flight: must be between 1 and 100000, got 0
line 9: targets[0].max_tokens_field: must be max_tokens or max_completion_tokens, got "tokens"
line 10: targets[0].cost_per_hour: must be a finite number, not negative, got -1
line 13: scenarios[0].input_tokens: must be at least 1, got 0
line 14: scenarios[0].output_tokens: must be at least 1, got -5
line 15: scenarios[0].objective: must be between 0 and 1 (exclusive), got 1
line 17: canary[0].target: unknown target "nowhere"
line 17: canary[0].scenario: unknown scenario "nothing"
line 17: canary[0].rate: must be between 0.0001 and 10000 req/s, got 0
line 17: canary[0].arrival: must be constant, poisson or gamma, got "bursty"`},
		{"duplicates.yml", `testdata/duplicates.yml: line 3: targets[1].name: duplicate target name "local"
line 6: scenarios[1].name: duplicate scenario name "chat"
line 9: canary[1]: canary[0] and canary[1] both produce target="local" scenario="chat" test="canary"`},
		// A secret pasted with its newline: named, never shown.
		{"header_newline.yml", `testdata/header_newline.yml: line 5: targets[0].authorization.credentials (or bearer_token): must not contain a newline or another control character: it is sent as a header value
line 7: targets[0].http_headers.x-api-key.secrets[0]: must not contain a newline or another control character: it is sent as a header value
line 8: targets[0].http_headers.x-team.values[0]: must not contain a newline or another control character: it is sent as a header value, got "a\rb"
line 9: targets[0].server_metrics.authorization.credentials (or bearer_token): must not contain a newline or another control character: it is sent as a header value`},
		// A query is kept (after the API's path); a fragment is refused.
		{"url_fragment.yml", `testdata/url_fragment.yml: line 2: targets[0].url: a #fragment is never sent to a server; remove it, got "http://127.0.0.1:8000/v1#chat"`},
		{"over_rate.yml", "testdata/over_rate.yml: line 7: canary: the enabled loads add up to 6 req/s, above global.max_rate 5"},
		{"bad_auth.yml", "testdata/bad_auth.yml: line 2: targets[0]: at most one of bearer_token & bearer_token_file must be configured"},
		{"bad_tracing.yml", `testdata/bad_tracing.yml: line 6: targets[0].timing.sources[1]: must be one of timings, server_timing, headers, got "spans"
line 6: targets[0].timing.sources[2]: duplicate source "timings"
line 7: targets[0].timing.timings.wait: must be one of gateway, queue, prefill, decode, got "network"
line 8: targets[0].timing.headers: "bad header" is not a valid name
line 8: targets[0].timing.headers: "server-timing" is not a valid name
line 10: targets[0].server_metrics.url: scheme must be http or https, got "ftp://127.0.0.1:8000/metrics"
line 11: targets[0].server_metrics.interval: must be between 1s and 1h, got 100ms
line 12: targets[0].server_metrics.timeout: must be positive and at most the interval (100ms), got 1m
line 18: tracing.endpoint: must be host:port, got "127.0.0.1"
line 19: tracing.client_type: must be grpc or http, got "udp"
line 20: tracing.sampling_fraction: must be between 0 and 1, got 1.5
line 21: tracing.compression: must be gzip or left out, got "zstd"
line 22: tracing.timeout: must be positive, got 0s
line 23: tracing.queue_size: must be between 1 and 100000, got 0
line 24: tracing.headers: "x y" is not a valid header name`},
		{"missing.yml", "open testdata/missing.yml: no such file or directory"},
		{"bad_report_keys.yml", `testdata/bad_report_keys.yml: line 5: targets[0].replicas: must be between 1 and 10000, got 0
line 6: targets[0].forecast.peak_rate: must be a positive number of req/s, got -3
line 6: targets[0].forecast.spare_replicas: must be between 0 and 10000, got -1
line 7: targets[0].metadata.gpu: must not contain control characters, got "H100\a"
line 11: targets[1].replicas: must be between 1 and 10000, got 100000
line 12: targets[1].forecast.peak_rate: must be a positive number of req/s, got NaN
line 16: targets[2].forecast.average_rate: must be a positive number of req/s at most peak_rate (10), got 12`},

		// Absurd numbers (issue 9, items 7, 12 and 18).
		{"huge_tokens.yml", `testdata/huge_tokens.yml: line 3: targets[0].max_context: must be between 1 and 1000000 tokens (or left out), got 2000000
line 4: targets[1].max_context: must be between 1 and 1000000 tokens (or left out), got -1
line 7: scenarios[0].input_tokens: must be at most 1000000 tokens, got 9000000000000000000
line 8: scenarios[0].output_tokens: must be at most 1000000 tokens, got 10000000000
line 10: scenarios[1].input_tokens: p90: must be at most 1000000 tokens, got 1e+300
line 11: scenarios[1].output_tokens: max: must be at most 1000000 tokens, got 1000001
line 12: scenarios[1].prefix.tokens: must be between 1 and 1000000 tokens, got 9000000000000000000
line 14: scenarios[2].input_tokens: values[1]: must be at most 1000000 tokens, got 2000000
line 15: scenarios[2].output_tokens: mean: must be positive and at most 1000000 tokens, got NaN`},
		{"float_tokens.yml", "testdata/float_tokens.yml: line 7: scenarios[1].input_tokens: must be at most 1000000 tokens, got 1e+300"},
		{"fraction_tokens.yml", "testdata/fraction_tokens.yml: line 3: scenarios[0].output_tokens: must be a whole number of tokens, got 2.5"},
		{"no_distribution.yml", "testdata/no_distribution.yml: line 4: scenarios[0].input_tokens: a length is a number or a mapping with a distribution key"},
		{"overflow_int.yml", "testdata/overflow_int.yml: line 5: targets[0].max_in_flight: cannot unmarshal !!int `9223372...` into int"},
		{"huge_rates.yml", `testdata/huge_rates.yml: line 2: global.max_rate: must be positive and at most 10000 req/s, got 1e+12
line 2: global.max_in_flight: must be between 1 and 100000, got 9000000000000000000
line 4: targets[0].max_in_flight: must be between 1 and 100000, got 1000000
line 4: targets[0].cost_per_hour: must be a finite number, not negative, got NaN
line 7: scenarios[0].objective: must be between 0 and 1 (exclusive), got NaN
line 8: scenarios[0].prefix.share: must be between 0 and 1, got NaN
line 9: scenarios[0].cancel.share: must be between 0 and 1, got +Inf
line 15: canary[0].rate: must be between 0.0001 and 10000 req/s, got 1e+09
line 16: canary[1].rate: must be between 0.0001 and 10000 req/s, got NaN
line 17: canary[2].rate: must be between 0.0001 and 10000 req/s, got +Inf
line 18: canary[3].rate: must be between 0.0001 and 10000 req/s, got 1e-300
line 18: canary[3].burstiness: must be between 0.01 and 100, got NaN
line 19: canary[4].mix.e: weight must be positive, got NaN
line 19: canary[4].burstiness: must be between 0.01 and 100, got 1e-300`},
		{"replay_rate.yml", `testdata/replay_rate.yml: line 10: canary[0].replay: traces/trace.jsonl at speed 10000 is 15000 req/s (a mean of 1.5 req/s), above the maximum of 10000 req/s
line 11: canary[1].replay.file: traces/instant.jsonl spans no time (2 records, all at the same time): nothing to replay
line 12: canary[2].replay.speed: must be a finite number of at least 0.01, got 0.001
line 13: canary[3].replay.speed: must be a finite number of at least 0.01, got +Inf`},
		{"bad_traces.yml", `testdata/bad_traces.yml: line 3: scenarios[0].lengths_from: file: testdata/traces/huge.jsonl: line 2: input_tokens: must be at most 1000000 tokens, got 9000000000000000000
line 5: scenarios[1].lengths_from: file: /dev/null: not a regular file (a device)
line 7: scenarios[2].lengths_from: file: testdata/traces/empty.csv: the file is empty`},
		{"turns.yml", "testdata/turns.yml: line 3: scenarios[0].conversation.turns: must be between 1 and 1000, got 1000000"},
		{"long_names.yml", `testdata/long_names.yml: line 2: targets[0].name: must be at most 64 bytes, got 65 bytes ("tttttttttttttttttttttttttttttttt"...)
line 4: targets[0].model: must be at most 256 bytes, got 257 bytes ("mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm"...)
line 5: targets[1].model: must not contain control characters, got "my\tmodel\n"
line 7: scenarios[0].name: must be at most 64 bytes, got 100 bytes ("ssssssssssssssssssssssssssssssss"...)`},
		// A bad URL is named, its password redacted (issue 9, item 13).
		{"secret_url.yml", `testdata/secret_url.yml: line 2: targets[0].url: scheme must be http or https, got "ftp://user:xxxxx@127.0.0.1/v1"
line 3: targets[1].url: invalid URL, got "http://user:xxxxx@127.0.0.1:port/v1"
line 4: targets[2].url: must start with http:// or https://, e.g. http://127.0.0.1:8000/v1, got "user:xxxxx@127.0.0.1:8000/v1"`},
		// A credential still holding ${VAR} (init writes them) would be
		// sent as the literal text without --config.expand-env.
		{"unexpanded_secret.yml", "testdata/unexpanded_secret.yml: line 6: targets[0].http_headers.X-Api-Key.secrets[0]: holds ${SLOPROBER_HEADER_X_API_KEY}, an environment reference not expanded: start sloprober with --config.expand-env (and the variable set), or the literal text is sent as the credential\n" +
			"line 7: targets[0].authorization.credentials (or bearer_token): holds ${TOKEN}, an environment reference not expanded: start sloprober with --config.expand-env (and the variable set), or the literal text is sent as the credential\n" +
			"(the file has ${VAR} references, the first ${SLOPROBER_HEADER_X_API_KEY} on line 6: they are expanded with --config.expand-env)"},
		// A URL copied with its API path: sloprober appends it itself.
		{"api_path_url.yml", `testdata/api_path_url.yml: line 2: targets[0].url: is the base URL, without the API's path (sloprober appends "/chat/completions" itself): write "http://127.0.0.1:8000/v1"
line 3: targets[1].url: is the base URL, without the API's path (sloprober appends "/responses" itself): write "https://user:xxxxx@gw.example:443/openai/v1"`},
		{"secret_proxy.yml", `testdata/secret_proxy.yml: line 5: targets[0].proxy_url: parse "http://proxy:xxxxx@proxy host:3128": invalid character " " in host name`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := LoadFile(filepath.Join("testdata", tc.file), false)
			require.EqualError(t, err, tc.want)
		})
	}
}

// TestLongValuesClipped: a value as long as the file is cut in its error,
// which is logged and shown on the landing page.
func TestLongValuesClipped(t *testing.T) {
	_, err := LoadFile("testdata/long_values.yml", false)
	require.Error(t, err)
	lines := strings.Split(strings.TrimPrefix(err.Error(), "testdata/long_values.yml: "), "\n")
	require.Len(t, lines, 2)
	for i, l := range lines {
		// The line number is added to the clipped error.
		line := regexp.MustCompile(`^line \d+: `).FindString(l)
		require.NotEmpty(t, line, l)
		l = strings.TrimPrefix(l, line)
		lines[i] = l
		require.LessOrEqual(t, len(l), maxErrorBytes+len("..."))
		require.True(t, strings.HasSuffix(l, "..."), l)
	}
	require.True(t, strings.HasPrefix(lines[0], `targets[0].url: scheme must be http or https, got "ftp://hhhh`), lines[0])
	require.True(t, strings.HasPrefix(lines[1], `canary[0].target: unknown target "tttt`), lines[1])
}

// TestBounds: values at the documented bounds are valid.
func TestBounds(t *testing.T) {
	c, err := LoadFile("testdata/max_rate.yml", false)
	require.NoError(t, err)
	require.Equal(t, float64(MaxLoadRate), c.Global.MaxRate)
	require.Equal(t, workload.MaxTokens, c.Target("local").MaxContext)
	require.Equal(t, MinBurstiness, c.Canary[1].Shape())
}

// TestLoadFileTooLarge: a configuration above MaxConfigFileBytes is
// rejected naming the file and the limit; one at the limit is parsed (here
// it fails at its first byte, a tab, which keeps the test fast). The files
// are written here: they are megabytes.
func TestLoadFileTooLarge(t *testing.T) {
	dir := t.TempDir()
	comment := func(n int) []byte { return append([]byte("#"), bytes.Repeat([]byte("x"), n-1)...) }

	atLimit := filepath.Join(dir, "at_limit.yml")
	require.NoError(t, os.WriteFile(atLimit, append([]byte("\t"), comment(MaxConfigFileBytes-1)...), 0o600))
	_, err := LoadFile(atLimit, false)
	require.EqualError(t, err, atLimit+": yaml: found character that cannot start any token")

	tooLarge := filepath.Join(dir, "too_large.yml")
	require.NoError(t, os.WriteFile(tooLarge, comment(MaxConfigFileBytes+1), 0o600))
	_, err = LoadFile(tooLarge, false)
	require.EqualError(t, err, tooLarge+": larger than the limit of 4194304 bytes (4 MiB)")

	_, err = Load(comment(MaxConfigFileBytes+1), false)
	require.EqualError(t, err, "larger than the limit of 4194304 bytes (4 MiB)")

	t.Setenv("SLOPROBER_TEST_LARGE", string(comment(MaxConfigFileBytes)))
	_, err = Load([]byte("# ${SLOPROBER_TEST_LARGE}"), true)
	require.EqualError(t, err, "with environment variables expanded: larger than the limit of 4194304 bytes (4 MiB)")
}

// TestRedactURL: the password of a URL's userinfo is never shown, whether
// net/url parses the URL or not.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:s3cr3tpass@127.0.0.1:38000/v1":    "http://user:xxxxx@127.0.0.1:38000/v1",
		"https://user:s3cr3tpass@host/v1?q=1#f":        "https://user:xxxxx@host/v1?q=1#f",
		"http://user:s3cr3t%40pass@host/v1":            "http://user:xxxxx@host/v1",
		"http://user:s3cr3t@pass@host/v1":              "http://user:xxxxx@host/v1",
		"http://user:s3cr3tpass@host:port/v1":          "http://user:xxxxx@host:port/v1",
		"http://user:s3cr3tpass@host/v1%zz":            "http://user:xxxxx@host/v1%zz",
		"user:s3cr3tpass@host:8000/v1":                 "user:xxxxx@host:8000/v1",
		"ftp://user:s3cr3tpass@host/v1":                "ftp://user:xxxxx@host/v1",
		"http://user@host/v1":                          "http://user@host/v1",
		"http://host/v1/a@b:c":                         "http://host/v1/a@b:c",
		"http://127.0.0.1:8000/v1":                     "http://127.0.0.1:8000/v1",
		"${SLOPROBER_TEST_URL}":                        "${SLOPROBER_TEST_URL}",
		"":                                             "",
		"http://[::1]:8000/v1":                         "http://[::1]:8000/v1",
		"http://user:s3cr3tpass@[::1]:8000/v1":         "http://user:xxxxx@[::1]:8000/v1",
		"http://user:s3cr3tpass@127.0.0.1:38000/v1 \n": "http://user:xxxxx@127.0.0.1:38000/v1 \n",
	} {
		t.Run(in, func(t *testing.T) {
			got := RedactURL(in)
			require.Equal(t, want, got)
			require.NotContains(t, got, "s3cr3t")
		})
	}
}

// TestStringRedacts: /config renders Config.String(); no secret of any
// kind may appear in it, and rendering leaves the configuration intact.
func TestStringRedacts(t *testing.T) {
	const secret = "s3cr3tpass"
	c, err := Load([]byte(`
targets:
  - {name: userinfo, url: "http://user:`+secret+`@127.0.0.1:38000/v1", model: m}
  - name: proxied
    url: http://127.0.0.1:38001/v1
    model: m
    proxy_url: http://proxy:`+secret+`@127.0.0.1:3128
    authorization: {credentials: `+secret+`}
  - {name: basic, url: "http://127.0.0.1:38002/v1", model: m, basic_auth: {username: u, password: `+secret+`}}
  - {name: oauth, url: "http://127.0.0.1:38003/v1", model: m, oauth2: {client_id: c, client_secret: `+secret+`, token_url: "http://u:`+secret+`@127.0.0.1/token"}}
  - name: engine
    url: http://127.0.0.1:38004/v1
    model: m
    server_metrics:
      url: "http://admin:`+secret+`@127.0.0.1:38004/metrics"
      oauth2: {client_id: c, client_secret: `+secret+`, token_url: "http://u:`+secret+`@127.0.0.1/token"}
tracing: {endpoint: "127.0.0.1:4317", headers: {x-api-key: `+secret+`}}
`), false)
	require.NoError(t, err)
	out := c.String()
	require.NotContains(t, out, secret)
	require.Contains(t, out, "url: http://user:xxxxx@127.0.0.1:38000/v1")
	require.Contains(t, out, "password: <secret>")
	require.Contains(t, out, "proxy_url: http://proxy:xxxxx@127.0.0.1:3128")
	require.Contains(t, out, "token_url: http://u:xxxxx@127.0.0.1/token")
	require.Contains(t, out, "url: http://admin:xxxxx@127.0.0.1:38004/metrics")
	require.Equal(t, "http://user:"+secret+"@127.0.0.1:38000/v1", c.Targets[0].URL, "String does not change the configuration")
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
	require.EqualError(t, err, `testdata/env.yml: line 3: targets[0].url: must start with http:// or https://, e.g. http://127.0.0.1:8000/v1, got "${SLOPROBER_TEST_URL}"`+"\n"+
		"line 5: targets[0].authorization.credentials (or bearer_token): holds ${SLOPROBER_TEST_TOKEN}, an environment reference not expanded: start sloprober with --config.expand-env (and the variable set), or the literal text is sent as the credential\n"+
		"(the file has ${VAR} references, the first ${SLOPROBER_TEST_URL} on line 3: they are expanded with --config.expand-env)")

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
	// 25 errors: the first 20 in the order of the file, then how many more.
	_, err := LoadFile("testdata/bad_workloads.yml", false)
	require.EqualError(t, err, `testdata/bad_workloads.yml: line 5: scenarios[0].input_tokens: p90: must be greater than median (600), got 300
line 6: scenarios[0].output_tokens: must be at least 1, got 0
line 7: scenarios[0].lengths_from: file: open testdata/traces/none.jsonl: no such file or directory
line 8: scenarios[0].prefix.tokens: must be between 1 and 1000000 tokens, got 0
line 8: scenarios[0].prefix.share: must be between 0 and 1, got 1.5
line 8: scenarios[0].prefix.groups: must be at least 1, got 0
line 9: scenarios[0].conversation.turns: must be between 1 and 1000, got 0
line 10: scenarios[0].cancel.share: must be between 0 and 1, got -1
line 10: scenarios[0].cancel.after: must be positive, got 0s
line 15: scenarios[2].lengths_from: format: must be one of azure, mooncake, jsonl, got "csv"
line 17: canary[0]: set either scenario or mix, not both
line 17: canary[0]: scenario "b" has conversations, which need a chat, responses or messages target; target "local" has api completions
line 17: canary[0]: scenario "b" cancels after 2s, which must be less than target "local"'s timeout 1s
line 18: canary[1].mix.c: weight must be positive, got 0
line 18: canary[1].mix: unknown scenario "zz"
line 18: canary[1].burstiness: applies to arrival: gamma only
line 18: canary[1]: scenario "b" has conversations, which need a chat, responses or messages target; target "local" has api completions
line 18: canary[1]: scenario "b" cancels after 2s, which must be less than target "local"'s timeout 1s
line 18: canary[1]: canary[0] and canary[1] both produce target="local" scenario="b" test="canary"
line 19: canary[2].replay: the trace sets the arrivals: leave out rate, arrival and burstiness
and 5 more errors`)
}

// TestValidateReadsNoFile: Validate checks the traces Parse read, and
// reads none itself. On a Config not made by Parse, a trace not read skips
// the checks against it, without a panic; its file and format are checked.
func TestValidateReadsNoFile(t *testing.T) {
	c, err := LoadFile("testdata/workloads.yml", false)
	require.NoError(t, err)
	require.NoError(t, c.Validate(), "a Config made by Parse is valid again")

	c.Scenario("real-mix").LengthsFrom.Trace = nil
	replay := c.Canary[1]
	replay.Replay.Trace = nil
	replay.Replay.File = "traces/none.jsonl"
	require.NoError(t, c.Validate(), "no file is read")
	require.Zero(t, c.LoadRate(replay), "a replay not read has no rate")

	c.Scenario("real-mix").LengthsFrom.Format = "csv"
	replay.Replay.File = ""
	require.EqualError(t, c.Validate(), `scenarios[1].lengths_from: format: must be one of azure, mooncake, jsonl, got "csv"
canary[1].replay.file: is required: the trace file, relative to the configuration file, e.g. traffic.csv`)
}

// TestReportKeys: a target's replicas (default 1), metadata and forecast
// (spare replicas default 1), and the configuration's hash: the SHA-256 of
// its bytes before environment variables are expanded, so a secret
// changes nothing a report shows.
func TestReportKeys(t *testing.T) {
	const yml = `
targets:
  - name: a
    url: http://127.0.0.1:8000/v1
    model: m
    replicas: 4
    metadata: {gpu: 8x H100 SXM, precision: fp8, engine_flags: "--max-num-seqs 256"}
    forecast: {peak_rate: 120}
    bearer_token: ${SLOPROBER_TEST_TOKEN}
  - {name: b, url: "http://127.0.0.1:8001/v1", model: m, forecast: {peak_rate: 5, spare_replicas: 0}}
scenarios: [{name: chat}]
canary: [{target: a, scenario: chat, rate: 1}]
`
	t.Setenv("SLOPROBER_TEST_TOKEN", "one")
	c, err := Load([]byte(yml), true)
	require.NoError(t, err)
	a, b := c.Targets[0], c.Targets[1]
	require.Equal(t, 4, a.Replicas)
	require.Equal(t, map[string]string{"gpu": "8x H100 SXM", "precision": "fp8", "engine_flags": "--max-num-seqs 256"}, a.Metadata)
	require.Equal(t, 120.0, a.Forecast.PeakRate)
	require.Equal(t, 1, a.Forecast.Spare())
	require.Equal(t, 1, b.Replicas)
	require.Equal(t, 0, b.Forecast.Spare())

	sum := sha256.Sum256([]byte(yml))
	require.Equal(t, hex.EncodeToString(sum[:]), c.Hash())
	t.Setenv("SLOPROBER_TEST_TOKEN", "two")
	c2, err := Load([]byte(yml), true)
	require.NoError(t, err)
	require.Equal(t, c.Hash(), c2.Hash(), "the secret is not in the hash")
}

// TestTracingAndTiming: the tracing section takes Prometheus's keys with
// defaults; a target's timing section adds to the default mappings what
// it names; secrets in the collector's headers stay out of String.
func TestTracingAndTiming(t *testing.T) {
	cfg, err := LoadFile("testdata/tracing.yml", false)
	require.NoError(t, err)
	tr := cfg.Tracing
	require.True(t, tr.Enabled())
	require.Equal(t, TracingClientGRPC, tr.ClientType)
	require.Equal(t, 0.01, tr.SamplingFraction)
	require.Equal(t, model.Duration(10*time.Second), tr.Timeout)
	require.Equal(t, 2048, tr.QueueSize)

	local := cfg.Target("local").TimingOf()
	require.Equal(t, TimingSources, local.Sources)
	require.Equal(t, DefaultTimingConfig.Timings, local.Timings, "the default timings mapping stays")
	require.Equal(t, map[string]string{"x-kong-proxy-latency": PhaseGateway}, local.Headers)
	require.Same(t, &DefaultTimingConfig, cfg.Target("plain").TimingOf())

	sm := cfg.Target("local").ServerMetrics
	require.Equal(t, model.Duration(15*time.Second), sm.Interval)
	require.Equal(t, model.Duration(5*time.Second), sm.Timeout)
	require.Nil(t, cfg.Target("plain").ServerMetrics)

	require.NotContains(t, cfg.String(), "topsecret")

	off, err := Load([]byte("targets: []\n"), false)
	require.NoError(t, err)
	require.False(t, off.Tracing.Enabled(), "tracing is off by default")
	empty, err := Load([]byte("targets: []\ntracing:\n"), false)
	require.NoError(t, err, "an empty tracing section is the defaults")
	require.Equal(t, DefaultTracingConfig, empty.Tracing)
}

// TestServerMetricsTimeout: a server_metrics read's timeout defaults to
// 5 s, or to the interval where that is shorter (an interval of 2 s alone
// was refused: "timeout must be at most the interval"); one set stands,
// and one above the interval is an error.
func TestServerMetricsTimeout(t *testing.T) {
	for _, tc := range []struct {
		section string
		timeout time.Duration
		err     string
	}{
		{"{url: 'http://127.0.0.1:8000/metrics'}", 5 * time.Second, ""},
		{"{url: 'http://127.0.0.1:8000/metrics', interval: 2s}", 2 * time.Second, ""},
		{"{url: 'http://127.0.0.1:8000/metrics', interval: 1m}", 5 * time.Second, ""},
		{"{url: 'http://127.0.0.1:8000/metrics', interval: 2s, timeout: 1s}", time.Second, ""},
		{"{url: 'http://127.0.0.1:8000/metrics', interval: 2s, timeout: 3s}", 0,
			"line 1: targets[0].server_metrics.timeout: must be positive and at most the interval (2s), got 3s"},
		{"{url: 'http://127.0.0.1:8000/metrics', timeout: 0s}", 0,
			"line 1: targets[0].server_metrics.timeout: must be positive and at most the interval (15s), got 0s"},
	} {
		t.Run(tc.section, func(t *testing.T) {
			c, err := Load([]byte("targets: [{name: x, url: 'http://127.0.0.1:8000/v1', model: m, server_metrics: "+tc.section+"}]"), false)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, model.Duration(tc.timeout), c.Targets[0].ServerMetrics.Timeout)
		})
	}
}

// TestLoadFileNamedPipe: a FIFO as --config.file is refused at once
// (`check config` hung on it, waiting for a writer).
func TestLoadFileNamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sloprober.yml")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, err := LoadFile(path, false)
	require.EqualError(t, err, path+": not a regular file (a named pipe)")
}
