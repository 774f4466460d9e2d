package capacity

import (
	"context"
	"fmt"
	"github.com/sloprober/sloprober/validity"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// sweepOf runs the closed-loop sweep, refinement and confirmation of a
// step test on synthetic levels (decisions by concurrency, as the
// search's synthetic levels: met, missed, allGood, leaningMissed; "a/b"
// is a when first measured, b when measured again) and returns the run
// with the sweep's bounds.
func sweepOf(t *testing.T, concurrency []int, refine int, levels map[int]string) (*Step, int, int) {
	t.Helper()
	tc := &config.TestConfig{Name: "s", Kind: config.TestStep, Sweep: config.SweepConfig{Concurrency: concurrency, Refine: refine}}
	s := &Step{Test: tc, MaxRate: 1000, run: &Run{}}
	calls := map[int]int{}
	s.closedSweep = func(_ context.Context, stage string, c int) (*Level, error) {
		decisions, ok := levels[c]
		require.True(t, ok, "no synthetic level at %d clients", c)
		// "a/b": a when first measured, b when measured again.
		all := strings.Split(decisions, "/")
		decision := all[min(calls[c], len(all)-1)]
		calls[c]++
		// As enough: a level short of requests is left so while a
		// higher sweep level follows.
		s.leftShort = decision == allGood && s.above
		l := syntheticLevel(decision, 30)
		l.Stage, l.Concurrency, l.CompletedRate = stage, c, float64(c)
		return l, nil
	}
	_, err := s.sweep(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.refine(t.Context()))
	require.NoError(t, s.confirm(t.Context()))
	good, bad := s.bounds()
	s.implied(good)
	return s, good, bad
}

// TestSweepImplied: a sweep level left undecided with every request good
// (a client or two of a slow target, too few requests to show the
// objective) neither ends the sweep nor breaks the run of levels below a
// higher one that met: attainment does not rise with load, and the
// higher level implies it. A level undecided below the objective counts
// against the levels above it, as a missed one.
func TestSweepImplied(t *testing.T) {
	for _, tc := range []struct {
		name        string
		concurrency []int
		refine      int
		levels      map[int]string
		// ran: the levels the sweep and refinement measured and how
		// each stands ("2 met", "1 implied by 4").
		ran       string
		good, bad int
	}{
		{
			name:        "the lowest level too short to decide, implied by the capacity's",
			concurrency: []int{1, 2, 4, 8, 16},
			levels:      map[int]string{1: allGood, 2: DecisionMet, 4: DecisionMet, 8: DecisionMissed, 16: DecisionMissed},
			ran:         "1 implied by 4, 2 met, 4 met, 8 missed, 16 missed",
			good:        4, bad: 8,
		},
		{
			name:        "two undecided levels in a row do not end the sweep",
			concurrency: []int{1, 2, 4, 8, 16},
			levels:      map[int]string{1: allGood, 2: allGood, 4: DecisionMet, 8: DecisionMissed, 16: DecisionMissed},
			ran:         "1 implied by 4, 2 implied by 4, 4 met, 8 missed, 16 missed",
			good:        4, bad: 8,
		},
		{
			name:        "an undecided level between met ones",
			concurrency: []int{1, 2, 4, 8, 16},
			levels:      map[int]string{1: DecisionMet, 2: allGood, 4: DecisionMet, 8: DecisionMissed, 16: DecisionMissed},
			ran:         "1 met, 2 implied by 4, 4 met, 8 missed, 16 missed",
			good:        4, bad: 8,
		},
		{
			name:        "the refinement above a level short of requests meets: it implies that level",
			concurrency: []int{2, 8, 16},
			refine:      1,
			levels:      map[int]string{2: DecisionMet, 8: allGood, 12: DecisionMet, 16: DecisionMissed},
			ran:         "2 met, 8 implied by 12, 12 met, 16 missed",
			good:        12, bad: 16,
		},
		{
			name:        "the refinement above a level short of requests misses: that level is measured again",
			concurrency: []int{2, 8, 16},
			refine:      1,
			levels:      map[int]string{2: DecisionMet, 8: allGood + "/" + DecisionMet, 12: DecisionMissed, 16: DecisionMissed},
			ran:         "2 met, 8 met (again), 12 missed, 16 missed",
			good:        8, bad: 12,
		},
		{
			name:        "measured again, still short of requests: the capacity stays below it",
			concurrency: []int{2, 8, 16},
			refine:      1,
			levels:      map[int]string{2: DecisionMet, 8: allGood, 12: DecisionMissed, 16: DecisionMissed},
			ran:         "2 met, 8 inconclusive (again), 12 missed, 16 missed",
			good:        2, bad: 8,
		},
		{
			name:        "the highest level short of requests below a miss is measured again, and met",
			concurrency: []int{1, 2, 4, 8, 16},
			levels:      map[int]string{1: allGood, 2: allGood, 4: allGood + "/" + DecisionMet, 8: DecisionMissed, 16: DecisionMissed},
			ran:         "1 implied by 4, 2 implied by 4, 4 met (again), 8 missed, 16 missed",
			good:        4, bad: 8,
		},
		{
			name:        "measured again, it missed: the next lower level is",
			concurrency: []int{1, 2, 4, 8, 16},
			levels:      map[int]string{1: allGood, 2: allGood + "/" + DecisionMet, 4: allGood + "/" + DecisionMissed, 8: DecisionMissed, 16: DecisionMissed},
			ran:         "1 implied by 2, 2 met (again), 4 missed (again), 8 missed, 16 missed",
			good:        2, bad: 4,
		},
		{
			name:        "measured again, still short of requests: no capacity",
			concurrency: []int{1, 2, 4, 8},
			levels:      map[int]string{1: allGood, 2: allGood, 4: DecisionMissed, 8: DecisionMissed},
			ran:         "1 inconclusive, 2 inconclusive (again), 4 missed, 8 missed",
			good:        0, bad: 1,
		},
		{
			name:        "the last level of the sweep had its extensions: not measured again",
			concurrency: []int{1, 2},
			levels:      map[int]string{1: DecisionMet, 2: allGood + "/" + DecisionMet},
			ran:         "1 met, 2 inconclusive",
			good:        1, bad: 2,
		},
		{
			name:        "a refinement level undecided with misses above a level short of requests: that level is measured again",
			concurrency: []int{2, 8, 16},
			refine:      1,
			levels:      map[int]string{2: allGood, 8: allGood + "/" + DecisionMet, 12: DecisionInconclusive, 16: DecisionMissed},
			ran:         "2 implied by 8, 8 met (again), 12 inconclusive, 16 missed",
			good:        8, bad: 12,
		},
		{
			name:        "a level undecided with misses at or above the objective neither stops the refinement nor is implied",
			concurrency: []int{1, 4, 8, 16},
			refine:      3,
			levels:      map[int]string{1: DecisionMet, 4: DecisionInconclusive, 8: DecisionMet, 12: DecisionMet, 13: DecisionMet, 14: DecisionMissed, 16: DecisionMissed},
			ran:         "1 met, 4 inconclusive, 8 met, 12 met, 13 met, 14 missed, 16 missed",
			good:        13, bad: 14,
		},
		{
			name:        "undecided below the objective counts against the levels above it",
			concurrency: []int{1, 2, 4, 8},
			levels:      map[int]string{1: leaningMissed, 2: DecisionMet, 4: DecisionMet, 8: DecisionMissed},
			ran:         "1 inconclusive, 2 met, 4 met, 8 missed",
			good:        0, bad: 1,
		},
		{
			name:        "two levels in a row against the objectives end the sweep",
			concurrency: []int{1, 2, 4, 8},
			levels:      map[int]string{1: DecisionMet, 2: leaningMissed, 4: DecisionMissed, 8: DecisionMet},
			ran:         "1 met, 2 inconclusive, 4 missed",
			good:        1, bad: 2,
		},
		{
			name:        "nothing met: no capacity, the lowest level undecided",
			concurrency: []int{1, 2, 4},
			levels:      map[int]string{1: allGood, 2: DecisionMissed, 4: DecisionMissed},
			ran:         "1 inconclusive (again), 2 missed, 4 missed",
			good:        0, bad: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, good, bad := sweepOf(t, tc.concurrency, tc.refine, tc.levels)
			var ran []string
			for _, l := range s.run.Sweep {
				if l.ImpliedBy > 0 {
					ran = append(ran, fmt.Sprintf("%d implied by %d", l.Concurrency, l.ImpliedBy))
					continue
				}
				again := ""
				if strings.Contains(l.Note, "measured again") {
					again = " (again)"
				}
				ran = append(ran, fmt.Sprintf("%d %s%s", l.Concurrency, l.Decided(), again))
			}
			require.Equal(t, tc.ran, strings.Join(ran, ", "))
			require.Equal(t, tc.good, good, "the capacity's level")
			require.Equal(t, tc.bad, bad, "the lowest level above it that did not meet")
			if good == 0 {
				verdict, reason := s.noCapacity("", "")
				require.Equal(t, VerdictInconclusive, verdict, reason)
				require.Contains(t, reason, "not concluded: no sweep level was shown to meet the objectives")
			}
		})
	}
}

