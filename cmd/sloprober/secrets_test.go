package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/testkit/freeport"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// TestSecretsNeverShown: a password in a target URL's userinfo and a bearer
// token appear in no output: /config, the landing page, /metrics, the
// reload error of a bad URL, the log at debug level (a failing target's
// errors included) and `sloprober probe`. The server checks that both
// secrets were sent, so their absence is redaction, not disuse.
func TestSecretsNeverShown(t *testing.T) {
	const password, token = "s3cr3tpass", "b3arer-t0ken-s3cr3t"
	var mu sync.Mutex
	var sawPassword, sawToken bool
	srv := simtest.StartWith(t, "slots: 0\nfixed: {ttft: 2ms, itl: 1ms}\n", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if _, pw, ok := r.BasicAuth(); ok && pw == password {
				sawPassword = true
			}
			if r.Header.Get("Authorization") == "Bearer "+token {
				sawToken = true
			}
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	host := strings.TrimPrefix(srv.URL, "http://")
	targets := fmt.Sprintf(`
targets:
  - {name: userinfo, url: "http://user:%[1]s@%[3]s/v1", model: sim-model}
  - {name: bearer, url: "http://%[3]s/v1", model: sim-model, authorization: {credentials: %[2]s}}
  - {name: down, url: "http://user:%[1]s@%[4]s/v1", model: sim-model, timeout: 1s}
scenarios: [{name: chat, input_tokens: 16, output_tokens: 2, ignore_eos: true, slo: {ttft: 1s}}]
`, password, token, host, freeport.Addr(t))
	good := targets + `canary:
  - {target: userinfo, scenario: chat, rate: 10, arrival: constant}
  - {target: bearer, scenario: chat, rate: 10, arrival: constant}
  - {target: down, scenario: chat, rate: 10, arrival: constant}
`
	file := writeConfig(t, good)
	p := start(t, "--config.file="+file, "--log.level=debug")
	p.waitReady(t)
	for _, target := range []string{"userinfo", "bearer"} {
		require.Eventually(t, func() bool {
			return p.metric(t, `sloprober_requests_good_total{scenario="chat",target="`+target+`",test="canary"}`) > 0
		}, 10*time.Second, 20*time.Millisecond, target)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(p.logs(), "load=down/chat/canary outcome=connect_error")
	}, 10*time.Second, 20*time.Millisecond)
	mu.Lock()
	require.True(t, sawPassword, "the password was sent as basic auth")
	require.True(t, sawToken, "the token was sent")
	mu.Unlock()

	outputs := map[string]string{}
	for _, path := range []string{"/config", "/", "/metrics"} {
		code, body := p.get(t, path)
		require.Equal(t, http.StatusOK, code, path)
		outputs[path] = body
	}
	require.Contains(t, outputs["/config"], "http://user:xxxxx@"+host+"/v1", "/config shows the URL, redacted")

	// A configuration rejected for its URL names the bad value, redacted.
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(good, `url: "http://user:`, `url: "ftp://user:`, 1)), 0o600))
	code, body := p.post(t, "/-/reload")
	require.Equal(t, http.StatusInternalServerError, code)
	require.Contains(t, body, "url")
	outputs["POST /-/reload"] = body

	require.Equal(t, 0, p.stop(t))
	outputs["log"] = p.logs()

	require.NoError(t, os.WriteFile(file, []byte(good), 0o600))
	for _, target := range []string{"userinfo", "bearer", "down"} {
		code, stdout, stderr := runCLI(t, "probe", "--config.file="+file, "--target="+target, "--scenario=chat", "--log.level=debug")
		require.Equal(t, map[bool]int{true: 1, false: 0}[target == "down"], code, "%s\n%s", stdout, stderr)
		require.Contains(t, stdout, "target:     "+target)
		outputs["probe "+target] = stdout + stderr
	}
	require.Contains(t, outputs["probe userinfo"], "http://user:xxxxx@"+host+"/v1")
	for name, out := range outputs {
		require.NotContains(t, out, password, name)
		require.NotContains(t, out, token, name)
	}
}
