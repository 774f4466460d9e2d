package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// dockerfile is the repository's Dockerfile as BuildKit reads it.
type dockerfile struct {
	stages []instructions.Stage
	// args are the defaults of the ARGs before the first FROM, which the
	// FROM lines may use.
	args []string
}

// parseDockerfile parses ../Dockerfile with BuildKit's own parser, the one
// `docker build` uses, and fails on any warning of the parser or of the
// lint rules BuildKit applies while parsing (those of `docker build
// --check` that need no build: casing, JSON form of CMD and ENTRYPOINT,
// stage names, legacy ENV syntax...).
func parseDockerfile(t *testing.T) *dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parsing the Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile parser warning: %s", w.Short)
	}
	var lints []string
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		lints = append(lints, fmt.Sprintf("line %d: %s: %s", line, rule, msg))
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("parsing the Dockerfile's instructions: %v", err)
	}
	for _, l := range lints {
		t.Errorf("Dockerfile lint: %s", l)
	}
	d := &dockerfile{stages: stages}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			d.args = append(d.args, kv.Key+"="+kv.ValueString())
		}
	}
	return d
}

// base is a stage's base image with the global ARGs' defaults expanded.
func (d *dockerfile) base(t *testing.T, s *instructions.Stage) string {
	t.Helper()
	word, _, err := shell.NewLex('\\').ProcessWord(s.BaseName, shell.EnvsFromSlice(d.args))
	if err != nil {
		t.Fatalf("FROM %s: %v", s.BaseName, err)
	}
	return word
}

// commandsOf returns a stage's commands of type T, in order.
func commandsOf[T instructions.Command](s *instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if c, ok := c.(T); ok {
			out = append(out, c)
		}
	}
	return out
}

// last returns the last command of type T of a stage (the one in force),
// failing the test if there is none.
func last[T instructions.Command](t *testing.T, s *instructions.Stage, what string) T {
	t.Helper()
	cs := commandsOf[T](s)
	if len(cs) == 0 {
		t.Fatalf("stage %q has no %s", s.Name, what)
	}
	return cs[len(cs)-1]
}

