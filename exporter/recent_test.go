package exporter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/prober"
)

// testKey is the load of the tests that drive observers by hand.
var testKey = config.Key{Target: "t", Scenario: "s", Test: "canary"}

// testLabels are the labels of testKey's series.
var testLabels = map[string]string{"target": "t", "scenario": "s", "test": "canary"}

// testSLOs are the SLOs finish measures its requests under; a LoadInfo of
// an observer it drives must carry them.
var testSLOs = []config.SLO{{Name: "ttft", Threshold: time.Second}}

// finish sends and finishes one request through obs, as the manager does:
// a good one is ok with three chunks, a bad one an HTTP 503 carrying a
// message.
func finish(obs prober.Observer, id string, good bool) {
	r := &prober.Result{RequestID: id, Sent: time.Unix(1700000000, 0), InputTokens: 8}
	if good {
		r.StatusCode, r.Done = 200, true
		r.Chunks = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}
	} else {
		r.StatusCode, r.ErrorBody = 503, "overloaded "+id
	}
	r.Outcome = prober.Classify(r)
	m := prober.Measure(r, testSLOs)
	obs.Scheduled()
	obs.Sent(time.Now(), 0)
	obs.Finished(r, &m)
}

// ids returns the request IDs of results, in order.
func ids(results []exporter.RecentResult) []string {
	out := []string{}
	for _, r := range results {
		out = append(out, r.RequestID)
	}
	return out
}

// TestRecentRings: Recent keeps, newest first, the last size results of a
// load and apart from them its last size failures, so a failure stays
// visible after many successes; its totals count every result.
func TestRecentRings(t *testing.T) {
	for _, tc := range []struct {
		name        string
		good        []bool // the results, oldest first; request i is "r<i>"
		all, failed []string
		total, ok   int64
	}{
		{name: "none", all: []string{}, failed: []string{}},
		{name: "fewer than size", good: []bool{true, false},
			all: []string{"r1", "r0"}, failed: []string{"r1"}, total: 2, ok: 1},
		{name: "wraps", good: []bool{true, true, true, true, true},
			all: []string{"r4", "r3", "r2"}, failed: []string{}, total: 5, ok: 5},
		{name: "a failure outlives successes", good: []bool{false, true, true, true, true, true},
			all: []string{"r5", "r4", "r3"}, failed: []string{"r0"}, total: 6, ok: 5},
		{name: "failures wrap too", good: []bool{false, false, false, false, true},
			all: []string{"r4", "r3", "r2"}, failed: []string{"r3", "r2", "r1"}, total: 5, ok: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recent := exporter.NewRecent(3)
			obs := recent.Observe(prober.LoadInfo{Key: testKey, Rate: 1, SLOs: testSLOs})
			for i, good := range tc.good {
				finish(obs, fmt.Sprintf("r%d", i), good)
			}
			all, failed, total, ok := recent.Snapshot(testKey)
			require.Equal(t, tc.all, ids(all))
			require.Equal(t, tc.failed, ids(failed))
			require.Equal(t, tc.total, total)
			require.Equal(t, tc.ok, ok)
		})
	}
}

// TestRecentViaFanout: composed with the metrics as cmd does, Recent
// receives every finished result of a load while the metrics count them;
// Update keeps its results, Forget drops them, a request that ends after
// its load was forgotten is not kept, and a load observed again starts
// empty.
func TestRecentViaFanout(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := exporter.NewMetrics(reg)
	recent := exporter.NewRecent(20)
	f := prober.Fanout(m, recent)
	info := prober.LoadInfo{Key: testKey, Rate: 2, Arrival: "poisson", SLOs: testSLOs}

	obs := f.Observe(info)
	finish(obs, "good", true)
	finish(obs, "bad", false)
	all, failed, total, good := recent.Snapshot(testKey)
	require.Equal(t, []string{"bad", "good"}, ids(all))
	require.Equal(t, []string{"bad"}, ids(failed))
	require.Equal(t, int64(2), total)
	require.Equal(t, int64(1), good)
	require.Equal(t, prober.OutcomeHTTP5xx, failed[0].Outcome)
	require.Equal(t, 503, failed[0].Status)
	require.Equal(t, "HTTP 503: overloaded bad", failed[0].Error)
	require.Equal(t, 30*time.Millisecond, all[1].E2E)
	require.Equal(t, 3, all[1].Tokens)
	require.True(t, all[1].Good)
	require.Equal(t, 1.0, value(t, reg, "sloprober_requests_finished_total", map[string]string{"scenario": "s", "outcome": "ok"}))
	require.Equal(t, 1.0, value(t, reg, "sloprober_requests_finished_total", map[string]string{"scenario": "s", "outcome": "http_5xx"}))
	require.Equal(t, 1.0, value(t, reg, "sloprober_requests_good_total", testLabels))

	info.Rate = 4
	f.Update(info)
	_, _, total, _ = recent.Snapshot(testKey)
	require.Equal(t, int64(2), total, "a load changed in place keeps its results")

	f.Forget(info)
	all, failed, total, good = recent.Snapshot(testKey)
	require.Empty(t, all)
	require.Empty(t, failed)
	require.Zero(t, total)
	require.Zero(t, good)
	finish(obs, "late", false)
	all, _, _, _ = recent.Snapshot(testKey)
	require.Empty(t, all, "a request ending after its load was forgotten is not kept")

	obs = f.Observe(info)
	all, _, total, _ = recent.Snapshot(testKey)
	require.Empty(t, all, "observed again, a load starts empty")
	require.Zero(t, total)
	finish(obs, "again", true)
	all, _, _, _ = recent.Snapshot(testKey)
	require.Equal(t, []string{"again"}, ids(all))
}
