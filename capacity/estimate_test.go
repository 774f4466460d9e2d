package capacity

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
)

// profileTest is a profile's step test, as `init` writes it, with its
// defaults applied.
func profileTest(t *testing.T, profile string) *config.TestConfig {
	t.Helper()
	cfg, err := config.Load([]byte(`
targets: [{name: t, url: "http://127.0.0.1:1/v1", model: m}]
scenarios: [{name: s, input_tokens: 16, output_tokens: 16, objective: 0.95, slo: {ttft: 1s}}]
tests:
  - name: capacity
    kind: step
    target: t
    scenario: s
`+config.StepProfile(profile)), false)
	require.NoError(t, err)
	return cfg.Tests[0]
}

// TestEstimateStep: a typical run of the first-look profile: 10 baseline
// requests of 2 s, five sweep levels of 5 s + 35% of 60 s + 2 s, four
// open-loop levels of 5 s + 90% of 60 s + 2 s, a burst of 5 s + 10 s + a
// third of 30 s: 20 s + 140 s + 244 s + 25 s = 7m9s.
func TestEstimateStep(t *testing.T) {
	target := &config.TargetConfig{Timeout: model.Duration(2 * time.Minute)} // the default
	e := EstimateStep(profileTest(t, config.ProfileFirstLook), target)
	require.Equal(t, 7*time.Minute+9*time.Second, e.Typical)
	// At its longest (longest), with the default timeout of 2 minutes:
	// each level 5 s + 60 s and twice 2m5s (its last look's wait and
	// its drain), three times, and two waits of 20 s for the prober:
	// 985 s; the baseline 10 requests of up to 2m5s and a drain, three
	// times, two waits; 9 sweep levels (5, 4 measured again to confirm),
	// 5 of the search (4, 0.6x measured again), the burst 5 s + 10 s, 30
	// s and a timeout to drain its backlog, a drain.
	level := 3*(65+250)*time.Second + 2*20*time.Second
	baseline := 3*(10*125+125)*time.Second + 2*20*time.Second
	require.Equal(t, baseline+9*level+5*level+(15+30+120+125)*time.Second, e.Most)
	require.Equal(t, "about 7m10s (up to 5h10m if every level takes its longest)", e.String())
	for d, want := range map[time.Duration]string{95 * time.Second: "1m40s", 21*time.Minute + 20*time.Second: "21m", 65 * time.Minute: "1h5m", 151 * time.Minute: "2h30m"} {
		require.Equal(t, want, roughly(d))
	}
	// A forecast's peak and average: two more open-loop levels.
	f := EstimateStep(profileTest(t, config.ProfileFirstLook), &config.TargetConfig{Forecast: &config.ForecastConfig{PeakRate: 6, AverageRate: 3}})
	require.Equal(t, e.Typical+2*(5+54+2)*time.Second, f.Typical)
	sign := EstimateStep(profileTest(t, config.ProfileSign), target)
	require.Greater(t, sign.Typical, 3*e.Typical, "a number to sign takes several times a first look")
	// Of the sign profile's 8 open-loop levels, the search typically
	// runs 5: 0.5x, 0.8x, then bisection from 0.8x to the closed loop
	// in steps down to 3% (ten runs used 4 to 7).
	require.Equal(t, 5, typicalVerifyLevels(&profileTest(t, config.ProfileSign).Verify))
	require.Equal(t, 4, typicalVerifyLevels(&profileTest(t, config.ProfileFirstLook).Verify))
	// Its open-loop levels take up to 12 minutes (verify.max_steady),
	// its sweep's 6: 20 baseline requests of 2 s, 7 sweep levels of 30 s
	// + 35% of 6m + 2 s, 5 open-loop levels of 30 s + 90% of 12m + 2 s,
	// a burst of 30 s + 10 s + 10 s.
	require.InDelta(t, (40*time.Second + 7*(32*time.Second+126*time.Second) + 5*(32*time.Second+648*time.Second) + 50*time.Second).Seconds(), sign.Typical.Seconds(), 1e-6)
	// At its longest the search stops at verify.max_duration (1h) and
	// its last level's tail (twice 2m5s), where its 9 levels of 51m
	// would take 7h39m; the sweep's 15 levels take up to 3 x (30 s + 6m
	// + 2 x 2m5s) + 2 x 30 s = 33m each, the baseline's 20 requests 2h12m.
	require.Equal(t, "about 1h17m (up to 11h40m if every level takes its longest)", sign.String())
	// A shorter one caps the typical search too: 30 minutes of its
	// 56m40s.
	short := profileTest(t, config.ProfileSign)
	short.Verify.MaxDuration = model.Duration(30 * time.Minute)
	require.InDelta(t, (sign.Typical - 5*680*time.Second + 30*time.Minute).Seconds(), EstimateStep(short, &config.TargetConfig{}).Typical.Seconds(), 1e-6)
	// Without verify.max_steady the search's levels take the sweep's.
	plain := profileTest(t, config.ProfileSign)
	plain.Verify.MaxSteady = 0
	require.InDelta(t, (sign.Typical - 5*324*time.Second).Seconds(), EstimateStep(plain, &config.TargetConfig{}).Typical.Seconds(), 1e-6)
}

