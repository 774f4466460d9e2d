// Package jaegertest runs a real Jaeger v2 over loopback for end-to-end tests
// of the OpenTelemetry spans sloprober exports, and reads the spans back
// through Jaeger's HTTP query API.
//
// A fake OTLP receiver would only check what its author believed about OTLP;
// Jaeger is what operators look at the spans in, so the tests send to it. The
// binary is built by `make jaeger` (pinned in the separate tools/ module, so it
// does not move sloprober's own dependencies) into .tools/bin/jaeger; JAEGER
// overrides the path, and SLOPROBER_SKIP_JAEGER=1 skips the tests that need it.
//
// Each Start runs its own Jaeger with in-memory storage on free loopback ports:
// OTLP over gRPC and HTTP in, the query API out, and nothing else listening.
package jaegertest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment variables that change where Path looks for Jaeger and whether
// Start runs it.
const (
	// EnvBinary overrides the path of the Jaeger v2 binary.
	EnvBinary = "JAEGER"
	// EnvSkip, set to 1, makes Start skip the test instead of failing it
	// when Jaeger cannot be run here.
	EnvSkip = "SLOPROBER_SKIP_JAEGER"
)

// ErrNotFound is returned by Path when there is no Jaeger binary.
var ErrNotFound = errors.New("jaeger not found: run `make jaeger` (it builds .tools/bin/jaeger), set " +
	EnvBinary + " to a Jaeger v2 binary, or skip with " + EnvSkip + "=1")

// Bounds of Start. A Jaeger with in-memory storage is ready in about a
// second; the bounds are for a loaded CI machine running the race detector
// on every package at once, not for a healthy start.
const (
	readyTimeout = 60 * time.Second
	pollInterval = 50 * time.Millisecond
	stopTimeout  = 10 * time.Second
	// startAttempts bounds the retries when Jaeger could not bind a port:
	// a free port is chosen by binding and closing it, and another process
	// can take it before Jaeger binds it.
	startAttempts = 3
)

// Path returns the Jaeger binary to run: $JAEGER if set, else
// .tools/bin/jaeger at the root of the sloprober module. The error wraps
// ErrNotFound when the file is not there.
func Path() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return checkExecutable(p, p+" (from $"+EnvBinary+")")
	}
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNotFound, err)
	}
	p := filepath.Join(root, ".tools", "bin", "jaeger")
	return checkExecutable(p, p)
}

func checkExecutable(p, what string) (string, error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: %s does not exist", ErrNotFound, what)
	case err != nil:
		return "", fmt.Errorf("%w: %v", ErrNotFound, err)
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%w: %s is not an executable file", ErrNotFound, what)
	}
	return p, nil
}

// moduleRoot is the directory of the go.mod above this source file, or, in a
// binary built with -trimpath (where the file name is not a path on disk),
// above the working directory, which go test sets to the package's.
func moduleRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("no go.mod above the package directory or the working directory")
}

// Jaeger is a running Jaeger started by Start. Its methods are safe for
// concurrent use.
type Jaeger struct {
	otlpGRPC, otlpHTTP, query string // host:port
	logPath                   string
	client                    *http.Client
	pid                       int
}

// OTLPGRPCEndpoint is the host:port of the OTLP/gRPC receiver (plaintext),
// in the form otlptracegrpc.WithEndpoint takes.
func (j *Jaeger) OTLPGRPCEndpoint() string { return j.otlpGRPC }

// OTLPHTTPEndpoint is the host:port of the OTLP/HTTP receiver (plaintext),
// in the form otlptracehttp.WithEndpoint takes; traces are POSTed to
// http://OTLPHTTPEndpoint()/v1/traces.
func (j *Jaeger) OTLPHTTPEndpoint() string { return j.otlpHTTP }

// QueryURL is the base URL of the query HTTP API and UI, without a trailing
// slash: http://127.0.0.1:port.
func (j *Jaeger) QueryURL() string { return "http://" + j.query }

// Start runs a Jaeger for the test and returns once it accepts spans and
// answers queries; a cleanup stops it. A missing binary fails the test with
// how to build it, and SLOPROBER_SKIP_JAEGER=1 skips the test instead.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	if os.Getenv(EnvSkip) == "1" {
		t.Skip(EnvSkip + "=1")
	}
	bin, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		j, err := start(t, bin, dir, attempt)
		if err == nil {
			return j
		}
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			t.Fatalf("jaeger: %v", err)
		}
		t.Logf("jaeger: %v; retrying with other ports", err)
	}
}

