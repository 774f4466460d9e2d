package deploy

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
)

// TestStaticBinary: the binary built with CGO_ENABLED=0, as the Dockerfile
// builds it, needs no dynamic loader and no shared library, so it runs on
// scratch.
func TestStaticBinary(t *testing.T) {
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a PT_INTERP program header: it needs a dynamic loader, which scratch lacks")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries (DT_NEEDED): %v", libs)
	}
}

// imageRuntime is what the final stage of the Dockerfile says a container
// runs: its user, default command and health check.
type imageRuntime struct {
	uid, gid    int
	cmd         []string // CMD, after the ENTRYPOINT (the binary)
	healthcheck []string // HEALTHCHECK CMD, after the binary
	storage     string   // the VOLUME that CMD's --storage.path names
}

func readImageRuntime(t *testing.T) imageRuntime {
	t.Helper()
	d := parseDockerfile(t)
	final := &d.stages[len(d.stages)-1]
	var rt imageRuntime
	user := last[*instructions.UserCommand](t, final, "USER").User
	uid, gid, _ := strings.Cut(user, ":")
	var err1, err2 error
	rt.uid, err1 = strconv.Atoi(uid)
	rt.gid, err2 = strconv.Atoi(gid)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("USER %s: %v", user, err)
	}
	rt.cmd = last[*instructions.CmdCommand](t, final, "CMD").CmdLine
	hc := last[*instructions.HealthCheckCommand](t, final, "HEALTHCHECK").Health.Test
	if len(hc) < 3 {
		t.Fatalf("HEALTHCHECK %v", hc)
	}
	rt.healthcheck = hc[2:]
	for _, arg := range rt.cmd {
		if v, ok := strings.CutPrefix(arg, "--storage.path="); ok {
			rt.storage = v
		}
	}
	if rt.storage == "" {
		t.Fatalf("CMD %v names no --storage.path", rt.cmd)
	}
	return rt
}

// scratchRoot is a stand-in for the container's file system: an empty
// working directory the process may not write (a read-only root
// filesystem), and the volume, writable by the image's user.
type scratchRoot struct {
	cwd, volume string
	cred        *syscall.Credential // nil when the tests do not run as root
}

func newScratchRoot(t *testing.T, rt imageRuntime) *scratchRoot {
	t.Helper()
	// Under binDir (0755), not t.TempDir (0700): the image's user must
	// reach it.
	root, err := os.MkdirTemp(binDir, "root-")
	if err != nil {
		t.Fatal(err)
	}
	r := &scratchRoot{cwd: filepath.Join(root, "cwd"), volume: filepath.Join(root, "data")}
	for _, dir := range []string{root, r.cwd, r.volume} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		// As the image's numeric user, which has no /etc/passwd entry
		// there either; the volume is its own, as COPY --chown makes it.
		if err := os.Chown(r.volume, rt.uid, rt.gid); err != nil {
			t.Fatal(err)
		}
		r.cred = &syscall.Credential{Uid: uint32(rt.uid), Gid: uint32(rt.gid), Groups: []uint32{}}
	} else {
		t.Logf("not root: running as uid %d, not the image's %d", os.Geteuid(), rt.uid)
	}
	return r
}

// command is the binary run as in the image: an empty environment (no
// PATH, HOME, TMPDIR, TZ, SSL_CERT_FILE...), the image's user, and a
// working directory it cannot write.
func (r *scratchRoot) command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{}
	cmd.Dir = r.cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred}
	return cmd
}

// TestScratchRoot runs the binary the way the image does, without a
// container runtime: `--version`, then the Dockerfile's own CMD (the
// embedded default: a built-in simulator, probed) on a loopback port with
// the storage in a stand-in volume, the Dockerfile's HEALTHCHECK command
// against it, and a SIGTERM, as `docker stop` sends.
func TestScratchRoot(t *testing.T) {
	rt := readImageRuntime(t)
	root := newScratchRoot(t, rt)

	out, err := root.command("--version").CombinedOutput()
	if err != nil {
		t.Fatalf("sloprober --version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "sloprober, version "+testVersion) {
		t.Errorf("sloprober --version: %s", out)
	}

	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{}
	for _, arg := range rt.cmd {
		if strings.HasPrefix(arg, "--storage.path=") {
			arg = "--storage.path=" + root.volume
		}
		args = append(args, arg)
	}
	// Loopback only here; in the image it listens on :9477.
	args = append(args, "--web.listen-address="+addr)
	daemon := root.command(args...)
	var logs lockedBuffer
	daemon.Stdout, daemon.Stderr = &logs, &logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = daemon.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sloprober %s:\n%s", strings.Join(args, " "), logs.String())
		}
	})
	base := "http://" + addr

	waitFor(t, 20*time.Second, "/-/ready answers 200", func() (bool, string) {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("sloprober exited before it was ready: %v\n%s", err, logs.String())
		default:
		}
		code, body := httpGet(base + "/-/ready")
		return code == 200, fmt.Sprintf("%d %s", code, body)
	})
	if root.cred != nil {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", daemon.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("Uid:\t%d\t", rt.uid); !strings.Contains(string(status), want) {
			t.Errorf("sloprober does not run as the image's user: no %q in\n%s", want, status)
		}
	}
	// The embedded default probes its simulator: a good request of the
	// scenario that meets its SLOs shows that the whole path works with
	// no configuration and no environment.
	good := regexp.MustCompile(`(?m)^sloprober_requests_good_total\{[^}]*scenario="chat"[^}]*\} [1-9]`)
	waitFor(t, 20*time.Second, "a good request on /metrics", func() (bool, string) {
		code, body := httpGet(base + "/metrics")
		if code != 200 {
			return false, fmt.Sprintf("%d %s", code, body)
		}
		if !strings.Contains(body, `version="`+testVersion+`"`) {
			return false, "no sloprober_build_info with the linked version"
		}
		return good.MatchString(body), "no sloprober_requests_good_total{scenario=\"chat\"} above 0"
	})

	// The image's HEALTHCHECK, pointed at this port.
	hc := root.command(append(append([]string{}, rt.healthcheck...), "--url="+base+"/-/healthy")...)
	if out, err := hc.CombinedOutput(); err != nil {
		t.Errorf("sloprober %s: %v\n%s", strings.Join(hc.Args[1:], " "), err, out)
	}

	// SIGTERM: the daemon drains its requests in flight, then waits (up
	// to --shutdown.linger) for a last scrape; scraping until it exits
	// plays Prometheus' part.
	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(25 * time.Second) // grace 15s + linger 5s + 2s + slack
	for !stopped {
		select {
		case err := <-exited:
			stopped = true
			if err != nil {
				t.Errorf("sloprober exited with %v after SIGTERM", err)
			}
		case <-deadline:
			t.Fatal("sloprober did not exit within 25s of SIGTERM")
		case <-time.After(100 * time.Millisecond):
			httpGet(base + "/metrics")
		}
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", logs.String())
	}
	// Nothing was written outside the volume: the image runs with a
	// read-only root file system where the orchestrator asks for one.
	if entries, err := os.ReadDir(root.cwd); err != nil || len(entries) > 0 {
		t.Errorf("the working directory is not empty after the run: %v %v", entries, err)
	}
}