// TestTimeLeft: the time left learns from the levels that ran, each
// stage's blended with its estimate before it as if that were two
// levels.
func TestTimeLeft(t *testing.T) {
	s := &Step{Test: profileTest(t, config.ProfileFirstLook)}
	// Before anything ran: the typical run less nothing.
	require.Equal(t, EstimateStep(s.Test, &s.Load.Target).Typical, s.timeLeft("baseline"))
	// The sweep done (five levels of 20 s), nothing known of the
	// target's speed: 0.6x and 0.8x are expected at 90% of their 60 s
	// (61 s), as the two bisection levels are; and the burst.
	s.took = map[string][]time.Duration{"baseline": {20 * time.Second}, "sweep": {20 * time.Second, 20 * time.Second, 20 * time.Second, 20 * time.Second, 20 * time.Second}}
	near := 61 * time.Second
	require.Equal(t, 4*near+25*time.Second, s.timeLeft("verify"))
	// The sweep completed 11 req/s: the configured rates, at about 7.7
	// req/s, are expected to decide in 200 requests, 26 s, not 54; the
	// bisection levels, next to the objective, take what they take
	// whatever the speed.
	s.run = &Run{Stages: Stages{Sweep: []Level{{Concurrency: 8, CompletedRate: 11}}}}
	need := 200 / (0.7 * 11.0)
	prior := 5*time.Second + time.Duration(need*float64(time.Second)) + 2*time.Second
	require.Equal(t, 2*prior+2*near+25*time.Second, s.timeLeft("verify"))
	// Measuring 0.6x again after 0.8x did not verify: one level more,
	// nearer the objective than its first measurement said, at 40% of
	// its 60 s (24 s, its warm-up and drain: 31 s).
	s.took["verify"] = []time.Duration{15 * time.Second, 60 * time.Second}
	s.measuringAgain = true
	require.Equal(t, 2*near+31*time.Second+25*time.Second, s.timeLeft("verify"))
	s.measuringAgain = false
	s.run = nil
	// Both configured rates ran (0.6x stopped after 15 s, 0.8x took
	// 60 s) and one bisection level, 40 s: the bisection level left is
	// the one that ran blended with its estimate before it as if that
	// were two levels, (2 x 61 + 40) / 3 s; the configured rates' times
	// teach it nothing (0.5x of a slow target took 2m24s where the
	// levels next to its objective took 12 minutes).
	s.took["verify"] = []time.Duration{15 * time.Second, 60 * time.Second}
	s.took["bisection"] = []time.Duration{40 * time.Second}
	require.Equal(t, 1*(2*near+40*time.Second)/3+25*time.Second, s.timeLeft("verify"))
	// A cache: both test's cold pass: the production pass after it is
	// about as long again.
	base := s.timeLeft("verify")
	s.passesLeft, s.passStart = 1, time.Now().Add(-4*time.Minute)
	left := s.timeLeft("verify")
	require.InDelta(t, (4*time.Minute + 2*base).Seconds(), left.Seconds(), 1)
}

