package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/sloprober/sloprober/internal/testkit/freeport"
	"github.com/sloprober/sloprober/simulator"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// asSloprober, set in a process's environment, makes this test binary the
// sloprober binary: the few tests of what only a process shows (signals,
// exit codes, a stop's deadline) run it so, with the very main the program
// has, and no separate build.
const asSloprober = "SLOPROBER_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(asSloprober) == "1" {
		os.Exit(runMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Exit))
	}
	os.Exit(m.Run())
}

// self is this test binary, run as sloprober with asSloprober set.
func self(t *testing.T) string {
	t.Helper()
	path, err := os.Executable()
	require.NoError(t, err)
	return path
}

// output is a writer safe for the goroutines of a running sloprober.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(b)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// process is a running `sloprober run`: in-process (start), or a process
// of its own (startProcess).
type process struct {
	addr string
	log  output
	// cmd is the process; nil in-process, where cancel stops the daemon
	// as SIGTERM does and done receives its exit code.
	cmd    *exec.Cmd
	cancel context.CancelFunc
	done   chan int
	code   int
	exited bool
}

func (p *process) logs() string { return p.log.String() }

// daemonArgs are the arguments of `sloprober run` with args. Unless args
// set them, the linger after the drain is short (these tests do not
// scrape while stopping, and the shutdown tests check the linger itself)
// and the runs are stored in a directory of the test's.
func daemonArgs(t *testing.T, addr string, args []string) []string {
	flags := []string{"run", "--web.listen-address=" + addr}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--shutdown.linger=") }) {
		flags = append(flags, "--shutdown.linger=200ms")
	}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--storage.path=") }) {
		flags = append(flags, "--storage.path="+t.TempDir())
	}
	return append(flags, args...)
}

// start runs `sloprober run` with args in-process, as main would. A stop
// that outlasts its deadline fails the test instead of ending the test
// binary.
func start(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{addr: freeport.Addr(t), done: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	exit := func(code int) { t.Errorf("sloprober called exit(%d): its stop outlasted the deadline", code) }
	go func() { p.done <- runMain(ctx, daemonArgs(t, p.addr, args), &p.log, &p.log, exit) }()
	t.Cleanup(func() {
		if !p.exited {
			cancel()
			p.wait(t, time.Minute)
		}
		if t.Failed() {
			t.Logf("sloprober log:\n%s", p.logs())
		}
	})
	return p
}

// startProcess runs `sloprober run` with args as a process of its own: for
// the tests of signals and exit codes.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{addr: freeport.Addr(t), done: make(chan int, 1)}
	p.cmd = exec.Command(self(t), daemonArgs(t, p.addr, args)...)
	p.cmd.Env = append(os.Environ(), asSloprober+"=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		p.done <- p.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		if !p.exited {
			_ = p.cmd.Process.Kill()
			p.wait(t, time.Minute)
		}
		if t.Failed() {
			t.Logf("sloprober log:\n%s", p.logs())
		}
	})
	return p
}

// signal sends sig to a process of its own.
func (p *process) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	require.NotNil(t, p.cmd, "signals are for a process of its own (startProcess)")
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// wait waits up to d for the exit, and returns its code.
func (p *process) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	if p.exited {
		return p.code
	}
	select {
	case p.code = <-p.done:
		p.exited = true
	case <-time.After(d):
		t.Fatalf("sloprober did not stop within %s", d)
	}
	return p.code
}

func (p *process) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends an empty POST to path.
func (p *process) post(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+p.addr+path, "", nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *process) waitReady(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, _ := p.get(t, "/-/ready")
		return code == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "sloprober did not become ready")
}

// metric returns the value of the first exposed series whose text starts
// with series (name and labels as exposed, sorted), or -1.
func (p *process) metric(t *testing.T, series string) float64 {
	t.Helper()
	_, body := p.get(t, "/metrics")
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, series+" "), 64)
			require.NoError(t, err)
			return v
		}
	}
	return -1
}

