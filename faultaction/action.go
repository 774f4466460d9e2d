// Package faultaction runs the fault actions of a soak test's fault plan
// against a real deployment, where the built-in simulator's PUT /sim/faults
// is not there to call: an HTTP request (a chaos endpoint, a gateway's
// admin API taking a replica out of rotation, and the request putting it
// back), the deletion of one pod of a Kubernetes workload (its Deployment
// or StatefulSet recreates it: failure and recovery), or a command run on
// the prober's host (off unless the daemon is started with
// --test.allow-exec-faults).
//
// An action is configuration (YAML, decoded strictly by the caller);
// a Runner carries what the daemon decides (whether exec is allowed, a
// shared Kubernetes client) and returns an Event per call for the soak's
// report. Every call is bounded in time and honours its context: a fault
// plan must never hang a soak.
package faultaction

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"golang.org/x/net/http/httpguts"
	"k8s.io/apimachinery/pkg/labels"
)

// Default timeouts of one call. An HTTP admin call answers in well under
// a second, 10s allows for a slow gateway; a pod list and delete are two
// API server round trips, 30s allows for a busy control plane; a command
// gets 30s like kubectl's default request timeout.
const (
	DefaultHTTPTimeout       = 10 * time.Second
	DefaultKubernetesTimeout = 30 * time.Second
	DefaultExecTimeout       = 30 * time.Second
)

// Action is one fault action of a fault plan's step: exactly one of its
// fields is set. It is run at the step's start (Runner.Do) and, when it
// has an undo, undone at the step's end (Runner.Undo).
type Action struct {
	HTTP       *HTTPAction       `yaml:"http,omitempty"`
	Kubernetes *KubernetesAction `yaml:"kubernetes,omitempty"`
	Exec       *ExecAction       `yaml:"exec,omitempty"`
}

// HTTPRequest is one request an HTTP action sends.
type HTTPRequest struct {
	// Method defaults to POST: a fault action changes something.
	Method string `yaml:"method,omitempty"`
	// URL is absolute, http or https. Redirects are never followed.
	URL string `yaml:"url"`
	// Headers are sent as given; their values are secrets (an
	// Authorization header, an admin token) and never appear in an
	// Event, a log or a report (only their names do).
	Headers map[string]commoncfg.Secret `yaml:"headers,omitempty"`
	Body    string                      `yaml:"body,omitempty"`
}

// HTTPAction sends a request at the step's start and, if Undo is set,
// another at its end. Success is a 2xx answer.
type HTTPAction struct {
	HTTPRequest `yaml:",inline"`
	Undo        *HTTPRequest `yaml:"undo,omitempty"`
	// Timeout bounds each request (default 10s).
	Timeout model.Duration `yaml:"timeout,omitempty"`
}

// KubernetesAction deletes one pod of a workload: among the pods of
// Namespace matching Selector that are Running and not being deleted, the
// oldest (by creation time, then name). Taking the oldest makes the choice
// deterministic and spreads repeated steps over the replicas: with pods
// a (oldest), b, c, a first step deletes a, whose replacement a' is now
// the youngest, so a second step deletes b, a third c.
//
// It needs only get, list and delete on pods in Namespace (a Role, not a
// ClusterRole). There is no undo: the pod's controller recreates it.
type KubernetesAction struct {
	Namespace string `yaml:"namespace"`
	// Selector is a label selector, as kubectl's -l: "app=vllm,tier!=canary".
	Selector string `yaml:"selector"`
	// Kubeconfig is the path of a kubeconfig file; empty: the in-cluster
	// credentials of the prober's service account.
	Kubeconfig string `yaml:"kubeconfig,omitempty"`
	// Context is a context of Kubeconfig (default: its current context).
	Context string `yaml:"context,omitempty"`
	// DryRun sends the delete with dryRun=All: the API server checks it
	// (authorization, admission) and deletes nothing.
	DryRun bool `yaml:"dry_run,omitempty"`
	// GracePeriod overrides the pod's terminationGracePeriodSeconds, in
	// whole seconds ("0s": killed at once; unset: the pod's own).
	GracePeriod *model.Duration `yaml:"grace_period,omitempty"`
	// Timeout bounds the list and delete together (default 30s).
	Timeout model.Duration `yaml:"timeout,omitempty"`
}