// TestUndecidable: a level undecided for want of requests goes on only
// when the requests its batches draw by its last look, at the rate they
// came, can decide it; one with a miss always does.
func TestUndecidable(t *testing.T) {
	level := func(counted, good int) *Level {
		return &Level{Decision: DecisionInconclusive, Counted: counted,
			Scenarios: []ScenarioResult{{Counted: counted, Good: good, Objective: 0.95, Decision: DecisionInconclusive}}}
	}
	// 30 batches: the last look at 97.5%, q = 2.241, q^2 = 5.02. The
	// count to come is projected from c + 2 sqrt(c) + 1 so far.
	thirty := newLookPlan(time.Second, 30)
	for _, tc := range []struct {
		name        string
		l           *Level
		batches     int
		plan        lookPlan
		undecidable bool
	}{
		{"3 all good in 3 of 30 batches: up to 75 are [93.7%, 100%]", level(3, 3), 3, thirty, true},
		{"7 all good in 3 of 30: up to 133 are [96.4%, 100%]", level(7, 7), 3, thirty, false},
		{"40 all good in 20 of 30: up to 80 are [94.1%, 100%]", level(40, 40), 20, thirty, true},
		{"70 all good in 20 of 30: up to 132 are [96.3%, 100%]", level(70, 70), 20, thirty, false},
		// 20 batches (3 s, max_steady 60 s) at 85%: 1 arrival where 4
		// were due projects up to 27, [84.3%, 100%]; 2 up to 39.
		{"1 all good in 3 of 20, objective 85%", func() *Level { l := level(1, 1); l.Scenarios[0].Objective = 0.85; return l }(), 3, newLookPlan(3*time.Second, 20), true},
		{"2 all good in 3 of 20, objective 85%", func() *Level { l := level(2, 2); l.Scenarios[0].Objective = 0.85; return l }(), 3, newLookPlan(3*time.Second, 20), false},
		{"a miss: more requests may decide either way", level(23, 22), 3, thirty, false},
		{"3 all good, one at 80% of its SLO: a miss may come", func() *Level {
			l := level(3, 3)
			l.Scenarios[0].Interval = &Interval{N: 3, nearest: 0.8}
			return l
		}(), 3, thirty, false},
		{"3 all good, the nearest at 40% of its SLO", func() *Level {
			l := level(3, 3)
			l.Scenarios[0].Interval = &Interval{N: 3, nearest: 0.4}
			return l
		}(), 3, thirty, true},
		{"a level decided is not undecidable", &Level{Decision: DecisionMet, Counted: 23}, 3, thirty, false},
		{"nothing counted", level(0, 0), 3, thirty, false},
		{"a scenario decided and one short of requests", &Level{Decision: DecisionInconclusive, Counted: 300, Scenarios: []ScenarioResult{
			{Counted: 290, Good: 290, Objective: 0.95, Decision: DecisionMet},
			{Counted: 3, Good: 3, Objective: 0.95, Decision: DecisionInconclusive},
		}}, 3, thirty, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.undecidable, undecidable(tc.l, tc.batches, tc.plan))
		})
	}
}

