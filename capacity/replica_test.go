package capacity_test

import (
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sloprober/sloprober/capacity"
	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
	"github.com/sloprober/sloprober/internal/testkit/rrproxy"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// replicas are simulator replicas behind a round-robin proxy (a gateway
// without retries: a request sent to a stopped replica fails with 502),
// each the pod of a fake Kubernetes API: deleting a pod stops its
// replica, and its "controller" starts it again restart later.
type replicas struct {
	t       *testing.T
	proxy   *rrproxy.Proxy
	urls    []string
	dead    string // a loopback URL nothing listens on
	restart time.Duration

	mu      sync.Mutex
	stopped []time.Time // when each deleted replica was stopped
	started []time.Time // and started again
}

func startReplicas(t *testing.T, n int, sim string, restart time.Duration) *replicas {
	r := &replicas{t: t, restart: restart}
	for range n {
		r.urls = append(r.urls, simtest.Start(t, sim).URL)
	}
	closed := httptest.NewServer(nil)
	r.dead = closed.URL
	closed.Close()
	r.proxy = rrproxy.New(r.urls...)
	srv := httptest.NewServer(r.proxy.Handler())
	t.Cleanup(func() {
		srv.Close()
		r.proxy.Close()
	})
	r.urls = append(r.urls, srv.URL) // the last one is the proxy's
	return r
}

func (r *replicas) url() string { return r.urls[len(r.urls)-1] }

// clientset is a fake Kubernetes API with one Running pod a replica
// (vllm-0 the oldest) whose pod deletions stop the replica.
func (r *replicas) clientset() *fake.Clientset {
	var objs []runtime.Object
	for i := range len(r.urls) - 1 {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vllm-%d", i), Namespace: "serving", UID: k8sUID(i),
				Labels: map[string]string{"app": "vllm"}, CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000+int64(i), 0))},
			Spec:   corev1.PodSpec{NodeName: fmt.Sprintf("gpu-node-%d", i)},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		var i int
		if _, err := fmt.Sscanf(name, "vllm-%d", &i); err != nil {
			return false, nil, nil
		}
		r.mu.Lock()
		r.stopped = append(r.stopped, time.Now())
		r.mu.Unlock()
		require.NoError(r.t, r.proxy.SetURL(i, r.dead))
		time.AfterFunc(r.restart, func() {
			require.NoError(r.t, r.proxy.SetURL(i, r.urls[i]))
			r.mu.Lock()
			r.started = append(r.started, time.Now())
			r.mu.Unlock()
		})
		return false, nil, nil // the fake's tracker deletes it too
	})
	return cs
}

func k8sUID(i int) types.UID { return types.UID(fmt.Sprintf("uid-%d", i)) }

// TestSoakReplicaLoss: a soak of three simulator replicas behind a
// round-robin proxy, whose fault plan deletes a pod through the
// Kubernetes API (a fake one, whose deletion stops that replica until its
// controller restarts it 4 s later), then takes a replica out of the
// proxy's rotation through its admin API (an http action) and puts it back.
// The pod deletion disrupts the soak (a third of the requests fail while
// the replica is gone) and it recovers after the restart; the replica
// taken out of rotation disrupts nothing, and the remaining two carry the
// load: the measured remaining capacity.
func TestSoakReplicaLoss(t *testing.T) {
	const restart = 4 * time.Second
	rs := startReplicas(t, 3, "slots: 0\nfixed: {ttft: 20ms, itl: 5ms}\n", restart)
	cfg, err := config.Load(fmt.Appendf(nil, `
global: {max_rate: 100, max_in_flight: 200}
targets: [{name: sim, url: "%[1]s/v1", model: sim-model, timeout: 10s, replicas: 3}]
scenarios:
  - {name: short, input_tokens: 16, output_tokens: 20, ignore_eos: true, objective: 0.95, slo: {ttft: 1s}}
tests:
  - name: soak
    kind: soak
    target: sim
    scenario: short
    rate: 30
    duration: 36s
    window: 12s
    drift: {p99_growth: 10, goodput_drop: 0.05}
    faults:
      - {at: 4s, for: 10s, kubernetes: {namespace: serving, selector: app=vllm}}
      - at: 22s
        for: 8s
        http: {url: "%[1]s/admin/backends/1/down", undo: {url: "%[1]s/admin/backends/1/up"}}
        replica_lost: true
`, rs.url()), false)
	require.NoError(t, err)
	rec, m := newManager(t, cfg)
	tc := cfg.Tests[0]
	s := &capacity.Soak{Manager: m, Recorder: rec, Test: tc, Load: cfg.TestLoad(tc), Logger: promslog.NewNopLogger(),
		Faults:       &faultaction.Runner{Kubernetes: rs.clientset()},
		LastCapacity: func(string) *capacity.LastCapacity { return &capacity.LastCapacity{RunID: "step-1", VerifiedRate: 45} },
	}
	run := s.Run(t.Context())
	require.NotEqual(t, capacity.VerdictAborted, run.Verdict, run.Reason)

	var kinds []string
	for _, e := range run.Soak.Faults {
		require.Empty(t, e.Error, "%+v", e)
		kinds = append(kinds, e.Kind+" "+e.Action)
	}
	require.Equal(t, []string{"kubernetes do", "http do", "http undo"}, kinds, "a pod deletion has nothing to undo")
	require.Contains(t, run.Soak.Faults[0].Result, "deleted pod vllm-0 on node gpu-node-0")

	require.Len(t, run.Soak.Impacts, 2)
	kill, out := run.Soak.Impacts[0], run.Soak.Impacts[1]
	require.True(t, kill.ReplicaLost, "a kubernetes action loses a replica by default")
	require.True(t, kill.Disrupted, "%+v", kill)
	require.Less(t, kill.Worst.Attainment, 0.9, "a third of a span's requests failed at worst")
	require.NotNil(t, kill.RecoverySeconds, "recovered after the restart: %+v", kill)
	// Recovered within a span or two of the restart, as the
	// replicas' own times say (not the configuration's).
	rs.mu.Lock()
	down := rs.started[0].Sub(rs.stopped[0]).Seconds()
	rs.mu.Unlock()
	require.GreaterOrEqual(t, *kill.RecoverySeconds, down-kill.SpanSeconds, "not back before the replica was")
	require.LessOrEqual(t, *kill.RecoverySeconds, down+kill.SpanSeconds, "back within a span of the restart")

	require.False(t, out.Disrupted, "two replicas carry 30 req/s of a simulator without slots: %+v", out)
	require.Equal(t, 0.0, *out.RecoverySeconds)
	require.Greater(t, out.During.Attainment, 0.95)

	// The pod deletion's failures were the proxy's 502s (it still sent a
	// third of the requests to the stopped replica): they measure
	// nothing of the two others. The replica taken out of rotation
	// measures them: they carried the load.
	require.True(t, kill.During.Failed > (kill.During.Counted-kill.During.Good)/2, "%+v", kill.During)
	require.Contains(t, kill.RemainingText(30, 0.95), "failed outright: requests still went to the lost replica")
	ol := run.Soak.OneLost
	require.NotNil(t, ol)
	require.Equal(t, 1, ol.Step, "the step not drowned in the proxy's errors")
	require.InDelta(t, 30, *ol.Computed, 1e-9, "45 req/s verified x 2/3")
	require.True(t, ol.Carried)
	require.Contains(t, ol.Measured, "carried 30 req/s with a replica lost")
}
