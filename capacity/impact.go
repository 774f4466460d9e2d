package capacity

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// A soak measures each step of its fault plan on a series of the requests'
// outcomes by when they were sent, finer than its windows (10 minutes by
// default, longer than most failures): buckets of a twentieth of a window,
// 5 s at most (100 ms at least), judged in spans of six buckets. A 10
// minute window gives 5 s buckets and 30 s spans: at 2 req/s, 60 requests
// a span, so one failed request is 1.7 points.
const (
	maxImpactBucket = 5 * time.Second
	minImpactBucket = 100 * time.Millisecond
	impactSpan      = 6
	// impactBefore bounds the span before a fault that is its reference:
	// as long as the fault, at most 5 minutes (and not before the warm-up
	// ended).
	impactBefore = 5 * time.Minute
	// maxSeriesBuckets bounds the series: a week (config.MaxSoakDuration)
	// of 5 s buckets, two counts each (1 MiB).
	maxSeriesBuckets = 7 * 24 * 3600 / 5
)

// impactBucket is the bucket of a soak's series: a twentieth of its
// window, within [100 ms, 5 s], and no finer than maxSeriesBuckets over its
// duration allows.
func impactBucket(window, duration time.Duration) time.Duration {
	b := min(max(window/20, minImpactBucket), maxImpactBucket)
	return max(b, duration/maxSeriesBuckets+1)
}

// series counts the requests of a soak by the bucket of their send time,
// from its origin (the soak's start): counted requests, the good ones, and
// the failed ones (an error, a timeout: not merely slow).
type series struct {
	origin  time.Time
	bucketD time.Duration
	counted []int32
	good    []int32
	failed  []int32
}

func (s *series) add(sent time.Time, counted, good, failed bool) {
	if !counted || sent.Before(s.origin) {
		return
	}
	i := int(sent.Sub(s.origin) / s.bucketD)
	if i >= maxSeriesBuckets {
		return
	}
	for len(s.counted) <= i {
		s.counted = append(s.counted, 0)
		s.good = append(s.good, 0)
		s.failed = append(s.failed, 0)
	}
	s.counted[i]++
	if good {
		s.good[i]++
	}
	if failed {
		s.failed[i]++
	}
}

// span sums buckets [from, to) (clipped to the series).
func (s *series) span(from, to int) (counted, good, failed int) {
	from, to = max(from, 0), min(to, len(s.counted))
	for i := from; i < to; i++ {
		counted += int(s.counted[i])
		good += int(s.good[i])
		failed += int(s.failed[i])
	}
	return counted, good, failed
}

// clone is a copy of s.
func (s *series) clone() *series {
	return &series{origin: s.origin, bucketD: s.bucketD,
		counted: slices.Clone(s.counted), good: slices.Clone(s.good), failed: slices.Clone(s.failed)}
}

// bucket returns the bucket of t, rounded down.
func (s *series) bucket(t time.Time) int {
	return int(math.Floor(float64(t.Sub(s.origin)) / float64(s.bucketD)))
}

// FaultImpact is what one step of a soak's fault plan did to the target,
// measured: the requests sent before it (as long as the step, at most 5
// minutes), during it, and the time until their attainment was back
// within the soak's allowance, in spans of six buckets (30 s with a
// window of 10 minutes or more).
type FaultImpact struct {
	// Step is the step's index in the plan; Kind its action ("simulator",
	// "http", "kubernetes", "exec"); Description what it did.
	Step        int       `json:"step"`
	Kind        string    `json:"kind"`
	Description string    `json:"description"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	// ReplicaLost: the step takes a serving replica away (a kubernetes
	// pod deletion, or a step marked replica_lost): During is then the
	// measured remaining capacity.
	ReplicaLost bool        `json:"replica_lost,omitempty"`
	Before      *ImpactSpan `json:"before,omitempty"`
	During      *ImpactSpan `json:"during,omitempty"`
	// SpanSeconds is the length of the spans judged (six buckets).
	SpanSeconds float64 `json:"span_seconds"`
	// Allowance is the least attainment a span must have to be
	// within the soak's allowance: the attainment before, less
	// drift.goodput_drop of it (100% before and 0.05: 95%).
	Allowance float64 `json:"allowance"`
	// DryRun: the step's action was a dry run; it took nothing away.
	DryRun bool `json:"dry_run,omitempty"`
	// Spans is how many spans from the step's start were judged: with
	// neither Disrupted nor RecoverySeconds, the soak ended before the
	// step could be judged (not measured).
	Spans int `json:"spans"`
	// Disrupted: a span from the step's start was below the
	// allowance. RecoverySeconds is then the time from the step's start
	// to the first of two spans in a row back within it; nil when none
	// came before the soak ended (not recovered), 0 when not disrupted.
	Disrupted       bool     `json:"disrupted"`
	RecoverySeconds *float64 `json:"recovery_seconds,omitempty"`
	// Worst is the span of the lowest attainment from the step's
	// start until recovery.
	Worst *ImpactSpan `json:"worst,omitempty"`
}

// ImpactSpan is the requests of a soak sent within a span of time.
type ImpactSpan struct {
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"`
	Counted int       `json:"counted"`
	Good    int       `json:"good"`
	// Failed are the counted requests that failed outright (an error, a
	// timeout), not merely slow ones.
	Failed     int       `json:"failed,omitempty"`
	Goodput    float64   `json:"goodput"` // good requests per second
	Attainment float64   `json:"attainment"`
	Interval   *Interval `json:"interval,omitempty"`
}

