package capacity

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

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
// stages'. The open-loop levels are two kinds. The bisection levels,
// next to the objective, are expected at typicalVerifyShare of their
// most whatever the target's speed (their misses come in bunches), then
// at what the bisection levels took: only those; once a level has
// verified, the bisection's path is expected from its bracket's ends,
// each level at what its distance to the objective says, at most that
// (bisectionTime). A configured rate measured again after a higher one
// did not verify is expected at againShare of its most. The configured rates,
// once the sweep has measured the closed loop's throughput, take what
// verifyRequests take at openShare of it (within their first look and
// their most), then what they took: the speed of the target, not only
// the windows, sets it. The burst and the hot tenant take what their
// settings say. Worked numbers, the sign profile against M/D/8 (5.6
// req/s closed loop) beside a CPU burner: 0.5x is expected to take 30 s
// + 200 / 3.9 s + 2 s = 83 s (cut short at its first look while 0.8x
// followed, 68 s; measured again after it, 30 s + 40% of 12m + 2 s =
// 5m20s, where 27 took 1.5 to 12.6 minutes), each bisection level 30 s
// + 90% of 12m + 2 s = 11m20s (28 of 37 took
// 12m30s, the rest 1.5 to 9 minutes). Replayed through it, six such runs
// were within 20% of their real duration from a quarter of each run on
// (TestProgressReplay), where the estimate they ran with (every open-loop
// level learning from every other, at 80%; the bisection's whole
// halvings) was 40% under to 23% over; against the README's example
// server beside a burner, the starter test (a level up to 60 s) 4m16s
// long is expected from a quarter on at 4m43s to 5m8s.

// Typical shares of its most a level's batches take: typicalSweepShare
// of window.max_steady; typicalVerifyShare (a bisection level) and
// againShare (a configured rate measured again) of verify.max_steady.
const (
	typicalSweepShare  = 0.35
	typicalVerifyShare = 0.9
	againShare         = 0.4
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
	// Typical is a typical run's; Most every level at its longest
	// (longest).
	Typical, Most time.Duration
}

// String is "about 6m10s (up to 21m if every level takes its longest)",
// the most rounded up.
func (e Estimate) String() string {
	return fmt.Sprintf("about %s (up to %s if every level takes its longest)", roughly(e.Typical), roughlyUp(e.Most))
}

// roughly writes a duration as a person would say it: to 10 s under 10
// minutes ("6m10s"), to a minute under 2 hours ("21m", "1h5m"), to ten
// minutes above ("2h30m"), without zero units ("1h", not "1h0m0s").
func roughly(d time.Duration) string {
	return say(d.Round(roughUnit(d)))
}

// roughlyUp is roughly rounded up, for a bound: 47m20s is "48m".
func roughlyUp(d time.Duration) string {
	u := roughUnit(d)
	if r := d.Truncate(u); r < d {
		d = r + u
	}
	return say(d)
}

// roughUnit is the unit roughly rounds d to.
func roughUnit(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Minute:
		return 10 * time.Second
	case d < 2*time.Hour:
		return time.Minute
	}
	return 10 * time.Minute
}

