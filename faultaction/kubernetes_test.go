package faultaction

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func pod(ns, name, app string, phase corev1.PodPhase, age time.Duration, terminating bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			Labels:            map[string]string{"app": app},
			CreationTimestamp: metav1.NewTime(t0.Add(-age)),
		},
		Spec:   corev1.PodSpec{NodeName: "node-" + name},
		Status: corev1.PodStatus{Phase: phase},
	}
	if terminating {
		now := metav1.NewTime(t0)
		p.DeletionTimestamp = &now
	}
	return p
}

// pods of a vLLM Deployment and its neighbours: the one to delete is
// vllm-a, the oldest Running one not terminating (vllm-b is as old: the
// name breaks the tie).
func pods() []runtime.Object {
	return []runtime.Object{
		pod("llm", "vllm-pending", "vllm", corev1.PodPending, 10*time.Hour, false),
		pod("llm", "vllm-terminating", "vllm", corev1.PodRunning, 10*time.Hour, true),
		pod("llm", "vllm-failed", "vllm", corev1.PodFailed, 10*time.Hour, false),
		pod("llm", "vllm-b", "vllm", corev1.PodRunning, 5*time.Hour, false),
		pod("llm", "vllm-a", "vllm", corev1.PodRunning, 5*time.Hour, false),
		pod("llm", "vllm-young", "vllm", corev1.PodRunning, time.Minute, false),
		pod("llm", "router", "router", corev1.PodRunning, 20*time.Hour, false),
		pod("prod", "vllm-prod", "vllm", corev1.PodRunning, 20*time.Hour, false),
	}
}

func podNames(t *testing.T, cs *fake.Clientset, ns string) []string {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Name)
	}
	return names
}

// deletes returns the delete actions the fake clientset received.
func deletes(cs *fake.Clientset) []k8stesting.DeleteActionImpl {
	var ds []k8stesting.DeleteActionImpl
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok {
			ds = append(ds, d)
		}
	}
	return ds
}

func TestKubernetesFakeDeletesOldestRunning(t *testing.T) {
	cs := fake.NewClientset(pods()...)
	r := Runner{Kubernetes: cs}
	a := &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=vllm", GracePeriod: dur("0s")}}
	e := r.Do(context.Background(), a)
	require.Empty(t, e.Error)
	require.Equal(t, "deleted pod vllm-a on node node-vllm-a", e.Result)
	require.False(t, e.DryRun)
	require.Equal(t, KindKubernetes, e.Kind)
	require.NotContains(t, podNames(t, cs, "llm"), "vllm-a")
	require.Len(t, podNames(t, cs, "llm"), 6)

	ds := deletes(cs)
	require.Len(t, ds, 1)
	require.Empty(t, ds[0].DeleteOptions.DryRun)
	require.Equal(t, int64(0), *ds[0].DeleteOptions.GracePeriodSeconds)
	require.Equal(t, types.UID("uid-vllm-a"), *ds[0].DeleteOptions.Preconditions.UID)

	// The next step takes the next oldest.
	e = r.Do(context.Background(), a)
	require.Equal(t, "deleted pod vllm-b on node node-vllm-b", e.Result)

	u := r.Undo(context.Background(), a)
	require.Empty(t, u.Error)
	require.Equal(t, "nothing to undo: the pod's controller recreates it", u.Result)
}

// The fake clientset deletes whatever the options say; a reactor plays
// the API server's dry run (answers, deletes nothing) so that what is
// tested is that the delete carries dryRun=All.
func TestKubernetesFakeDryRun(t *testing.T) {
	cs := fake.NewClientset(pods()...)
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		if len(d.DeleteOptions.DryRun) == 1 && d.DeleteOptions.DryRun[0] == metav1.DryRunAll {
			return true, nil, nil
		}
		return false, nil, nil
	})
	r := Runner{Kubernetes: cs}
	e := r.Do(context.Background(), &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=vllm", DryRun: true}})
	require.Empty(t, e.Error)
	require.True(t, e.DryRun)
	require.Equal(t, "dry run (server-side, dryRun=All): would delete pod vllm-a on node node-vllm-a; nothing deleted", e.Result)
	require.Contains(t, podNames(t, cs, "llm"), "vllm-a")
	ds := deletes(cs)
	require.Len(t, ds, 1)
	require.Equal(t, []string{metav1.DryRunAll}, ds[0].DeleteOptions.DryRun)
	require.Nil(t, ds[0].DeleteOptions.GracePeriodSeconds)
}

