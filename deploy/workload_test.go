package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/sloprober/sloprober/deploy/internal/k8sgen"
)

// The paths the pod's files are at; the comments of the configuration tell
// users to put tokens under secretsDir.
const (
	secretsDir = "/etc/sloprober/secrets"
	simAddress = "127.0.0.1:8000"
	imageUser  = 65532
)

// rendering is one rendered output (kustomize build, helm template) and
// what its checks expect of it.
type rendering struct {
	source string
	objs   []object

	shards int
	// simulator: the sim sidecar is there, and the configuration probes
	// loopback only.
	simulator   bool
	persistence bool
	// secret is the credentials Secret's name; secretOptional whether the
	// pod starts without it.
	secret         string
	secretOptional bool
	// externalConfigMap is the configuration's ConfigMap when it is not
	// rendered (Helm's existingConfigMap).
	externalConfigMap string
	serviceMonitor    bool
	prometheusRule    bool
	dashboards        bool
	pdb               bool
	// faultActions: the Role and RoleBinding of a soak's kubernetes
	// fault action are there, in faultNamespace, and the pods get the
	// ServiceAccount's token.
	faultActions   bool
	faultNamespace string
}

// ofKind returns the objects of a kind.
func (r *rendering) ofKind(kind string) []object {
	var out []object
	for _, o := range r.objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// find returns the object of a kind and name.
func (r *rendering) find(kind, name string) (object, bool) {
	for _, o := range r.objs {
		if o.Kind == kind && o.Name == name {
			return o, true
		}
	}
	return object{}, false
}

// only returns the one object of a kind, or fails the test.
func only[T any](t *testing.T, r *rendering, kind string) *T {
	t.Helper()
	objs := r.ofKind(kind)
	if len(objs) != 1 {
		t.Fatalf("%s: %d objects of kind %s, want 1: %v", r.source, len(objs), kind, r.objs)
	}
	return objs[0].Obj.(*T)
}

// container returns the container of a name.
func container(cs []corev1.Container, name string) (*corev1.Container, bool) {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i], true
		}
	}
	return nil, false
}

// volume returns the pod's volume of a name.
func volume(spec *corev1.PodSpec, name string) (*corev1.Volume, bool) {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i], true
		}
	}
	return nil, false
}

