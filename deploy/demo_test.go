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
	d := startDemo(t, "trap - INT; scripts/demo.sh 2>&1 | tee "+filepath.Join(t.TempDir(), "log"))
	if err := syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	d.requireStopped(t, "Ctrl-C")
}

// TestDemoStopsWhenItsParentDies: `kill <make's pid>`. Make passes SIGTERM
// to the shell that runs its recipe and exits; a shell that did not exec
// the script (dash keeps itself as the parent of `VAR=x script`) dies of
// it and leaves the script to init, with the simulator, sloprober and
// Prometheus running. The script must notice its parent gone and stop
// them. About 15 s.
func TestDemoStopsWhenItsParentDies(t *testing.T) {
	// The parent: a shell that waits for the script, as make's does.
	d := startDemo(t, "scripts/demo.sh; echo parent-done")
	if err := syscall.Kill(d.cmd.Process.Pid, syscall.SIGKILL); err != nil { // the parent only
		t.Fatal(err)
	}
	d.requireStopped(t, "its parent died")
	_ = d.cmd.Wait() // the script's output ends with it
}

// demo is a demo script started by a shell of its own, on loopback ports
// of its own.
type demo struct {
	cmd   *exec.Cmd
	ports map[string]int
	mu    sync.Mutex
	out   bytes.Buffer
}

// startDemo runs script (a bash command line) in a process group of its
// own, SIGINT at its default (a test's children may inherit it ignored),
// and waits until the demo is up: sloprober scraped, the script's last
// message.
func startDemo(t *testing.T, script string) *demo {
	t.Helper()
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Fatalf("prometheus not found: run `make test` (it installs Debian's prometheus): %v", err)
	}
	dir := t.TempDir()
	d := &demo{ports: map[string]int{}}
	for _, name := range []string{"SIM_PORT", "SLOPROBER_PORT", "PROMETHEUS_PORT", "GRAFANA_PORT"} {
		d.ports[name] = freePort(t)
	}
	env := append(os.Environ(), "SLOPROBER_BIN="+binary, "DEMO_DIR="+filepath.Join(dir, "demo"))
	for name, p := range d.ports {
		env = append(env, fmt.Sprintf("%s=%d", name, p))
	}
	d.cmd = exec.Command("bash", "-c", script)
	d.cmd.Dir, d.cmd.Env = repoRoot, env
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d.cmd.Stdout, d.cmd.Stderr = &lockedWriter{w: &d.out, mu: &d.mu}, &lockedWriter{w: &d.out, mu: &d.mu}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		killNamed(d.ports) // what the demo left, in process groups of their own
	})
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(d.output(), "Prometheus scrapes sloprober") {
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not come up within 60 s:\n%s", d.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return d
}

func (d *demo) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// requireStopped waits until none of the demo's processes listens: the
// script stops them in turn, each within its grace.
func (d *demo) requireStopped(t *testing.T, after string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range []string{"SIM_PORT", "SLOPROBER_PORT", "PROMETHEUS_PORT"} {
		addr := fmt.Sprintf("127.0.0.1:%d", d.ports[name])
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatalf("%s (%s) still listens 60 s after %s: the demo left it running\n%s", name, addr, after, d.output())
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
