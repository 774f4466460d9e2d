package deploy

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sloprober/sloprober/deploy/internal/k8sgen"
)

// chartDir is the Helm chart.
var chartDir = filepath.Join("helm", "sloprober")

// helmNamespace is the namespace the chart is rendered for.
const helmNamespace = "monitoring"

// helmKubeVersion is the cluster the chart is rendered for: the oldest it
// supports (native sidecars). Helm as a library defaults to v1.20, which
// the chart's kubeVersion refuses.
const helmKubeVersion = "v1.29.0"

var loadChart = sync.OnceValues(func() (*chart.Chart, error) { return loader.Load(chartDir) })

// helmRender is `helm template release deploy/helm/sloprober -n monitoring
// -f values` with Helm's own libraries: the values checked against
// values.schema.json and coalesced with values.yaml, the templates
// rendered in strict mode (a reference to a value that does not exist is
// an error). It returns the manifests, in the order of their templates,
// and NOTES.txt.
func helmRender(release, values string) (manifests, notes string, err error) {
	ch, err := loadChart()
	if err != nil {
		return "", "", fmt.Errorf("loading %s: %w", chartDir, err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		return "", "", fmt.Errorf("values %q: %w", values, err)
	}
	opts := chartutil.ReleaseOptions{Name: release, Namespace: helmNamespace, Revision: 1, IsInstall: true}
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := chartutil.ParseKubeVersion(helmKubeVersion)
	if err != nil {
		return "", "", err
	}
	caps.KubeVersion = *kv
	// What helm install and helm template check before rendering.
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return "", "", fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", ch.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	rv, err := chartutil.ToRenderValues(ch, vals, opts, caps)
	if err != nil {
		return "", "", err
	}
	files, err := engine.Engine{Strict: true}.Render(ch, rv)
	if err != nil {
		return "", "", err
	}
	var docs []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		switch base := path.Base(name); {
		case base == "NOTES.txt":
			notes = files[name]
		case strings.HasPrefix(base, "_"):
		default:
			docs = append(docs, "# Source: "+name+"\n"+files[name])
		}
	}
	return strings.Join(docs, "\n---\n"), notes, nil
}

