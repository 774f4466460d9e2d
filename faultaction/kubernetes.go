package faultaction

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// userAgent names the prober in the API server's audit log.
const userAgent = "sloprober-faultaction"

// clientset is the Runner's Kubernetes client, or one built from the
// action's credentials.
func (r *Runner) clientset(k *KubernetesAction) (kubernetes.Interface, error) {
	if r.Kubernetes != nil {
		return r.Kubernetes, nil
	}
	cfg, err := restConfig(k)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}

// restConfig reads the action's credentials: its kubeconfig file (and
// context), or the pod's service account when it names none.
func restConfig(k *KubernetesAction) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if k.Kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster kubernetes credentials (set kubernetes.kubeconfig when not running in a pod): %w", err)
		}
	} else {
		// Only the file named: not $KUBECONFIG, not ~/.kube/config.
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: k.Kubeconfig}
		over := &clientcmd.ConfigOverrides{CurrentContext: k.Context}
		if cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, over).ClientConfig(); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", k.Kubeconfig, err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	return cfg, nil
}

// doKubernetes deletes the pod chooseVictim picks, by UID: a StatefulSet
// pod recreated under the same name between the list and the delete is
// not the one chosen, and is left alone (the delete fails with a conflict).
func (r *Runner) doKubernetes(ctx context.Context, k *KubernetesAction) (result, error) {
	ctx, cancel := bounded(ctx, timeout(k.Timeout, DefaultKubernetesTimeout))
	defer cancel()
	res := result{dryRun: k.DryRun}
	cs, err := r.clientset(k)
	if err != nil {
		return res, err
	}
	pods := cs.CoreV1().Pods(k.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: k.Selector})
	if err != nil {
		return res, fmt.Errorf("listing pods in namespace %q matching %q: %w", k.Namespace, k.Selector, withCause(ctx, err))
	}
	victim := chooseVictim(list.Items)
	if victim == nil {
		return res, fmt.Errorf("no running pod in namespace %q matching %q (%d matching, none Running and not being deleted)", k.Namespace, k.Selector, len(list.Items))
	}
	opts := metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(victim.UID))}
	if k.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if k.GracePeriod != nil {
		s := int64(time.Duration(*k.GracePeriod) / time.Second)
		opts.GracePeriodSeconds = &s
	}
	node := victim.Spec.NodeName
	if node == "" {
		node = "(none)"
	}
	if err := pods.Delete(ctx, victim.Name, opts); err != nil {
		return res, fmt.Errorf("deleting pod %s/%s on node %s: %w", k.Namespace, victim.Name, node, withCause(ctx, err))
	}
	if k.DryRun {
		res.text = fmt.Sprintf("dry run (server-side, dryRun=All): would delete pod %s on node %s; nothing deleted", victim.Name, node)
	} else {
		res.text = fmt.Sprintf("deleted pod %s on node %s", victim.Name, node)
	}
	return res, nil
}

// chooseVictim is the pod to delete: among the Running pods not being
// deleted, the oldest by creation time, the first by name among pods
// created the same second (creation timestamps have a resolution of one
// second). Pending pods are not chosen (deleting one tests nothing that
// serves), nor terminating ones (already going). Nil when none qualifies.
func chooseVictim(pods []corev1.Pod) *corev1.Pod {
	var ok []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			ok = append(ok, p)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	return slices.MinFunc(ok, func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}