// mountAtPath returns the container's volume mount at a path.
func mountAtPath(c *corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

// selects reports whether a selector's labels are all among labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// shutdownBound is how long `sloprober run` with these flags may take to
// exit after SIGTERM: grace period + linger, each the flag's or else the
// default that the binary under test shows in `run --help`, + exitMargin
// (cmd/sloprober/run.go's 2s, which no flag shows).
func shutdownBound(flags map[string]string) (time.Duration, error) {
	total := 2 * time.Second
	for _, flag := range []string{"--shutdown.grace-period", "--shutdown.linger"} {
		d, err := flagDuration(flags, flag)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// flagDuration is a duration flag of `sloprober run`: its value in flags,
// else the default `run --help` shows.
func flagDuration(flags map[string]string, flag string) (time.Duration, error) {
	v, ok := flags[flag]
	if !ok {
		help, err := runHelp()
		if err != nil {
			return 0, err
		}
		m := regexp.MustCompile(regexp.QuoteMeta(flag) + `=(\S+)`).FindStringSubmatch(help)
		if m == nil {
			return 0, fmt.Errorf("sloprober run --help shows no default of %s", flag)
		}
		v = m[1]
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%s: %v", flag, v, err)
	}
	return d, nil
}

// runHelp is `sloprober run --help`.
var runHelp = sync.OnceValues(func() (string, error) {
	out, err := exec.Command(binary, "run", "--help").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("sloprober run --help: %v\n%s", err, out)
	}
	return string(out), nil
})

// checkRendering checks what every rendered output must get right, and
// what r expects of this one.
func checkRendering(t *testing.T, r *rendering) {
	t.Helper()
	sts := only[appsv1.StatefulSet](t, r, "StatefulSet")
	pod := &sts.Spec.Template.Spec
	where := r.source + ": StatefulSet/" + sts.Name
	main, ok := container(pod.Containers, "sloprober")
	if !ok {
		t.Fatalf("%s: no container sloprober", where)
	}
	if len(main.Args) == 0 || main.Args[0] != "run" {
		t.Fatalf("%s: container sloprober runs %v, want run ...", where, main.Args)
	}
	flags := flagValues(main.Args)

	t.Run("shards", func(t *testing.T) {
		replicas := 1
		if sts.Spec.Replicas != nil {
			replicas = int(*sts.Spec.Replicas)
		}
		if replicas != r.shards {
			t.Errorf("%s: spec.replicas %d, want %d", where, replicas, r.shards)
		}
		shard := flags["--shard"]
		n, ok := strings.CutPrefix(shard, "ordinal/")
		if count, err := strconv.Atoi(n); !ok || err != nil || count != replicas {
			t.Errorf("%s: --shard=%s with spec.replicas %d: want --shard=ordinal/%d, or the shards send the wrong share of every load", where, shard, replicas, replicas)
		}
		if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			t.Errorf("%s: spec.podManagementPolicy %q, want Parallel", where, sts.Spec.PodManagementPolicy)
		}
		// ordinal/N reads the ordinal from the host name's last -<n>: the
		// pod's own name, <name>-0 ... <name>-(N-1), unless the pod takes
		// the node's host name, a fully qualified one, or ordinals that do
		// not start at 0.
		if pod.HostNetwork || pod.Hostname != "" || pod.SetHostnameAsFQDN != nil && *pod.SetHostnameAsFQDN {
			t.Errorf("%s: hostNetwork %v, hostname %q, setHostnameAsFQDN %v: the host name would not end in the pod's ordinal", where, pod.HostNetwork, pod.Hostname, pod.SetHostnameAsFQDN)
		}
		if o := sts.Spec.Ordinals; o != nil && o.Start != 0 {
			t.Errorf("%s: spec.ordinals.start %d: the last pod's ordinal would be N or more, which --shard=ordinal/N refuses", where, o.Start)
		}
		// Shards spread over nodes, softly: each shard's timing is its own
		// node's, and a cluster of fewer nodes still runs them all.
		if replicas > 1 && !slices.ContainsFunc(pod.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
			return c.TopologyKey == "kubernetes.io/hostname" && c.WhenUnsatisfiable == corev1.ScheduleAnyway &&
				c.LabelSelector != nil && selects(c.LabelSelector.MatchLabels, sts.Spec.Template.Labels)
		}) {
			t.Errorf("%s: %d shards and no topologySpreadConstraint over kubernetes.io/hostname (ScheduleAnyway) selecting the pods: %+v", where, replicas, pod.TopologySpreadConstraints)
		}
	})

	t.Run("security", func(t *testing.T) {
		psc := pod.SecurityContext
		if psc == nil || psc.FSGroup == nil || *psc.FSGroup != imageUser {
			t.Errorf("%s: spec.template.spec.securityContext.fsGroup is not %d: the volume would not be the image user's", where, imageUser)
		}
		switch automount := pod.AutomountServiceAccountToken; {
		case r.faultActions && (automount == nil || !*automount):
			t.Errorf("%s: automountServiceAccountToken is not true: the kubernetes fault action would have no API token", where)
		case !r.faultActions && (automount == nil || *automount):
			t.Errorf("%s: automountServiceAccountToken is not false: without fault actions sloprober needs no API token", where)
		}
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			checkSecurityContext(t, where+": container "+c.Name, psc, c.SecurityContext)
		}
	})

	t.Run("resources", func(t *testing.T) {
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			res := c.Resources
			if _, ok := res.Limits[corev1.ResourceCPU]; ok {
				t.Errorf("%s: container %s has resources.limits.cpu: throttling adds its delay to every latency sloprober measures", where, c.Name)
			}
			for _, q := range []struct {
				what string
				list corev1.ResourceList
				name corev1.ResourceName
			}{{"requests", res.Requests, corev1.ResourceCPU}, {"requests", res.Requests, corev1.ResourceMemory}, {"limits", res.Limits, corev1.ResourceMemory}} {
				if v, ok := q.list[q.name]; !ok || v.IsZero() {
					t.Errorf("%s: container %s has no resources.%s.%s", where, c.Name, q.what, q.name)
				}
			}
			if req, lim := res.Requests[corev1.ResourceMemory], res.Limits[corev1.ResourceMemory]; lim.Cmp(req) < 0 {
				t.Errorf("%s: container %s: memory limit %s below its request %s", where, c.Name, lim.String(), req.String())
			}
		}
		// The canary's own footprint (BENCHMARKS.md: 17 MB RSS) fits
		// the request.
		if req := main.Resources.Requests[corev1.ResourceMemory]; req.Cmp(resource.MustParse("32Mi")) < 0 {
			t.Errorf("%s: container sloprober requests %s of memory, below the canary's own footprint", where, req.String())
		}
	})

	t.Run("probes and port", func(t *testing.T) {
		port := -1
		for _, p := range main.Ports {
			if p.Name == "http" {
				port = int(p.ContainerPort)
			}
		}
		if addr := flags["--web.listen-address"]; addr != ":"+strconv.Itoa(port) || port != 9477 {
			t.Errorf("%s: --web.listen-address=%s, container port http %d: want :9477 and 9477", where, addr, port)
		}
		for _, p := range []struct {
			name, path string
			probe      *corev1.Probe
		}{{"livenessProbe", "/-/healthy", main.LivenessProbe}, {"readinessProbe", "/-/ready", main.ReadinessProbe}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s: container sloprober has no HTTP %s", where, p.name)
				continue
			}
			if g := p.probe.HTTPGet; g.Path != p.path || g.Port.String() != "http" {
				t.Errorf("%s: container sloprober %s asks %s on port %s, want %s on http", where, p.name, g.Path, g.Port.String(), p.path)
			}
		}
	})

	t.Run("termination", func(t *testing.T) {
		bound, err := shutdownBound(flags)
		if err != nil {
			t.Fatal(err)
		}
		what := "grace period + linger + 2s"
		if r.simulator {
			// The sidecar stops once sloprober has exited, within the
			// same grace period: its HTTP server's shutdown timeout
			// (cmd/sloprober/sim.go).
			bound += 5 * time.Second
			what += ", then the simulator's 5s"
		}
		grace := 30 * time.Second // Kubernetes' default
		if s := pod.TerminationGracePeriodSeconds; s != nil {
			grace = time.Duration(*s) * time.Second
		}
		if grace <= bound {
			t.Errorf("%s: terminationGracePeriodSeconds %s, want above the pod's exit bound %s (%s): the kubelet would kill sloprober before the last scrape", where, grace, bound, what)
		}
		// The linger waits for one scrape: it must outlast the scrape
		// interval, the ServiceMonitor's or else the Prometheus
		// Operator's default 30s, or the final counts are lost.
		linger, err := flagDuration(flags, "--shutdown.linger")
		if err != nil {
			t.Fatal(err)
		}
		interval := 30 * time.Second
		for _, o := range r.ofKind("ServiceMonitor") {
			for _, ep := range o.Obj.(*monitoringv1.ServiceMonitor).Spec.Endpoints {
				if ep.Interval != "" {
					if interval, err = time.ParseDuration(string(ep.Interval)); err != nil {
						t.Fatalf("%s: ServiceMonitor/%s interval %q: %v", r.source, o.Name, ep.Interval, err)
					}
				}
			}
		}
		if linger < interval+time.Second {
			t.Errorf("%s: --shutdown.linger=%s, scrape interval %s: a stopping sloprober would exit before Prometheus' last scrape of its final counts", where, linger, interval)
		}
	})

	t.Run("simulator", func(t *testing.T) {
		sim, ok := container(pod.InitContainers, "sim")
		if _, also := container(pod.Containers, "sim"); also {
			t.Errorf("%s: the simulator is a regular container: it would stop with sloprober, not after its drain", where)
		}
		if !r.simulator {
			if ok {
				t.Errorf("%s: the simulator runs, though not wanted", where)
			}
			return
		}
		if !ok {
			t.Fatalf("%s: no simulator (init container sim)", where)
		}
		if sim.RestartPolicy == nil || *sim.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("%s: init container sim has no restartPolicy: Always: it is no sidecar, and the pod would never start", where)
		}
		if len(sim.Args) == 0 || sim.Args[0] != "sim" || flagValues(sim.Args)["--web.listen-address"] != simAddress {
			t.Errorf("%s: init container sim runs %v, want sim --web.listen-address=%s", where, sim.Args, simAddress)
		}
		if sim.Image != main.Image {
			t.Errorf("%s: sim runs %s, sloprober %s: want one image", where, sim.Image, main.Image)
		}
		if sim.StartupProbe == nil || sim.StartupProbe.Exec == nil || !slices.ContainsFunc(sim.StartupProbe.Exec.Command, func(a string) bool { return strings.Contains(a, simAddress) }) {
			t.Errorf("%s: init container sim has no startupProbe asking %s: sloprober would start before it serves", where, simAddress)
		}
	})

	t.Run("volumes", func(t *testing.T) {
		// The configuration.
		cfgMount, ok := mountAtPath(main, flags["--config.file"])
		if !ok {
			t.Fatalf("%s: --config.file=%s is not mounted", where, flags["--config.file"])
		}
		cfgVol, ok := volume(pod, cfgMount.Name)
		if !ok || cfgVol.ConfigMap == nil {
			t.Fatalf("%s: --config.file=%s is not from a ConfigMap volume", where, flags["--config.file"])
		}
		cmName := cfgVol.ConfigMap.Name
		cm, rendered := r.find("ConfigMap", cmName)
		switch {
		case r.externalConfigMap != "":
			if cmName != r.externalConfigMap || rendered {
				t.Errorf("%s: the configuration is ConfigMap/%s (rendered: %v), want the existing %s, not rendered", where, cmName, rendered, r.externalConfigMap)
			}
		case !rendered:
			t.Errorf("%s: volume %s names ConfigMap/%s, which is not rendered", where, cfgVol.Name, cmName)
		default:
			data := cm.Obj.(*corev1.ConfigMap).Data
			key := cfgMount.SubPath
			if key == "" {
				key = filepath.Base(flags["--config.file"])
			}
			if content, ok := data[key]; !ok {
				t.Errorf("%s: ConfigMap/%s has no key %s", r.source, cmName, key)
			} else {
				checkConfig(t, r.source+": ConfigMap/"+cmName+" "+key, content, r.simulator)
			}
		}

		// The credentials: a reference, never data.
		secMount, ok := mountAtPath(main, secretsDir)
		if !ok || !secMount.ReadOnly {
			t.Fatalf("%s: nothing mounted read-only at %s", where, secretsDir)
		}
		secVol, ok := volume(pod, secMount.Name)
		if !ok || secVol.Secret == nil {
			t.Fatalf("%s: %s is not a Secret volume", where, secretsDir)
		}
		optional := secVol.Secret.Optional != nil && *secVol.Secret.Optional
		if secVol.Secret.SecretName != r.secret || optional != r.secretOptional {
			t.Errorf("%s: %s is Secret %s (optional: %v), want %s (optional: %v)", where, secretsDir, secVol.Secret.SecretName, optional, r.secret, r.secretOptional)
		}

		// The results of test runs.
		dataMount, ok := mountAtPath(main, flags["--storage.path"])
		if !ok {
			t.Fatalf("%s: --storage.path=%s is not mounted", where, flags["--storage.path"])
		}
		dataVol, inPod := volume(pod, dataMount.Name)
		claims := slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(c corev1.PersistentVolumeClaim) bool { return c.Name == dataMount.Name })
		switch {
		case r.persistence && (inPod || !claims):
			t.Errorf("%s: --storage.path is not from a volumeClaimTemplate named %s", where, dataMount.Name)
		case !r.persistence && (claims || !inPod || dataVol.EmptyDir == nil):
			t.Errorf("%s: without persistence, --storage.path is not an emptyDir", where)
		}

		// Every ConfigMap a volume names is rendered or is the existing one.
		for _, v := range pod.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name != r.externalConfigMap {
				if _, ok := r.find("ConfigMap", v.ConfigMap.Name); !ok {
					t.Errorf("%s: volume %s names ConfigMap/%s, which is not rendered", where, v.Name, v.ConfigMap.Name)
				}
			}
		}
	})

	t.Run("service", func(t *testing.T) {
		o, ok := r.find("Service", sts.Spec.ServiceName)
		if !ok {
			t.Fatalf("%s: serviceName %q is no Service rendered", where, sts.Spec.ServiceName)
		}
		svc := o.Obj.(*corev1.Service)
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s: Service/%s is not headless: a StatefulSet's governing Service must be", r.source, svc.Name)
		}
		if !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("%s: Service/%s has no publishNotReadyAddresses: a stopping sloprober would not get its last scrape", r.source, svc.Name)
		}
		if !selects(svc.Spec.Selector, sts.Spec.Template.Labels) || !selects(sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
			t.Errorf("%s: Service/%s selects %v, the pods are labelled %v", r.source, svc.Name, svc.Spec.Selector, sts.Spec.Template.Labels)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" || svc.Spec.Ports[0].Port != 9477 || svc.Spec.Ports[0].TargetPort.String() != "http" {
			t.Errorf("%s: Service/%s ports %+v, want http 9477 to the container's http", r.source, svc.Name, svc.Spec.Ports)
		}
		sms := r.ofKind("ServiceMonitor")
		if !r.serviceMonitor {
			if len(sms) > 0 {
				t.Errorf("%s: a ServiceMonitor, though not wanted", r.source)
			}
			return
		}
		sm := only[monitoringv1.ServiceMonitor](t, r, "ServiceMonitor")
		if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
			t.Errorf("%s: ServiceMonitor/%s selects %v, Service/%s is labelled %v", r.source, sm.Name, sm.Spec.Selector.MatchLabels, svc.Name, svc.Labels)
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("%s: ServiceMonitor/%s endpoints %+v, want port http, path /metrics", r.source, sm.Name, sm.Spec.Endpoints)
		}
		if c := sm.Spec.ScrapeClassicHistograms; c == nil || !*c {
			t.Errorf("%s: ServiceMonitor/%s lacks scrapeClassicHistograms: true: with native histograms scraped, the rules' _bucket series would be missing", r.source, sm.Name)
		}
	})

	t.Run("rules", func(t *testing.T) {
		prs := r.ofKind("PrometheusRule")
		if !r.prometheusRule {
			if len(prs) > 0 {
				t.Errorf("%s: a PrometheusRule, though not wanted", r.source)
			}
			return
		}
		if len(prs) != 1 {
			t.Fatalf("%s: %d PrometheusRules, want 1", r.source, len(prs))
		}
		checkRules(t, r.source+": "+prs[0].String(), prs[0].Raw)
	})

	t.Run("dashboards", func(t *testing.T) {
		got := map[string]string{}
		for _, o := range r.ofKind("ConfigMap") {
			cm := o.Obj.(*corev1.ConfigMap)
			if cm.Labels["grafana_dashboard"] != "1" {
				continue
			}
			if len(cm.Data) != 1 || len(cm.BinaryData) > 0 {
				t.Errorf("%s: ConfigMap/%s holds %d files, want one dashboard", r.source, cm.Name, len(cm.Data)+len(cm.BinaryData))
			}
			for k, v := range cm.Data {
				got[k] = v
			}
		}
		if !r.dashboards {
			if len(got) > 0 {
				t.Errorf("%s: dashboards, though not wanted: %v", r.source, slices.Sorted(maps.Keys(got)))
			}
			return
		}
		checkDashboards(t, r.source, got)
	})

	t.Run("service account and fault actions", func(t *testing.T) {
		checkFaultActions(t, r, sts)
	})

	t.Run("disruption budget", func(t *testing.T) {
		pdbs := r.ofKind("PodDisruptionBudget")
		if !r.pdb {
			if len(pdbs) > 0 {
				t.Errorf("%s: a PodDisruptionBudget, though not wanted", r.source)
			}
			return
		}
		pdb := only[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget")
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" || pdb.Spec.MinAvailable != nil {
			t.Errorf("%s: PodDisruptionBudget/%s: maxUnavailable %v, minAvailable %v; want maxUnavailable 1 alone (a drain takes one at a time, and is never blocked)", r.source, pdb.Name, pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
		}
		if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
			t.Errorf("%s: PodDisruptionBudget/%s does not select the pods", r.source, pdb.Name)
		}
	})
}

