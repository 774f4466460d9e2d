package capacity

import (
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/faultaction"
)

// seriesOf builds a series of 5 s buckets from per-bucket (counted, good)
// pairs.
func seriesOf(origin time.Time, buckets ...[2]int32) *series {
	s := &series{origin: origin, bucketD: maxImpactBucket}
	for _, b := range buckets {
		s.counted = append(s.counted, b[0])
		s.good = append(s.good, b[1])
		s.failed = append(s.failed, 0)
	}
	return s
}

// repeat is n buckets of counted requests, good of them good.
func repeat(n int, counted, good int32) [][2]int32 {
	out := make([][2]int32, n)
	for i := range out {
		out[i] = [2]int32{counted, good}
	}
	return out
}

func concat(parts ...[][2]int32) [][2]int32 {
	var out [][2]int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestImpactOf: a fault step is measured against the span before it; the
// recovery is the first of two 30 s spans in a row back within the
// allowance (the attainment before, less drift.goodput_drop of it).
func TestImpactOf(t *testing.T) {
	origin := time.Unix(1_800_000_000, 0)
	at := func(b int) time.Time { return origin.Add(time.Duration(b) * maxImpactBucket) }
	seconds := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name string
		// buckets of 5 s: (counted, good); the fault runs from bucket
		// start to bucket end.
		buckets    [][2]int32
		start, end int
		disrupted  bool
		recovery   *float64 // nil: not recovered
		during     [2]int   // counted, good during the fault
		worst      float64  // the worst span's attainment, when disrupted
	}{
		{
			// 10 requests a bucket, all good, throughout.
			name:    "not disrupted",
			buckets: repeat(36, 10, 10), start: 12, end: 18,
			recovery: seconds(0), during: [2]int{60, 60},
		},
		{
			// A replica of three lost for 30 s: a third of the
			// requests fail, then all are good again. The first span
			// from the fault's start is 66.7%; the spans overlapping
			// the fault stay below 95% until the one that starts at
			// its end (30 s after its start).
			name:    "lost a replica and recovered",
			buckets: concat(repeat(12, 9, 9), repeat(6, 9, 6), repeat(24, 9, 9)), start: 12, end: 18,
			disrupted: true, recovery: seconds(30), during: [2]int{54, 36}, worst: 36.0 / 54,
		},
		{
			// Failing from the fault on, to the soak's end.
			name:    "not recovered",
			buckets: concat(repeat(12, 10, 10), repeat(20, 10, 0)), start: 12, end: 18,
			disrupted: true, during: [2]int{60, 0}, worst: 0,
		},
		{
			// Recovered for one span only, then failing again: not
			// two spans in a row.
			name:    "relapse",
			buckets: concat(repeat(12, 10, 10), repeat(6, 10, 0), repeat(6, 10, 10), repeat(12, 10, 0)), start: 12, end: 18,
			disrupted: true, during: [2]int{60, 0}, worst: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := seriesOf(origin, tc.buckets...)
			fi := s.impactOf(0, "http", "take a replica out", at(tc.start), at(tc.end), impactSpans{last: len(tc.buckets)}, 0.05)
			require.Equal(t, tc.disrupted, fi.Disrupted)
			if tc.recovery == nil {
				require.Nil(t, fi.RecoverySeconds)
			} else {
				require.NotNil(t, fi.RecoverySeconds)
				require.InDelta(t, *tc.recovery, *fi.RecoverySeconds, 1e-9)
			}
			require.Equal(t, tc.during, [2]int{fi.During.Counted, fi.During.Good})
			require.NotNil(t, fi.Before)
			require.Equal(t, 30.0, fi.Before.Seconds, "as long as the fault")
			require.InDelta(t, 0.95, fi.Allowance, 1e-9, "100% before, less 5% of it")
			if tc.disrupted {
				require.InDelta(t, tc.worst, fi.Worst.Attainment, 1e-9)
			}
		})
	}
}

