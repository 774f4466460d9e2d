package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeBuild is `kustomize build dir` (kubectl kustomize's own library),
// decoded strictly.
func kustomizeBuild(t *testing.T, dir string) []object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), abs(t, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	objs, err := decodeManifests("kustomize build "+dir, out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// kustomizeRendering is what the base's build must be; overlays change it.
func kustomizeRendering(t *testing.T, dir string) *rendering {
	return &rendering{
		source:         "kustomize build " + dir,
		objs:           kustomizeBuild(t, dir),
		shards:         1,
		simulator:      true,
		persistence:    true,
		secret:         "sloprober-credentials",
		secretOptional: true,
		serviceMonitor: true,
		prometheusRule: true,
		dashboards:     true,
		pdb:            true,
	}
}

// TestKustomize builds the base and the overlay with kustomize's library
// and checks what they render: every object strictly decoded into its API
// type, and checkRendering's checks (security, resources, probes, shards,
// the configuration through `sloprober check config` and on loopback,
// the rules against rules/ and promtool, the dashboards against
// dashboards/, the Secret only referenced).
func TestKustomize(t *testing.T) {
	t.Run("base", func(t *testing.T) {
		checkRendering(t, kustomizeRendering(t, filepath.Join("kubernetes", "base")))
	})
	t.Run("overlays/shards-3", func(t *testing.T) {
		r := kustomizeRendering(t, filepath.Join("kubernetes", "overlays", "shards-3"))
		r.shards = 3
		checkRendering(t, r)
	})
}

// TestKustomizeOverlayRecipe builds the overlay the base's comments tell a
// user to write for a real target (kustomization.yaml, statefulset.yaml,
// sloprober.yml): the image pointed at a registry, sloprober.yml replaced
// (configMapGenerator, behavior: replace), the sidecar removed by the JSON
// patch statefulset.yaml's comment gives, word for word. The result gets
// every rendering's checks, without the simulator.
func TestKustomizeOverlayRecipe(t *testing.T) {
	// The patch, as statefulset.yaml's comment writes it.
	sts, err := os.ReadFile(filepath.Join("kubernetes", "base", "statefulset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*#\s*(patch: '\[\{"op": "remove", "path": "/spec/template/spec/initContainers/0"\}\]')$`).FindSubmatch(sts)
	if m == nil {
		t.Fatal("statefulset.yaml's comment no longer gives the patch that removes the sidecar: update it and this test")
	}

	// A copy of the base beside the overlay, as ../base.
	dir := t.TempDir()
	copyTree(t, filepath.Join("kubernetes", "base"), filepath.Join(dir, "base"))
	overlay := filepath.Join(dir, "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	kust := `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../base
images:
  - {name: sloprober, newName: registry.example.com/sloprober, newTag: "1.2.3"}
configMapGenerator:
  - name: sloprober-config
    behavior: replace
    files:
      - sloprober.yml
patches:
  - target: {kind: StatefulSet, name: sloprober}
    ` + string(m[1]) + "\n"
	for name, content := range map[string]string{"kustomization.yaml": kust, "sloprober.yml": strings.TrimPrefix(realTarget, "\n")} {
		if err := os.WriteFile(filepath.Join(overlay, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := kustomizeRendering(t, overlay)
	r.source = "kustomize build (the overlay of the base's comments)"
	r.simulator = false
	checkRendering(t, r)
	for _, c := range only[appsv1.StatefulSet](t, r, "StatefulSet").Spec.Template.Spec.Containers {
		if c.Image != "registry.example.com/sloprober:1.2.3" {
			t.Errorf("%s: container %s runs %s, want the overlay's registry.example.com/sloprober:1.2.3", r.source, c.Name, c.Image)
		}
	}
}

// copyTree copies the files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// faultActionsComponent is the optional component of the kubernetes fault
// action's Role and RoleBinding.
var faultActionsComponent = filepath.Join("kubernetes", "components", "fault-actions")

// faultActionsRecipe returns the two overlay fragments the component's
// kustomization.yaml quotes in its comment: the overlay that adds it, and
// the transformers that move the Role to the serving pods' namespace.
func faultActionsRecipe(t *testing.T) (overlay, transformers string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(faultActionsComponent, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// A block: a run of comment lines indented by three spaces or more,
	// from its first line on.
	block := func(first string) string {
		var out []string
		for _, line := range strings.Split(string(b), "\n") {
			if len(out) == 0 && line != "#   "+first {
				continue
			}
			rest, ok := strings.CutPrefix(line, "#   ")
			if !ok {
				break
			}
			out = append(out, rest)
		}
		if len(out) == 0 {
			t.Fatalf("%s/kustomization.yaml's comment no longer quotes a block starting %q: update it and this test", faultActionsComponent, first)
		}
		return strings.Join(out, "\n") + "\n"
	}
	return block("apiVersion: kustomize.config.k8s.io/v1beta1"), block("transformers:")
}

// faultActionsOverlay writes an overlay of a copy of deploy/kubernetes
// (kustomization is its kustomization.yaml) and returns its directory.
func faultActionsOverlay(t *testing.T, kustomization string) string {
	t.Helper()
	dir := t.TempDir()
	copyTree(t, "kubernetes", dir)
	overlay := filepath.Join(dir, "overlays", "fault-actions")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// TestKustomizeFaultActions builds components/fault-actions as its comment
// says to use it: the base alone renders no Role (TestKustomize); the
// overlay it quotes puts the Role and RoleBinding in sloprober's namespace,
// the transformers it quotes move them to the serving pods' and keep the
// subject sloprober's, and without a namespace at all they land beside
// sloprober. Each build gets every rendering's checks, and exactly pods
// get, list, delete, bound to the ServiceAccount the pods run as, whose
// token they mount.
func TestKustomizeFaultActions(t *testing.T) {
	overlay, transformers := faultActionsRecipe(t)
	for _, tc := range []struct {
		name, kustomization, namespace string
	}{
		{"the overlay of its comment", overlay, "monitoring"},
		{"another namespace by its comment's transformers", overlay + transformers, "llm"},
		{"no namespace", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../base]\ncomponents: [../../components/fault-actions]\n", ""},
		{"with overlays/shards-3", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: monitoring\nresources: [../shards-3]\ncomponents: [../../components/fault-actions]\n", "monitoring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := kustomizeRendering(t, faultActionsOverlay(t, tc.kustomization))
			r.source = "kustomize build (" + tc.name + ")"
			r.faultActions, r.faultNamespace = true, tc.namespace
			if strings.Contains(tc.kustomization, "shards-3") {
				r.shards = 3
			}
			checkRendering(t, r)
			if tc.namespace == "llm" {
				// The subject stays in sloprober's namespace, written out.
				rb := only[rbacv1.RoleBinding](t, r, "RoleBinding")
				if sts := only[appsv1.StatefulSet](t, r, "StatefulSet"); sts.Namespace != "monitoring" || rb.Subjects[0].Namespace != "monitoring" {
					t.Errorf("%s: StatefulSet in %q, subject in %q, want both in monitoring", r.source, sts.Namespace, rb.Subjects[0].Namespace)
				}
			}
		})
	}
}