// faultActionRules are all a soak's kubernetes fault action may do: find
// its target's pods by label selector and delete one.
var faultActionRules = []rbacv1.PolicyRule{{
	APIGroups: []string{""},
	Resources: []string{"pods"},
	Verbs:     []string{"get", "list", "delete"},
}}

// checkFaultActions checks the pods' ServiceAccount, and the Role and
// RoleBinding of the kubernetes fault action: none unless r.faultActions;
// then exactly faultActionRules, in r.faultNamespace, bound to that
// ServiceAccount in sloprober's namespace.
func checkFaultActions(t *testing.T, r *rendering, sts *appsv1.StatefulSet) {
	t.Helper()
	pod := &sts.Spec.Template.Spec
	if pod.ServiceAccountName == "" || pod.DeprecatedServiceAccount != "" {
		t.Fatalf("%s: StatefulSet/%s: serviceAccountName %q (serviceAccount %q): want sloprober's own, not the namespace's default", r.source, sts.Name, pod.ServiceAccountName, pod.DeprecatedServiceAccount)
	}
	o, ok := r.find("ServiceAccount", pod.ServiceAccountName)
	if !ok {
		t.Fatalf("%s: StatefulSet/%s runs as ServiceAccount %s, which is not rendered", r.source, sts.Name, pod.ServiceAccountName)
	}
	sa := o.Obj.(*corev1.ServiceAccount)
	if sa.Namespace != sts.Namespace {
		t.Errorf("%s: ServiceAccount/%s in namespace %q, the pods in %q", r.source, sa.Name, sa.Namespace, sts.Namespace)
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("%s: ServiceAccount/%s has no automountServiceAccountToken: false: its token would reach pods that do not ask for it", r.source, sa.Name)
	}
	roles, bindings := r.ofKind("Role"), r.ofKind("RoleBinding")
	if !r.faultActions {
		if len(roles)+len(bindings) > 0 {
			t.Errorf("%s: %v and %v, though fault actions are off", r.source, roles, bindings)
		}
		return
	}
	role := only[rbacv1.Role](t, r, "Role")
	rb := only[rbacv1.RoleBinding](t, r, "RoleBinding")
	if role.Namespace != r.faultNamespace {
		t.Errorf("%s: Role/%s in namespace %q, want the serving pods' %q", r.source, role.Name, role.Namespace, r.faultNamespace)
	}
	if diff := cmp.Diff(faultActionRules, role.Rules); diff != "" {
		t.Errorf("%s: Role/%s grants other than pods get, list, delete (-want +got):\n%s", r.source, role.Name, diff)
	}
	if rb.Namespace != role.Namespace {
		t.Errorf("%s: RoleBinding/%s in namespace %q, Role/%s in %q: a RoleBinding grants a Role of its own namespace only", r.source, rb.Name, rb.Namespace, role.Name, role.Namespace)
	}
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}); rb.RoleRef != want {
		t.Errorf("%s: RoleBinding/%s refers to %+v, want %+v", r.source, rb.Name, rb.RoleRef, want)
	}
	if len(rb.Subjects) != 1 {
		t.Fatalf("%s: RoleBinding/%s binds %+v, want sloprober's ServiceAccount alone", r.source, rb.Name, rb.Subjects)
	}
	// A ServiceAccount subject without a namespace is in the binding's
	// (the API server's RBAC authorizer defaults it so).
	s := rb.Subjects[0]
	ns := s.Namespace
	if ns == "" {
		ns = rb.Namespace
	}
	if s.Kind != rbacv1.ServiceAccountKind || s.APIGroup != "" || s.Name != sa.Name || ns != sa.Namespace {
		t.Errorf("%s: RoleBinding/%s binds %s %s in namespace %q, want ServiceAccount %s in %q", r.source, rb.Name, s.Kind, s.Name, ns, sa.Name, sa.Namespace)
	}
}

