package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/simulator/simtest"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in, base, api, err string
	}{
		{in: "http://127.0.0.1:8000/v1", base: "http://127.0.0.1:8000/v1"},
		{in: "http://127.0.0.1:8000/v1/", base: "http://127.0.0.1:8000/v1"},
		{in: "http://127.0.0.1:8000/v1/chat/completions", base: "http://127.0.0.1:8000/v1", api: "chat"},
		{in: "http://127.0.0.1:8000/v1/completions", base: "http://127.0.0.1:8000/v1", api: "completions"},
		{in: "https://gw.example/openai/v1/responses", base: "https://gw.example/openai/v1", api: "responses"},
		{in: "http://[::1]:8080/v1/messages", base: "http://[::1]:8080/v1", api: "messages"},
		{in: "http://127.0.0.1:8000/v1?api-version=2", base: "http://127.0.0.1:8000/v1?api-version=2"},
		{in: "127.0.0.1:8000/v1", err: "must be http:// or https:// with a host"},
		{in: "ftp://h/v1", err: "must be http:// or https:// with a host"},
		{in: "http:///v1", err: "must be http:// or https:// with a host"},
		{in: "http://user:s3cret@h/v1", err: "credentials in the URL"},
		{in: "http://h/%zz", err: "invalid URL escape"},
	} {
		base, api, err := parseURL(c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.in)
			require.NotContains(t, err.Error(), "s3cret")
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.base, base, c.in)
		require.Equal(t, c.api, api, c.in)
	}
	require.Equal(t, "127-0-0-1-8000", targetName("http://127.0.0.1:8000/v1"))
	require.Equal(t, "127-0-0-1-8001", targetName("http://127.0.0.1:8001/v1"), "two servers on one host are two targets")
	require.Equal(t, "1-8000", targetName("http://[::1]:8000/v1"))
	require.Equal(t, "vllm-prod_eu", targetName("https://vllm.prod_eu/v1"))
	require.Equal(t, "target", targetName("http://пример/v1"), "no ASCII letter or digit")
	require.Equal(t, "target-8000", targetName("http://пример:8000/v1"))
}

// seenHeaders wraps a simulator's handler and records the Authorization
// and X-Tenant headers of every request, by path.
type seenHeaders struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (s *seenHeaders) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.seen == nil {
			s.seen = map[string][]string{}
		}
		s.seen[r.URL.Path] = append(s.seen[r.URL.Path], r.Header.Get("Authorization")+"|"+r.Header.Get("X-Tenant"))
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// tokenSim starts a simulator that records the headers it is sent, and
// writes a bearer token file holding token.
func tokenSim(t *testing.T, token string) (*simtest.Server, *seenHeaders, string) {
	t.Helper()
	heads := &seenHeaders{}
	sim := simtest.StartWith(t, "", heads.wrap)
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte(token), 0o600))
	return sim, heads, file
}

func (s *seenHeaders) at(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen[path]...)
}