// helmTemplate renders the chart and decodes its manifests strictly; name
// says which values in messages.
func helmTemplate(t *testing.T, name, release, values string) *rendering {
	t.Helper()
	source := fmt.Sprintf("helm template %s %s (%s)", release, chartDir, name)
	manifests, _, err := helmRender(release, values)
	if err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	objs, err := decodeManifests(source, []byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	return &rendering{source: source, objs: objs}
}

// fullname is the chart's name for a release's objects.
func fullname(release string) string {
	if strings.Contains(release, "sloprober") {
		return release
	}
	return release + "-sloprober"
}

// realTarget is a configuration of a target outside the pod, its token
// read from the Secret's mount.
const realTarget = `
targets:
  - name: llm
    url: https://llm.example.com/v1
    api: chat
    model: my-model
    timeout: 60s
    max_in_flight: 16
    authorization: {credentials_file: /etc/sloprober/secrets/token}
scenarios:
  - name: chat
    input_tokens: 256
    output_tokens: 64
    slo: {ttft: 2s, tpot: 100ms}
    objective: 0.99
canary:
  - {target: llm, scenario: chat, rate: 0.5, arrival: poisson}
`

// oddConfig is a configuration whose text YAML and Go templates could both
// mangle: quotes of both kinds, Go template and Prometheus template braces,
// a '#' inside a string, a tab, trailing spaces, non-ASCII, an indented
// first line (which a block scalar would take as its indentation), a
// trailing blank line (which a block scalar's clipping would drop). The
// chart must hand it to the pod byte for byte.
const oddConfig = "   # an indented first line\n" +
	"# sloprober.yml: \"double\" and 'single' quotes, {{ .Values.x }}, {{ $labels.target }}, a tab:\t, ünïcödé, trailing spaces:   \n" +
	"# shards: 99\n" +
	"targets:\n" +
	"  - name: llm\n" +
	"    url: https://llm.example.com/v1\n" +
	"    api: chat\n" +
	"    model: \"org/model:v1 #2\"\n" +
	"    timeout: 60s\n" +
	"    max_in_flight: 16\n" +
	"    metadata: {hardware: \"8x H100: {{ not a template }}\", engine: 'it''s \"vLLM\"'}\n" +
	"    authorization: {credentials_file: /etc/sloprober/secrets/token}\n" +
	"scenarios:\n" +
	"  - name: chat\n" +
	"    input_tokens: 256\n" +
	"    output_tokens: 64\n" +
	"    slo: {ttft: 2s, tpot: 100ms}\n" +
	"    objective: 0.99\n" +
	"canary:\n" +
	"  - {target: llm, scenario: chat, rate: 0.5, arrival: poisson}\n\n"

// mustYAML is v as YAML, for values that are easier to build than to write.
func mustYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// helmCases are the value sets the chart is rendered and linted with, and
// what each must render.
var helmCases = []struct {
	name, release, values string
	// want adjusts the defaults' expectations.
	want func(r *rendering)
	// check checks what is particular to the case.
	check func(t *testing.T, r *rendering)
}{
	{
		name: "defaults", release: "sloprober",
		check: func(t *testing.T, r *rendering) {
			sts := only[appsv1.StatefulSet](t, r, "StatefulSet")
			manifests, _, err := helmRender("sloprober", "")
			if err != nil {
				t.Fatal(err)
			}
			// The annotation is the hash of the rendered configmap.yaml.
			i := strings.Index(manifests, "# Source: sloprober/templates/configmap.yaml\n")
			if i < 0 {
				t.Fatalf("%s: no configmap.yaml in the output", r.source)
			}
			j := strings.Index(manifests[i:], "\n---\n")
			if j < 0 {
				t.Fatalf("%s: configmap.yaml is the last template", r.source)
			}
			cm := strings.TrimPrefix(manifests[i:i+j], "# Source: sloprober/templates/configmap.yaml\n")
			if got, want := sts.Spec.Template.Annotations["checksum/config"], fmt.Sprintf("%x", sha256.Sum256([]byte(cm))); got != want {
				t.Errorf("%s: checksum/config %q, want the configmap's sha256 %s", r.source, got, want)
			}
			if img := sts.Spec.Template.Spec.Containers[0].Image; img != "sloprober:"+readVersion(t) {
				t.Errorf("%s: image %s, want sloprober:%s (appVersion, the VERSION file)", r.source, img, readVersion(t))
			}
		},
	},
	{name: "three shards", release: "sloprober", values: "shards: 3", want: func(r *rendering) { r.shards = 3 }},
	{
		name: "persistence off", release: "sloprober", values: "persistence: {enabled: false}",
		want: func(r *rendering) { r.persistence = false },
	},
	{
		name: "monitoring objects off", release: "sloprober",
		values: "serviceMonitor: {enabled: false}\nprometheusRule: {enabled: false}\ndashboards: {enabled: false}\npdb: {enabled: false}",
		want: func(r *rendering) {
			r.serviceMonitor, r.prometheusRule, r.dashboards, r.pdb = false, false, false, false
		},
	},
	{
		name: "existing Secret", release: "sloprober", values: "credentials: {existingSecret: llm-tokens}",
		want: func(r *rendering) { r.secret, r.secretOptional = "llm-tokens", false },
	},
	{
		name: "existing ConfigMap", release: "sloprober", values: "existingConfigMap: my-sloprober-config",
		want: func(r *rendering) { r.externalConfigMap = "my-sloprober-config" },
		check: func(t *testing.T, r *rendering) {
			sts := only[appsv1.StatefulSet](t, r, "StatefulSet")
			if _, ok := sts.Spec.Template.Annotations["checksum/config"]; ok {
				t.Errorf("%s: a checksum/config of a ConfigMap the chart does not render", r.source)
			}
		},
	},
	{
		name: "a real target", release: "sloprober",
		values: "simulator: {enabled: false}\ncredentials: {existingSecret: llm-tokens}\nconfig: |" + strings.ReplaceAll(realTarget, "\n", "\n  "),
		want: func(r *rendering) {
			r.simulator = false
			r.secret, r.secretOptional = "llm-tokens", false
		},
	},
	{
		name: "fullnameOverride, five shards, no persistence, an odd configuration", release: "prod",
		values: mustYAML(map[string]any{
			"fullnameOverride": "probe",
			"shards":           5,
			"persistence":      map[string]any{"enabled": false},
			"simulator":        map[string]any{"enabled": false},
			"config":           oddConfig,
		}),
		want: func(r *rendering) {
			r.shards, r.persistence, r.simulator = 5, false, false
			r.secret = "probe-credentials"
		},
		check: func(t *testing.T, r *rendering) {
			for _, id := range []string{"StatefulSet/probe", "Service/probe", "ConfigMap/probe-config", "ServiceMonitor/probe", "PrometheusRule/probe", "PodDisruptionBudget/probe", "ConfigMap/probe-dashboard-slo"} {
				if !slices.ContainsFunc(r.objs, func(o object) bool { return o.String() == id }) {
					t.Errorf("%s: no %s in %v", r.source, id, r.objs)
				}
			}
			if sts := only[appsv1.StatefulSet](t, r, "StatefulSet"); sts.Spec.ServiceName != "probe" || sts.Labels["app.kubernetes.io/instance"] != "prod" {
				t.Errorf("%s: serviceName %q, instance label %q; want probe, prod", r.source, sts.Spec.ServiceName, sts.Labels["app.kubernetes.io/instance"])
			}
			o, ok := r.find("ConfigMap", "probe-config")
			if !ok {
				return
			}
			if got := o.Obj.(*corev1.ConfigMap).Data["sloprober.yml"]; got != oddConfig {
				t.Errorf("%s: the configuration is not the value byte for byte:\n%s", r.source, cmp.Diff(oddConfig, got))
			}
		},
	},
	{
		name: "fault actions", release: "sloprober", values: "faultActions: {kubernetes: {enabled: true}}",
		want: func(r *rendering) { r.faultActions, r.faultNamespace = true, helmNamespace },
	},
	{
		name: "fault actions in the serving pods' namespace", release: "canary",
		values: "faultActions: {kubernetes: {enabled: true, namespace: llm}}",
		want: func(r *rendering) {
			r.secret = "canary-sloprober-credentials"
			r.faultActions, r.faultNamespace = true, "llm"
		},
		check: func(t *testing.T, r *rendering) {
			for _, id := range []string{"ServiceAccount/canary-sloprober", "Role/canary-sloprober-fault-actions", "RoleBinding/canary-sloprober-fault-actions"} {
				if !slices.ContainsFunc(r.objs, func(o object) bool { return o.String() == id }) {
					t.Errorf("%s: no %s in %v", r.source, id, r.objs)
				}
			}
			// The subject's namespace is written out: the binding's is
			// another.
			if s := only[rbacv1.RoleBinding](t, r, "RoleBinding").Subjects; len(s) != 1 || s[0].Namespace != helmNamespace {
				t.Errorf("%s: subjects %+v, want the ServiceAccount in %s", r.source, s, helmNamespace)
			}
		},
	},
	// A namespace alone enables nothing.
	{name: "fault actions off, a namespace set", release: "sloprober", values: "faultActions: {kubernetes: {namespace: llm}}"},
	{
		name: "another release", release: "canary",
		values: `shards: 2
extraArgs: [--web.enable-test-api, --shutdown.grace-period=60s]
env: [{name: GOMEMLIMIT, valueFrom: {resourceFieldRef: {resource: limits.memory}}}]
terminationGracePeriodSeconds: 120
persistence: {storageClass: "-"}
serviceMonitor: {labels: {release: kube-prometheus-stack}, interval: 15s}
prometheusRule: {labels: {release: kube-prometheus-stack}}
dashboards: {namespace: grafana}
podAnnotations: {example.com/team: llm}
nodeSelector: {kubernetes.io/arch: amd64}`,
		want: func(r *rendering) {
			r.shards = 2
			r.secret = "canary-sloprober-credentials"
		},
		check: func(t *testing.T, r *rendering) {
			sts := only[appsv1.StatefulSet](t, r, "StatefulSet")
			if sts.Name != "canary-sloprober" {
				t.Errorf("%s: StatefulSet/%s, want canary-sloprober", r.source, sts.Name)
			}
			if !slices.Contains(sts.Spec.Template.Spec.Containers[0].Args, "--web.enable-test-api") {
				t.Errorf("%s: extraArgs missing from %v", r.source, sts.Spec.Template.Spec.Containers[0].Args)
			}
			if env := sts.Spec.Template.Spec.Containers[0].Env; len(env) != 1 || env[0].Name != "GOMEMLIMIT" || env[0].ValueFrom == nil || env[0].ValueFrom.ResourceFieldRef == nil {
				t.Errorf("%s: env %+v, want GOMEMLIMIT from limits.memory", r.source, env)
			}
			if sc := sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName; sc == nil || *sc != "" {
				t.Errorf("%s: storageClass \"-\" is not storageClassName: \"\"", r.source)
			}
			if a := sts.Spec.Template.Annotations; a["example.com/team"] != "llm" || a["checksum/config"] == "" {
				t.Errorf("%s: pod annotations %v, want podAnnotations and checksum/config", r.source, a)
			}
			if sm := only[monitoringv1.ServiceMonitor](t, r, "ServiceMonitor"); sm.Labels["release"] != "kube-prometheus-stack" || sm.Spec.Endpoints[0].Interval != "15s" {
				t.Errorf("%s: ServiceMonitor labels %v, interval %q", r.source, sm.Labels, sm.Spec.Endpoints[0].Interval)
			}
			if pr := only[monitoringv1.PrometheusRule](t, r, "PrometheusRule"); pr.Labels["release"] != "kube-prometheus-stack" {
				t.Errorf("%s: PrometheusRule labels %v", r.source, pr.Labels)
			}
			for _, o := range r.ofKind("ConfigMap") {
				cm := o.Obj.(*corev1.ConfigMap)
				if want := map[bool]string{true: "grafana", false: helmNamespace}[cm.Labels["grafana_dashboard"] == "1"]; cm.Namespace != want {
					t.Errorf("%s: ConfigMap/%s in namespace %q, want %q", r.source, cm.Name, cm.Namespace, want)
				}
			}
		},
	},
}

// TestHelmTemplate renders the chart with Helm's libraries for each of
// helmCases and checks every output as TestKustomize checks kustomize's.
func TestHelmTemplate(t *testing.T) {
	for _, tc := range helmCases {
		t.Run(tc.name, func(t *testing.T) {
			r := helmTemplate(t, tc.name, tc.release, tc.values)
			r.shards = 1
			r.simulator, r.persistence = true, true
			r.secret, r.secretOptional = fullname(tc.release)+"-credentials", true
			r.serviceMonitor, r.prometheusRule, r.dashboards, r.pdb = true, true, true, true
			if tc.want != nil {
				tc.want(r)
			}
			for _, o := range r.objs {
				if ns := o.Obj.(metav1.Object).GetNamespace(); ns == "" {
					t.Errorf("%s: %s has no namespace", r.source, o)
				}
			}
			checkRendering(t, r)
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// TestHelmTemplateRefuses: values that would render a broken or misleading
// deployment are errors, each naming what is wrong.
func TestHelmTemplateRefuses(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		// The default configuration probes the simulator.
		{"simulator: {enabled: false}", "simulator.enabled=false needs a configuration of your own"},
		// One value sets both replicas and --shard's N.
		{"extraArgs: [--shard=0/1]", "extraArgs: --shard=0/1: the chart sets it"},
		{"shards: 0", "shards"},
		{"shards: 1001", "shards"},
		{`shards: "3"`, "shards"},
		// Misspelled values are errors, not ignored.
		{"shard: 3", "shard"},
		{"persistence: {enable: false}", "enable"},
		// The configuration is a string, replaced whole, never merged.
		{"config: {targets: []}", "config"},
		// sloprober refuses a flag given twice.
		{"extraArgs: [--shutdown.linger=1m]", "extraArgs: --shutdown.linger=1m: the chart sets it"},
		{"extraArgs: [--storage.path, /tmp]", "extraArgs: --storage.path: the chart sets it"},
		// The probes would get 401s, or plain HTTP on a TLS port.
		{"extraArgs: [--web.config.file=/etc/sloprober/secrets/web.yml]", "the probes and the ServiceMonitor speak plain HTTP"},
		// Names the API server would refuse, or that leave no room for the
		// pods' labels.
		{"fullnameOverride: Sloprober_1", "fullnameOverride"},
		{"fullnameOverride: " + strings.Repeat("s", 53), "fullnameOverride"},
		// A bare number is bytes: a volume of 10 bytes.
		{"persistence: {size: 10}", "size"},
		{"persistence: {size: 10G0}", "size"},
		// Durations the Prometheus Operator or sloprober would refuse.
		{"serviceMonitor: {interval: 30 seconds}", "interval"},
		{"shutdownLinger: 35", "shutdownLinger"},
		// A namespace the API server would refuse; a misspelled switch; a
		// string, which the template would take as true.
		{"faultActions: {kubernetes: {enabled: true, namespace: LLM_serving}}", "namespace"},
		{"faultActions: {kubernetes: {enable: true}}", "enable"},
		{`faultActions: {kubernetes: {enabled: "false"}}`, "enabled"},
		// A budget of none would block every node drain.
		{"pdb: {maxUnavailable: 0}", "maxUnavailable"},
		{`pdb: {maxUnavailable: "0%"}`, "maxUnavailable"},
	} {
		_, _, err := helmRender("sloprober", tc.values)
		if err == nil {
			t.Errorf("values %q: rendered", tc.values)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: error %q does not mention %q", tc.values, err, tc.want)
		}
	}
}

// TestHelmKubeVersion: the chart's kubeVersion admits the Kubernetes
// versions with native sidecars (1.29, a provider's 1.29 build, later
// ones) and refuses older ones, on which the sidecar would be an init
// container that never ends and the pods would never start.
func TestHelmKubeVersion(t *testing.T) {
	ch, err := loadChart()
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]bool{
		"v1.28.9": false, "v1.29.0": true, "v1.29.3-eks-adc7111": true, "v1.30.1+k3s1": true, "v1.35.0": true,
	} {
		if got := chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, v); got != want {
			t.Errorf("kubeVersion %q on Kubernetes %s: compatible %v, want %v", ch.Metadata.KubeVersion, v, got, want)
		}
	}
}

// TestHelmConfigRolls: a changed configuration changes the pod template
// (checksum/config), so the StatefulSet rolls its pods onto it; a change
// elsewhere does not touch the checksum.
func TestHelmConfigRolls(t *testing.T) {
	checksum := func(values string) string {
		r := helmTemplate(t, values, "sloprober", values)
		return only[appsv1.StatefulSet](t, r, "StatefulSet").Spec.Template.Annotations["checksum/config"]
	}
	def := checksum("")
	if def == "" {
		t.Fatal("no checksum/config")
	}
	if other := checksum("config: |" + strings.ReplaceAll(realTarget, "\n", "\n  ") + "\nsimulator: {enabled: false}"); other == def {
		t.Error("another configuration, the same checksum/config: the pods would not roll")
	}
	if same := checksum("podAnnotations: {a: b}\nshards: 2"); same != def {
		t.Error("the same configuration, another checksum/config")
	}
}

// TestHelmLint runs Helm's linter (`helm lint`, with the values' schema and
// strict rendering) with the defaults and every value set of helmCases;
// warnings fail the test as errors do.
func TestHelmLint(t *testing.T) {
	for _, tc := range helmCases {
		vals, err := chartutil.ReadValues([]byte(tc.values))
		if err != nil {
			t.Fatal(err)
		}
		kv, err := chartutil.ParseKubeVersion(helmKubeVersion)
		if err != nil {
			t.Fatal(err)
		}
		linter := lint.AllWithKubeVersion(chartDir, vals, helmNamespace, kv)
		for _, m := range linter.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint %s (%s): %s", chartDir, tc.name, m)
			} else {
				t.Logf("helm lint %s (%s): %s", chartDir, tc.name, m)
			}
		}
	}
}

