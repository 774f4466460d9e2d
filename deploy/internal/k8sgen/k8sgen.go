// Package k8sgen makes the copies that the Kubernetes manifests and the
// Helm chart need of files kept elsewhere in the repository. Kustomize reads
// nothing outside its root and Helm nothing outside its chart, so the rules
// (rules/sloprober.rules.yml), the dashboards (dashboards/*.json), the
// default Kubernetes configuration and the version are copied in; the
// repository's files stay the one source of truth, `make deploy-generate`
// (cmd/k8sgen) writes the copies, and deploy/'s tests fail when a copy
// drifts from what Files makes now.
package k8sgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Paths, relative to the repository's root and slash-separated.
const (
	RulesSource      = "rules/sloprober.rules.yml"
	DashboardsSource = "dashboards"
	VersionSource    = "VERSION"

	KustomizeBase = "deploy/kubernetes/base"
	Chart         = "deploy/helm/sloprober"

	// ConfigSource is the default configuration of both the kustomize
	// base and the chart; the chart's copy is ChartConfig.
	ConfigSource = KustomizeBase + "/sloprober.yml"
	ChartConfig  = Chart + "/files/sloprober.yml"

	// The copies, and the files whose version field the generator sets.
	PrometheusRule      = KustomizeBase + "/prometheusrule.yaml"
	ChartRules          = Chart + "/files/sloprober.rules.yml"
	BaseDashboards      = KustomizeBase + "/dashboards"
	ChartDashboards     = Chart + "/files/dashboards"
	BaseDashboardsKust  = BaseDashboards + "/kustomization.yaml"
	ChartYAML           = Chart + "/Chart.yaml"
	BaseKustomization   = KustomizeBase + "/kustomization.yaml"
	DashboardNamePrefix = "sloprober-dashboard-"
)

// Command is what makes the copies, for messages about stale ones.
const Command = "make deploy-generate"

// File is a file as Files makes it.
type File struct {
	// Path is where it goes, relative to the repository's root.
	Path string
	// Source is what it is made from, for messages.
	Source string
	// Content is what it must hold.
	Content []byte
}

// Files returns every generated file, as it must be now, of the repository
// at root.
func Files(root string) ([]File, error) {
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("reading the source of a generated file: %w", err)
		}
		return b, nil
	}
	var files []File

	rules, err := read(RulesSource)
	if err != nil {
		return nil, err
	}
	files = append(files,
		File{Path: ChartRules, Source: RulesSource, Content: rules},
		File{Path: PrometheusRule, Source: RulesSource, Content: prometheusRule(rules)},
	)

	dashboards, err := Dashboards(root)
	if err != nil {
		return nil, err
	}
	for _, name := range dashboards {
		src := DashboardsSource + "/" + name
		b, err := read(src)
		if err != nil {
			return nil, err
		}
		files = append(files,
			File{Path: BaseDashboards + "/" + name, Source: src, Content: b},
			File{Path: ChartDashboards + "/" + name, Source: src, Content: b},
		)
	}
	files = append(files, File{Path: BaseDashboardsKust, Source: DashboardsSource + "/*.json", Content: dashboardsKustomization(dashboards)})

	config, err := read(ConfigSource)
	if err != nil {
		return nil, err
	}
	files = append(files, File{Path: ChartConfig, Source: ConfigSource, Content: config})

	version, err := read(VersionSource)
	if err != nil {
		return nil, err
	}
	v := strings.TrimSpace(string(version))
	for _, f := range []struct{ path, field string }{
		{ChartYAML, "appVersion"},
		{BaseKustomization, "newTag"},
	} {
		b, err := read(f.path)
		if err != nil {
			return nil, err
		}
		b, err = setField(b, f.field, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		files = append(files, File{Path: f.path, Source: VersionSource, Content: b})
	}
	return files, nil
}