// TestStoppedUndecided: a sweep level stopped before window.max_steady
// because its windows could not bring enough good requests (a 99%
// objective) says so and what would decide it; with no level decided,
// the verdict names the level nearest to a decision and what it needs,
// not the lowest.
func TestStoppedUndecided(t *testing.T) {
	l := func(c, counted int, td *ToDecide) Level {
		return Level{Concurrency: c, Counted: counted, Decision: DecisionInconclusive, Attainment: 1, Batches: 3, Looks: 1,
			WindowSeconds: 6, ToDecide: td, Interval: &Interval{Lower: 0.9, Upper: 1, N: counted}}
	}
	s := &Step{Test: &config.TestConfig{}, run: &Run{Stages: Stages{Sweep: []Level{
		l(2, 16, &ToDecide{Requests: 480, Seconds: 180, Early: true}),
		l(16, 65, &ToDecide{Requests: 420, Seconds: 38, Early: true}),
		l(32, 66, nil),
	}}}}
	s.run.Sweep[2].Decision, s.run.Sweep[2].Attainment = DecisionMissed, 0
	verdict, reason := s.noCapacity("", "")
	require.Equal(t, VerdictInconclusive, verdict)
	require.Equal(t, "not concluded: no sweep level was shown to meet the objectives within window.max_steady: 16 clients attained 100.0% [90.0, 100.0] of 65; about 420 more requests (~38s at this rate) would decide it", reason)
	require.Contains(t, s.run.Sweep[1].Notes(false), "stopped undecided after 6 s: about 420 more requests (~38s at this rate) would decide it, more than window.max_steady holds")
}