// TestTimeMost: the most left, if every level left takes its longest, is
// EstimateStep's Most before anything ran, counts only the levels left
// (the one starting whatever ran), and in the sign profile's search is
// what is left of its hour, its last level's tail and the burst.
func TestTimeMost(t *testing.T) {
	now := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	target := config.TargetConfig{Timeout: model.Duration(2 * time.Minute)}
	s := &Step{Test: profileTest(t, config.ProfileSign), Load: config.LoadSpec{Target: target}, now: func() time.Time { return now }}
	e := EstimateStep(s.Test, &target)
	require.Equal(t, e.Most, s.timeMost("baseline"))
	// Three sweep levels ran: three of its 15 fewer, at up to 33m each,
	// and no baseline (3 x (20 x 2m5s + 2m5s) + 2 x 30 s).
	s.took = map[string][]time.Duration{"baseline": {time.Minute}, "sweep": {time.Minute, time.Minute, time.Minute}}
	level, baseline := 33*time.Minute, 3*21*125*time.Second+time.Minute
	require.Equal(t, e.Most-baseline-3*level, s.timeMost("sweep"))
	// Past its 15 (confirmations and prober's retries counted apart),
	// the one starting.
	s.took["sweep"] = make([]time.Duration, 20)
	require.Equal(t, e.Most-baseline-14*level, s.timeMost("sweep"))
	// The search 20 minutes into its hour: 40 minutes, its last level's
	// tail (twice 2m5s), the burst (30 s + 10 s, 30 s and 2 minutes to
	// drain its backlog, a drain of 2m5s): 49m25s.
	s.searchStart = now.Add(-20 * time.Minute)
	burst := 40*time.Second + 30*time.Second + 2*time.Minute + 125*time.Second
	require.Equal(t, 40*time.Minute+250*time.Second+burst, s.timeMost("verify"))
	require.Equal(t, burst, s.timeMost("burst"))
	// The progress says both, the most rounded up.
	p := Progress{Remaining: 13*time.Minute + 37*time.Second, RemainingMax: s.timeMost("verify")}
	require.Equal(t, "about 13m37s left (up to 50m)", p.RemainingText())
	require.Equal(t, "about 5m0s left", Progress{Remaining: 5 * time.Minute, RemainingMax: 5 * time.Minute}.RemainingText(), "no bound above the time left")
	require.Equal(t, "48m", roughlyUp(47*time.Minute+time.Second))
	require.Equal(t, "10m", roughlyUp(9*time.Minute+51*time.Second))
	require.Equal(t, "2h20m", roughlyUp(2*time.Hour+11*time.Minute))
}

