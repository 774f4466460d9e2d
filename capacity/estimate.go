package capacity

import (
	"fmt"
	"math"
	"time"

	"github.com/sloprober/sloprober/config"
)

// How long a step test takes. A level runs its warm-up, then batches
// until a look decides it (sequential.go): a level far from the
// objective stops at its first looks, one next to it takes its
// window.max_steady. Before the test starts the target is unknown, and
// the estimate is a typical run's: each sweep level deciding at
// typicalSweepShare of its window.max_steady, each open-loop level at
// typicalVerifyShare (the search spends its levels next to the
// objective, up to verify.max_steady), the sweep ending two levels past
// the knee, the search running the levels it typically runs
// (typicalVerifyLevels). At most, every level runs to its longest and
// every level is measured again retries times.
//
// While it runs, the estimate of the time left learns from the levels so
// far: each stage's levels are expected to take what that stage's levels
// took on average (their drain and re-measurements included), blended
// with the estimate before it as if that were two levels; the levels
// left are the stage's typical ones less those that ran, and the later
// stages'. Once the sweep has measured the closed loop's throughput, an
// open-loop level is expected to take what verifyRequests take at
// openShare of it (within its first look and its most): the speed of the
// target, not only the windows, sets it; a bisection level, next to the
// objective, is expected to take typicalVerifyShare of its most whatever
// the target's speed (its misses come in bunches). Worked numbers, the starter
// test (a level up to 60 s) against a target whose sweep completed 11
// req/s: an open-loop level is expected to take 5 s + 200 / 7.7 s + 2 s
// = 33 s; the first stopped after 15 s; the next three are expected to
// take (2 x 33 + 15) / 3 = 27 s each. Over the runs of this session
// (the starter test against the simulator and an independent server,
// the embedded test), the estimate was within 25% of the real duration
// from a quarter of each run on; before the sweep's end, 16% under to 89%
// over.

// Typical shares of window.max_steady a level's batches take.
const (
	typicalSweepShare  = 0.35
	typicalVerifyShare = 0.8
)

// typicalBaseline is what a baseline request is taken to take before the
// target has answered one: an LLM request of a few hundred tokens.
const typicalBaseline = 2 * time.Second

// verifyRequests is about how many requests an open-loop level takes to
// decide (156 all good meet 95% at an early look; a level next to the
// objective takes its most), and openShare the share of the closed
// loop's throughput the search's rates are at, for the time an open-loop
// level is expected to take once the sweep has measured that throughput.
const (
	verifyRequests = 200
	openShare      = 0.7
)

// priorWeight is how many levels the estimate before a stage runs counts
// as, beside the levels that ran.
const priorWeight = 2

// drainAllowance is what a level's drain is taken to add: its requests in
// flight ending after its window.
const drainAllowance = 2 * time.Second

// Estimate is a step test's expected duration before it starts.
type Estimate struct {
	// Typical is a typical run's; Most every level to its
	// window.max_steady, measured again retries times.
	Typical, Most time.Duration
}

// String is "about 6m10s (up to 21m if every level takes its longest)".
func (e Estimate) String() string {
	return fmt.Sprintf("about %s (up to %s if every level takes its longest)", roughly(e.Typical), roughly(e.Most))
}

// roughly writes a duration as a person would say it: to 10 s under 10
// minutes ("6m10s"), to a minute under 2 hours ("21m", "1h5m"), to ten
// minutes above ("2h30m"), without zero units ("1h", not "1h0m0s").
func roughly(d time.Duration) string {
	switch {
	case d < 10*time.Minute:
		return d.Round(10 * time.Second).String()
	case d < 2*time.Hour:
		d = d.Round(time.Minute)
	default:
		d = d.Round(10 * time.Minute)
	}
	h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case h == 0:
		return fmt.Sprintf("%dm", m)
	case m == 0:
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dh%dm", h, m)
}

