package exporter

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sloprober/sloprober/prober"
)

// Identity exports who each target says it is: the model its replies
// name, their system_fingerprint, and the value of the target's
// identity_header. A model swapped silently behind an endpoint (a new
// checkpoint, another quantisation, a fallback model) changes the SLOs'
// meaning without failing a request; the bundled alert
// SloproberServedModelChanged fires when a new identity persists.
//
// It is a prober.ObserverFactory: every load of a target reports its ok
// replies, and the target's series go when its last load is forgotten.
type Identity struct {
	info    *prometheus.GaugeVec
	changes *prometheus.CounterVec

	mu      sync.Mutex
	targets map[string]*targetIdentity
}

// targetIdentity is a target's last stated identity and its loads.
type targetIdentity struct {
	loads   int
	current prober.ServedIdentity
	known   bool
}

var _ prober.ObserverFactory = (*Identity)(nil)

// NewIdentity creates the identity metrics and registers them with reg.
func NewIdentity(reg prometheus.Registerer) *Identity {
	i := &Identity{
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "target_served_info",
			Help: "Who a target's last ok reply said it is: its model, system_fingerprint and identity_header value (\"\" when not sent); 1."},
			[]string{"target", "model", "fingerprint", "header"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "target_identity_changes_total",
			Help: "Changes of a target's stated identity (model, fingerprint, identity header) between consecutive ok replies."},
			[]string{"target"}),
		targets: map[string]*targetIdentity{},
	}
	reg.MustRegister(i.info, i.changes)
	return i
}

// Observe implements prober.ObserverFactory.
func (i *Identity) Observe(info prober.LoadInfo) prober.Observer {
	i.mu.Lock()
	defer i.mu.Unlock()
	t := i.targets[info.Target]
	if t == nil {
		t = &targetIdentity{}
		i.targets[info.Target] = t
		i.changes.WithLabelValues(info.Target)
	}
	t.loads++
	return identityObserver{i: i, target: info.Target}
}

// Update implements prober.ObserverFactory.
func (i *Identity) Update(prober.LoadInfo) {}

// Forget implements prober.ObserverFactory: the target's series go with its
// last load.
func (i *Identity) Forget(info prober.LoadInfo) {
	i.mu.Lock()
	defer i.mu.Unlock()
	t := i.targets[info.Target]
	if t == nil {
		return
	}
	if t.loads--; t.loads > 0 {
		return
	}
	delete(i.targets, info.Target)
	i.info.DeletePartialMatch(prometheus.Labels{"target": info.Target})
	i.changes.DeleteLabelValues(info.Target)
}

// served records an ok reply's identity.
func (i *Identity) served(target string, id prober.ServedIdentity) {
	i.mu.Lock()
	defer i.mu.Unlock()
	t := i.targets[target]
	if t == nil || (t.known && t.current == id) {
		return
	}
	if t.known {
		i.changes.WithLabelValues(target).Inc()
		i.info.DeleteLabelValues(target, t.current.Model, t.current.Fingerprint, t.current.Header)
	}
	t.current, t.known = id, true
	i.info.WithLabelValues(target, id.Model, id.Fingerprint, id.Header).Set(1)
}

type identityObserver struct {
	i      *Identity
	target string
}

func (identityObserver) Scheduled()                    {}
func (identityObserver) Dropped(prober.DropReason)     {}
func (identityObserver) Sent(time.Time, time.Duration) {}

// Finished records the identity of an ok reply that said who it is.
func (o identityObserver) Finished(r *prober.Result, _ *prober.Measurement) {
	if r.Outcome != prober.OutcomeOK {
		return
	}
	if id := r.Identity(); id != (prober.ServedIdentity{}) {
		o.i.served(o.target, id)
	}
}