// TestTimeLeftBisection: once the configured rates have run, the
// bisection levels left come from the search's bracket, not a typical
// run's count: log2 of the gap over the resolution and a half, at least
// the one starting, in the search's own bracket and resolution. The sign
// profile (3% of the capacity level's 5.6 req/s) with a closed loop of
// 5.6 req/s, 2.8 req/s met and 4.98 missed: log2(2.18 / 0.168) + 1/2
// = 4.2 levels (a typical run's count said 3, then 1, for runs that went
// on to 7 and 8 levels); with 4.01 undecided below its objective the
// bracket is 1.21 req/s, 3.35; over the resolution by less than twice,
// the one starting; within it, none.
func TestTimeLeftBisection(t *testing.T) {
	s := &Step{Test: profileTest(t, config.ProfileSign)}
	measured := &ProberHealth{}
	level := func(rate float64, decision string, attainment float64) Level {
		return Level{Stage: "verify", OfferedRate: rate, Decision: decision, Attainment: attainment, Prober: measured,
			Scenarios: []ScenarioResult{{Counted: 100, Attainment: attainment, Objective: 0.95, Decision: decision}}}
	}
	s.run = &Run{Stages: Stages{Sweep: []Level{{Concurrency: 8, CompletedRate: 5.6}}, Capacity: &Capacity{Concurrency: 8, Rate: 5.6},
		Verify: []Level{level(2.8, DecisionMet, 1), level(4.98, DecisionMissed, 0.72)}}}
	n, ok := s.bisectionLeft()
	require.True(t, ok)
	require.InDelta(t, math.Log2(2.18/0.168)+0.5, n, 1e-9)
	// Nothing above the verified rate yet, the closed loop short of its
	// knee: the search bisects up to its peak first, as bisectionLeft.
	s.MaxRate = math.Inf(1)
	s.run.Verify[1] = level(4, DecisionMet, 0.99)
	n, _ = s.bisectionLeft()
	require.InDelta(t, math.Log2(1.6/0.168)+0.5, n, 1e-9)
	top, between := s.bracketTop(&s.run.Verify[1], nil)
	require.Equal(t, 5.6, top)
	require.Equal(t, "the closed loop's peak 5.6 req/s (its sweep reached no knee)", between)
	s.run.Verify[1] = level(4.98, DecisionMissed, 0.72)
	// Nothing verified: the typical count stands.
	s.run.Verify[0].Decision = DecisionInconclusive
	_, ok = s.bisectionLeft()
	require.False(t, ok, "a bracket from 0")
	s.run.Verify[0].Decision = DecisionMet
	s.run.Verify = append(s.run.Verify, level(4.01, DecisionInconclusive, 0.94))
	n, _ = s.bisectionLeft()
	require.InDelta(t, math.Log2(1.21/0.168)+0.5, n, 1e-9)
	s.run.Verify = append(s.run.Verify, level(3.25, DecisionMet, 0.99), level(3.6, DecisionMet, 0.99), level(3.8, DecisionMet, 0.99))
	n, _ = s.bisectionLeft()
	require.Equal(t, 1.0, n, "3.8 to 4.01, 0.21 over 0.168: the one starting")
	s.run.Verify = append(s.run.Verify, level(3.9, DecisionMet, 0.99))
	n, _ = s.bisectionLeft()
	require.Zero(t, n, "3.9 to 4.01 is within the resolution")
	// The time left is those levels at a bisection level's prior, and
	// the burst: 90% of the search's 12 minutes (verify.max_steady),
	// whatever the configured rates took.
	s.run.Verify = s.run.Verify[:2]
	bisection := time.Duration(s.Test.Window.Warmup) + time.Duration(0.9*float64(12*time.Minute)) + drainAllowance
	s.took = map[string][]time.Duration{"verify": {time.Minute, 2 * time.Minute}}
	require.InDelta(t, ((math.Log2(2.18/0.168)+0.5)*bisection.Seconds() + burstTime(s.Test).Seconds()), s.timeLeft("verify").Seconds(), 1e-6)
}

// TestProfileMaxInFlight: each profile's target is written with a
// max_in_flight of twice its sweep's most clients (at least the
// default), so that its open-loop levels near the capacity are not cut
// by the cap.
func TestProfileMaxInFlight(t *testing.T) {
	for _, p := range config.Profiles {
		most := slices.Max(profileTest(t, p).Sweep.Concurrency)
		require.Equal(t, max(2*most, config.DefaultTargetConfig.MaxInFlight), config.ProfileMaxInFlight(p), p)
	}
	require.Equal(t, 128, config.ProfileMaxInFlight(config.ProfileSign))
	require.Empty(t, config.StepProfile("soak"))
}

// TestTimeLeftMaxDuration: the search's time left is at most what is
// left of verify.max_duration: before it starts, all of it; 25 minutes
// into a 30-minute search, 5 minutes (and the burst after it).
func TestTimeLeftMaxDuration(t *testing.T) {
	test := profileTest(t, config.ProfileSign)
	test.Verify.MaxDuration = model.Duration(30 * time.Minute)
	now := time.Unix(1_700_000_000, 0)
	s := &Step{Test: test, now: func() time.Time { return now }, run: &Run{}}
	require.Equal(t, EstimateStep(test, &s.Load.Target).Typical, s.timeLeft("baseline"))
	s.searchStart = now.Add(-25 * time.Minute)
	require.Equal(t, 5*time.Minute+burstTime(test), s.timeLeft("verify"))
	s.searchStart = now.Add(-31 * time.Minute)
	require.Equal(t, burstTime(test), s.timeLeft("verify"), "spent: the burst is left")
}