// checkSecurityContext checks a container's effective security context:
// the container's fields, else the pod's.
func checkSecurityContext(t *testing.T, where string, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	t.Helper()
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if c == nil {
		c = &corev1.SecurityContext{}
	}
	pick := func(container, pod *int64) *int64 {
		if container != nil {
			return container
		}
		return pod
	}
	for _, id := range []struct {
		field string
		value *int64
	}{{"runAsUser", pick(c.RunAsUser, pod.RunAsUser)}, {"runAsGroup", pick(c.RunAsGroup, pod.RunAsGroup)}} {
		if id.value == nil || *id.value != imageUser {
			t.Errorf("%s: securityContext.%s is not %d, the image's user", where, id.field, imageUser)
		}
	}
	nonRoot := c.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = pod.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Errorf("%s: securityContext.runAsNonRoot is not true", where)
	}
	if c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		t.Errorf("%s: securityContext.readOnlyRootFilesystem is not true", where)
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		t.Errorf("%s: securityContext.allowPrivilegeEscalation is not false", where)
	}
	if c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.Capabilities.Add) > 0 {
		t.Errorf("%s: securityContext.capabilities %+v, want drop [ALL] and nothing added", where, c.Capabilities)
	}
	seccomp := c.SeccompProfile
	if seccomp == nil {
		seccomp = pod.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: securityContext.seccompProfile %+v, want RuntimeDefault", where, seccomp)
	}
}