// TestFailedNamed: requests that failed (a server's 429s, resets) are
// named with their kinds in the level's notes and in a miss's reason,
// not left to read as slow tokens.
func TestFailedNamed(t *testing.T) {
	l := &Level{Counted: 10, Outcomes: map[prober.Outcome]int{prober.OutcomeOK: 6, "http_429": 3, "protocol_error": 1},
		Scenarios: []ScenarioResult{{Scenario: "chat", Counted: 10, Good: 6, Attainment: 0.6, Objective: 0.95,
			SLOAttainment: map[string]float64{"ttft": 0.6}}}}
	require.Contains(t, l.Notes(false), "4 of 10 failed (http_429 3, protocol_error 1)")
	require.Equal(t, "chat attained 60.0% (objective 95.0%), ttft 60.0%; 4 of 10 failed (http_429 3, protocol_error 1)", missedObjectives(l))
}

// TestDroppedNamed: a level's drops say what they were dropped for; a
// drop at max_in_flight is the load's cap, a late one the prober's.
func TestDroppedNamed(t *testing.T) {
	for _, tc := range []struct {
		dropped map[string]int
		want    string
	}{
		{nil, ""},
		{map[string]int{"max_in_flight": 10}, "dropped 10 (max_in_flight)"},
		{map[string]int{"late": 2, "max_in_flight": 10}, "dropped 12 (max_in_flight 10, late 2)"},
		{map[string]int{"something_new": 3}, "dropped 3"},
	} {
		require.Equal(t, tc.want, droppedText(&Level{Dropped: tc.dropped}))
	}
}