// EstimateStep is how long a step test t of target is expected to take,
// a cache: both test twice. Its longest: every level to its last look
// (the forecast's to verify.forecast_max_steady), measured again retries
// times after waiting for the prober, and the sweep's and the search's
// level measured again to decide it.
func EstimateStep(t *config.TestConfig, target *config.TargetConfig) Estimate {
	w := t.Window
	warmup := time.Duration(w.Warmup)
	most, openMost := w.MaxSteadyTotal(), t.VerifyMaxSteady()
	share := func(f float64, most time.Duration) time.Duration {
		return warmup + time.Duration(f*float64(most)) + drainAllowance
	}
	retry := min(validWait, time.Duration(w.Steady)) // waitValid
	full := func(most time.Duration) time.Duration {
		return warmup + most + drainAllowance + time.Duration(t.Retries)*retry
	}

	sweep := len(t.Sweep.Concurrency) + t.Sweep.Refine + 1
	typicalSweep := min(len(t.Sweep.Concurrency), 5) + min(t.Sweep.Refine, 2)
	verify := typicalVerifyLevels(&t.Verify)
	forecast := forecastLevelCount(target)
	burst := burstTime(t)
	hot := time.Duration(0)
	if h := t.Verify.HotTenant; h != nil {
		hot = warmup + max(time.Duration(h.For), time.Duration(w.Steady)) + drainAllowance
	}
	baseline := time.Duration(t.Baseline.Requests) * typicalBaseline
	e := Estimate{
		Typical: baseline + time.Duration(typicalSweep)*share(typicalSweepShare, most) + time.Duration(verify+forecast)*share(typicalVerifyShare, openMost) + burst + hot,
		Most: baseline + time.Duration(sweep*(1+t.Retries))*full(most) + time.Duration((t.Verify.Levels()+1)*(1+t.Retries))*full(openMost) +
			time.Duration(forecast*(1+t.Retries))*full(t.ForecastMaxSteady()) + burst + hot,
	}
	if t.Cache == config.CacheBoth {
		e.Typical, e.Most = 2*e.Typical, 2*e.Most
	}
	return e
}

// typicalVerifyLevels is how many open-loop levels the search typically
// runs: its configured rates, then bisection from the highest of them to
// the closed loop's rate until the gap is within verify.resolution,
// within verify.max_levels. The starter test (0.6x and 0.8x, 5%): 2 + 2
// = 4, its max_levels; the sign profile (0.5x and 0.8x, 3%): 2 +
// ceil(log2(0.2 / 0.03)) = 5 of its 8 (ten runs against an M/D/8 engine
// used 4 to 7; the estimate that counted all 8 said 1h3m for runs of 33
// to 48 minutes).
func typicalVerifyLevels(v *config.VerifyConfig) int {
	top := 0.0
	for _, r := range v.Rates {
		top = max(top, r)
	}
	n := len(v.Rates)
	if res := v.Resolution; res > 0 && top < 1 {
		n += int(math.Ceil(math.Log2(max(1-top, res) / res)))
	}
	return min(max(n, 1), v.Levels())
}

// bisectionLeft is how many bisection levels the search still runs, this
// one included, once its configured rates have run and one verified: the gap from the
// highest rate verified to the lowest above it that did not verify (or
// the closed loop's peak, or twice it) halved until it is within
// verify.resolution of the peak, within verify.max_levels. Worked
// numbers, the sign profile (3%) against a closed loop of 5.6 req/s,
// 2.8 req/s verified and 4.98 missed: 2.18 req/s halves 4 times to
// within 0.168, 4 levels more; a typical run's count (5 open-loop
// levels, 3 of them bisection) said 3, and 1 after two of them, for
// runs that went on to 7 and 8 levels and took up to 40% longer than
// it said.
func (s *Step) bisectionLeft() (int, bool) {
	v := &s.Test.Verify
	peak := s.peak()
	if s.run == nil || peak <= 0 || v.Resolution <= 0 || len(s.run.Verify) < len(v.Rates) {
		return 0, false
	}
	lo, hi := s.searchBounds()
	if lo == nil {
		// Nothing verified yet: a bracket from 0 says little of how
		// many levels the search takes (3.05 req/s undecided: 5 halvings
		// to 3%, where the runs took 3, their first met at half of it
		// and their next close under it, and the time left read 60%
		// over).
		return 0, false
	}
	top := offered(hi)
	if hi == nil {
		top, _ = s.ceiling()
	}
	n := 0
	for gap := top - offered(lo); gap > v.Resolution*peak && n < v.Levels(); gap /= 2 {
		n++
	}
	return max(0, min(n, v.Levels()-len(s.run.Verify))), true
}

// forecastLevelCount is how many levels a target's forecast adds to the
// search: its peak, its average, the peak with one replica lost.
func forecastLevelCount(target *config.TargetConfig) int {
	f := target.Forecast
	if f == nil {
		return 0
	}
	n := 1
	if f.AverageRate > 0 {
		n++
	}
	if target.Replicas > 1 {
		n++
	}
	return n
}

