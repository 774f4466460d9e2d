package deploy

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDemoStopsOnInterrupt: `make demo | tee log`, then Ctrl-C. The
// terminal's SIGINT reaches make, the demo script and tee; tee ends at
// once, and the script's messages about stopping then go to a closed
// pipe. The script must stop the simulator, sloprober and Prometheus all
// the same (it died of SIGPIPE at its first message, and left the
// simulator and Prometheus running). Run on loopback ports of its own;
// about 15 s.
func TestDemoStopsOnInterrupt(t *testing.T) {
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Fatalf("prometheus not found: run `make test` (it installs Debian's prometheus): %v", err)
	}
	dir := t.TempDir()
	ports := map[string]int{}
	for _, name := range []string{"SIM_PORT", "SLOPROBER_PORT", "PROMETHEUS_PORT", "GRAFANA_PORT"} {
		ports[name] = freePort(t)
	}
	env := append(os.Environ(), "SLOPROBER_BIN="+binary, "DEMO_DIR="+filepath.Join(dir, "demo"))
	for name, p := range ports {
		env = append(env, fmt.Sprintf("%s=%d", name, p))
	}
	// The pipeline as a terminal runs it: a process group of its own,
	// SIGINT at its default (a test's children may inherit it ignored).
	cmd := exec.Command("bash", "-c", "trap - INT; scripts/demo.sh 2>&1 | tee "+filepath.Join(dir, "log"))
	cmd.Dir, cmd.Env = repoRoot, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: &out, mu: &mu}, &lockedWriter{w: &out, mu: &mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		killNamed(ports) // what the demo left, in process groups of their own
	})

	// Up once sloprober has been scraped (the script's last message).
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		up := strings.Contains(out.String(), "Prometheus scrapes sloprober")
		mu.Unlock()
		if up {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the demo did not come up within 60 s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The script stops the processes in turn, each within its grace: none
	// listens any more once it is done.
	deadline = time.Now().Add(60 * time.Second)
	for _, name := range []string{"SIM_PORT", "SLOPROBER_PORT", "PROMETHEUS_PORT"} {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[name])
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s (%s) still listens 60 s after Ctrl-C: the demo left it running\n%s", name, addr, out.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// killNamed kills the processes whose command line names one of ports
// (--web.listen-address=127.0.0.1:PORT): what a failed demo left running.
func killNamed(ports map[string]int) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, port := range ports {
			if bytes.Contains(b, []byte(fmt.Sprintf("127.0.0.1:%d\x00", port))) || bytes.HasSuffix(b, []byte(fmt.Sprintf("127.0.0.1:%d", port))) {
				var pid int
				if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
}

// lockedWriter serialises the writes of a process's stdout and stderr.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