// terminate begins sloprober's stop: SIGTERM to a process of its own, the
// context's end in-process (the same path); it does not wait.
func (p *process) terminate(t *testing.T) {
	t.Helper()
	if p.cmd != nil {
		p.signal(t, syscall.SIGTERM)
		return
	}
	p.cancel()
}

// hasExited reports whether sloprober has exited, without waiting.
func (p *process) hasExited() bool {
	if p.exited {
		return true
	}
	select {
	case p.code = <-p.done:
		p.exited = true
	default:
	}
	return p.exited
}

// stop stops sloprober as SIGTERM does (SIGTERM itself to a process of
// its own) and waits for the exit code.
func (p *process) stop(t *testing.T) int {
	t.Helper()
	p.terminate(t)
	return p.wait(t, 30*time.Second)
}

// TestEmbeddedDefault: without a config file sloprober probes its built-in
// simulator, and a new user sees TTFT histograms and good/sent counters move
// within 10 seconds. A normal stop with streams stalled in the simulator
// ends in exit 0 within grace + linger + exitMargin: the simulator stops
// alongside the web server, within the margin.
func TestEmbeddedDefault(t *testing.T) {
	const grace, linger = time.Second, 200 * time.Millisecond
	p := startProcess(t, "--shutdown.grace-period="+grace.String(), "--shutdown.linger="+linger.String())
	p.waitReady(t)
	require.Eventually(t, func() bool {
		return p.metric(t, `sloprober_time_to_first_token_seconds_count{scenario="chat",target="sim",test="canary"}`) > 0 &&
			p.metric(t, `sloprober_requests_good_total{scenario="chat",target="sim",test="canary"}`) > 0 &&
			p.metric(t, `sloprober_slo_missed_total{scenario="strict-ttft",slo="ttft",target="sim",test="canary"}`) > 0
	}, 10*time.Second, 100*time.Millisecond)
	require.Zero(t, p.metric(t, `sloprober_requests_good_total{scenario="strict-ttft",target="sim",test="canary"}`))
	_, page := p.get(t, "/")
	require.Contains(t, page, "probing the built-in simulator at http://127.0.0.1:")
	require.Contains(t, page, "missed ttft")
	sim := regexp.MustCompile(`simulator=(http://127\.0\.0\.1:\d+) inject_faults=`).FindStringSubmatch(p.logs())
	require.NotNil(t, sim, p.logs())

	// Stall every stream halfway for longer than the test, so that the
	// stop finds requests in flight, cancels them at the end of the grace
	// period and closes the simulator with their connections just gone.
	req, err := http.NewRequest(http.MethodPut, sim[1]+"/sim/faults", strings.NewReader(`{"stall": {"rate": 1, "duration": "10m"}}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// A stream stalled: the simulator counts the stall as it begins
	// (requests in flight alone may be a reply sent before the fault,
	// which ends within the grace period).
	require.Eventually(t, func() bool {
		resp, err := http.Get(sim[1] + "/sim/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st simulator.Stats
		return json.NewDecoder(resp.Body).Decode(&st) == nil && st.FaultsInjected["stall"] > 0
	}, 10*time.Second, 50*time.Millisecond)

	signalled := time.Now()
	p.signal(t, syscall.SIGTERM)
	code := p.wait(t, grace+linger+exitMargin+5*time.Second)
	took := time.Since(signalled)
	require.Equal(t, 0, code, p.logs())
	require.GreaterOrEqual(t, took, grace, "the stalled streams had the grace period")
	require.Less(t, took, grace+linger+exitMargin)
	require.NotContains(t, p.logs(), "did not stop within")
	require.Contains(t, p.logs(), "See you next time!")
}

// TestEmbeddedSimStop: the embedded simulator stops within its timeout even
// when a request keeps a connection busy (here one whose response headers
// are delayed for an hour): the connections still busy then are closed.
func TestEmbeddedSimStop(t *testing.T) {
	e, err := startEmbeddedSim(promslog.NewNopLogger(), "127.0.0.1:0")
	require.NoError(t, err)
	e.sim.SetFaults(simulator.Faults{HeaderDelay: simulator.Duration(time.Hour)})
	answered := make(chan error, 1)
	go func() {
		body := `{"model": "sim-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": true}`
		resp, err := http.Post(e.url()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	require.Eventually(t, func() bool {
		return e.sim.Stats().FaultsInjected["header_delay"] == 1
	}, 5*time.Second, 5*time.Millisecond, "the request reached its handler")

	const timeout = 300 * time.Millisecond
	began := time.Now()
	e.stop(timeout)
	took := time.Since(began)
	require.GreaterOrEqual(t, took, timeout, "the busy connection was given the timeout")
	require.Less(t, took, timeout+time.Second)
	require.Error(t, <-answered, "the busy connection was closed")
}

// TestReloadAndShutdown: reload by POST /-/reload and SIGHUP, a bad file
// keeping the old configuration running, secrets never shown, and a graceful
// shutdown.
func TestReloadAndShutdown(t *testing.T) {
	srv := simtest.Start(t, "slots: 0\nfixed: {ttft: 5ms, itl: 2ms}\n")

	dir := t.TempDir()
	file := filepath.Join(dir, "sloprober.yml")
	write := func(body string) {
		require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	}
	good := fmt.Sprintf(`
targets:
  - name: sim
    url: %s/v1
    model: sim-model
    basic_auth: {username: prober, password: hunter2}
  - name: down
    url: http://%s/v1
    model: sim-model
scenarios:
  - {name: chat, input_tokens: 32, output_tokens: 4, ignore_eos: true, slo: {ttft: 1s}}
canary:
  - {target: down, scenario: chat, rate: 10, arrival: constant}
  - {target: sim, scenario: chat, rate: 20, arrival: constant}
`, srv.URL, freeport.Addr(t))
	write(good)
	p := startProcess(t, "--config.file="+file)
	p.waitReady(t)
	require.Eventually(t, func() bool {
		return p.metric(t, `sloprober_requests_good_total{scenario="chat",target="sim",test="canary"}`) > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, 1.0, p.metric(t, "sloprober_config_last_reload_successful"))
	// An unreachable target fails every request as connect_error; the
	// daemon goes on, and logs the failures rate-limited.
	require.Eventually(t, func() bool {
		return p.metric(t, `sloprober_requests_finished_total{outcome="connect_error",scenario="chat",target="down",test="canary"}`) >= 5
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, 1, strings.Count(p.logs(), "msg=\"Probe request failed\" load=down/chat/canary outcome=connect_error"), p.logs())

	write(strings.Replace(good, "rate: 20", "rate: fast", 1))
	resp, err := http.Post("http://"+p.addr+"/-/reload", "", nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Regexp(t, regexp.QuoteMeta(file+": line 14: canary[")+`\d\]\.rate: cannot unmarshal !!str `+"`fast`"+` into float64`, string(body))
	require.Equal(t, 0.0, p.metric(t, "sloprober_config_last_reload_successful"))
	before := p.metric(t, `sloprober_requests_sent_total{scenario="chat",target="sim",test="canary"}`)
	require.Eventually(t, func() bool {
		return p.metric(t, `sloprober_requests_sent_total{scenario="chat",target="sim",test="canary"}`) > before
	}, 5*time.Second, 50*time.Millisecond, "the old configuration keeps running")

	write(good + "  - {target: sim, scenario: second, rate: 5}\nscenarios_extra: 1\n")
	p.signal(t, syscall.SIGHUP)
	require.Eventually(t, func() bool {
		return strings.Contains(p.logs(), "scenarios_extra: no such key")
	}, 5*time.Second, 20*time.Millisecond, "SIGHUP reloads")

	write(strings.Replace(good, "  - {name: chat,", "  - {name: second, slo: {ttft: 1s}}\n  - {name: chat,", 1) + "  - {target: sim, scenario: second, rate: 5}\n")
	p.signal(t, syscall.SIGHUP)
	require.Eventually(t, func() bool {
		return p.metric(t, "sloprober_config_last_reload_successful") == 1 &&
			p.metric(t, `sloprober_intended_request_rate{scenario="second",target="sim",test="canary"}`) == 5
	}, 5*time.Second, 20*time.Millisecond)

	_, cfg := p.get(t, "/config")
	require.Contains(t, cfg, "password: <secret>")
	require.NotContains(t, cfg, "hunter2")

	require.Equal(t, 0, p.stop(t))
	require.NotContains(t, p.logs(), "hunter2")
	require.Contains(t, p.logs(), "Stopping loads")
}

// TestWebConfig: --web.config.file puts basic auth on every endpoint, the
// profiling ones, the reload and the test API included.
func TestWebConfig(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	webcfg := filepath.Join(t.TempDir(), "web.yml")
	require.NoError(t, os.WriteFile(webcfg, []byte("basic_auth_users:\n  admin: "+string(hash)+"\n"), 0o600))
	p := start(t, "--web.config.file="+webcfg, "--debug.pprof")
	require.Eventually(t, func() bool {
		code, _ := p.get(t, "/metrics")
		return code == http.StatusUnauthorized
	}, 20*time.Second, 20*time.Millisecond)
	endpoints := []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/metrics"}, {"GET", "/config"}, {"GET", "/-/healthy"}, {"GET", "/-/ready"},
		{"POST", "/-/reload"}, {"PUT", "/-/reload"}, {"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/cmdline"},
		{"GET", "/debug/pprof/goroutine?debug=1"}, {"GET", "/nonexistent"},
		{"GET", "/api/v1/tests"}, {"GET", "/api/v1/runs"}, {"POST", "/api/v1/tests/knee/run"},
	}
	do := func(method, path, user, password string) int {
		req, err := http.NewRequest(method, "http://"+p.addr+path, nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, e := range endpoints {
		require.Equal(t, http.StatusUnauthorized, do(e.method, e.path, "", ""), "%s %s without credentials", e.method, e.path)
		require.Equal(t, http.StatusUnauthorized, do(e.method, e.path, "admin", "wrong"), "%s %s with a wrong password", e.method, e.path)
	}
	require.Eventually(t, func() bool {
		return do("GET", "/-/ready", "admin", "s3cret") == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond)
	for _, e := range endpoints {
		want := http.StatusOK
		switch e.path {
		case "/nonexistent":
			want = http.StatusNotFound
		case "/api/v1/tests/knee/run":
			want = http.StatusForbidden // authenticated, but without --web.enable-test-api
		}
		require.Equal(t, want, do(e.method, e.path, "admin", "s3cret"), "%s %s", e.method, e.path)
	}
	require.Equal(t, 0, p.stop(t))
}

// runCLI runs sloprober's command line with args in-process, as main
// would, and returns its exit code, standard output and standard error.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr output
	exit := func(code int) { t.Errorf("sloprober called exit(%d)", code) }
	code := runMain(t.Context(), args, &stdout, &stderr, exit)
	return code, stdout.String(), stderr.String()
}

// runProcess runs sloprober's command line with args as a process of its
// own (this test binary as sloprober), for a command that starts
// sloprober processes itself (bench starts its simulator so).
func runProcess(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(self(t), args...)
	cmd.Env = append(os.Environ(), asSloprober+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

func TestCheckConfig(t *testing.T) {
	code, stdout, _ := runCLI(t, "check", "config", "testdata/good.yml")
	require.Equal(t, 0, code)
	require.Equal(t, "SUCCESS: testdata/good.yml is valid: 1 target, 1 scenario, 1 canary load, 0 tests\n", stdout)
	code, stdout, _ = runCLI(t, "check", "config", "--config.file", "testdata/good.yml")
	require.Equal(t, 0, code, "--config.file, as every other command takes it")
	require.Contains(t, stdout, "SUCCESS: testdata/good.yml")
	code, _, stderr := runCLI(t, "check", "config")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "no configuration file to check")

	code, stdout, stderr = runCLI(t, "check", "config", "testdata/good.yml", "testdata/bad.yml")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "SUCCESS: testdata/good.yml")
	require.Equal(t, "FAILED: testdata/bad.yml: line 5: targets[0].timeout: not a valid duration string: \"-5s\"\n"+
		"line 9: canary[0].target: unknown target \"remote\"\n", stderr, "the reference is told beside the bad duration, not after it is fixed")

	// An empty file is valid YAML and probes nothing: the wrong file.
	empty := filepath.Join(t.TempDir(), "empty.yml")
	require.NoError(t, os.WriteFile(empty, []byte("# nothing yet\n"), 0o600))
	code, _, stderr = runCLI(t, "check", "config", empty)
	require.Equal(t, 1, code)
	require.Equal(t, "FAILED: "+empty+": no targets: it probes nothing (sloprober init --target URL writes a starter)\n", stderr)

	// The shipped examples are valid.
	for _, f := range []string{"../../examples/production-like.yml", "../../examples/quality/sloprober.yml"} {
		code, stdout, stderr = runCLI(t, "check", "config", f)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "SUCCESS")
	}
	for _, f := range []string{"../../examples/sim-prefix-cache.yml", "../../examples/quality/sim.yml"} {
		_, err := simulator.LoadFile(f)
		require.NoError(t, err, f)
	}
}

func TestProbeCommand(t *testing.T) {
	code, stdout, stderr := runCLI(t, "probe", "--target=sim", "--scenario=chat")
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"first token (t1)", "last token (tN)", "status:     200", "server timings: queue", "\noutcome: ok\n", "slo ttft", "verdict: good", "prober:     "} {
		require.Contains(t, stdout, want)
	}
	require.Regexp(t, regexp.MustCompile(`request id: [0-9a-f]{32}`), stdout)

	code, stdout, _ = runCLI(t, "probe", "--target=sim", "--scenario=strict-ttft")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "MISSED")
	require.Contains(t, stdout, "verdict: bad")

	code, _, stderr = runCLI(t, "probe", "--target=nope", "--scenario=chat")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `--target "nope": no such target in the configuration (have: sim)`)
}

func TestWorkloadStats(t *testing.T) {
	code, stdout, stderr := runCLI(t, "workload", "stats", "--file=../../examples/traces/azure-llm-inference-2023-conv.csv", "--format=azure")
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"requests:          19366", "mean rate:         5.530 req/s", "input/output correlation: -0.112"} {
		require.Contains(t, stdout, want)
	}
	code, stdout, stderr = runCLI(t, "workload", "stats", "--file=../../examples/traces/mooncake-fast25-conversation.jsonl", "--format=mooncake")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "prompt blocks repeating an earlier block: 36.6%")
	require.Regexp(t, `input\s+12035\.1\s+6909\s+27367\s+39552\s+85401\s+126195`, stdout)

	code, _, stderr = runCLI(t, "workload", "stats", "--file=main.go", "--format=mooncake")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "sloprober: main.go: line 1: invalid character")
}

// TestBenchSmoke runs `sloprober bench` at one small level: it must send
// without drops and report its numbers (speed belongs to make bench).
func TestBenchSmoke(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	code, stdout, stderr := runProcess(t, "bench", "--streams=20", "--measure=1s", "--log.level=warn", "--json="+out)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "streams")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rs []struct {
		Streams, Sent, Dropped, Chunks int
		ITLErrP99MS                    float64 `json:"itl_err_p99_ms"`
	}
	require.NoError(t, json.Unmarshal(b, &rs))
	require.Len(t, rs, 1)
	require.Equal(t, 20, rs[0].Streams)
	require.Positive(t, rs[0].Sent)
	require.Zero(t, rs[0].Dropped)
	require.Positive(t, rs[0].Chunks)
}