// burstTime is what a test's burst is taken to take: its warm-up, its
// length and a third of the drain it is allowed; 0 without a burst.
func burstTime(t *config.TestConfig) time.Duration {
	if b := t.Verify.Burst; b.Factor > 1 && b.For > 0 {
		return time.Duration(t.Window.Warmup) + time.Duration(b.For) + time.Duration(t.Verify.DrainWithin)/3
	}
	return 0
}

// timeLeft is the running test's estimate of the time left at the start
// of a level of stage (see the top of this file), from the levels that
// ran so far.
func (s *Step) timeLeft(stage string) time.Duration {
	t := s.Test
	w := t.Window
	most, openMost := w.MaxSteadyTotal(), t.VerifyMaxSteady()
	prior := map[string]time.Duration{
		"baseline": time.Duration(t.Baseline.Requests) * typicalBaseline,
		"sweep":    time.Duration(w.Warmup) + time.Duration(typicalSweepShare*float64(most)) + drainAllowance,
		"verify":   time.Duration(w.Warmup) + time.Duration(typicalVerifyShare*float64(openMost)) + drainAllowance,
	}
	prior["refine"] = prior["sweep"]
	// The bisection's levels are next to the objective, where a sample
	// decides late (the misses come in bunches: 1,300 requests near 95%
	// decide no better than 100 independent ones): at 80% of
	// verify.max_steady, whatever the target's speed.
	prior["bisection"] = prior["verify"]
	if peak := s.peak(); peak > 0 {
		// The configured rates, further from it, run at about 0.7x of
		// what the closed loop completed, and decide in about
		// verifyRequests requests: a target of 11 req/s decides in 26 s
		// where one of 3.5 req/s takes its whole 60 s.
		first := time.Duration(firstLook) * s.batch()
		need := time.Duration(float64(time.Second) * verifyRequests / (openShare * peak))
		prior["verify"] = time.Duration(w.Warmup) + min(openMost, max(first, need)) + drainAllowance
	}
	// What a level of each stage took so far, blended with the prior as
	// if the prior were priorWeight levels: one open-loop level that
	// stopped at its first look (15 s) does not make the next ones as
	// short.
	// expectAs is what a level of stage st is expected to take, the
	// levels of st that ran blended with the prior of kind.
	expectAs := func(st, kind string) time.Duration {
		ds := s.took[st]
		sum := priorWeight * prior[kind]
		for _, d := range ds {
			sum += d
		}
		return sum / time.Duration(priorWeight+len(ds))
	}
	expect := func(st string) time.Duration { return expectAs(st, st) }
	// The levels left, this one included.
	ran := func(st string) int { return len(s.took[st]) }
	sweepLeft := max(0, min(len(t.Sweep.Concurrency), 5)-ran("sweep")) + max(0, min(t.Sweep.Refine, 2)-ran("refine"))
	// The open-loop levels left: the configured rates' (and the
	// forecast's), at what the target's speed says, and the bisection's,
	// at its share; the levels that ran so far teach both.
	ranOpen := ran("verify")
	configured := max(0, len(t.Verify.Rates)-ranOpen) + forecastLevelCount(&s.Load.Target)
	bisection := max(0, typicalVerifyLevels(&t.Verify)-max(ranOpen, len(t.Verify.Rates)))
	if n, ok := s.bisectionLeft(); ok {
		bisection = n
	}
	open := func(atLeastOne bool) time.Duration {
		c, b := configured, bisection
		if atLeastOne && c+b == 0 {
			b = 1 // more bisection than typical
		}
		d := time.Duration(c)*expect("verify") + time.Duration(b)*expectAs("verify", "bisection")
		return d
	}
	var left time.Duration
	switch stage {
	case "baseline":
		left = expect("baseline") + time.Duration(sweepLeft)*expect("sweep") + open(false)
	case "sweep", "refine":
		left = time.Duration(max(sweepLeft, 1))*expect("sweep") + open(false)
	case "verify":
		left = open(true)
	default: // burst, hot tenant: one level each
		left = expect("verify")
	}
	if stage != "burst" && stage != "hot-tenant" {
		left += burstTime(t)
	}
	if s.passesLeft > 0 {
		// A cache: both test's cold pass: the production pass after it
		// takes about as long as this one.
		left += time.Duration(s.passesLeft) * (time.Since(s.passStart) + left)
	}
	return left
}