// errPortTaken is start's error when Jaeger exited because a port it was
// given had been taken in the meantime.
var errPortTaken = errors.New("a chosen port was taken before jaeger bound it")

func start(t testing.TB, bin, dir string, attempt int) (*Jaeger, error) {
	t.Helper()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{
		otlpGRPC: loopback(ports[0]),
		otlpHTTP: loopback(ports[1]),
		query:    loopback(ports[2]),
		logPath:  filepath.Join(dir, fmt.Sprintf("jaeger-%d.log", attempt)),
		// Loopback only: no proxy, whatever the environment says.
		client: &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second},
	}
	cfgPath := filepath.Join(dir, fmt.Sprintf("jaeger-%d.yaml", attempt))
	if err := os.WriteFile(cfgPath, []byte(j.config()), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(j.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor

	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	j.pid = cmd.Process.Pid
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()

	if err := j.waitReady(exited); err != nil {
		stop(cmd, exited)
		j.client.CloseIdleConnections()
		log := j.log()
		if strings.Contains(log, "address already in use") {
			return nil, fmt.Errorf("%w: %v", errPortTaken, err)
		}
		if waitErr != nil {
			err = fmt.Errorf("%w (%v)", err, waitErr)
		}
		return nil, fmt.Errorf("%w; its log:\n%s", err, log)
	}
	t.Cleanup(func() {
		stop(cmd, exited)
		// Leave no connection goroutines behind for goleak to find.
		j.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("jaeger log (%s):\n%s", j.logPath, j.log())
		}
	})
	return j, nil
}

// waitReady polls until Jaeger answers queries and accepts spans, or exits.
func (j *Jaeger) waitReady(exited <-chan struct{}) error {
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if j.ready() {
			return nil
		}
		select {
		case <-exited:
			return errors.New("jaeger exited before it was ready")
		case <-deadline.C:
			return fmt.Errorf("jaeger not ready after %s", readyTimeout)
		case <-tick.C:
		}
	}
}

// ready reports whether the query API answers and the OTLP/HTTP receiver
// accepts an empty export. The collector starts the storage exporter before
// the receivers, and the OTLP receiver binds gRPC before HTTP, so then all is
// up. Asking for OTLP answers, rather than dialing the port, keeps another
// process that took the port meanwhile from passing for Jaeger.
func (j *Jaeger) ready() bool {
	resp, err := j.client.Get(j.QueryURL() + "/api/services")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	resp, err = j.client.Post("http://"+j.otlpHTTP+"/v1/traces", "application/json", strings.NewReader("{}"))
	if err != nil {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return err == nil && resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte("partialSuccess"))
}

// stop asks Jaeger to shut down, kills it if it has not within stopTimeout,
// and waits for it to exit.
func stop(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (j *Jaeger) log() string {
	b, err := os.ReadFile(j.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", j.logPath, err)
	}
	return string(bytes.TrimSpace(b))
}

// config is Jaeger's configuration: its all-in-one (cmd/jaeger/internal/
// all-in-one.yaml) cut down to what the tests use, every listener on
// loopback. Left out, so that they do not listen: the Jaeger and Zipkin
// receivers, remote sampling, the health check, expvar, zpages and pprof.
// Also:
//
//   - No batch processor: the storage exporter has no queue, so an OTLP
//     export is answered once its spans are stored and queryable.
//   - The collector's own metrics (a Prometheus endpoint on :8888 by
//     default) and traces are off, and so are the query service's traces,
//     which it would otherwise send over OTLP to localhost:4317, the
//     address of any other collector on the machine.
//   - The telemetry resource is emptied: it labels only that telemetry, and
//     would otherwise be repeated on every line of the log.
//   - The query service's gRPC API, which the tests do not use, gets a port
//     from the kernel.
func (j *Jaeger) config() string {
	return `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: null
      service.instance.id: null
      service.version: null
    metrics:
      level: none
    traces:
      level: none
    logs:
      level: info

extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    max_clock_skew_adjust: 0s
    http:
      endpoint: ` + j.query + `
    grpc:
      endpoint: 127.0.0.1:0

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: ` + j.otlpGRPC + `
      http:
        endpoint: ` + j.otlpHTTP + `

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. The listeners are held until all are chosen so that the ports differ.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