// TestDockerfile checks the image's shape: a Go build stage producing a
// static binary, and a final stage on an empty root that runs it as a
// non-root user, with its port, health check, volume and default command.
func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	if len(d.stages) != 2 {
		t.Fatalf("want 2 stages (build, final), got %d", len(d.stages))
	}
	build, final := &d.stages[0], &d.stages[1]

	t.Run("build stage", func(t *testing.T) {
		if build.Name != "build" {
			t.Errorf("the first stage is named %q, want build", build.Name)
		}
		if base := d.base(t, build); !regexp.MustCompile(`^golang:1\.26(\.\d+)?-`).MatchString(base) {
			t.Errorf("build stage FROM %s, want golang:1.26-<debian release> (go.mod's Go)", base)
		}
		// CGO_ENABLED=0 in the stage's environment, or on the go build line.
		cgoOff := false
		for _, env := range commandsOf[*instructions.EnvCommand](build) {
			for _, kv := range env.Env {
				if kv.Key == "CGO_ENABLED" {
					cgoOff = kv.Value == "0"
				}
			}
		}
		goBuild := ""
		for _, run := range commandsOf[*instructions.RunCommand](build) {
			line := strings.Join(run.CmdLine, " ")
			if strings.Contains(line, "go build") {
				goBuild = line
			}
		}
		if goBuild == "" {
			t.Fatal("no RUN ... go build in the build stage")
		}
		if strings.Contains(goBuild, "CGO_ENABLED=0") {
			cgoOff = true
		}
		if !cgoOff {
			t.Error("the build stage does not set CGO_ENABLED=0: the binary would need libc, which scratch lacks")
		}
		for _, want := range []string{"-trimpath", "./cmd/sloprober"} {
			if !strings.Contains(goBuild, want) {
				t.Errorf("go build lacks %s: %s", want, goBuild)
			}
		}
	})

	t.Run("final stage", func(t *testing.T) {
		base := d.base(t, final)
		if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
			t.Errorf("final stage FROM %s, want scratch or gcr.io/distroless/static", base)
		}
		if runs := commandsOf[*instructions.RunCommand](final); len(runs) > 0 {
			t.Errorf("the final stage has RUN %v: an empty root has no shell", runs[0].CmdLine)
		}

		// Non-root, numeric (scratch has no /etc/passwd to look a name up).
		user := last[*instructions.UserCommand](t, final, "USER").User
		uid, gid, _ := strings.Cut(user, ":")
		for _, id := range []string{uid, gid} {
			if n, err := strconv.Atoi(id); err != nil || n == 0 {
				t.Errorf("USER %s: want numeric, non-root uid:gid", user)
				break
			}
		}

		// Nothing from the build context itself: only files from the build
		// stage (no source, no .git, no secrets in a layer).
		if adds := commandsOf[*instructions.AddCommand](final); len(adds) > 0 {
			t.Errorf("ADD in the final stage: %v", adds[0].SourcePaths)
		}
		copied := map[string]*instructions.CopyCommand{}
		for _, c := range commandsOf[*instructions.CopyCommand](final) {
			if c.From != build.Name {
				t.Errorf("COPY %v %s in the final stage is not --from=%s: the context would reach the image", c.SourcePaths, c.DestPath, build.Name)
			}
			for _, src := range c.SourcePaths {
				if src == "." || src == "/" || src == "/src" || src == "./" {
					t.Errorf("COPY --from=%s %s copies a whole tree into the final stage", c.From, src)
				}
			}
			copied[c.DestPath] = c
		}
		if _, ok := copied["/etc/ssl/certs/ca-certificates.crt"]; !ok && base == "scratch" {
			t.Error("no CA certificates in a scratch image: HTTPS targets would fail")
		}

		entrypoint := last[*instructions.EntrypointCommand](t, final, "ENTRYPOINT")
		if entrypoint.PrependShell || len(entrypoint.CmdLine) != 1 || filepath.Base(entrypoint.CmdLine[0]) != "sloprober" {
			t.Fatalf("ENTRYPOINT %v: want the exec form of the sloprober binary alone", entrypoint.CmdLine)
		}
		bin := entrypoint.CmdLine[0]
		if _, ok := copied[bin]; !ok {
			t.Errorf("ENTRYPOINT %s, but nothing is copied there", bin)
		}

		cmd := last[*instructions.CmdCommand](t, final, "CMD")
		if cmd.PrependShell || len(cmd.CmdLine) == 0 || cmd.CmdLine[0] != "run" {
			t.Errorf("CMD %v: want the exec form of run (the embedded default, no configuration needed)", cmd.CmdLine)
		}

		var volumes []string
		for _, v := range commandsOf[*instructions.VolumeCommand](final) {
			volumes = append(volumes, v.Volumes...)
		}
		if !slices.Contains(volumes, "/data") {
			t.Errorf("VOLUME %v: want /data, the test runs' storage", volumes)
		}
		if !slices.Contains(cmd.CmdLine, "--storage.path=/data") {
			t.Errorf("CMD %v does not keep test runs in the /data volume (--storage.path=/data)", cmd.CmdLine)
		}
		// The volume's directory belongs to USER, or the daemon cannot
		// write its runs into a fresh volume.
		if c, ok := copied["/data"]; !ok || c.Chown != user {
			t.Errorf("/data is not created owned by %s (COPY --chown=%s ... /data)", user, user)
		}
		if wd := last[*instructions.WorkdirCommand](t, final, "WORKDIR").Path; wd != "/data" {
			t.Errorf("WORKDIR %s: want /data, so relative paths land in the volume", wd)
		}

		var ports []string
		for _, e := range commandsOf[*instructions.ExposeCommand](final) {
			ports = append(ports, e.Ports...)
		}
		if !slices.Contains(ports, "9477") && !slices.Contains(ports, "9477/tcp") {
			t.Errorf("EXPOSE %v: want 9477", ports)
		}

		hc := last[*instructions.HealthCheckCommand](t, final, "HEALTHCHECK").Health
		if len(hc.Test) < 3 || hc.Test[0] != "CMD" || hc.Test[1] != bin || hc.Test[2] != "healthcheck" {
			t.Errorf("HEALTHCHECK %v: want [CMD %s healthcheck ...] (no shell, no curl on an empty root)", hc.Test, bin)
		}
		// The subcommand's own timeout must end before Docker kills it, so
		// the reason reaches `docker inspect`.
		for _, arg := range hc.Test[3:] {
			if v, ok := strings.CutPrefix(arg, "--timeout="); ok {
				if d, err := time.ParseDuration(v); err != nil || hc.Timeout != 0 && d >= hc.Timeout {
					t.Errorf("HEALTHCHECK healthcheck --timeout=%s is not below Docker's --timeout=%s", v, hc.Timeout)
				}
			}
		}
	})
}

