package gpu

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v2"
)

func TestConfigDefaults(t *testing.T) {
	var c Config
	require.NoError(t, yaml.UnmarshalStrict([]byte(`
prometheus:
  url: http://127.0.0.1:9090
  selector: '{Hostname="gpu-node-1"}'
  basic_auth: {username: u, password_file: /dev/null}
names: {power: my_power}
`), &c))
	require.NoError(t, c.Validate())
	assert.Equal(t, model.Duration(5*time.Second), c.Interval)
	assert.Equal(t, model.Duration(3*time.Second), c.Timeout)
	assert.Equal(t, "DCGM_FI_DEV_GPU_UTIL", c.Names.Utilization)
	assert.Equal(t, "my_power", c.Names.Power)
	assert.True(t, c.Prometheus.HTTPClientConfig.FollowRedirects)
	assert.Equal(t, "u", c.Prometheus.HTTPClientConfig.BasicAuth.Username)

	var short Config
	require.NoError(t, yaml.UnmarshalStrict([]byte("exporter: {url: 'http://127.0.0.1:9400/metrics'}\ninterval: 2s\n"), &short))
	assert.Equal(t, model.Duration(2*time.Second), short.Timeout, "the interval where shorter than 3s")
	require.NoError(t, short.Validate())

	var unknown Config
	require.Error(t, yaml.UnmarshalStrict([]byte("exporter: {url: 'http://x/metrics', selectr: x}\n"), &unknown))
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		yaml, want string
	}{
		{"interval: 5s", `gpu: set exactly one of prometheus and exporter`},
		{"prometheus: {url: 'http://a:9090'}\nexporter: {url: 'http://b:9400'}", `gpu: set exactly one of prometheus and exporter`},
		{"prometheus: {url: x}", `gpu.prometheus.url: must be an absolute http(s) URL, got "x"`},
		{"exporter: {url: 'ftp://h/metrics'}", `gpu.exporter.url: must be an absolute http(s) URL, got "ftp://h/metrics"`},
		{"exporter: {url: 'http://u:s3cret@h/metrics'}", `gpu.exporter.url: must not hold a password (use basic_auth with password_file), got "http://u:xxxxx@h/metrics"`},
		{"prometheus: {url: 'http://h', selector: 'Hostname=\"a\"'}", `gpu.prometheus.selector: must be a label-matcher set in braces`},
		{"prometheus: {url: 'http://h', selector: '{Hostname=a}'}", `gpu.prometheus.selector: expected a quoted value at "a", got "{Hostname=a}"`},
		{"prometheus: {url: 'http://h', selector: '{Hostname==\"a\"}'}", `gpu.prometheus.selector: expected a quoted value`},
		{"prometheus: {url: 'http://h', selector: '{pod=~\"vllm-(\"}'}", `gpu.prometheus.selector: invalid regular expression for pod`},
		{"prometheus: {url: 'http://h', selector: '{__name__=\"x\"}'}", `gpu.prometheus.selector: must not match __name__`},
		{"prometheus: {url: 'http://h', selector: '{a=\"1\" b=\"2\"}'}", `gpu.prometheus.selector: expected , or } at "b=\"2\""`},
		{"prometheus: {url: 'http://h', selector: '{a=\"1}'}", `gpu.prometheus.selector: unterminated "-quoted value`},
		{"exporter: {url: 'http://h'}\nnames: {utilization: 'a-b'}", `gpu.names.utilization: must be a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), got "a-b"`},
		{"exporter: {url: 'http://h'}\ninterval: 100ms", `gpu.interval: must be between 1s and 1h, got 100ms`},
		{"exporter: {url: 'http://h'}\ninterval: 10s\ntimeout: 11s", `gpu.timeout: must be positive and at most the interval (10s), got 11s`},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			var c Config
			require.NoError(t, yaml.UnmarshalStrict([]byte(tc.yaml), &c))
			err := c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}

func TestValidateSelector(t *testing.T) {
	for _, ok := range []string{
		``, `{}`, `{Hostname="gpu-node-1"}`, `{pod=~"vllm-.*"}`, ` { Hostname = "a" , gpu != '0', pod!~` + "`x|y`" + `, } `,
		`{"service.name"="a"}`, `{a="x\"y"}`, `{a='it\'s'}`, `{namespace="llm",pod=~"vllm-[0-9]+"}`,
	} {
		assert.NoError(t, ValidateSelector(ok), ok)
		q := Query("DCGM_FI_DEV_GPU_UTIL", ok)
		assert.True(t, strings.HasPrefix(q, "DCGM_FI_DEV_GPU_UTIL"))
	}
	for _, bad := range []string{`{`, `}`, `{a}`, `{a="x",,b="y"}`, `{1a="x"}`, `{a="x"} or vector(1)`, `{a=~"*"}`, "{a=\"x\ny\"}"} {
		assert.Error(t, ValidateSelector(bad), bad)
	}
}