// TestReplicaLoss: the remaining capacity after a replica is lost, the
// computed one from the last verified capacity beside the measured one.
func TestReplicaLoss(t *testing.T) {
	origin := time.Unix(1_800_000_000, 0)
	s := seriesOf(origin, concat(repeat(12, 30, 30), repeat(12, 30, 30))...)
	fi := s.impactOf(1, "kubernetes", "delete a pod", origin.Add(60*time.Second), origin.Add(120*time.Second), impactSpans{last: 24}, 0.05)
	fi.ReplicaLost = true
	rl := replicaLoss([]FaultImpact{{Step: 0}, fi}, 3, 6, 0.95, &LastCapacity{RunID: "r1", VerifiedRate: 9})
	require.NotNil(t, rl)
	require.Equal(t, 1, rl.Step)
	require.InDelta(t, 6, *rl.Computed, 1e-9, "9 req/s x 2/3")
	require.True(t, rl.Carried, "360 of 360 good: [99.0, 100] is above 95%")
	require.Contains(t, rl.Measured, "carried 6 req/s with a replica lost (100.0% good [")
	require.InDelta(t, 6, rl.Goodput, 1e-9)

	// Half failing during it: what the remaining replicas deliver.
	s = seriesOf(origin, concat(repeat(12, 30, 30), repeat(12, 30, 15))...)
	fi = s.impactOf(0, "http", "take a replica out", origin.Add(60*time.Second), origin.Add(120*time.Second), impactSpans{last: 24}, 0.05)
	fi.ReplicaLost = true
	rl = replicaLoss([]FaultImpact{fi}, 1, 6, 0.95, &LastCapacity{RunID: "r1", VerifiedRate: 9})
	require.False(t, rl.Carried)
	require.Nil(t, rl.Computed, "one replica: nothing remains to compute")
	require.Contains(t, rl.Measured, "did not carry 6 req/s with a replica lost (50.0% good [")
	require.Contains(t, rl.Measured, "the remaining replicas carry less than that (their 3 good req/s under overload is not their capacity")

	// The same, the bad requests failing outright (502s from a gateway
	// that still sends to the lost replica): not the replicas' limit.
	for i := 12; i < 24; i++ {
		s.failed[i] = 15
	}
	fi = s.impactOf(0, "http", "take a replica out", origin.Add(60*time.Second), origin.Add(120*time.Second), impactSpans{last: 24}, 0.05)
	require.Equal(t, 180, fi.During.Failed)
	require.Contains(t, fi.RemainingText(6, 0.95), "but 180 of the 180 bad requests failed outright: requests still went to the lost replica (a gateway without health checks), so this does not measure")
	// Of two steps that lost a replica, the one not drowned in errors
	// measures the remaining capacity.
	fi.ReplicaLost = true
	clean := fi
	clean.Step, clean.During = 1, &ImpactSpan{Counted: 360, Good: 180, Goodput: 3, Attainment: 0.5, Interval: &Interval{Lower: 0.45, Upper: 0.55}}
	require.Equal(t, 1, replicaLoss([]FaultImpact{fi, clean}, 3, 6, 0.95, nil).Step)
	require.Equal(t, 0, replicaLoss([]FaultImpact{fi}, 3, 6, 0.95, nil).Step, "the only one")

	require.Nil(t, replicaLoss([]FaultImpact{{Step: 0}}, 3, 6, 0.95, nil), "no step lost a replica")
	require.Nil(t, replicaLoss([]FaultImpact{{Step: 0, ReplicaLost: true, DryRun: true}}, 3, 6, 0.95, nil), "a dry run took nothing away")
}

// TestImpactBucket: a twentieth of the window, within [100 ms, 5 s], and
// coarse enough for a week in maxSeriesBuckets.
func TestImpactBucket(t *testing.T) {
	require.Equal(t, 5*time.Second, impactBucket(10*time.Minute, time.Hour))
	require.Equal(t, time.Second, impactBucket(20*time.Second, time.Minute))
	require.Equal(t, 100*time.Millisecond, impactBucket(time.Second, 10*time.Second))
	week := 7 * 24 * time.Hour
	require.LessOrEqual(t, int(week/impactBucket(time.Second, week)), maxSeriesBuckets)
}