// TestSweepPastIdleClients: a closed-loop level that met while its
// clients waited on a late prober (set aside: lowerBound) does not end
// the sweep: the levels above it are measured (once each, measure), a
// valid one above it can be the capacity, and what they completed raises
// the peak the search bisects to. One the prober limited otherwise (its
// CPUs saturated) ends it, and is named; so does max_rate.
func TestSweepPastIdleClients(t *testing.T) {
	const (
		valid     = ""
		idle      = "busy host: ..."
		saturated = diagnosisSaturated + ": ..."
	)
	for _, tc := range []struct {
		name           string
		levels         map[int]string // the prober's diagnosis of each level
		maxRate        float64
		ran            []int
		good           int
		peak           float64
		passed, capped string
	}{
		{"clients idle on a busy host", map[int]string{8: valid, 16: idle, 32: valid, 64: idle}, 1000,
			[]int{8, 16, 32, 64}, 32, 64, "prober-bound at 16 clients", ""},
		{"a saturated prober", map[int]string{8: valid, 16: saturated, 32: valid, 64: valid}, 1000,
			[]int{8, 16}, 8, 16, "", "prober-bound at 16 clients"},
		{"idle, then saturated", map[int]string{8: valid, 16: idle, 32: saturated, 64: valid}, 1000,
			[]int{8, 16, 32}, 8, 32, "prober-bound at 16 clients", "prober-bound at 32 clients"},
		{"idle at max_rate", map[int]string{8: valid, 16: valid, 32: idle, 64: valid}, 33,
			[]int{8, 16, 32}, 16, 32, "prober-bound at 32 clients", "capped by max_rate 33 req/s at 32 clients"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tcfg := &config.TestConfig{Name: "s", Kind: config.TestStep, Retries: 2, Sweep: config.SweepConfig{Concurrency: []int{8, 16, 32, 64}}}
			s := &Step{Test: tcfg, MaxRate: tc.maxRate, run: &Run{}}
			s.closedSweep = func(_ context.Context, stage string, c int) (*Level, error) {
				l := syntheticLevel(DecisionMet, 300)
				l.Stage, l.Concurrency, l.CompletedRate = stage, c, float64(c)
				if d := tc.levels[c]; d != valid {
					// Reads up to 30 ms late in an E2E median of 160 ms.
					l.E2E.P50 = 0.16
					l.Prober.ReadDelayP99, l.Prober.Rule = 0.03, ruleChanged
					l.Prober.Invalid, l.Prober.Diagnosis = []string{"gc_pause"}, d
				}
				return l, nil
			}
			end, err := s.sweep(t.Context())
			require.NoError(t, err)
			var ran []int
			for _, l := range s.run.Sweep {
				ran = append(ran, l.Concurrency)
			}
			require.Equal(t, tc.ran, ran)
			require.Equal(t, tc.peak, s.peak())
			good, _ := s.bounds()
			require.Equal(t, tc.good, good, "the capacity level: one the prober measured validly")
			require.Equal(t, tc.passed != "", s.lowerBounds, "the sweep levels after it measured once")
			if tc.passed == "" {
				require.Empty(t, end.passed)
			} else {
				require.Contains(t, end.passed, tc.passed)
			}
			if tc.capped == "" {
				require.Empty(t, end.capped, "the sweep did not end early")
			} else {
				require.Contains(t, end.capped, tc.capped)
			}
			// A second pass (cache: both) starts afresh.
			s.run.Sweep, tc.levels = nil, map[int]string{}
			_, err = s.sweep(t.Context())
			require.NoError(t, err)
			require.False(t, s.lowerBounds)
		})
	}
}