// TestDockerfileVersionFlags: the image's binary carries the same version
// information as `make build`'s, and `make image` passes every value.
func TestDockerfileVersionFlags(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	// LDFLAGS := -X $(PKG).Version=$(VERSION) ...
	makeVars := map[string]string{}
	for _, m := range regexp.MustCompile(`-X \$\(PKG\)\.(\w+)=\$\((\w+)\)`).FindAllStringSubmatch(string(mk), -1) {
		makeVars[m[1]] = m[2]
	}
	if len(makeVars) == 0 {
		t.Fatal("no -X $(PKG).Field=$(VAR) in the Makefile's LDFLAGS")
	}
	d := parseDockerfile(t)
	goBuild := ""
	for _, run := range commandsOf[*instructions.RunCommand](&d.stages[0]) {
		if line := strings.Join(run.CmdLine, " "); strings.Contains(line, "go build") {
			goBuild = line
		}
	}
	// -X $pkg.Version=${VERSION:-...}
	dockerArgs := map[string]string{}
	for _, m := range regexp.MustCompile(`-X \$pkg\.(\w+)=\$\{(\w+)`).FindAllStringSubmatch(goBuild, -1) {
		dockerArgs[m[1]] = m[2]
	}
	var declared []string
	for _, a := range commandsOf[*instructions.ArgCommand](&d.stages[0]) {
		for _, kv := range a.Args {
			declared = append(declared, kv.Key)
		}
	}
	for field, makeVar := range makeVars {
		arg, ok := dockerArgs[field]
		if !ok {
			t.Errorf("the Makefile sets version.%s, the Dockerfile's go build does not", field)
			continue
		}
		if !slices.Contains(declared, arg) {
			t.Errorf("the Dockerfile uses ${%s} without ARG %s in the build stage", arg, arg)
		}
		if want := fmt.Sprintf("--build-arg %s='$(%s)'", arg, makeVar); !strings.Contains(string(mk), want) {
			t.Errorf("make image does not pass %s", want)
		}
	}
	for field := range dockerArgs {
		if _, ok := makeVars[field]; !ok {
			t.Errorf("the Dockerfile sets version.%s, the Makefile does not", field)
		}
	}
}

// TestDockerignore: the build context leaves out what the image must never
// contain or need (the git history, tools, local results, binaries) and
// keeps what the build stage compiles.
func TestDockerignore(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for path, excluded := range map[string]bool{
		".git/HEAD":                       true,
		".tools/bin/promtool":             true,
		"data/knee/run.json":              true,
		"sloprober":                       true,
		"cmd/sloprober/sloprober":         false, // only the root's binary is a build output
		"exporter/exporter.test":          true,
		"go.mod":                          false,
		"go.sum":                          false,
		"VERSION":                         false,
		"cmd/sloprober/main.go":           false,
		"cmd/sloprober/default.yml":       false, // embedded
		"config/testdata/x.yml":           false,
		"simulator/server.go":             false,
		"internal/testkit/browser/foo.go": false,
		"dashboards/sloprober-slo.json":   false,
	} {
		got, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != excluded {
			t.Errorf(".dockerignore: %s excluded=%v, want %v", path, got, excluded)
		}
	}
}
