package deploy

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"go.yaml.in/yaml/v3"
)

// composeDir holds the compose stack.
var composeDir = filepath.Join("compose")

// loadCompose loads compose/compose.yaml the way `docker compose` does
// (compose-go is its loader): schema validation, normalization,
// consistency checks, paths resolved against the file's directory. The
// environment is empty, so nothing of this machine's leaks into it.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	dir, err := filepath.Abs(composeDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	details, err := loader.LoadConfigFiles(ctx, []string{filepath.Join(dir, "compose.yaml")}, dir)
	if err != nil {
		t.Fatal(err)
	}
	details.Environment = types.Mapping{}
	p, err := loader.LoadWithContext(ctx, *details, func(o *loader.Options) { o.ResolvePaths = true })
	if err != nil {
		t.Fatalf("loading compose.yaml: %v", err)
	}
	return p
}

// flagValues returns the values of --name=value arguments, by name.
func flagValues(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if name, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "--") {
			out[name] = value
		} else if strings.HasPrefix(a, "--") {
			out[a] = ""
		}
	}
	return out
}

// mountAt returns the service's mount whose target is target.
func mountAt(s types.ServiceConfig, target string) (types.ServiceVolumeConfig, bool) {
	for _, v := range s.Volumes {
		if v.Target == target {
			return v, true
		}
	}
	return types.ServiceVolumeConfig{}, false
}

// abs is path made absolute, or the test fails.
func abs(t *testing.T, path string) string {
	t.Helper()
	a, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// containerPort is the port a --web.listen-address style address listens
// on.
func containerPort(t *testing.T, addr string) uint32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return uint32(n)
}

// publishes reports whether the service publishes its container port.
func publishes(s types.ServiceConfig, port uint32) bool {
	return slices.ContainsFunc(s.Ports, func(p types.ServicePortConfig) bool { return p.Target == port })
}

