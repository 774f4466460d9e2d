package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sloprober/sloprober/deploy/internal/k8sgen"
)

// TestGeneratedCopies: every copy the kustomize base and the chart hold of
// the repository's rules, dashboards, default configuration and version is
// what `make deploy-generate` makes of its source now, and no copy is left
// of a source that is gone.
func TestGeneratedCopies(t *testing.T) {
	files, err := k8sgen.Files(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(f.Path)))
		switch {
		case err != nil:
			t.Errorf("%s, the copy of %s: %v; run `%s`", f.Path, f.Source, err, k8sgen.Command)
		case !bytes.Equal(got, f.Content):
			t.Errorf("%s has drifted from %s: run `%s` (cd deploy && go run ./cmd/k8sgen)", f.Path, f.Source, k8sgen.Command)
		}
	}
	stale, err := k8sgen.Stale(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stale {
		t.Errorf("%s is the copy of no file in %s: run `%s`, which removes it", s, k8sgen.DashboardsSource, k8sgen.Command)
	}
}

// TestK8sgenWrite runs the generator on a copy of its sources: it writes
// what Files says, removes the copy of a dashboard that is gone, sets the
// version in Chart.yaml and the base's images, and a second run changes
// nothing.
func TestK8sgenWrite(t *testing.T) {
	root := t.TempDir()
	put := func(path, content string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(path string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
		if err != nil {
			t.Fatal(err)
		}
		put(path, string(b))
	}
	for _, p := range []string{k8sgen.RulesSource, k8sgen.ConfigSource, k8sgen.ChartYAML, k8sgen.BaseKustomization} {
		copyFile(p)
	}
	put(k8sgen.VersionSource, "9.8.7\n")
	put(k8sgen.DashboardsSource+"/sloprober-new.json", "{}\n")
	put(k8sgen.ChartDashboards+"/sloprober-gone.json", "{}\n")

	files, err := k8sgen.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := k8sgen.Write(root, files)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(changed, k8sgen.ChartDashboards+"/sloprober-gone.json (removed)") {
		t.Errorf("the copy of a removed dashboard stays: changed %v", changed)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Path)))
		if err != nil || !bytes.Equal(got, f.Content) {
			t.Errorf("%s not written as Files makes it: %v", f.Path, err)
		}
	}
	read := func(path string) string {
		b, _ := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		return string(b)
	}
	if !strings.Contains(read(k8sgen.ChartYAML), "\nappVersion: \"9.8.7\"\n") {
		t.Errorf("%s has no appVersion 9.8.7:\n%s", k8sgen.ChartYAML, read(k8sgen.ChartYAML))
	}
	if !strings.Contains(read(k8sgen.BaseKustomization), "    newTag: \"9.8.7\"\n") {
		t.Errorf("%s has no newTag 9.8.7:\n%s", k8sgen.BaseKustomization, read(k8sgen.BaseKustomization))
	}
	if kust := read(k8sgen.BaseDashboardsKust); !strings.Contains(kust, "name: sloprober-dashboard-new\n    files:\n      - sloprober-new.json\n") {
		t.Errorf("%s does not generate the new dashboard's ConfigMap:\n%s", k8sgen.BaseDashboardsKust, kust)
	}
	if again, err := k8sgen.Write(root, files); err != nil || len(again) > 0 {
		t.Errorf("a second run changed %v (%v)", again, err)
	}
}