// ExecAction runs a command (an argv, no shell) on the prober's host at
// the step's start and, if Undo is set, another at its end. Success is
// exit status 0.
type ExecAction struct {
	Command []string `yaml:"command"`
	Undo    []string `yaml:"undo,omitempty"`
	// Timeout bounds each command (default 30s); the command is killed
	// when it passes.
	Timeout model.Duration `yaml:"timeout,omitempty"`
}

// Kinds of action, as Kind returns them and Event.Kind records them.
const (
	KindHTTP       = "http"
	KindKubernetes = "kubernetes"
	KindExec       = "exec"
)

// httpMethods are the methods an HTTP action may send: the standard ones
// with a meaning for an admin API (not CONNECT or TRACE).
var httpMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// Kind is "http", "kubernetes" or "exec" (the first set), or "" when
// none is set.
func (a *Action) Kind() string {
	switch {
	case a == nil:
		return ""
	case a.HTTP != nil:
		return KindHTTP
	case a.Kubernetes != nil:
		return KindKubernetes
	case a.Exec != nil:
		return KindExec
	}
	return ""
}

// Undoable says whether the action has something to run at the step's end.
func (a *Action) Undoable() bool {
	switch a.Kind() {
	case KindHTTP:
		return a.HTTP.Undo != nil
	case KindExec:
		return len(a.Exec.Undo) > 0
	}
	return false
}

// Validate checks the action alone; each error names its key and value,
// e.g. `http.url: must be an absolute http(s) URL, got "foo"`. Whether
// exec actions are allowed is the Runner's to say (Runner.Check).
func (a *Action) Validate() error {
	if a == nil {
		return errors.New("must set exactly one of http, kubernetes, exec; got none")
	}
	var set []string
	if a.HTTP != nil {
		set = append(set, KindHTTP)
	}
	if a.Kubernetes != nil {
		set = append(set, KindKubernetes)
	}
	if a.Exec != nil {
		set = append(set, KindExec)
	}
	switch len(set) {
	case 0:
		return errors.New("must set exactly one of http, kubernetes, exec; got none")
	case 1:
	default:
		return fmt.Errorf("must set exactly one of http, kubernetes, exec; got %s", strings.Join(set, " and "))
	}
	switch {
	case a.HTTP != nil:
		return a.HTTP.validate()
	case a.Kubernetes != nil:
		return a.Kubernetes.validate()
	default:
		return a.Exec.validate()
	}
}

func (h *HTTPAction) validate() error {
	if err := h.HTTPRequest.validate("http"); err != nil {
		return err
	}
	if h.Undo != nil {
		if err := h.Undo.validate("http.undo"); err != nil {
			return err
		}
	}
	return validTimeout("http.timeout", h.Timeout)
}

func (r *HTTPRequest) validate(key string) error {
	if r.Method != "" && !slices.Contains(httpMethods, r.Method) {
		return fmt.Errorf("%s.method: must be one of %s, got %q", key, strings.Join(httpMethods, ", "), r.Method)
	}
	u, err := url.Parse(r.URL)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The value as url.Redacted shows it: a password in it is not echoed.
		shown := r.URL
		if err == nil {
			shown = u.Redacted()
		} else if strings.Contains(r.URL, "@") {
			shown = "<unparsable URL with userinfo>"
		}
		return fmt.Errorf("%s.url: must be an absolute http(s) URL, got %q", key, shown)
	}
	for _, name := range sortedKeys(r.Headers) {
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("%s.headers: %q is not a valid header name", key, name)
		}
		// The value is a secret: say what is wrong, not what it is.
		if !httpguts.ValidHeaderFieldValue(string(r.Headers[name])) {
			return fmt.Errorf("%s.headers.%s: value has a control character (a line break?)", key, name)
		}
	}
	return nil
}