// TestInit: `sloprober init` writes a starter configuration that check
// config accepts, its model read from /models with the credentials given,
// and does not overwrite a file without --force.
func TestInit(t *testing.T) {
	sim, heads, token := tokenSim(t, "s3cret\n")
	file := filepath.Join(filepath.Dir(token), "sloprober.yml")
	code, stdout, stderr := runCLI(t, "init", "--target="+sim.URL+"/v1/chat/completions", "-o", file,
		"--bearer-token-file="+token, "--header=X-Tenant: team-a")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout)
	name := "127-0-0-1-" + sim.URL[strings.LastIndex(sim.URL, ":")+1:] // host and port
	require.Contains(t, stderr, "Wrote "+file+": target "+name+", model sim-model, API chat.")
	require.Equal(t, []string{"Bearer s3cret|team-a"}, heads.at("/v1/models"), "the model is read with the credentials")

	b, err := os.ReadFile(file)
	require.NoError(t, err)
	text := string(b)
	require.NotContains(t, text, "s3cret", "the token stays in its file")
	require.NotContains(t, text, "team-a", "a header's value is never written")
	require.Contains(t, text, "credentials_file: "+token)
	require.Contains(t, text, `X-Tenant: {secrets: ["${SLOPROBER_HEADER_X_TENANT}"]}`)
	require.Contains(t, text, "#   sloprober check config --config.file="+file+" --config.expand-env\n")
	require.Contains(t, stderr, "Next: sloprober check config --config.file="+file+" --config.expand-env")
	require.LessOrEqual(t, strings.Count(text, "\n"), 40, "a starter, not a reference:\n%s", text)
	t.Setenv("SLOPROBER_HEADER_X_TENANT", "team-b")
	code, stdout, _ = runCLI(t, "check", "config", file, "--config.expand-env")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "1 target, 1 scenario, 1 canary load, 1 test")
	// Without --config.expand-env the literal ${...} would be sent as the
	// credential: refused.
	code, _, stderr = runCLI(t, "check", "config", file)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "holds ${SLOPROBER_HEADER_X_TENANT}, an environment reference not expanded")
	cfg, err := config.LoadFile(file, true)
	require.NoError(t, err)
	tg := cfg.Targets[0]
	require.Equal(t, sim.URL+"/v1", tg.URL, "the API's path is cut from the URL")
	require.Equal(t, "chat", tg.API)
	require.Equal(t, "sim-model", tg.Model)
	// The file's configuration sends what the environment holds.
	code, _, stderr = runCLI(t, "probe", "--config.file="+file, "--config.expand-env", "--target="+name, "--scenario=chat")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, []string{"Bearer s3cret|team-b"}, heads.at("/v1/chat/completions"))
	cfg, err = config.LoadFile(file, true)
	require.NoError(t, err)
	require.NotNil(t, cfg.Test(starterTest))
	require.NotNil(t, cfg.Scenario(starterScenario))

	code, _, stderr = runCLI(t, "init", "--target="+sim.URL+"/v1", "-o", file)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "exists: give --force")
	code, _, stderr = runCLI(t, "init", "--target="+sim.URL+"/v1/messages", "--model=other", "-o", file, "--force")
	require.Equal(t, 0, code, stderr)
	cfg, err = config.LoadFile(file, false)
	require.NoError(t, err)
	require.Equal(t, "messages", cfg.Targets[0].API)
	require.Equal(t, "other", cfg.Targets[0].Model, "--model is not looked up")

	// Standard output, and the errors a newcomer meets.
	code, stdout, _ = runCLI(t, "init", "--target="+sim.URL+"/v1")
	require.Equal(t, 0, code)
	require.True(t, strings.HasPrefix(stdout, "# sloprober configuration for "+sim.URL+"/v1"), stdout)
	// Nothing that could be a secret is written or printed: a query, a
	// user name in the URL; a model name that --config.expand-env would
	// expand is refused.
	code, _, stderr = runCLI(t, "init", "--target="+sim.URL+"/v1?key=s3cret", "-o", filepath.Join(t.TempDir(), "q.yml"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "has a query, which may hold a key")
	require.NotContains(t, stderr, "s3cret")
	code, _, stderr = runCLI(t, "init", "--target=http://sk-s3cret@127.0.0.1:1/v1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "credentials in the URL")
	require.NotContains(t, stderr, "s3cret")
	code, _, stderr = runCLI(t, "init", "--target="+sim.URL+"/v1", "--model=${AWS_SECRET_ACCESS_KEY}")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "which --config.expand-env would expand")
	code, _, stderr = runCLI(t, "init", "--target="+sim.URL+"/v1", "--header=X-K: s3cret", "--header=X_K: s3cret")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--header X-K and --header X_K would both be read from SLOPROBER_HEADER_X_K")
	require.NotContains(t, stderr, "s3cret")
	code, _, stderr = runCLI(t, "init", "--target=http://127.0.0.1:1/v1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "reading the model from http://127.0.0.1:1/v1/models")
	require.Contains(t, stderr, "give it with --model")
	for arg, msg := range map[string]string{
		"NoColon":                      `--header "NoColon": must be 'Name: value'`,
		"Bad Name: s3cret":             `--header "Bad Name: <value>": "Bad Name" is not a header name`,
		"X-Key: s3cret\r\nX: y":        `--header X-Key: the value holds a line break, NUL, backslash or double quote`,
		`X-Key: s3c\ret`:               `--header X-Key: the value holds a line break, NUL, backslash or double quote`,
		`X-Key: s3"cret`:               `--header X-Key: the value holds a line break, NUL, backslash or double quote`,
		"Authorization: Bearer s3cret": "--header Authorization: give a bearer token with --bearer-token-file",
		"User-Agent: s3cret":           "--header User-Agent: ",
	} {
		code, _, stderr = runCLI(t, "init", "--target="+sim.URL+"/v1", "--header="+arg)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, msg)
		require.NotContains(t, stderr, "s3cret")
	}
}

