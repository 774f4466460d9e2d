package capacity

import (
	"time"

	"github.com/sloprober/sloprober/config"
)

// longest is what each part of a step test takes at its longest: the
// bound of the estimate before it starts (Estimate.Most) and of the most
// left while it runs (timeMost). Every part is bounded by the code that
// runs it, not by what is typical:
//
//   - a measurement of a level: its warm-up, its batches to its last
//     look, the last look's wait for its requests (the target's timeout
//     and 5 s: batches) and its drain (as long again: drain);
//   - a level: its measurement, then measured again up to retries times
//     for the prober (measure), each after waiting for it (proberWait);
//   - the sweep: its levels, its refinement and each level below the
//     first miss measured again to confirm it (confirm): 2n-1+refine of
//     n;
//   - the search: verify.max_levels and each configured rate but the
//     highest measured again (unconfirmedRate); with verify.max_duration
//     no level starts, nor is measured again, without room for its first
//     look, and each ends within its end, its last look's wait and its
//     drain;
//   - the forecast's levels, the burst (its backlog's wait to
//     verify.drain_within and a timeout, then its drain) and the hot
//     tenant.
//
// Worked numbers, the sign profile (2-minute windows, a 30 s warm-up, 2
// retries, a timeout of 2 minutes): a search level 3 x (30 s + 12m + 2 x
// 2m5s) + 2 x 30 s = 51m; 20 minutes into the search, its 40 left,
// 4m10s for its last level's tail and the burst's 5m15s: up to 49m25s.
// Early it is loose (the sweep's 15 levels at their longest take 8h15m,
// the baseline's 20 requests 2h12m); it is meant for the search within
// verify.max_duration, where it is a date to plan around.
type longest struct {
	t      *config.TestConfig
	target *config.TargetConfig
	// maxRate is the test's global cap, which spaces the baseline's
	// requests; 0 for none.
	maxRate float64
}

// drain is the longest a level's drain takes, and its last look's wait
// (drainLimit).
func (l longest) drain() time.Duration { return drainLimit(l.target) }

// level is the longest a level whose batches run up to most takes.
func (l longest) level(most time.Duration) time.Duration {
	r := time.Duration(l.t.Retries)
	return (1+r)*(time.Duration(l.t.Window.Warmup)+most+2*l.drain()) + r*proberWait(time.Duration(l.t.Window.Steady))
}

// baseline is the longest the baseline takes: its requests one at a
// time, each within its limit (baselineOnce), and its drain, measured
// again retries times.
func (l longest) baseline() time.Duration {
	each := time.Duration(l.target.Timeout)
	if l.maxRate > 0 {
		each = max(each, time.Duration(float64(time.Second)/l.maxRate))
	}
	r := time.Duration(l.t.Retries)
	return (1+r)*(time.Duration(l.t.Baseline.Requests)*(each+baselineSlack)+l.drain()) + r*proberWait(time.Duration(l.t.Window.Steady))
}

// sweepLevels is the most levels the sweep runs.
func (l longest) sweepLevels() int {
	return max(0, 2*len(l.t.Sweep.Concurrency)-1) + l.t.Sweep.Refine
}

// sweep is the longest the sweep's levels take, ran of them run.
func (l longest) sweep(ran int) time.Duration {
	return time.Duration(max(0, l.sweepLevels()-ran)) * l.level(l.t.Window.MaxSteadyTotal())
}

// searchLevels is the most levels the open-loop search runs.
func (l longest) searchLevels() int {
	return l.t.Verify.Levels() + max(0, len(l.t.Verify.Rates)-1)
}

// search is the longest the open-loop search's levels take, ran of them
// run, within left of verify.max_duration (0: none).
func (l longest) search(ran int, left time.Duration) time.Duration {
	d := time.Duration(max(0, l.searchLevels()-ran)) * l.level(l.t.VerifyMaxSteady())
	if l.t.Verify.MaxDuration > 0 {
		d = min(d, left+2*l.drain())
	}
	return d
}

// forecast is the longest the forecast's levels take.
func (l longest) forecast() time.Duration {
	most := max(l.t.Window.MaxSteadyTotal(), l.t.ForecastMaxSteady()) // lookPlan
	return time.Duration(forecastLevelCount(l.target)) * l.level(most)
}

// burst is the longest the burst takes; 0 without one.
func (l longest) burst() time.Duration {
	b := l.t.Verify.Burst
	if !b.Enabled() {
		return 0
	}
	return time.Duration(l.t.Window.Warmup) + time.Duration(b.For) + time.Duration(l.t.Verify.DrainWithin) + time.Duration(l.target.Timeout) + l.drain()
}

// hotTenant is the longest verify.hot_tenant's level takes: its window
// (its for, else window.steady) once, measured again as any level; 0
// without one.
func (l longest) hotTenant() time.Duration {
	h := l.t.Verify.HotTenant
	if h == nil {
		return 0
	}
	window := time.Duration(l.t.Window.Steady)
	if h.For > 0 {
		window = time.Duration(h.For)
	}
	r := time.Duration(l.t.Retries)
	// Its window is the steady one waitValid reads.
	return (1+r)*(time.Duration(l.t.Window.Warmup)+window+2*l.drain()) + r*proberWait(window)
}

// timeMost is the most the running test takes still at the start of a
// level of stage, this one included, if every level left takes its
// longest (longest): in the sign profile's search, what is left of its
// hour, its last level's tail, the forecast's levels, the burst and the
// hot tenant. The time left is a typical path's; this is the bound a
// team can plan around: runs in one state a quarter in went on to take
// 40 minutes and 1h20m in all (regime b), which no one estimate holds
// within 25%.
func (s *Step) timeMost(stage string) time.Duration {
	l := longest{t: s.Test, target: &s.Load.Target, maxRate: s.MaxRate}
	ran := func(st ...string) int {
		n := 0
		for _, k := range st {
			n += len(s.took[k])
		}
		return n
	}
	var most time.Duration
	switch stage {
	case "baseline", "sweep", "refine", "verify":
		if stage == "baseline" {
			most += l.baseline()
		}
		// The level starting counts, whatever ran.
		if stage != "verify" {
			most += l.sweep(min(ran("sweep", "refine"), l.sweepLevels()-1))
		}
		left, _ := s.searchLeft()
		most += l.search(min(ran("verify", "bisection"), l.searchLevels()-1), left) + l.forecast()
	}
	if stage != "hot-tenant" {
		most += l.burst()
	}
	most += l.hotTenant()
	if s.passesLeft > 0 {
		// A cache: both test's production pass after this one.
		most += time.Duration(s.passesLeft) * estimatePass(s.Test, &s.Load.Target).Most
	}
	return most
}

// proberWait is the longest waitValid waits for the prober before a
// level of steady windows is measured again.
func proberWait(steady time.Duration) time.Duration {
	return max(validWindow, min(validWait, steady))
}