func TestKubernetesFakeNone(t *testing.T) {
	for _, tc := range []struct{ ns, selector, want string }{
		{"llm", "app=none", `no running pod in namespace "llm" matching "app=none" (0 matching, none Running and not being deleted)`},
		{"llm", "app=vllm,tier=x", `no running pod in namespace "llm" matching "app=vllm,tier=x" (0 matching, none Running and not being deleted)`},
		{"empty", "app=vllm", `no running pod in namespace "empty" matching "app=vllm" (0 matching, none Running and not being deleted)`},
	} {
		cs := fake.NewClientset(pods()...)
		r := Runner{Kubernetes: cs}
		e := r.Do(context.Background(), &Action{Kubernetes: &KubernetesAction{Namespace: tc.ns, Selector: tc.selector}})
		require.Equal(t, tc.want, e.Error)
		require.Empty(t, deletes(cs))
	}
	// Pods match, none of them Running and not terminating.
	cs := fake.NewClientset(pods()[:3]...)
	e := (&Runner{Kubernetes: cs}).Do(context.Background(), &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=vllm"}})
	require.Equal(t, `no running pod in namespace "llm" matching "app=vllm" (3 matching, none Running and not being deleted)`, e.Error)
}

func TestKubernetesInClusterOutsideACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	var r Runner
	e := r.Do(context.Background(), &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=vllm"}})
	require.True(t, strings.HasPrefix(e.Error, "in-cluster kubernetes credentials (set kubernetes.kubeconfig when not running in a pod): "), e.Error)
}

// apiserver is an httptest TLS server speaking the two pod endpoints a
// kubernetes action uses, recording what it received.
type apiserver struct {
	*httptest.Server
	mu         sync.Mutex
	selectors  []string
	auths      []string
	agents     []string
	deleted    []string
	deleteOpts []metav1.DeleteOptions
	unexpected []string
}

func newAPIServer(t *testing.T, items []corev1.Pod) *apiserver {
	t.Helper()
	s := &apiserver{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		s.agents = append(s.agents, r.Header.Get("User-Agent"))
		const prefix = "/api/v1/namespaces/llm/pods"
		switch {
		case r.Method == http.MethodGet && r.URL.Path == prefix:
			s.selectors = append(s.selectors, r.URL.Query().Get("labelSelector"))
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(&corev1.PodList{
				TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
				Items:    items,
			})
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, prefix+"/"):
			name := strings.TrimPrefix(r.URL.Path, prefix+"/")
			b, _ := io.ReadAll(r.Body)
			// client-go sends pods' requests as protobuf (JSON if asked):
			// decode whichever it is as the API server would.
			var opts metav1.DeleteOptions
			if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, &opts); err != nil {
				s.unexpected = append(s.unexpected, fmt.Sprintf("delete body %q (%s): %v", b, r.Header.Get("Content-Type"), err))
			}
			s.deleted = append(s.deleted, name)
			s.deleteOpts = append(s.deleteOpts, opts)
			for _, p := range items {
				if p.Name == name {
					w.Header().Set("Content-Type", "application/json")
					p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
					_ = json.NewEncoder(w).Encode(&p)
					return
				}
			}
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
		default:
			s.unexpected = append(s.unexpected, r.Method+" "+r.URL.String())
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// writeKubeconfig writes a kubeconfig whose current context points at
// nothing (127.0.0.1:1) and whose context "test" points at srv, trusting
// its certificate and sending a bearer token.
func writeKubeconfig(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
- name: nowhere
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: prober
  user:
    token: tok-abc
contexts:
- name: test
  context: {cluster: test, user: prober, namespace: ignored}
- name: wrong
  context: {cluster: nowhere, user: prober}
current-context: wrong
`, srv.URL, ca)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// A real client-go REST client, built from a kubeconfig file, against an
// API server on loopback: the list carries the label selector, the delete
// the chosen pod's name, UID precondition, grace period and dryRun=All.
func TestKubernetesWire(t *testing.T) {
	var items []corev1.Pod
	for _, o := range pods() {
		if p := o.(*corev1.Pod); p.Namespace == "llm" && p.Labels["app"] == "vllm" {
			items = append(items, *p)
		}
	}
	for _, dryRun := range []bool{true, false} {
		t.Run(fmt.Sprintf("dry_run=%v", dryRun), func(t *testing.T) {
			srv := newAPIServer(t, items)
			a := &Action{Kubernetes: &KubernetesAction{
				Namespace: "llm", Selector: "app=vllm,tier!=canary",
				Kubeconfig: writeKubeconfig(t, srv.Server), Context: "test",
				DryRun: dryRun, GracePeriod: dur("7s"),
			}}
			require.NoError(t, a.Validate())
			var r Runner
			e := r.Do(context.Background(), a)
			require.Empty(t, e.Error)
			require.Equal(t, dryRun, e.DryRun)
			if dryRun {
				require.Equal(t, "dry run (server-side, dryRun=All): would delete pod vllm-a on node node-vllm-a; nothing deleted", e.Result)
			} else {
				require.Equal(t, "deleted pod vllm-a on node node-vllm-a", e.Result)
			}

			srv.mu.Lock()
			defer srv.mu.Unlock()
			require.Empty(t, srv.unexpected)
			require.Equal(t, []string{"app=vllm,tier!=canary"}, srv.selectors)
			require.Equal(t, []string{"vllm-a"}, srv.deleted)
			require.Equal(t, []string{"Bearer tok-abc", "Bearer tok-abc"}, srv.auths)
			require.Equal(t, []string{userAgent, userAgent}, srv.agents)
			opts := srv.deleteOpts[0]
			if dryRun {
				require.Equal(t, []string{metav1.DryRunAll}, opts.DryRun)
			} else {
				require.Empty(t, opts.DryRun)
			}
			require.Equal(t, int64(7), *opts.GracePeriodSeconds)
			require.Equal(t, types.UID("uid-vllm-a"), *opts.Preconditions.UID)
		})
	}
}

func TestKubernetesKubeconfigErrors(t *testing.T) {
	srv := newAPIServer(t, nil)
	path := writeKubeconfig(t, srv.Server)
	var r Runner
	e := r.Do(context.Background(), &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=vllm", Kubeconfig: path, Context: "nope"}})
	require.True(t, strings.HasPrefix(e.Error, "kubeconfig "+path+": "), e.Error)
	require.Contains(t, e.Error, `context "nope"`)

	missing := filepath.Join(t.TempDir(), "missing")
	e = r.Do(context.Background(), &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=vllm", Kubeconfig: missing}})
	require.True(t, strings.HasPrefix(e.Error, "kubeconfig "+missing+": "), e.Error)

	// The API server's refusal is the event's error, naming namespace and selector.
	e = r.Do(context.Background(), &Action{Kubernetes: &KubernetesAction{Namespace: "other", Selector: "app=vllm", Kubeconfig: path, Context: "test"}})
	require.True(t, strings.HasPrefix(e.Error, `listing pods in namespace "other" matching "app=vllm": `), e.Error)
}

func TestKubernetesTimeout(t *testing.T) {
	hang := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	var r Runner
	e := r.Do(context.Background(), &Action{Kubernetes: &KubernetesAction{
		Namespace: "llm", Selector: "app=vllm", Kubeconfig: writeKubeconfig(t, hang), Context: "test",
		Timeout: 200 * 1e6,
	}})
	require.True(t, strings.HasPrefix(e.Error, `listing pods in namespace "llm" matching "app=vllm": `), e.Error)
	require.Contains(t, e.Error, "timed out after 200ms")
	require.Less(t, e.Seconds, 5.0)
}
