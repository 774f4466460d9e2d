package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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
	base := filepath.Join("kubernetes", "base")
	err = filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(base, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, "base", rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
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