// TestCompose checks the compose stack offline: compose-go loads it without
// error, every published port binds 127.0.0.1, every file it mounts is the
// repository's, the services agree on names and ports, and what each one
// reads is valid: sloprober's configuration by sloprober's own check,
// Prometheus' by promtool 3.x. Running it needs a container runtime, which
// this machine lacks (`make demo` runs the same stack as processes).
func TestCompose(t *testing.T) {
	p := loadCompose(t)
	repo := abs(t, repoRoot)
	for _, name := range []string{"sim", "sloprober", "prometheus", "grafana"} {
		if _, ok := p.Services[name]; !ok {
			t.Fatalf("no service %q; have %v", name, p.ServiceNames())
		}
	}

	t.Run("ports on loopback", func(t *testing.T) {
		for name, s := range p.Services {
			if len(s.Ports) == 0 {
				t.Errorf("service %s publishes no port", name)
			}
			for _, port := range s.Ports {
				if port.HostIP != "127.0.0.1" || port.Published == "" {
					t.Errorf("service %s publishes %d on %q:%s, want 127.0.0.1 and a fixed port", name, port.Target, port.HostIP, port.Published)
				}
			}
		}
	})

	t.Run("mounts", func(t *testing.T) {
		for name, s := range p.Services {
			for _, v := range s.Volumes {
				switch v.Type {
				case types.VolumeTypeBind:
					// A missing source would be created as an empty
					// directory by Docker, and the service would start
					// without its file.
					fi, err := os.Stat(v.Source)
					if err != nil {
						t.Errorf("service %s mounts %s: %v", name, v.Source, err)
						continue
					}
					if ext := filepath.Ext(v.Target); (ext == ".yml" || ext == ".yaml" || ext == ".json") && !fi.Mode().IsRegular() {
						t.Errorf("service %s mounts %s at %s: not a file", name, v.Source, v.Target)
					}
					if rel, err := filepath.Rel(repo, v.Source); err != nil || strings.HasPrefix(rel, "..") {
						t.Errorf("service %s mounts %s, outside the repository", name, v.Source)
					}
					if !v.ReadOnly {
						t.Errorf("service %s mounts %s read-write: the repository's files are the source of truth", name, v.Source)
					}
				case types.VolumeTypeVolume:
					if _, ok := p.Volumes[v.Source]; !ok {
						t.Errorf("service %s mounts the undeclared volume %s", name, v.Source)
					}
				default:
					t.Errorf("service %s: a %s mount at %s", name, v.Type, v.Target)
				}
			}
		}
	})

	d := parseDockerfile(t)
	entrypoint := last[*instructions.EntrypointCommand](t, &d.stages[len(d.stages)-1], "ENTRYPOINT").CmdLine[0]

	t.Run("image", func(t *testing.T) {
		for _, name := range []string{"sim", "sloprober"} {
			s := p.Services[name]
			if s.Build == nil {
				t.Errorf("service %s has no build: it runs the repository's image", name)
				continue
			}
			if s.Build.Context != repo {
				t.Errorf("service %s builds %s, want the repository's root", name, s.Build.Context)
			}
			if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		}
		if p.Services["sim"].Image != p.Services["sloprober"].Image {
			t.Error("sim and sloprober do not share one image")
		}
	})

	sim := p.Services["sim"]
	if len(sim.Command) == 0 || sim.Command[0] != "sim" {
		t.Fatalf("sim runs %v, want `sim ...`", sim.Command)
	}
	simAddr := flagValues(sim.Command)["--web.listen-address"]
	simPort := containerPort(t, simAddr)

	t.Run("sim", func(t *testing.T) {
		if host, _, _ := net.SplitHostPort(simAddr); host != "0.0.0.0" && host != "" {
			t.Errorf("sim listens on %s: sloprober reaches it from another container", simAddr)
		}
		if !publishes(sim, simPort) {
			t.Errorf("sim does not publish its port %d (for fault injection from this host)", simPort)
		}
		// The health check the image has asks sloprober's port: the sim
		// needs its own. Run it for real against a simulator.
		hc := sim.HealthCheck
		if hc == nil || len(hc.Test) < 3 || hc.Test[0] != "CMD" || hc.Test[1] != entrypoint || hc.Test[2] != "healthcheck" {
			t.Fatalf("sim's healthcheck %v: want [CMD %s healthcheck --url=...]", hc, entrypoint)
		}
		local := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		srv := exec.Command(binary, "sim", "--web.listen-address="+local)
		var logs lockedBuffer
		srv.Stdout, srv.Stderr = &logs, &logs
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- srv.Wait() }()
		defer func() {
			_ = srv.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = srv.Process.Kill()
				<-exited
				t.Errorf("sloprober sim did not stop within 10s of SIGTERM")
			}
		}()
		var args []string
		for _, a := range hc.Test[3:] {
			if v, ok := strings.CutPrefix(a, "--url="); ok {
				u, err := url.Parse(v)
				if err != nil {
					t.Fatal(err)
				}
				if u.Port() != strconv.Itoa(int(simPort)) {
					t.Errorf("sim's health check asks port %s, it listens on %d", u.Port(), simPort)
				}
				u.Host = local
				a = "--url=" + u.String()
			}
			args = append(args, a)
		}
		waitFor(t, 10*time.Second, "sim's health check passes", func() (bool, string) {
			out, err := exec.Command(binary, append([]string{"healthcheck"}, args...)...).CombinedOutput()
			return err == nil, fmt.Sprintf("%v: %s; sim: %s", err, out, logs.String())
		})
	})

	t.Run("sloprober", func(t *testing.T) {
		s := p.Services["sloprober"]
		if len(s.Command) == 0 || s.Command[0] != "run" {
			t.Fatalf("sloprober runs %v, want `run ...`", s.Command)
		}
		flags := flagValues(s.Command)
		cfgMount, ok := mountAt(s, flags["--config.file"])
		if !ok {
			t.Fatalf("--config.file=%s is not mounted", flags["--config.file"])
		}
		if cfgMount.Source != abs(t, filepath.Join(composeDir, "sloprober.yml")) {
			t.Errorf("sloprober's configuration is %s, want compose/sloprober.yml", cfgMount.Source)
		}
		if _, ok := flags["--config.expand-env"]; !ok {
			t.Error("no --config.expand-env: ${SIM_ADDR} would stay in the URL")
		}
		if v, ok := mountAt(s, flags["--storage.path"]); !ok || v.Type != types.VolumeTypeVolume {
			t.Errorf("--storage.path=%s is not a volume: test runs would be lost with the container", flags["--storage.path"])
		}
		if addr, ok := flags["--web.listen-address"]; ok && containerPort(t, addr) != 9477 || !publishes(s, 9477) {
			t.Error("sloprober does not publish the port it listens on, 9477")
		}
		// SIM_ADDR names the sim service at its port.
		simEnv := s.Environment["SIM_ADDR"]
		if simEnv == nil {
			t.Fatal("no SIM_ADDR in sloprober's environment")
		}
		host, port, err := net.SplitHostPort(*simEnv)
		if err != nil || host != "sim" || port != strconv.Itoa(int(simPort)) {
			t.Errorf("SIM_ADDR=%s, want sim:%d", *simEnv, simPort)
		}
		if dep, ok := s.DependsOn["sim"]; !ok || dep.Condition != types.ServiceConditionHealthy {
			t.Error("sloprober does not wait for a healthy sim")
		}
		// grace 15s + linger 5s + 2s: less, and the runtime kills it
		// before the last scrape.
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < 22*time.Second {
			t.Errorf("stop_grace_period %v: want at least 22s", s.StopGracePeriod)
		}
		// sloprober's own validation of the file it mounts, with the
		// environment compose gives it.
		check := exec.Command(binary, "check", "config", "--config.expand-env", "--config.file="+cfgMount.Source)
		check.Env = []string{"SIM_ADDR=" + *simEnv}
		out, err := check.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("sloprober check config %s: %v\n%s", cfgMount.Source, err, out)
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		s := p.Services["prometheus"]
		flags := flagValues(s.Command)
		if !slices.Contains(strings.Split(flags["--enable-feature"], ","), "exemplar-storage") {
			t.Errorf("--enable-feature=%s lacks exemplar-storage: the dashboards' exemplars need it", flags["--enable-feature"])
		}
		if !publishes(s, 9090) {
			t.Error("prometheus does not publish 9090")
		}
		cfgMount, ok := mountAt(s, flags["--config.file"])
		if !ok {
			t.Fatalf("--config.file=%s is not mounted", flags["--config.file"])
		}
		b, err := os.ReadFile(cfgMount.Source)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		// The rule files, as the container sees them, are the
		// repository's rules/.
		var hostRules []string
		for _, glob := range cfg["rule_files"].([]any) {
			matched := false
			for _, v := range s.Volumes {
				if ok, _ := filepath.Match(glob.(string), v.Target); ok && v.Type == types.VolumeTypeBind {
					hostRules = append(hostRules, v.Source)
					matched = true
				}
			}
			if !matched {
				t.Errorf("rule_files %s matches no mounted file", glob)
			}
		}
		if want := filepath.Join(repo, "rules", "sloprober.rules.yml"); !slices.Contains(hostRules, want) {
			t.Errorf("the rules Prometheus loads are %v, want %s", hostRules, want)
		}
		// The recording rules read classic buckets: scraping native
		// histograms alone would leave them without data.
		global, _ := cfg["global"].(map[string]any)
		if global["scrape_native_histograms"] == true && global["always_scrape_classic_histograms"] != true {
			t.Error("scrape_native_histograms without always_scrape_classic_histograms: the rules' _bucket series would be missing")
		}
		scrapes := fmt.Sprint(cfg["scrape_configs"])
		if !strings.Contains(scrapes, "sloprober:9477") {
			t.Errorf("Prometheus does not scrape sloprober:9477: %s", scrapes)
		}
		// promtool checks the file and the rule files it names; these are
		// the container's paths, so check a copy that names the host's.
		cfg["rule_files"] = hostRules
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(t.TempDir(), "prometheus.yml")
		if err := os.WriteFile(tmp, out, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := exec.Command(promtool(t), "check", "config", tmp).CombinedOutput()
		if err != nil {
			t.Errorf("promtool check config (rule_files mapped to %v): %v\n%s", hostRules, err, res)
		}
	})

	t.Run("grafana", func(t *testing.T) {
		s := p.Services["grafana"]
		if !publishes(s, 3000) {
			t.Error("grafana does not publish 3000")
		}
		dsMount, ok := mountAt(s, "/etc/grafana/provisioning/datasources")
		if !ok {
			t.Fatal("no datasource provisioning mounted")
		}
		var ds struct {
			Datasources []struct {
				Type, URL string
				IsDefault bool `yaml:"isDefault"`
			}
		}
		readYAML(t, filepath.Join(dsMount.Source, "prometheus.yml"), &ds)
		if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || !ds.Datasources[0].IsDefault {
			t.Fatalf("datasources %+v: want one default prometheus", ds.Datasources)
		}
		if u, err := url.Parse(ds.Datasources[0].URL); err != nil || u.Hostname() != "prometheus" || u.Port() != "9090" {
			t.Errorf("the datasource's URL %s is not the prometheus service", ds.Datasources[0].URL)
		}

		dbMount, ok := mountAt(s, "/etc/grafana/provisioning/dashboards")
		if !ok {
			t.Fatal("no dashboard provisioning mounted")
		}
		var providers struct {
			Providers []struct {
				Type    string
				Options struct{ Path string }
			}
		}
		readYAML(t, filepath.Join(dbMount.Source, "sloprober.yml"), &providers)
		if len(providers.Providers) != 1 || providers.Providers[0].Type != "file" {
			t.Fatalf("dashboard providers %+v: want one file provider", providers.Providers)
		}
		dashboards, ok := mountAt(s, providers.Providers[0].Options.Path)
		if !ok || dashboards.Source != filepath.Join(repo, "dashboards") {
			t.Fatalf("the provider reads %s, which is not the repository's dashboards/", providers.Providers[0].Options.Path)
		}
		files, _ := filepath.Glob(filepath.Join(dashboards.Source, "*.json"))
		if len(files) < 2 {
			t.Errorf("dashboards/ holds %v", files)
		}
		if home := s.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != nil {
			rel, err := filepath.Rel(dashboards.Target, *home)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("the home dashboard %s is not under %s", *home, dashboards.Target)
			} else if _, err := os.Stat(filepath.Join(dashboards.Source, rel)); err != nil {
				t.Errorf("the home dashboard: %v", err)
			}
		}
	})
}

// readYAML decodes the fields of v from a YAML file.
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := yaml.NewDecoder(f).Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// promtool is Prometheus 3.x's promtool, which `make unit` builds into
// .tools/bin ($PROMTOOL there).
func promtool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p = abs(t, filepath.Join(repoRoot, ".tools", "bin", "promtool"))
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Prometheus 3.x promtool not found: run `make unit`, or set $PROMTOOL: %v", err)
	}
	return p
}
