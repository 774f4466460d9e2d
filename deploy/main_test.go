package deploy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the repository's root: this module lives in deploy/.
const repoRoot = ".."

// testVersion is the version linked into the binary under test, so that
// `--version` can be checked for the Makefile's ldflags taking effect.
const testVersion = "0.0.0-deploytest"

// binary is sloprober built once for these tests the way the Dockerfile
// builds it: CGO_ENABLED=0, -trimpath, the version ldflags. Not with -race:
// the race detector needs cgo, and a static binary is the point.
var binary string

// binDir holds binary. It is world-readable (0755), so that the binary
// can run as the image's numeric user when the tests run as root.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	binDir, err = os.MkdirTemp("", "sloprober-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if err := os.Chmod(binDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binary = filepath.Join(binDir, "sloprober")
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	build := exec.Command(goCmd, "build", "-trimpath",
		"-ldflags", "-X github.com/prometheus/common/version.Version="+testVersion,
		"-o", binary, "./cmd/sloprober")
	// The root module: deploy/ is a module of its own, and ../cmd/sloprober
	// is outside it.
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sloprober:", err)
		return 1
	}
	return m.Run()
}

// freePort returns a loopback port that was free a moment ago and never
// returned before in this test binary.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !portsHanded[port] {
			portsHanded[port] = true
			return port
		}
	}
	t.Fatal("no loopback port that was not handed out before")
	return 0
}

// The ports freePort handed out: the kernel may return a port again to the
// next listen on :0 before the process given it has bound it (as the main
// module's internal/testkit/freeport says; this module cannot import it).
var (
	portsMu     sync.Mutex
	portsHanded = map[int]bool{}
)

// httpGet GETs url with a short timeout and returns the status and body;
// status 0 when there was no answer.
func httpGet(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitFor polls cond every 50ms until it holds or timeout passes, and
// fails the test with what last made it false.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedBuffer is an io.Writer safe for a process's output and the test
// reading it concurrently.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