// Dashboards returns the names of the dashboards in dashboards/, sorted.
func Dashboards(root string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(root, DashboardsSource, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("no dashboards in %s", filepath.Join(root, DashboardsSource))
	}
	var names []string
	for _, m := range matches {
		names = append(names, filepath.Base(m))
	}
	slices.Sort(names)
	return names, nil
}

// DashboardConfigMap is the name of the ConfigMap of a dashboard file in
// the kustomize base, and in the chart when its full name is "sloprober":
// sloprober-slo.json is in sloprober-dashboard-slo.
func DashboardConfigMap(file string) string {
	return DashboardNamePrefix + strings.TrimPrefix(strings.TrimSuffix(file, ".json"), "sloprober-")
}

// Stale returns the files in the directories of copies that no source
// makes any more (a dashboard removed from dashboards/).
func Stale(root string, files []File) ([]string, error) {
	want := map[string]bool{}
	for _, f := range files {
		want[f.Path] = true
	}
	var stale []string
	for _, dir := range []string{BaseDashboards, ChartDashboards} {
		entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dir)))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if p := dir + "/" + e.Name(); !want[p] {
				stale = append(stale, p)
			}
		}
	}
	return stale, nil
}

// Write writes the files that differ from what is on disk and removes the
// stale ones, and returns the paths it changed.
func Write(root string, files []File) ([]string, error) {
	var changed []string
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f.Path))
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, f.Content) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return changed, err
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			return changed, err
		}
		changed = append(changed, f.Path)
	}
	stale, err := Stale(root, files)
	if err != nil {
		return changed, err
	}
	for _, s := range stale {
		if err := os.Remove(filepath.Join(root, filepath.FromSlash(s))); err != nil {
			return changed, err
		}
		changed = append(changed, s+" (removed)")
	}
	return changed, nil
}

// prometheusRule wraps a Prometheus rule file in a PrometheusRule, whose
// spec has the rule file's schema. The file is indented as it is, comments
// and all, rather than parsed and marshalled again, so that the copy reads
// like its source and its block scalars (every expr: |) stay as written.
func prometheusRule(rules []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Generated by %s from %s: do not edit.
# The Prometheus Operator's form of the rule file: spec is the file itself.
# The operator's ruleSelector may ask for a label (kube-prometheus-stack's:
# release: <its release name>); add it in an overlay.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: sloprober
  labels:
    app.kubernetes.io/name: sloprober
    app.kubernetes.io/instance: sloprober
spec:
`, Command, RulesSource)
	for line := range strings.Lines(string(rules)) {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
		b.WriteString("\n")
	}
	return b.Bytes()
}

// dashboardsKustomization is a kustomization of one ConfigMap a dashboard,
// named as the chart names them, with the label Grafana's dashboard sidecar
// looks for by default. The names carry no hash: the sidecar reads any
// ConfigMap with the label, and a hashed name would leave the old one, a
// second copy of the dashboard, behind after every change.
func dashboardsKustomization(dashboards []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Generated by %s from %s/*.json: do not edit.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
generatorOptions:
  disableNameSuffixHash: true
  labels:
    app.kubernetes.io/name: sloprober
    app.kubernetes.io/instance: sloprober
    grafana_dashboard: "1"
configMapGenerator:
`, Command, DashboardsSource)
	for _, d := range dashboards {
		fmt.Fprintf(&b, "  - name: %s\n    files:\n      - %s\n", DashboardConfigMap(d), d)
	}
	return b.Bytes()
}

// setField sets a top-level or nested scalar field of a YAML file, the
// only line of the file that sets it, to a quoted value, leaving every
// other byte as it is.
func setField(b []byte, field, value string) ([]byte, error) {
	re := regexp.MustCompile(`(?m)^([ \t]*(?:- )?` + regexp.QuoteMeta(field) + `:)[ \t]*.*$`)
	matches := re.FindAllIndex(b, -1)
	if len(matches) != 1 {
		return nil, fmt.Errorf("%d lines set %s, want exactly one", len(matches), field)
	}
	return re.ReplaceAll(b, []byte(fmt.Sprintf("${1} %q", value))), nil
}