// TestTakePassSearchStart: a cache: both test's production pass has a
// verify.max_duration of its own; the cold pass's start would leave its
// time left no search at all.
func TestTakePassSearchStart(t *testing.T) {
	test := profileTest(t, config.ProfileSign)
	now := time.Unix(1_700_000_000, 0)
	s := &Step{Test: test, now: func() time.Time { return now }, run: &Run{}, searchStart: now.Add(-2 * time.Hour)}
	s.takePass(config.CacheCold, VerdictPass, "")
	left, ok := s.searchLeft()
	require.True(t, ok)
	require.Equal(t, time.Hour, left)
}

// TestBisectionTime: the bisection's path is expected from its bracket's
// ends. Far from the objective (every request of 3,405 good at 94.6
// req/s, 98.9% of 108,779 at 151, worth 637 and 374) its midpoint decides
// at its second look, and the next, nearer, a few looks later; next to it (99.6% of 744 at
// 3.44 req/s, 95.4% of 2,729 at 3.79) no level decides sooner than a
// bisection level is expected to take, and each is taken at that; with
// nothing verified the bracket says nothing.
func TestBisectionTime(t *testing.T) {
	s := &Step{Test: profileTest(t, config.ProfileSign), MaxRate: math.Inf(1)}
	measured := &ProberHealth{}
	level := func(rate float64, decision string, attainment float64, n int, neff float64) Level {
		return Level{Stage: "verify", IntendedRate: rate, OfferedRate: rate, Decision: decision, Attainment: attainment, Prober: measured,
			Interval:  &Interval{N: n, NEff: neff},
			Scenarios: []ScenarioResult{{Counted: n, Attainment: attainment, Objective: 0.95, Decision: decision}}}
	}
	s.run = &Run{Stages: Stages{Sweep: []Level{{Concurrency: 32, CompletedRate: 199}}, Capacity: &Capacity{Concurrency: 32, Rate: 199},
		Verify: []Level{level(94.6, DecisionMet, 1, 3405, 637), level(151, DecisionInconclusive, 0.989, 108779, 374)}}}
	typical := 11 * time.Minute
	plan := s.lookPlan("verify", false)
	first := time.Duration(s.Test.Window.Warmup) + time.Duration(plan.looks[1])*plan.batch + drainAllowance
	d, ok := s.bisectionTime(1, typical)
	require.True(t, ok)
	require.Equal(t, first, d, "123 req/s, far from the objective, at its second look (a minute)")
	two, _ := s.bisectionTime(2, typical)
	second := two - first
	require.Greater(t, second, first, "137 req/s, nearer, later")
	require.Less(t, second, typical, "and decided before its most")
	d, _ = s.bisectionTime(1.5, typical)
	require.Equal(t, first+second/2, d, "half a level at half its time")

	// Nothing above the verified rate: the bracket's top is the closed
	// loop's throughput, taken as missing half, its requests worth a
	// hundredth of the bottom's; so is a level above it with no
	// interval, at its rate.
	verified := s.run.Verify[0]
	s.run.Verify = []Level{verified}
	d, ok = s.bisectionTime(1, typical)
	require.True(t, ok)
	require.Greater(t, d, first, "146.8 req/s, between 94.6 and the closed loop's 199: its requests worth less near the top")
	require.Less(t, d, typical)
	unmeasured := level(151, DecisionInconclusive, 0.989, 0, 0)
	unmeasured.Interval = nil
	s.run.Verify = append(s.run.Verify, unmeasured)
	d, ok = s.bisectionTime(1, typical)
	require.True(t, ok)
	require.Less(t, d, typical, "122.8 req/s, between 94.6 and 151 taken as missing half")

	s.run.Verify = []Level{level(3.44, DecisionMet, 0.996, 744, 247), level(3.79, DecisionInconclusive, 0.954, 2729, 238)}
	s.run.Sweep[0].CompletedRate, s.run.Capacity.Rate = 5.6, 5.6
	d, _ = s.bisectionTime(2, typical)
	require.Equal(t, 2*typical, d, "next to the objective: each at a bisection level's")

	s.run.Verify[0].Decision = DecisionInconclusive
	_, ok = s.bisectionTime(2, typical)
	require.False(t, ok, "nothing verified")
}
