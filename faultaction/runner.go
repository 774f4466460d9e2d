package faultaction

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/sloprober/sloprober/internal/safetext"
)

// ErrExecNotAllowed is the error of an exec action run, or checked, by a
// Runner whose AllowExec is false. A command run on the prober's host by
// whoever can change its configuration (or POST a test run) is a remote
// shell: it takes a flag of the daemon, off by default, to allow it.
var ErrExecNotAllowed = errors.New("exec fault actions are off: start sloprober with --test.allow-exec-faults")

// Runner runs fault actions. Its zero value runs http and kubernetes
// actions (with in-cluster or kubeconfig credentials) and refuses exec
// ones. It is safe for concurrent use; set its fields before the first use.
type Runner struct {
	// AllowExec allows exec actions; set from the daemon's
	// --test.allow-exec-faults flag, off by default.
	AllowExec bool
	// Kubernetes, if set, is used instead of building a clientset from
	// the action's credentials (tests; a daemon may share one).
	Kubernetes kubernetes.Interface
	// HTTPClient, if set, sends the http actions' requests; by default a
	// client of its own without a proxy from the environment. Either way
	// redirects are never followed: a copy of the client is used whose
	// CheckRedirect refuses them.
	HTTPClient *http.Client

	mu      sync.Mutex
	pending map[*Event]time.Time // calls under way, by their deadline
}

// Pending says which fault action call under way ends last, and by when
// its timeout ends it (zero when none is under way): a daemon stopping
// waits for it rather than exit with a replica out of rotation and no
// record of the undo.
func (r *Runner) Pending() (until time.Time, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for e, t := range r.pending {
		if t.After(until) {
			until, what = t, e.Action+" "+e.Description
		}
	}
	return until, what
}

// track records a call under way until its returned function is called.
func (r *Runner) track(e *Event, d time.Duration) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[*Event]time.Time{}
	}
	r.pending[e] = time.Now().Add(d)
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.pending, e)
	}
}

// Event is what one call did, for a soak's report.
type Event struct {
	At time.Time `json:"at"`
	// Action is "do" or "undo".
	Action      string `json:"action"`
	Kind        string `json:"kind"`
	Description string `json:"description"`
	// Result says what happened, e.g. "deleted pod vllm-7f9c-abc on node
	// n1", "HTTP 200 OK: <body…>".
	Result string `json:"result,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
	Error  string `json:"error,omitempty"`
	// Seconds is how long the call took.
	Seconds float64 `json:"seconds"`
}

// Event.Action values.
const (
	ActionDo   = "do"
	ActionUndo = "undo"
)

// Failed says whether the call failed.
func (e Event) Failed() bool { return e.Error != "" }

// Check validates a, then refuses an exec action unless AllowExec: a fault
// plan is checked with it when its run starts (the configuration alone
// cannot know the daemon's flags), not when its step comes, hours in.
func (r *Runner) Check(a *Action) error {
	if err := a.Validate(); err != nil {
		return err
	}
	if a.Exec != nil && !r.AllowExec {
		return ErrExecNotAllowed
	}
	return nil
}

// Do runs the action (a step's start). Failures are in the Event's Error,
// never a panic or a hang: the call is bounded by the action's timeout
// and ctx.
func (r *Runner) Do(ctx context.Context, a *Action) Event {
	return r.run(ctx, a, ActionDo)
}

// Undo runs the action's undo (a step's end); for an action without one
// it does nothing and says so in the Event's Result.
func (r *Runner) Undo(ctx context.Context, a *Action) Event {
	return r.run(ctx, a, ActionUndo)
}

func (r *Runner) run(ctx context.Context, a *Action, action string) Event {
	start := time.Now()
	e := Event{At: start, Action: action, Kind: a.Kind(), Description: a.Describe()}
	if action == ActionUndo {
		e.Description = a.describeUndo()
	}
	var res result
	err := r.Check(a)
	switch {
	case err != nil:
	case action == ActionUndo && !a.Undoable():
		res.text = "nothing to undo"
		if a.Kubernetes != nil {
			res.text = "nothing to undo: the pod's controller recreates it"
		}
	case a.HTTP != nil:
		req := &a.HTTP.HTTPRequest
		if action == ActionUndo {
			req = a.HTTP.Undo
		}
		d := timeout(a.HTTP.Timeout, DefaultHTTPTimeout)
		defer r.track(&e, d)()
		res, err = r.doHTTP(ctx, req, d)
	case a.Kubernetes != nil:
		defer r.track(&e, timeout(a.Kubernetes.Timeout, DefaultKubernetesTimeout))()
		res, err = r.doKubernetes(ctx, a.Kubernetes)
	default:
		argv := a.Exec.Command
		if action == ActionUndo {
			argv = a.Exec.Undo
		}
		d := timeout(a.Exec.Timeout, DefaultExecTimeout)
		defer r.track(&e, d+execWaitDelay)()
		res, err = doExec(ctx, argv, d)
	}
	// What an action returns (an endpoint's body, a command's output)
	// is cleaned as a server's message is before it is stored or shown.
	e.Result, e.DryRun = safetext.Line(res.text, MaxResultBytes), res.dryRun
	if err != nil {
		e.Error = safetext.Line(err.Error(), MaxResultBytes)
	}
	e.Seconds = time.Since(start).Seconds()
	return e
}

// MaxResultBytes bounds an Event's Result and Error: one line, enough
// for a command's message or an endpoint's answer.
const MaxResultBytes = 1024

// result is what a call did, for its Event.
type result struct {
	text   string
	dryRun bool
}

func timeout[D ~int64](d D, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return time.Duration(d)
}

// bounded returns ctx bounded by d, and a cause naming the timeout: the
// error of a call cut by it says "timed out after 10s", not only
// "context deadline exceeded".
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("timed out after %s", d))
}