// TestInitModelRewritten: a model id a server lists with control
// characters (or too long) is not the name to send; `init` says so and
// asks for --model. Before, it wrote the id with the characters made
// spaces, a model the server does not serve.
func TestInitModelRewritten(t *testing.T) {
	for _, id := range []string{"my\tmodel", strings.Repeat("m", 200)} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"data": [{"id": %q}]}`, id)
		}))
		code, _, stderr := runCLI(t, "init", "--target="+srv.URL+"/v1")
		srv.Close()
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "holds control characters or is longer than 128 bytes: give it with --model")
	}
}

// TestProbeURL: `sloprober probe URL` probes an endpoint without a
// configuration file, with the credentials given, and its flags are
// refused beside a configuration.
func TestProbeURL(t *testing.T) {
	sim, heads, token := tokenSim(t, "s3cret")
	code, stdout, stderr := runCLI(t, "probe", sim.URL+"/v1", "--bearer-token-file="+token, "--header=X-Tenant: team-a")
	require.Equal(t, 0, code, stdout+stderr)
	require.NotContains(t, stdout+stderr, "team-a")
	require.Contains(t, stdout, "target:     127-0-0-1-"+sim.URL[strings.LastIndex(sim.URL, ":")+1:]+" (chat API, model sim-model, "+sim.URL+"/v1)")
	require.Contains(t, stdout, "scenario:   chat (input 512 tokens, output 128 tokens")
	require.Contains(t, stdout, "verdict: good")
	require.Equal(t, []string{"Bearer s3cret|team-a"}, heads.at("/v1/chat/completions"))

	code, _, stderr = runCLI(t, "probe", sim.URL+"/v1", "--target=sim")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "probe URL takes no --config.file, --target or --scenario")
	code, _, stderr = runCLI(t, "probe", "--target=sim", "--scenario=chat", "--model=x")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--model")
	code, _, stderr = runCLI(t, "probe")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "probe needs an endpoint's URL")
}

// TestTestRunURL: `sloprober test run --target URL` runs the starter
// configuration's step test against the endpoint; the run is stopped once
// its baseline is under way (the whole test takes tens of minutes).
func TestTestRunURL(t *testing.T) {
	var heads seenHeaders
	sim := simtest.StartWith(t, "", heads.wrap)
	storage := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr output
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, append([]string{"test", "run", "--target=" + sim.URL + "/v1", "--storage.path=" + storage, "--output=json"}, testValidity...),
			&stdout, &stderr, func(code int) { t.Errorf("exit(%d)", code) })
	}()
	require.Eventually(t, func() bool { return len(heads.at("/v1/chat/completions")) >= 2 }, 30*time.Second, 10*time.Millisecond,
		"the baseline's requests reach the endpoint: %s", stderr.String())
	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitError, code, "an aborted run concludes nothing")
	case <-time.After(30 * time.Second):
		t.Fatal("test run did not stop")
	}
	require.Contains(t, stderr.String(), "Running step test capacity on target 127-0-0-1-"+sim.URL[strings.LastIndex(sim.URL, ":")+1:])
	var printed capacity.Run
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &printed), "--output json: %s", stdout.String())
	require.Equal(t, capacity.VerdictAborted, printed.Verdict)
	runs, err := filepath.Glob(filepath.Join(storage, "runs", starterTest+"-*.json"))
	require.NoError(t, err)
	require.Len(t, runs, 1, stderr.String())
	b, err := os.ReadFile(runs[0])
	require.NoError(t, err)
	var run capacity.Run
	require.NoError(t, json.Unmarshal(b, &run))
	require.Equal(t, capacity.VerdictAborted, run.Verdict)
	require.Equal(t, starterTest, run.Test)

	code, _, errOut := runCLI(t, "test", "run", "--target="+sim.URL+"/v1", "--config.file=x.yml")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "--target URL and --config.file exclude each other")
	code, _, errOut = runCLI(t, "test", "run")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "needs a test's name")
}