func (k *KubernetesAction) validate() error {
	if k.Namespace == "" {
		return errors.New("kubernetes.namespace: must be set")
	}
	if k.Selector == "" {
		// An empty selector matches every pod of the namespace: never
		// what a fault plan means.
		return errors.New("kubernetes.selector: must be set (an empty selector matches every pod)")
	}
	if _, err := labels.Parse(k.Selector); err != nil {
		return fmt.Errorf("kubernetes.selector: %q: %w", k.Selector, err)
	}
	if k.Context != "" && k.Kubeconfig == "" {
		return fmt.Errorf("kubernetes.context: %q needs kubernetes.kubeconfig (in-cluster credentials have no contexts)", k.Context)
	}
	if g := k.GracePeriod; g != nil {
		d := time.Duration(*g)
		if d < 0 || d%time.Second != 0 {
			return fmt.Errorf("kubernetes.grace_period: must be whole seconds, 0s or more, got %s", g)
		}
	}
	return validTimeout("kubernetes.timeout", k.Timeout)
}

func (e *ExecAction) validate() error {
	if len(e.Command) == 0 || e.Command[0] == "" {
		return errors.New("exec.command: must be a non-empty argv list, e.g. [\"/usr/local/bin/chaos\", \"--kill\"]")
	}
	if e.Undo != nil && (len(e.Undo) == 0 || e.Undo[0] == "") {
		return errors.New("exec.undo: must be a non-empty argv list when set")
	}
	return validTimeout("exec.timeout", e.Timeout)
}

func validTimeout(key string, d model.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s: must not be negative (0: the default), got %s", key, d)
	}
	return nil
}

// Describe is the action on one line for logs and reports. It never
// shows a secret: header names but not their values, the body's size but
// not its text, a URL's password redacted.
func (a *Action) Describe() string {
	switch a.Kind() {
	case KindHTTP:
		s := "http " + a.HTTP.HTTPRequest.describe()
		if a.HTTP.Undo != nil {
			s += "; undo " + a.HTTP.Undo.describe()
		}
		return s
	case KindKubernetes:
		return "kubernetes " + a.Kubernetes.describe()
	case KindExec:
		s := "exec " + describeArgv(a.Exec.Command)
		if len(a.Exec.Undo) > 0 {
			s += "; undo " + describeArgv(a.Exec.Undo)
		}
		return s
	}
	return "no action"
}

// describeUndo is the undo part alone, for an undo's Event.
func (a *Action) describeUndo() string {
	switch {
	case !a.Undoable():
		return a.Describe()
	case a.HTTP != nil:
		return "http " + a.HTTP.Undo.describe()
	default:
		return "exec " + describeArgv(a.Exec.Undo)
	}
}

func (r *HTTPRequest) describe() string {
	s := r.method() + " " + redactURL(r.URL)
	var extra []string
	if len(r.Headers) > 0 {
		extra = append(extra, "headers "+strings.Join(sortedKeys(r.Headers), ", "))
	}
	if r.Body != "" {
		extra = append(extra, fmt.Sprintf("body %d bytes", len(r.Body)))
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, "; ") + ")"
	}
	return s
}

func (r *HTTPRequest) method() string {
	if r.Method == "" {
		return http.MethodPost
	}
	return r.Method
}

func (k *KubernetesAction) describe() string {
	s := fmt.Sprintf("delete one pod in namespace %q matching %q", k.Namespace, k.Selector)
	if k.GracePeriod != nil {
		s += fmt.Sprintf(" with grace period %s", k.GracePeriod)
	}
	if k.DryRun {
		s += " (dry run)"
	}
	if k.Kubeconfig == "" {
		return s + " with in-cluster credentials"
	}
	s += " with kubeconfig " + k.Kubeconfig
	if k.Context != "" {
		s += " context " + k.Context
	}
	return s
}

// describeArgv quotes each argument: ["sh" "-c" "x y"] shows where an
// argument with a space begins and ends.
func describeArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, s := range argv {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, " ") + "]"
}

// redactURL hides a URL's password (user:xxxxx@host); an unparsable URL
// (never one that validated) is not shown.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<invalid URL>"
	}
	return u.Redacted()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
