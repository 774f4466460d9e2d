package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// object is one rendered manifest, decoded into its Go API type.
type object struct {
	// Kind and Name identify it in messages and comparisons.
	Kind, Name string
	// Obj is a pointer to the typed object: *appsv1.StatefulSet, ...
	Obj any
	// Raw is the manifest as JSON, for what the typed object cannot
	// show unchanged (the PrometheusRule's spec as the rule file's).
	Raw []byte
}

func (o object) String() string { return o.Kind + "/" + o.Name }

// kinds are the API types the manifests may hold, by apiVersion and kind.
// Anything else is an error: a kind the tests know nothing about is a kind
// they check nothing of, a Secret would mean a credential is rendered, and
// a ClusterRole or ClusterRoleBinding rights beyond one namespace.
var kinds = map[string]func() any{
	"apps/v1 StatefulSet":                      func() any { return new(appsv1.StatefulSet) },
	"v1 Service":                               func() any { return new(corev1.Service) },
	"v1 ConfigMap":                             func() any { return new(corev1.ConfigMap) },
	"v1 ServiceAccount":                        func() any { return new(corev1.ServiceAccount) },
	"rbac.authorization.k8s.io/v1 Role":        func() any { return new(rbacv1.Role) },
	"rbac.authorization.k8s.io/v1 RoleBinding": func() any { return new(rbacv1.RoleBinding) },
	"policy/v1 PodDisruptionBudget":            func() any { return new(policyv1.PodDisruptionBudget) },
	"monitoring.coreos.com/v1 ServiceMonitor":  func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1 PrometheusRule":  func() any { return new(monitoringv1.PrometheusRule) },
}

// decodeManifests decodes a YAML stream of Kubernetes manifests (kustomize
// build or helm template output) strictly into the Go API types the API
// server and the operator decode them into: a field the type does not
// have, a field spelled in another case, or a key given twice is an error,
// as kubectl's --validate=strict makes it, instead of a field the server
// drops without a word. encoding/json's DisallowUnknownFields is not
// enough: it matches keys case-insensitively, so readonlyRootFilesystem
// would pass; sigs.k8s.io/json is the API server's own strict decoder.
// source names the output in errors.
func decodeManifests(source string, stream []byte) ([]object, error) {
	var objs []object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "" {
			continue // comments only, or an empty template
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		var meta struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		_ = yaml.Unmarshal(doc, &meta)
		id := fmt.Sprintf("%s: %s/%s", source, tm.Kind, meta.Metadata.Name)
		newObj, ok := kinds[tm.APIVersion+" "+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: apiVersion %q kind %q is none of the kinds these manifests may hold", id, tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		strict, err := kjson.UnmarshalStrict(js, obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		if err := errors.Join(strict...); err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		if meta.Metadata.Name == "" {
			return nil, fmt.Errorf("%s: no metadata.name", id)
		}
		if err := validateObject(obj, len(js)); err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		objs = append(objs, object{Kind: tm.Kind, Name: meta.Metadata.Name, Obj: obj, Raw: js})
	}
}

// maxApplySize is the largest object `kubectl apply` (client-side, as
// `kubectl apply -k` does by default) can take: it stores the whole object
// in its last-applied-configuration annotation, and a Kubernetes object's
// annotations hold at most 256 KiB. Kept a little below, for the rest of
// the annotation.
const maxApplySize = apivalidation.TotalAnnotationSizeLimitB - 1024

// validateObject checks what the API server checks of an object's
// metadata and selectors but strict decoding does not: names, label keys
// and values, annotation keys and size, ConfigMap keys; and that `kubectl
// apply` can take it (size is its JSON's).
func validateObject(obj any, size int) error {
	var errs field.ErrorList
	name := func(path *field.Path, value string, check func(string) []string) {
		for _, msg := range check(value) {
			errs = append(errs, field.Invalid(path, value, msg))
		}
	}
	labels := func(path *field.Path, l map[string]string) {
		errs = append(errs, metavalidation.ValidateLabels(l, path)...)
	}
	selector := func(path *field.Path, sel *metav1.LabelSelector) {
		if sel != nil {
			errs = append(errs, metavalidation.ValidateLabelSelector(sel, metavalidation.LabelSelectorValidationOptions{}, path)...)
		}
	}
	m := obj.(metav1.Object)
	meta := field.NewPath("metadata")
	name(meta.Child("name"), m.GetName(), validation.IsDNS1123Subdomain)
	if ns := m.GetNamespace(); ns != "" {
		name(meta.Child("namespace"), ns, validation.IsDNS1123Label)
	}
	labels(meta.Child("labels"), m.GetLabels())
	errs = append(errs, apivalidation.ValidateAnnotations(m.GetAnnotations(), meta.Child("annotations"))...)
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		// Its pods' host names are <name>-<ordinal>, DNS labels, and
		// carry a controller-revision-hash label of <name>-<hash of up to
		// 10 characters>, at most 63: a longer name creates no pod.
		name(meta.Child("name"), o.Name, validation.IsDNS1123Label)
		if len(o.Name) > 52 {
			errs = append(errs, field.TooLong(meta.Child("name"), o.Name, 52))
		}
		spec := field.NewPath("spec")
		selector(spec.Child("selector"), o.Spec.Selector)
		tmpl := spec.Child("template", "metadata")
		labels(tmpl.Child("labels"), o.Spec.Template.Labels)
		errs = append(errs, apivalidation.ValidateAnnotations(o.Spec.Template.Annotations, tmpl.Child("annotations"))...)
		for i, c := range o.Spec.Template.Spec.TopologySpreadConstraints {
			selector(spec.Child("template", "spec", "topologySpreadConstraints").Index(i).Child("labelSelector"), c.LabelSelector)
		}
		for i, v := range o.Spec.VolumeClaimTemplates {
			labels(spec.Child("volumeClaimTemplates").Index(i).Child("metadata", "labels"), v.Labels)
		}
	case *corev1.Service:
		// A Service's name is a DNS label that starts with a letter.
		name(meta.Child("name"), o.Name, validation.IsDNS1035Label)
		labels(field.NewPath("spec", "selector"), o.Spec.Selector)
	case *corev1.ConfigMap:
		for k := range o.Data {
			name(field.NewPath("data").Key(k), k, validation.IsConfigMapKey)
		}
	case *policyv1.PodDisruptionBudget:
		selector(field.NewPath("spec", "selector"), o.Spec.Selector)
	case *monitoringv1.ServiceMonitor:
		selector(field.NewPath("spec", "selector"), &o.Spec.Selector)
	case *rbacv1.RoleBinding:
		// What the API server's RBAC validation refuses of a binding to
		// a ServiceAccount.
		if o.RoleRef.APIGroup != rbacv1.GroupName || o.RoleRef.Kind == "" || o.RoleRef.Name == "" {
			errs = append(errs, field.Invalid(field.NewPath("roleRef"), o.RoleRef, "want apiGroup "+rbacv1.GroupName+", a kind and a name"))
		}
		for i, s := range o.Subjects {
			p := field.NewPath("subjects").Index(i)
			if s.Kind == rbacv1.ServiceAccountKind {
				name(p.Child("name"), s.Name, validation.IsDNS1123Subdomain)
				if s.APIGroup != "" {
					errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
				}
			}
			if s.Namespace != "" {
				name(p.Child("namespace"), s.Namespace, validation.IsDNS1123Label)
			}
		}
	}
	if size > maxApplySize {
		errs = append(errs, field.TooLong(field.NewPath(""), fmt.Sprintf("%d bytes", size), maxApplySize))
	}
	return errs.ToAggregate()
}