// newImpactSpan sums the buckets [from, to) of s.
func (s *series) impactSpan(from, to int) *ImpactSpan {
	counted, good, failed := s.span(from, to)
	sec := float64(to-from) * s.bucketD.Seconds()
	sp := &ImpactSpan{Start: s.origin.Add(time.Duration(from) * s.bucketD), Seconds: sec, Counted: counted, Good: good, Failed: failed}
	if sec > 0 {
		sp.Goodput = float64(good) / sec
	}
	if counted > 0 {
		// Each bucket is a batch of the batch means: misses that come
		// together (a replica's requests failing at once) widen the
		// interval as they do a level's.
		sp.Attainment = float64(good) / float64(counted)
		bs := make([]batchCount, 0, to-from)
		for i := max(from, 0); i < min(to, len(s.counted)); i++ {
			bs = append(bs, batchCount{n: int(s.counted[i]), good: int(s.good[i])})
		}
		sp.Interval = batchInterval(bs, good, counted, confidence, 1)
	}
	return sp
}

// impactSpans is where a fault step is measured on a soak's series, in
// buckets: its reference span may not begin before notBefore (the end of
// the step before it); it is judged "not disrupted" only once settle is
// reached without a span below the allowance (its end, or for an action
// whose effects may come late, a pod's deletion, the next step or the
// soak's end); the series is judged up to last (exclusive: when the soak
// stopped sending).
type impactSpans struct {
	notBefore, settle, last int
}

// impactOf measures a fault step that ran from start to end on the
// series, with the soak's drift.goodput_drop as the allowance.
func (s *series) impactOf(step int, kind, desc string, start, end time.Time, at impactSpans, goodputDrop float64) FaultImpact {
	fi := FaultImpact{Step: step, Kind: kind, Description: desc, Start: start, End: end,
		SpanSeconds: float64(impactSpan) * s.bucketD.Seconds()}
	last := min(at.last, len(s.counted))
	b0, b1 := max(s.bucket(start), 0), s.bucket(end)
	if b1 <= b0 {
		b1 = b0 + 1
	}
	before := min(b1-b0, int(impactBefore/s.bucketD))
	if from := max(b0-before, at.notBefore, 0); from < b0 {
		fi.Before = s.impactSpan(from, b0)
	}
	if e := min(b1, last); e > b0 {
		fi.During = s.impactSpan(b0, e)
	}
	ref := 1.0
	if fi.Before != nil && fi.Before.Counted > 0 {
		ref = fi.Before.Attainment
	}
	fi.Allowance = ref * (1 - goodputDrop)
	settle := max(at.settle, b1)
	within := func(k int) (bool, *ImpactSpan, bool) {
		if k+impactSpan > last {
			return false, nil, false // the soak ended first
		}
		sp := s.impactSpan(k, k+impactSpan)
		// A span with no request says nothing either way.
		return sp.Counted == 0 || sp.Attainment >= fi.Allowance, sp, true
	}
	for k := b0; ; k++ {
		ok, sp, exists := within(k)
		if exists {
			fi.Spans++
		}
		switch {
		case !exists:
			// The soak ended: not recovered if disrupted; not
			// disrupted only if it was judged up to settle (else not
			// measured: Spans says how far it got).
			if !fi.Disrupted && k >= settle {
				zero := 0.0
				fi.RecoverySeconds = &zero
			}
			return fi
		case !ok:
			fi.Disrupted = true
			if fi.Worst == nil || sp.Attainment < fi.Worst.Attainment {
				fi.Worst = sp
			}
		case !fi.Disrupted && k >= settle:
			// Within the allowance from the start to settle and a
			// span after it: not disrupted.
			zero := 0.0
			fi.RecoverySeconds = &zero
			return fi
		case fi.Disrupted:
			// Back within it: recovered if the next span is too.
			ok2, _, exists2 := within(k + impactSpan)
			if !exists2 {
				return fi
			}
			if ok2 {
				sec := float64(k-b0) * s.bucketD.Seconds()
				fi.RecoverySeconds = &sec
				return fi
			}
		}
	}
}