// TestImpactSpans: where a step is measured: its reference not before the
// step before it, a pod deletion judged up to its settle, and a step the
// soak ended on not measured.
func TestImpactSpans(t *testing.T) {
	origin := time.Unix(1_800_000_000, 0)
	at := func(b int) time.Time { return origin.Add(time.Duration(b) * maxImpactBucket) }

	// Step 0 failed everything in buckets 12-17; step 1 starts at 18,
	// where step 0 ended: its reference may not reach back into step 0
	// (notBefore 18), so it has none, and the allowance is of 100%.
	s := seriesOf(origin, concat(repeat(12, 10, 10), repeat(6, 10, 0), repeat(6, 10, 7), repeat(12, 10, 10))...)
	fi := s.impactOf(1, "http", "out", at(18), at(24), impactSpans{notBefore: 18, last: 36}, 0.05)
	require.Nil(t, fi.Before, "nothing between the step before and this one")
	require.InDelta(t, 0.95, fi.Allowance, 1e-9, "100% without a reference")
	require.True(t, fi.Disrupted, "70% is below 95%")
	// Without notBefore its reference would be step 0's failures (0%),
	// and nothing would count as disrupted.
	fi = s.impactOf(1, "http", "out", at(18), at(24), impactSpans{last: 36}, 0.05)
	require.Zero(t, fi.Before.Attainment)
	require.False(t, fi.Disrupted)

	// A pod deleted at bucket 12 for 5 s, whose failures begin 60 s
	// later (the grace period): judged up to settle, it is disrupted.
	s = seriesOf(origin, concat(repeat(24, 10, 10), repeat(6, 10, 6), repeat(12, 10, 10))...)
	fi = s.impactOf(0, "kubernetes", "delete a pod", at(12), at(13), impactSpans{settle: 36, last: 42}, 0.05)
	require.True(t, fi.Disrupted)
	require.NotNil(t, fi.RecoverySeconds)
	fi = s.impactOf(0, "kubernetes", "delete a pod", at(12), at(13), impactSpans{last: 42}, 0.05)
	require.False(t, fi.Disrupted, "judged only to its end and a span after it")

	// The soak stopped sending three buckets into the step: no span was
	// judged, so it was not measured (neither disrupted nor recovered).
	s = seriesOf(origin, concat(repeat(12, 10, 10), repeat(3, 10, 10), repeat(9, 0, 0))...)
	fi = s.impactOf(0, "http", "out", at(12), at(18), impactSpans{last: 15}, 0.05)
	require.Zero(t, fi.Spans)
	require.False(t, fi.Disrupted)
	require.Nil(t, fi.RecoverySeconds, "not measured, not \"not disrupted\"")
}

// TestFaultPlanRefusesExec: a plan with an exec step is refused when the
// soak starts unless the runner allows exec, not when the step comes.
func TestFaultPlanRefusesExec(t *testing.T) {
	steps := []config.FaultStep{
		{At: 0, For: model.Duration(time.Minute), Action: faultaction.Action{HTTP: &faultaction.HTTPAction{HTTPRequest: faultaction.HTTPRequest{URL: "http://127.0.0.1:1/x"}}}},
		{At: model.Duration(time.Hour), For: model.Duration(time.Minute), Action: faultaction.Action{Exec: &faultaction.ExecAction{Command: []string{"true"}}}},
	}
	_, err := newFaultPlan("http://127.0.0.1:1/v1", steps, nil, nil)
	require.ErrorIs(t, err, faultaction.ErrExecNotAllowed)
	require.ErrorContains(t, err, "step 1: exec fault actions are off: start sloprober with --test.allow-exec-faults")
	p, err := newFaultPlan("http://127.0.0.1:1/v1", steps, &faultaction.Runner{AllowExec: true}, nil)
	require.NoError(t, err)
	require.Empty(t, p.admin, "no step sets a simulator's faults")
}

// TestRedactedTest: a run states its fault plan without what may carry a
// secret: a URL's credentials and query, a body, a command's arguments.
func TestRedactedTest(t *testing.T) {
	tc := &config.TestConfig{Name: "soak", Faults: []config.FaultStep{
		{Action: faultaction.Action{HTTP: &faultaction.HTTPAction{
			HTTPRequest: faultaction.HTTPRequest{URL: "http://admin:hunter2@127.0.0.1:8001/out?token=s3cret", Body: `{"key":"s3cret"}`},
			Undo:        &faultaction.HTTPRequest{URL: "http://127.0.0.1:8001/in?token=s3cret"},
		}}},
		{Action: faultaction.Action{Exec: &faultaction.ExecAction{Command: []string{"/usr/bin/kubectl", "--token=s3cret", "scale"}}}},
	}}
	got := flowYAML(redactedTest(tc))
	require.NotContains(t, got, "s3cret")
	require.NotContains(t, got, "hunter2")
	require.Contains(t, got, "http://127.0.0.1:8001/out")
	require.Contains(t, got, "<16 bytes>")
	require.Contains(t, got, "<2 arguments>")
	require.Equal(t, "http://admin:hunter2@127.0.0.1:8001/out?token=s3cret", tc.Faults[0].HTTP.URL, "the configuration's own is left alone")
}
