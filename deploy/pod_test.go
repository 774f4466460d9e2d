package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestPodCommands runs the kustomize base's pod, its containers' own
// commands, without a cluster: the simulator sidecar with its arguments,
// its startupProbe's command until it passes (as the kubelet does before
// it starts sloprober), then sloprober with its arguments and the
// ConfigMap's configuration, whose liveness and readiness paths must
// answer 200 and whose canary must get good requests from the sidecar;
// then the stop, in the kubelet's order: sloprober first (SIGTERM, scraped
// as Prometheus would, exiting within the pod's grace period), then the
// sidecar. Only what a host cannot give is changed: loopback ports in
// place of 8000 and :9477, a temporary directory in place of the volume,
// the shard's ordinal (the pod's host name) given as 0.
func TestPodCommands(t *testing.T) {
	r := kustomizeRendering(t, filepath.Join("kubernetes", "base"))
	sts := only[appsv1.StatefulSet](t, r, "StatefulSet")
	pod := &sts.Spec.Template.Spec
	sim, ok := container(pod.InitContainers, "sim")
	if !ok {
		t.Fatal("no sidecar sim")
	}
	main, ok := container(pod.Containers, "sloprober")
	if !ok {
		t.Fatal("no container sloprober")
	}
	root := newScratchRoot(t, readImageRuntime(t))
	simAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	webAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	local := func(s string) string { return strings.ReplaceAll(s, simAddress, simAddr) }

	// The sidecar, and its startup probe as the kubelet runs it.
	simArgs := make([]string, len(sim.Args))
	for i, a := range sim.Args {
		simArgs[i] = local(a)
	}
	simProc := startProcess(t, root, "sim", simArgs)
	probe := sim.StartupProbe
	if probe == nil || probe.Exec == nil || len(probe.Exec.Command) < 2 || probe.Exec.Command[0] != "/bin/sloprober" {
		t.Fatalf("sidecar sim: startupProbe %+v, want an exec of /bin/sloprober", probe)
	}
	passed := false
	var last string
	for range max(probe.FailureThreshold, 1) {
		// As the kubelet runs it: the image's binary for /bin/sloprober,
		// killed at the probe's timeout.
		args := make([]string, 0, len(probe.Exec.Command)-1)
		for _, a := range probe.Exec.Command[1:] {
			args = append(args, local(a))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(max(probe.TimeoutSeconds, 1))*time.Second)
		cmd := exec.CommandContext(ctx, binary, args...)
		like := root.command()
		cmd.Env, cmd.Dir, cmd.SysProcAttr = like.Env, like.Dir, like.SysProcAttr
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			passed = true
			break
		}
		last = fmt.Sprintf("%v: %s", err, out)
		time.Sleep(time.Duration(max(probe.PeriodSeconds, 1)) * time.Second)
	}
	if !passed {
		t.Fatalf("sidecar sim: its startupProbe %v never passed; last: %s\n%s", probe.Exec.Command, last, simProc.logs.String())
	}

	// sloprober, with the ConfigMap's configuration.
	cfgVol, ok := volume(pod, "config")
	if !ok || cfgVol.ConfigMap == nil {
		t.Fatal("no config volume")
	}
	cm, ok := r.find("ConfigMap", cfgVol.ConfigMap.Name)
	if !ok {
		t.Fatalf("ConfigMap/%s not rendered", cfgVol.ConfigMap.Name)
	}
	cfgPath := filepath.Join(filepath.Dir(root.cwd), "sloprober.yml")
	if err := os.WriteFile(cfgPath, []byte(local(cm.Obj.(*corev1.ConfigMap).Data["sloprober.yml"])), 0o644); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range main.Args {
		switch {
		case strings.HasPrefix(a, "--config.file="):
			a = "--config.file=" + cfgPath
		case strings.HasPrefix(a, "--storage.path="):
			a = "--storage.path=" + root.volume
		case strings.HasPrefix(a, "--web.listen-address="):
			a = "--web.listen-address=" + webAddr
		case strings.HasPrefix(a, "--shard=ordinal/"):
			a = "--shard=0/" + strings.TrimPrefix(a, "--shard=ordinal/")
		}
		args = append(args, a)
	}
	proc := startProcess(t, root, "sloprober", args)
	base := "http://" + webAddr
	for _, p := range []*corev1.Probe{main.ReadinessProbe, main.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Fatal("container sloprober: no HTTP readiness or liveness probe")
		}
		path := p.HTTPGet.Path
		waitFor(t, 20*time.Second, "container sloprober: "+path+" answers 200", func() (bool, string) {
			if proc.exited() {
				t.Fatalf("sloprober exited:\n%s", proc.logs.String())
			}
			code, body := httpGet(base + path)
			return code == 200, fmt.Sprintf("%d %s", code, body)
		})
	}
	good := regexp.MustCompile(`(?m)^sloprober_requests_good_total\{[^}]*scenario="chat"[^}]*\} [1-9]`)
	waitFor(t, 20*time.Second, "a good request from the sidecar on /metrics", func() (bool, string) {
		_, body := httpGet(base + "/metrics")
		return good.MatchString(body), "no sloprober_requests_good_total{scenario=\"chat\"} above 0"
	})

	// The stop: sloprober, scraped until it exits, within the pod's grace
	// period less the sidecar's stop; then the sidecar.
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	start := time.Now()
	proc.signal(t, syscall.SIGTERM)
	for !proc.exited() {
		if time.Since(start) > grace {
			t.Fatalf("sloprober still running %s after SIGTERM, the pod's terminationGracePeriodSeconds", grace)
		}
		httpGet(base + "/metrics")
		time.Sleep(200 * time.Millisecond)
	}
	simProc.signal(t, syscall.SIGTERM)
	for !simProc.exited() {
		if time.Since(start) > grace {
			t.Fatalf("the sidecar still running %s after the pod's SIGTERM", grace)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range []*process{proc, simProc} {
		if p.err != nil {
			t.Errorf("%s exited with %v:\n%s", p.name, p.err, p.logs.String())
		}
		if strings.Contains(p.logs.String(), "level=ERROR") {
			t.Errorf("%s logged errors:\n%s", p.name, p.logs.String())
		}
	}
}

// process is a command of the pod running as the image runs it.
type process struct {
	name string
	cmd  *exec.Cmd
	logs lockedBuffer
	done chan struct{}
	err  error // once done is closed
}

func startProcess(t *testing.T, root *scratchRoot, name string, args []string) *process {
	t.Helper()
	p := &process{name: name, cmd: root.command(args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s %s:\n%s", name, strings.Join(args, " "), p.logs.String())
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}