// RemainingText says what a fault that took a replica away measured of
// the remaining capacity at the soak's rate, against the objective:
//
//   - "carried 6 req/s with a replica lost (99.2% good [97.1, 99.8] of
//     360): the remaining replicas carry at least that";
//   - "did not carry 6 req/s with a replica lost (41.2% good [30.2, 53.1] of
//     483): the remaining replicas carry less than that (2.21 good req/s
//     under overload is not their capacity: a queue that grows fails every
//     request behind it)";
//   - with the bad requests mostly failing outright (a gateway that still
//     sends to the lost replica, 502s): not a measure of the remaining
//     replicas at all;
//   - an interval straddling the objective: not told.
func (fi *FaultImpact) RemainingText(offered, objective float64) string {
	d := fi.During
	if d == nil || d.Counted == 0 {
		return "not measured: no request was counted during the fault"
	}
	good := fmt.Sprintf("%.1f%% good of %d", 100*d.Attainment, d.Counted)
	if d.Interval != nil {
		good = fmt.Sprintf("%.1f%% good [%.1f, %.1f] of %d", 100*d.Attainment, lower(d.Interval), upper(d.Interval), d.Counted)
	}
	switch {
	case d.Interval != nil && d.Interval.Lower >= objective:
		return fmt.Sprintf("carried %.3g req/s with a replica lost (%s): the remaining replicas carry at least that", offered, good)
	case fi.gatewayErrors():
		return fmt.Sprintf("%s, but %d of the %d bad requests failed outright: requests still went to the lost replica (a gateway without health checks), so this does not measure what the remaining replicas carry",
			good, d.Failed, d.Counted-d.Good)
	case d.Interval != nil && d.Interval.Upper < objective:
		return fmt.Sprintf("did not carry %.3g req/s with a replica lost (%s): the remaining replicas carry less than that (their %.3g good req/s under overload is not their capacity: a queue that grows fails the requests behind it)",
			offered, good, d.Goodput)
	}
	return fmt.Sprintf("could not tell whether the remaining replicas carry %.3g req/s (%s: the interval straddles the objective %.1f%%)", offered, good, 100*objective)
}

// gatewayErrors reports whether most of the bad requests during the step
// failed outright (errors, not slow replies): requests still went to the
// replica that was lost.
func (fi *FaultImpact) gatewayErrors() bool {
	d := fi.During
	return d != nil && d.Failed > 0 && d.Failed > (d.Counted-d.Good)/2
}

// ReplicaLoss is a soak's remaining capacity after one replica is lost:
// the computed one beside the measured one. With 3 replicas and 9 req/s
// verified, the computed remaining capacity is 9 x 2/3 = 6 req/s; a soak
// at 6 req/s whose pod deletion kept 99.2% [97.1, 99.8] good measured
// that the two remaining replicas carry at least 6 req/s.
type ReplicaLoss struct {
	// Replicas is the target's replicas (target.replicas).
	Replicas int `json:"replicas"`
	// VerifiedRate is the target's last verified open-loop capacity, of
	// the step test run ComputedFrom; Computed is VerifiedRate x
	// (Replicas - 1) / Replicas. Both are absent without such a run, or
	// with one replica (nothing remains).
	ComputedFrom string   `json:"computed_from,omitempty"`
	VerifiedRate *float64 `json:"verified_rate,omitempty"`
	Computed     *float64 `json:"computed,omitempty"`
	// Step is the fault step that took a replica away, Offered the soak's
	// rate during it, Carried whether the attainment's interval during it
	// was at or above the objective, Goodput its good requests per second.
	Step      int     `json:"step"`
	Offered   float64 `json:"offered"`
	Objective float64 `json:"objective"`
	Carried   bool    `json:"carried"`
	Goodput   float64 `json:"goodput"`
	// Measured says it in words (FaultImpact.RemainingText).
	Measured string `json:"measured"`
}

// replicaLoss is the remaining capacity measured by the first step that
// took a replica away and whose failures were not mostly errors (requests
// sent to the lost replica measure nothing of the others), else by the
// first that took one away; nil when none did.
func replicaLoss(impacts []FaultImpact, replicas int, offered, objective float64, last *LastCapacity) *ReplicaLoss {
	pick := -1
	for i := range impacts {
		fi := &impacts[i]
		if !fi.ReplicaLost || fi.DryRun {
			continue
		}
		if pick < 0 || impacts[pick].gatewayErrors() && !fi.gatewayErrors() {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	fi := &impacts[pick]
	rl := &ReplicaLoss{Replicas: max(replicas, 1), Step: fi.Step, Offered: offered, Objective: objective,
		Measured: fi.RemainingText(offered, objective)}
	if d := fi.During; d != nil {
		rl.Goodput = d.Goodput
		rl.Carried = d.Interval != nil && d.Interval.Lower >= objective
	}
	if last != nil {
		// The verified rate is of the replicas its run measured.
		n := rl.Replicas
		if last.Replicas > 0 {
			n = last.Replicas
		}
		if n > 1 {
			v := last.VerifiedRate
			c := v * float64(n-1) / float64(n)
			rl.ComputedFrom, rl.VerifiedRate, rl.Computed = last.RunID, &v, &c
		}
	}
	return rl
}

// LastCapacity is a target's last verified capacity: the step test run
// that verified it, the rate, and the replicas it was of.
type LastCapacity struct {
	RunID        string
	VerifiedRate float64
	// Replicas is the target's replicas when that run measured it; 0:
	// not known (the soak's target's are taken).
	Replicas int
}