// TestHelmNotes: NOTES.txt renders and says where to look, and what the
// kubernetes fault action may delete when it is enabled.
func TestHelmNotes(t *testing.T) {
	for _, values := range []string{"", "shards: 3\nserviceMonitor: {enabled: false}"} {
		_, notes, err := helmRender("sloprober", values)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(notes, "port-forward sloprober-0 9477") {
			t.Errorf("NOTES.txt (values %q) says no port-forward:\n%s", values, notes)
		}
		if strings.Contains(notes, "fault actions") {
			t.Errorf("NOTES.txt (values %q) speaks of fault actions, which are off:\n%s", values, notes)
		}
	}
	_, notes, err := helmRender("sloprober", "faultActions: {kubernetes: {enabled: true, namespace: llm}}")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes, "may delete pods in namespace llm") {
		t.Errorf("NOTES.txt with faultActions.kubernetes enabled does not say what it may delete, and where:\n%s", notes)
	}
}

// TestKustomizeHelmParity: the kustomize base and the chart's defaults
// render the same objects, kind and name, and the same specs once what
// Helm adds (its labels, the checksum annotation, a namespace) and
// kustomize's name hash are set aside: one deployment, written twice, that
// cannot drift apart.
func TestKustomizeHelmParity(t *testing.T) {
	for _, tc := range []struct{ dir, values string }{
		{filepath.Join("kubernetes", "base"), ""},
		{filepath.Join("kubernetes", "overlays", "shards-3"), "shards: 3"},
	} {
		t.Run(tc.dir, func(t *testing.T) { checkParity(t, tc.dir, tc.values) })
	}
	t.Run("components/fault-actions", func(t *testing.T) {
		overlay, _ := faultActionsRecipe(t)
		checkParity(t, faultActionsOverlay(t, overlay), "faultActions: {kubernetes: {enabled: true}}")
	})
}