// TestRefinePastIdleClients: refinement does not measure again a level
// the sweep went on past (its clients idle on a late prober, measured
// again it would be limited again): 1 client met, 2 set aside, 4 missed.
func TestRefinePastIdleClients(t *testing.T) {
	tcfg := &config.TestConfig{Name: "s", Kind: config.TestStep, Sweep: config.SweepConfig{Concurrency: []int{1, 2, 4}, Refine: 2}}
	s := &Step{Test: tcfg, MaxRate: 1000, run: &Run{}}
	s.closedSweep = func(_ context.Context, stage string, c int) (*Level, error) {
		decision := DecisionMet
		if c == 4 {
			decision = DecisionMissed
		}
		l := syntheticLevel(decision, 300)
		l.Stage, l.Concurrency, l.CompletedRate = stage, c, float64(c)
		if c == 2 {
			l.E2E.P50 = 0.16
			l.Prober.ReadDelayP99, l.Prober.Rule = 0.03, ruleChanged
			l.Prober.Invalid, l.Prober.Diagnosis = []string{"gc_pause"}, "busy host: ..."
		}
		return l, nil
	}
	_, err := s.sweep(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.refine(t.Context()))
	require.Len(t, s.run.Sweep, 3, "2 clients not measured again")
	good, bad := s.bounds()
	require.Equal(t, []int{1, 4}, []int{good, bad})
}

// TestNotesRead: a level's notes are a clause a fact, the decision first:
// an implied level says what implies it and why once (not "too few
// requests to decide; implied by ...; (few: under window.min_requests)"),
// as do runs stored before the note was one clause; a prober-bound level
// says what held the prober as measured, not the thresholds' keys.
func TestNotesRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level Level
		want  []string
	}{
		{"implied sweep level", Level{Concurrency: 2, ImpliedBy: 16, Insufficient: true},
			[]string{"implied by 16 clients, which met: too few requests to decide alone"}},
		{"implied verify level", Level{OfferedRate: 7.83, Insufficient: true, Note: impliedNote("8.92 req/s")},
			[]string{"implied by 8.92 req/s, which met: too few requests to decide alone"}},
		{"implied verify level, stored in two clauses", Level{OfferedRate: 7.83, Insufficient: true, Note: "too few requests to decide; implied by 8.92 req/s, which met"},
			[]string{"implied by 8.92 req/s, which met: too few requests to decide alone"}},
		{"short, not implied", Level{Concurrency: 1, Insufficient: true},
			[]string{"few requests: under window.min_requests"}},
		{"not used first", Level{Concurrency: 4, Insufficient: true, Note: "not used: prober-bound (send lag P99 49 ms, reads up to 12 ms late, busy host): the sends came in bunches",
			Remeasured: []string{"prober-bound: a", "prober-bound: b"}},
			[]string{"not used: prober-bound (send lag P99 49 ms, reads up to 12 ms late, busy host): the sends came in bunches", "measured 3 times (prober-bound)", "few requests: under window.min_requests"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.level.Notes(false))
		})
	}

	p := &ProberHealth{Sends: 400, LagP99: 0.049, SchedulerP99: 0.021, CPUShare: 0.12, GOMAXPROCS: 2, GCPauseP99: 0.031, ReadDelayMax: 0.012,
		Diagnosis: diagnosisBusyHost + ": sloprober used 12% of its 2 CPUs while it was late to run"}
	require.Equal(t, "send lag P99 49 ms, scheduler latency P99 21 ms, busy host", boundBy(p, []string{validity.ReasonSendLag, validity.ReasonSchedulerLatency}, ""))
	require.Equal(t, "send lag P99 49 ms, reads up to 12 ms late, busy host", boundBy(p, []string{validity.ReasonSendLag}, lateness(&ProberHealth{Sends: 400, LagP99: 0.049, ReadDelayMax: 0.012})))
	require.Equal(t, "CPU 12% of 2 cores, GC pause P99 31 ms, busy host", boundBy(p, []string{validity.ReasonCPU, validity.ReasonGCPause}, ""))
}