// checkConfig checks a sloprober configuration as a pod gets it:
// `sloprober check config` accepts it; with the simulator, every URL it
// probes is the pod's loopback (applying the defaults sends nothing out of
// the pod); without it, nothing asks the simulator's address; every file
// of a credential is under the Secret's mount, and no credential is
// written in it.
func checkConfig(t *testing.T, where, content string, simulator bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sloprober.yml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "check", "config", "--config.file="+path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("%s: sloprober check config: %v\n%s", where, err, out)
	}

	var cfg struct {
		Targets []map[string]any `json:"targets"`
	}
	if err := yaml.Unmarshal([]byte(content), &cfg); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for _, target := range cfg.Targets {
		urls := []string{fmt.Sprint(target["url"])}
		if sm, ok := target["server_metrics"].(map[string]any); ok {
			urls = append(urls, fmt.Sprint(sm["url"]))
		}
		for _, raw := range urls {
			u, err := url.Parse(raw)
			if err != nil {
				t.Errorf("%s: target %v: %v", where, target["name"], err)
				continue
			}
			ip := net.ParseIP(u.Hostname())
			loopback := u.Hostname() == "localhost" || ip != nil && ip.IsLoopback()
			if simulator && !loopback {
				t.Errorf("%s: target %v probes %s: with the simulator, the configuration must probe the pod's loopback only", where, target["name"], raw)
			}
			if !simulator && u.Host == simAddress {
				t.Errorf("%s: target %v probes %s, the simulator's address, without the simulator", where, target["name"], raw)
			}
		}
		// prometheus/common's HTTP client settings: authorization,
		// basic_auth, oauth2, a TLS client key, http_headers' secrets and
		// files.
		walkKeys(target, func(key string, value any) {
			switch key {
			case "credentials", "password", "bearer_token", "client_secret", "secrets":
				if l, ok := value.([]any); value != nil && value != "" && (!ok || len(l) > 0) {
					t.Errorf("%s: target %v has %s written in the configuration: put it in the Secret, and name its file (%s/...)", where, target["name"], key, secretsDir)
				}
			case "credentials_file", "password_file", "bearer_token_file", "client_secret_file", "key_file", "files":
				files, ok := value.([]any)
				if !ok {
					files = []any{value}
				}
				for _, f := range files {
					if s, ok := f.(string); !ok || !strings.HasPrefix(s, secretsDir+"/") {
						t.Errorf("%s: target %v reads %s %v, which is not under the Secret's mount %s", where, target["name"], key, f, secretsDir)
					}
				}
			}
		})
	}
}