// checkParity compares kustomize build dir with the chart rendered with
// values for the release "sloprober".
func checkParity(t *testing.T, dir, values string) {
	k := kustomizeBuild(t, dir)
	h := helmTemplate(t, values, "sloprober", values).objs

	// kustomize's hash-suffixed ConfigMap, under the chart's name.
	hashed := regexp.MustCompile(`^(sloprober-config)-[a-z0-9]{10}$`)
	renamed := 0
	for i := range k {
		if m := hashed.FindStringSubmatch(k[i].Name); k[i].Kind == "ConfigMap" && m != nil {
			k[i].Name = m[1]
			k[i].Obj.(*corev1.ConfigMap).Name = m[1]
			renamed++
		}
		if sts, ok := k[i].Obj.(*appsv1.StatefulSet); ok {
			for _, v := range sts.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil {
					if m := hashed.FindStringSubmatch(v.ConfigMap.Name); m != nil {
						v.ConfigMap.Name = m[1]
					}
				}
			}
		}
	}
	if renamed != 1 {
		t.Errorf("kustomize build: %d ConfigMaps named sloprober-config-<hash>, want 1", renamed)
	}

	ids := func(objs []object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.String())
		}
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff(ids(k), ids(h)); diff != "" {
		t.Fatalf("kinds and names differ (-%s +helm %q):\n%s", dir, values, diff)
	}
	for _, want := range []string{"StatefulSet/sloprober", "ServiceAccount/sloprober", "Service/sloprober", "ConfigMap/sloprober-config", "ServiceMonitor/sloprober", "PrometheusRule/sloprober", "PodDisruptionBudget/sloprober"} {
		if !slices.Contains(ids(k), want) {
			t.Errorf("no %s", want)
		}
	}
	names, err := k8sgen.Dashboards(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if want := "ConfigMap/" + k8sgen.DashboardConfigMap(n); !slices.Contains(ids(k), want) {
			t.Errorf("no %s for dashboards/%s", want, n)
		}
	}

	find := func(objs []object, id string) any {
		for _, o := range objs {
			if o.String() == id {
				return o.Obj
			}
		}
		return nil
	}
	for _, o := range k {
		kObj, hObj := normalize(o.Obj), normalize(find(h, o.String()))
		if diff := cmp.Diff(kObj, hObj); diff != "" {
			t.Errorf("%s differs (-%s +helm %q):\n%s", o, dir, values, diff)
		}
	}
}

// normalize clears what the chart and kustomize may write differently:
// labels but the selectors', annotations, namespaces (a RoleBinding's
// subjects' too: the chart writes them out, kustomize's component leaves
// them to default to the binding's).
func normalize(obj any) any {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj
	}
	keepOnly := func(labels map[string]string) map[string]string {
		out := map[string]string{}
		for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "grafana_dashboard"} {
			if v, ok := labels[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	m.SetLabels(keepOnly(m.GetLabels()))
	m.SetAnnotations(nil)
	m.SetNamespace("")
	if sts, ok := obj.(*appsv1.StatefulSet); ok {
		sts.Spec.Template.Labels = keepOnly(sts.Spec.Template.Labels)
		sts.Spec.Template.Annotations = nil
	}
	if rb, ok := obj.(*rbacv1.RoleBinding); ok {
		for i := range rb.Subjects {
			rb.Subjects[i].Namespace = ""
		}
	}
	return obj
}

// readVersion is the VERSION file's version.
func readVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, k8sgen.VersionSource))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
