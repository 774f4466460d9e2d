package capacity

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/validity"
)

// TestNoCapacityProberBound: a sweep that found no capacity is the
// target's failure when a level the prober did not limit missed, even if
// the sweep then stopped at a prober-bound level; with no level measuring
// the target it concludes nothing.
func TestNoCapacityProberBound(t *testing.T) {
	missed := Level{Stage: "sweep", Concurrency: 1, Counted: 10,
		Scenarios: []ScenarioResult{{Scenario: "chat", Attainment: 0.5, Objective: 0.9}}}
	bound := Level{Stage: "sweep", Concurrency: 2, Met: true, Prober: &ProberHealth{Invalid: []string{validity.ReasonSchedulerLatency}}}
	reason := proberBoundReason(&bound)
	require.Equal(t, "prober-bound at 2 clients (scheduler_latency): add shards or CPU", reason)

	s := &Step{run: &Run{Stages: Stages{Sweep: []Level{missed, bound}}}}
	verdict, why := s.noCapacity(reason, reason)
	require.Equal(t, VerdictFail, verdict, why)
	require.Equal(t, "no sweep level met the objectives: chat attained 50.0% (objective 90.0%); the sweep ended early: "+reason, why)

	s = &Step{run: &Run{Stages: Stages{Sweep: []Level{bound}}}}
	verdict, why = s.noCapacity(reason, reason)
	require.Equal(t, VerdictInconclusive, verdict)
	require.Equal(t, "not concluded: no level measured the target validly: "+reason, why)

	s = &Step{run: &Run{Stages: Stages{Sweep: []Level{missed}}}}
	verdict, why = s.noCapacity("", "")
	require.Equal(t, VerdictFail, verdict)
	require.Equal(t, "no sweep level met the objectives: chat attained 50.0% (objective 90.0%)", why)
}