// walkKeys calls f with every key and value of a decoded YAML tree.
func walkKeys(v any, f func(key string, value any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			f(k, x)
			walkKeys(x, f)
		}
	case []any:
		for _, x := range v {
			walkKeys(x, f)
		}
	}
}

// checkRules checks a rendered PrometheusRule (as JSON): its spec is
// rules/sloprober.rules.yml, parsed, exactly; Prometheus' templates in the
// annotations reached it unrendered; promtool accepts the rules it holds.
func checkRules(t *testing.T, where string, raw []byte) {
	t.Helper()
	var pr struct {
		Spec any `json:"spec"`
	}
	if err := json.Unmarshal(raw, &pr); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	src, err := os.ReadFile(filepath.Join(repoRoot, k8sgen.RulesSource))
	if err != nil {
		t.Fatal(err)
	}
	var want any
	if err := yaml.Unmarshal(src, &want); err != nil {
		t.Fatalf("%s: %v", k8sgen.RulesSource, err)
	}
	if diff := cmp.Diff(want, pr.Spec); diff != "" {
		t.Errorf("%s: spec differs from %s (a stale copy? run `%s`) (-file +rendered):\n%s", where, k8sgen.RulesSource, k8sgen.Command, firstLines(diff, 40))
	}
	spec, err := json.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(spec, []byte("{{ $labels.target }}")) || !bytes.Contains(spec, []byte("{{ $value")) {
		t.Errorf("%s: no annotation holds {{ $labels.target }} and {{ $value ... }}: Prometheus' templates were rendered away", where)
	}
	// JSON is YAML: promtool reads the spec as the rule file it is.
	file := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(file, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool(t), "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("%s: promtool check rules: %v\n%s", where, err, out)
	}
}

// checkDashboards checks that the dashboards' ConfigMaps hold exactly
// dashboards/*.json: every file, as it is, and nothing else.
func checkDashboards(t *testing.T, where string, got map[string]string) {
	t.Helper()
	names, err := k8sgen.Dashboards(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(repoRoot, k8sgen.DashboardsSource, n))
		if err != nil {
			t.Fatal(err)
		}
		want[n] = string(b)
	}
	if !reflect.DeepEqual(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Errorf("%s: dashboards %v, want %s: %v", where, slices.Sorted(maps.Keys(got)), k8sgen.DashboardsSource, slices.Sorted(maps.Keys(want)))
	}
	for n, content := range got {
		if w, ok := want[n]; ok && content != w {
			t.Errorf("%s: dashboard %s differs from %s/%s: run `%s`", where, n, k8sgen.DashboardsSource, n, k8sgen.Command)
		}
	}
}

// firstLines is s cut to n lines, so that a diff of a whole rule file
// says where it starts without burying the other failures.
func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "") + fmt.Sprintf("... (%d more lines)\n", len(lines)-n)
}