// say writes a duration rounded to roughUnit without zero units.
func say(d time.Duration) string {
	if d < 10*time.Minute {
		return d.String()
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
	e := estimatePass(t, target)
	if t.Cache == config.CacheBoth {
		e.Typical, e.Most = 2*e.Typical, 2*e.Most
	}
	return e
}

// estimatePass is EstimateStep's one pass of the test (cache: both runs
// two).
func estimatePass(t *config.TestConfig, target *config.TargetConfig) Estimate {
	w := t.Window
	warmup := time.Duration(w.Warmup)
	most, openMost := w.MaxSteadyTotal(), t.VerifyMaxSteady()
	share := func(f float64, most time.Duration) time.Duration {
		return warmup + time.Duration(f*float64(most)) + drainAllowance
	}
	typicalSweep := min(len(t.Sweep.Concurrency), 5) + min(t.Sweep.Refine, 2)
	verify := typicalVerifyLevels(&t.Verify)
	forecast := forecastLevelCount(target)
	burst := burstTime(t)
	hot := hotTenantTime(t)
	baseline := time.Duration(t.Baseline.Requests) * typicalBaseline
	search := time.Duration(verify) * share(typicalVerifyShare, openMost)
	if budget := time.Duration(t.Verify.MaxDuration); budget > 0 {
		search = min(search, budget) // the search stops at verify.max_duration
	}
	l := longest{t: t, target: target}
	return Estimate{
		Typical: baseline + time.Duration(typicalSweep)*share(typicalSweepShare, most) + search + time.Duration(forecast)*share(typicalVerifyShare, openMost) + burst + hot,
		Most:    l.baseline() + l.sweep(0) + l.search(0, time.Duration(t.Verify.MaxDuration)) + l.forecast() + l.burst() + l.hotTenant(),
	}
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

// bisectionLeft is how many bisection levels the search is expected to
// run still, this one included, once its configured rates have run and
// one verified: the gap from the highest rate verified to the top of the
// search's bracket (bracketTop: the lowest rate above it that did not
// verify, or the closed loop's peak, or twice it) is halved until it is
// within the search's resolution (verify.resolution of the capacity
// level's completed rate), within verify.max_levels. Halved exactly, that is ceil(log2(gap /
// resolution)) levels; but each midpoint's window offers a little more
// or less than the midpoint, the bracket shrinks by more or less than
// half, and the fraction the ceiling rounds up is as good as random: the
// expected count is log2(gap / resolution) + 1/2, at least the one
// starting. Worked numbers: ten runs against M/D/8 beside a CPU burner,
// from about 2.8 to 4.45 req/s with a resolution of 0.167 (log2 3.3;
// halved exactly, 4), ran 3 to 5 bisection levels, 3.7 on average; the
// sign profile against a closed loop of 5.6 req/s, 2.8 req/s verified
// and 4.98 missed: log2(2.18 / 0.168) + 1/2 = 4.2 levels.
func (s *Step) bisectionLeft() (float64, bool) {
	again, path, ok := s.bisectionLevels()
	return again + path, ok
}

// bisectionLevels is bisectionLeft's levels in two: the bracket's top
// measured again (againAtTop), next to the objective, and the bisection's
// path below it.
func (s *Step) bisectionLevels() (again, path float64, ok bool) {
	v := &s.Test.Verify
	peak := s.peak()
	if s.run == nil || peak <= 0 || v.Resolution <= 0 || len(s.run.Verify) < len(v.Rates) {
		return 0, 0, false
	}
	lo, hi := s.searchBounds()
	if lo == nil {
		// Nothing verified yet: a bracket from 0 says little of how
		// many levels the search takes (3.05 req/s undecided: 5 halvings
		// to 3%, where the runs took 3, their first met at half of it
		// and their next close under it, and the time left read 60%
		// over).
		return 0, 0, false
	}
	top, _ := s.bracketTop(lo, hi)
	gap, res := top-offered(lo), s.resolution()
	if res <= 0 {
		return 0, 0, false
	}
	if s.againAtTop(hi, gap <= res) {
		// The bracket's top measured again first: met, the search goes
		// on above it; not, below it, as now.
		again = 1
	}
	if gap > res && (hi == nil || !wantsRequests(hi)) { // else the search's own stops
		path = max(1, math.Log2(gap/res)+0.5)
	}
	levels := float64(max(0, v.Levels()-len(s.run.Verify)))
	again = min(again, levels)
	return again, min(path, levels-again), true
}

// searchLeft is what is left of the open-loop search's
// verify.max_duration (all of it before the search starts), and whether
// it has one.
func (s *Step) searchLeft() (time.Duration, bool) {
	budget := time.Duration(s.Test.Verify.MaxDuration)
	if budget <= 0 {
		return 0, false
	}
	if s.searchStart.IsZero() {
		return budget, true
	}
	return max(0, budget-s.clock().Sub(s.searchStart)), true
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
	if b := t.Verify.Burst; b.Enabled() {
		return time.Duration(t.Window.Warmup) + time.Duration(b.For) + time.Duration(t.Verify.DrainWithin)/3
	}
	return 0
}

// tookKey is what a level of stage run for why counts as in what the
// levels took (Step.took): its stage, the search's bisection levels (and
// the bracket's top measured again: againAtTop) apart from its configured
// rates ("bisection").
func tookKey(stage, why string) string {
	if strings.HasPrefix(why, "bisection") || strings.HasPrefix(why, "measured again") {
		return "bisection"
	}
	return stage
}

// hotTenantTime is what verify.hot_tenant's level is taken to take: its
// warm-up, its length (at least a steady window) and a drain; 0 without
// one.
func hotTenantTime(t *config.TestConfig) time.Duration {
	h := t.Verify.HotTenant
	if h == nil {
		return 0
	}
	return time.Duration(t.Window.Warmup) + max(time.Duration(h.For), time.Duration(t.Window.Steady)) + drainAllowance
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
	// decide no better than 100 independent ones): at 90% of
	// verify.max_steady, whatever the target's speed.
	prior["bisection"] = prior["verify"]
	if peak := s.peak(); peak > 0 {
		// The configured rates below those, further from it, run at
		// about 0.7x of what the closed loop completed, and decide in
		// about verifyRequests requests: a target of 200 req/s decides
		// at its first look, one of 5.6 req/s in about 2 minutes.
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
	// forecast's), at what the target's speed says and what they took,
	// and the bisection's, at its share and what the bisection levels
	// took. The highest configured rate is not taken as one next to the
	// objective: against M/D/8 0.8x took its whole 12 minutes in seven
	// runs of ten, but against the README's example server 0.8x met in
	// 31 s and the starter test's time left read 46% over where it was.
	ranOpen := ran("verify") + ran("bisection")
	configured, forecast := max(0, len(t.Verify.Rates)-ranOpen), forecastLevelCount(&s.Load.Target)
	bisection := float64(max(0, typicalVerifyLevels(&t.Verify)-max(ranOpen, len(t.Verify.Rates))))
	// pathTime is the bisection's path, where its bracket says it: its
	// levels at what their distance to the objective says
	// (bisectionTime), at most what a bisection level is expected to
	// take.
	var pathTime, againTime time.Duration
	if again, path, ok := s.bisectionLevels(); ok {
		bisection = again + path
		if d, ok := s.bisectionTime(path, expect("bisection")); ok {
			bisection, pathTime = again, d
		}
	}
	if s.measuringAgain {
		// A configured rate cut short while a higher one followed,
		// measured again up to its last look now that the higher one
		// did not verify: nearer to the objective than its first
		// measurement said, further than the bisection's levels (27
		// such levels in the stored runs, against M/D/8 at 2.5 to 3
		// req/s, took 1.5 to 12.6 minutes, 5.4 on average; their
		// first measurements, cut short, about 68 s).
		againTime = time.Duration(w.Warmup) + time.Duration(againShare*float64(openMost)) + drainAllowance
	}
	open := func(atLeastOne bool) time.Duration {
		c, b := configured, bisection
		if atLeastOne && float64(c+forecast)+b == 0 && pathTime == 0 && againTime == 0 {
			b = 1 // more bisection than typical
		}
		search := time.Duration(c)*expect("verify") + time.Duration(b*float64(expect("bisection"))) + pathTime + againTime
		if left, ok := s.searchLeft(); ok {
			search = min(search, left) // verify.max_duration
		}
		return search + time.Duration(forecast)*expect("verify")
	}
	var left time.Duration
	switch stage {
	case "baseline":
		left = expect("baseline") + time.Duration(sweepLeft)*expect("sweep") + open(false)
	case "sweep", "refine":
		left = time.Duration(max(sweepLeft, 1))*expect("sweep") + open(false)
	case "verify":
		left = open(true)
	}
	// The burst and the hot tenant, one level each, last: what their
	// settings say (a burst of 10 s took 50 s with its warm-up and
	// drain, where an open-loop level's 12 minutes had been taken).
	if stage != "hot-tenant" {
		left += burstTime(t)
	}
	left += hotTenantTime(t)
	if s.passesLeft > 0 {
		// A cache: both test's cold pass: the production pass after it
		// takes about as long as this one.
		left += time.Duration(s.passesLeft) * (time.Since(s.passStart) + left)
	}
	return left
}

// The bisection's levels take what their distance to the objective says.
// A level decides once its interval leaves the objective: at an
// attainment p and an objective p0 about q² p(1-p) / (p-p0)² independent
// requests, each worth the share of one its neighbours' were (their
// effective sample over their requests). Its attainment is not known
// before it runs, but its bracket's are: the miss ratio grows about
// geometrically with the rate towards the closed loop's (queueing), so it
// is interpolated on a log scale between the bracket's ends, the closed
// loop's taken as missing half. The bisection's path follows: a midpoint
// expected to meet the objective moves the bracket's bottom up, one
// expected to miss it or to stay undecided moves its top down. A level
// is taken at no more than what a bisection level is expected to take
// (the share and what they took): near the objective the interpolation
// says little (the miss ratio of 3.44 req/s against M/D/8 was 0.4%, its
// bracket's ends 0.3% and 4.6%), far from it, it says a level decides at
// its first looks. Worked numbers, regime b's run that bisected below a
// met 0.8x (151 req/s, 98.9% of 108,779, worth 374: each request 0.0034
// of one) from 0.5x (94.6, every request of 3,405 good, worth 637): 123
// req/s is expected to miss 0.3%, its requests each worth 0.025 of one;
// 180 independent ones (7,100 requests, 58 s) decide it at its second
// look (5 batches of 12 s), 92 s with its warm-up; it took 66 s, and the
// four after it 1 to 6 minutes. The estimate that took every bisection level at 90% of its
// 12 minutes said 1h13m of a run that took 40 minutes; this one, 49
// minutes.

// missAtTop is the miss ratio taken at the closed loop's throughput, a
// bracket's top that no level measured: arrivals at the rate the server
// completes queue without end.
const missAtTop = 0.5

// worthAtTop is the share of the bracket's bottom's worth its requests are
// taken at there: near the closed loop's throughput misses come in ever
// longer bunches (regime b: a request at 0.8x of it worth 1/29 of an
// independent one, at 0.87x 1/190, at 0.93x 1/753).
const worthAtTop = 0.01

// curvePoint is a rate of the bracket with its miss ratio and the share
// of an independent request each of its requests is worth.
type curvePoint struct {
	rate, miss, worth float64
}

// pointOf is a measured level's point: its misses (at least half a miss
// in its effective sample: every request of 3,491 good is not a miss
// ratio of 0) and its requests' worth.
func pointOf(l *Level) (curvePoint, bool) {
	iv := l.Interval
	if iv == nil || iv.N == 0 || iv.NEff <= 0 || l.OfferedRate <= 0 {
		return curvePoint{}, false
	}
	return curvePoint{
		rate:  l.OfferedRate,
		miss:  min(1, max(1-l.Attainment, 0.5/(iv.NEff+1))),
		worth: min(1, iv.NEff/float64(iv.N)),
	}, true
}

// between is the point at rate r between a and b: log-linear in the miss
// ratio and the worth.
func between(a, b curvePoint, r float64) curvePoint {
	if b.rate == a.rate {
		return curvePoint{rate: r, miss: a.miss, worth: a.worth}
	}
	f := min(1, max(0, (r-a.rate)/(b.rate-a.rate)))
	geo := func(x, y float64) float64 { return math.Exp((1-f)*math.Log(x) + f*math.Log(y)) }
	return curvePoint{rate: r, miss: geo(a.miss, b.miss), worth: geo(a.worth, b.worth)}
}

// decideTime is how long a level at p's rate and miss ratio is expected
// to take to decide against objective: the batches its requests need,
// rounded up to a look of plan, its warm-up and drain added; and whether
// it decides within plan (else it takes its most, undecided).
func (s *Step) decideTime(p curvePoint, objective float64, plan lookPlan) (time.Duration, bool) {
	eff := effToDecide(1-p.miss, objective, distuv.UnitNormal.Quantile(1-(1-plan.confidence[0])/2))
	batches, decided := plan.max(), false
	if eff > 0 && plan.batch > 0 {
		need := eff / p.worth / p.rate / plan.batch.Seconds()
		for _, look := range plan.looks {
			if float64(look) >= need {
				batches, decided = look, true
				break
			}
		}
	}
	return time.Duration(s.Test.Window.Warmup) + time.Duration(batches)*plan.batch + drainAllowance, decided
}

// effToDecide is the effective sample whose Wilson interval at quantile q
// around p leaves objective; 0 for none (p at the objective, or more than
// 10^7).
func effToDecide(p, objective, q float64) float64 {
	n, _ := leastDeciding(1, 1e7, func(n float64) bool {
		lo, hi := wilson(p, n, q)
		return lo >= objective || hi < objective
	})
	return n
}

// bisectionTime is the time the bisection's n levels left are expected to
// take along the path its bracket's ends say (see above), each at most
// typical, and whether the bracket says it: it needs a verified bottom.
func (s *Step) bisectionTime(n float64, typical time.Duration) (time.Duration, bool) {
	lo, hi := s.searchBounds()
	if lo == nil || n <= 0 {
		return 0, false
	}
	bottom, ok := pointOf(lo)
	if !ok {
		return 0, false
	}
	objective := 0.0
	for _, sc := range lo.Scenarios {
		objective = max(objective, sc.Objective)
	}
	if objective <= 0 || objective >= 1 {
		return 0, false
	}
	top, measured := curvePoint{}, false
	if hi != nil {
		top, measured = pointOf(hi)
	}
	if !measured {
		rate, _ := s.bracketTop(lo, hi)
		top = curvePoint{rate: rate, miss: missAtTop, worth: bottom.worth * worthAtTop}
	}
	if top.rate <= bottom.rate {
		return 0, false
	}
	// The plan of a level of the search as it starts, not capped at
	// what is left of verify.max_duration now (lookPlan once fits ran):
	// the time left caps the search's whole (searchLeft).
	plan := newLookPlan(s.batch(), int(s.Test.VerifyMaxSteady()/max(s.batch(), 1)))
	var sum time.Duration
	for i := 0; float64(i) < n; i++ {
		p := between(bottom, top, (bottom.rate+top.rate)/2)
		d, decided := s.decideTime(p, objective, plan)
		d = min(d, typical)
		if left := n - float64(i); left < 1 {
			d = time.Duration(left * float64(d))
		}
		sum += d
		// A level left undecided is the bracket's top, as one that
		// missed: the search bisects below it (searchBounds).
		if decided && 1-p.miss >= objective {
			bottom = p
		} else {
			top = p
		}
	}
	return sum, true
}