// TestStrictDecoder: the decoder the manifests' checks rely on rejects what
// the API server would reject or silently drop, so that a manifest passing
// it is one the server takes as written.
func TestStrictDecoder(t *testing.T) {
	const good = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: sloprober
spec:
  serviceName: sloprober
  selector: {matchLabels: {app: sloprober}}
  template:
    metadata: {labels: {app: sloprober}}
    spec:
      containers:
        - name: sloprober
          image: sloprober
          securityContext:
            readOnlyRootFilesystem: true
`
	objs, err := decodeManifests("good", []byte("# a comment\n---\n"+good))
	if err != nil {
		t.Fatalf("a valid StatefulSet: %v", err)
	}
	if len(objs) != 1 || objs[0].String() != "StatefulSet/sloprober" {
		t.Fatalf("decoded %v, want [StatefulSet/sloprober]", objs)
	}
	sts := objs[0].Obj.(*appsv1.StatefulSet)
	if sc := sts.Spec.Template.Spec.Containers[0].SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem not decoded: %+v", sc)
	}

	for _, tc := range []struct{ name, manifest, want string }{
		{"misspelled field", strings.Replace(good, "readOnlyRootFilesystem", "readOnlyRootFileSystem", 1), `unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem"`},
		{"field in another case", strings.Replace(good, "readOnlyRootFilesystem", "readonlyRootFilesystem", 1), "readonlyRootFilesystem"},
		{"field at the wrong level", strings.Replace(good, "  serviceName: sloprober", "  serviceName: sloprober\n  podManagement: Parallel", 1), `unknown field "spec.podManagement"`},
		{"key given twice", strings.Replace(good, "  serviceName: sloprober", "  serviceName: sloprober\n  serviceName: other", 1), `key "serviceName" already set`},
		{"wrong type", strings.Replace(good, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: yes please", 1), "readOnlyRootFilesystem"},
		{"unknown kind", strings.Replace(good, "kind: StatefulSet", "kind: Deployment", 1), `kind "Deployment" is none of the kinds`},
		{"a Secret", "apiVersion: v1\nkind: Secret\nmetadata: {name: sloprober-credentials}\nstringData: {token: x}\n", `kind "Secret" is none of the kinds`},
		{"a ClusterRole", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: sloprober}\nrules: [{apiGroups: [\"\"], resources: [pods], verbs: [delete]}]\n", `kind "ClusterRole" is none of the kinds`},
		{"invalid subject namespace", "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: b}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}\nsubjects: [{kind: ServiceAccount, name: sloprober, namespace: LLM}]\n", "subjects[0].namespace"},
		{"misspelled field of a CRD", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: s}\nspec:\n  selector: {}\n  endpoints: [{port: http, pth: /metrics}]\n", `unknown field "spec.endpoints[0].pth"`},
		{"invalid label value", strings.Replace(good, "metadata:\n  name: sloprober\n", "metadata:\n  name: sloprober\n  labels: {app.kubernetes.io/version: 1.0+dirty}\n", 1), "metadata.labels"},
		{"invalid selector", strings.Replace(good, "selector: {matchLabels: {app: sloprober}}", "selector: {matchLabels: {app: -sloprober}}", 1), "spec.selector.matchLabels"},
		{"StatefulSet name too long for its pods", strings.Replace(good, "name: sloprober\nspec", "name: "+strings.Repeat("s", 53)+"\nspec", 1), "metadata.name"},
		{"Service name not a DNS-1035 label", "apiVersion: v1\nkind: Service\nmetadata: {name: 1st-sloprober}\nspec: {clusterIP: None}\n", "metadata.name"},
		{"too large for kubectl apply", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {big.json: " + strings.Repeat("x", maxApplySize) + "}\n", "Too long"},
	} {
		_, err := decodeManifests(tc.name, []byte(tc.manifest))
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.want)
		}
	}
}
