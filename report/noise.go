package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sloprober/sloprober/capacity"
)

// A comparison row's noise verdict starts with one of these: the two runs
// do not tell the numbers apart (their intervals or ranges overlap: no
// difference is shown, which is not that there is none), the difference
// is beyond what the runs' own noise explains, or the runs hold too
// little to judge (and say why).
const (
	notToldApart = "not told apart"
	beyondNoise  = "beyond noise"
	cannotTell   = "cannot tell"
)

func notApart(format string, a ...any) string { return notToldApart + ": " + fmt.Sprintf(format, a...) }
func beyond(format string, a ...any) string   { return beyondNoise + ": " + fmt.Sprintf(format, a...) }
func cannot(format string, a ...any) string   { return cannotTell + ": " + fmt.Sprintf(format, a...) }

// poissonSD is how many standard deviations of their Poisson noise two
// counts per second may differ by before they are told apart. A
// comparison judges about a dozen numbers at once: at 3 sd one of them
// is beyond noise by chance in 0.27% of identical pairs (2 sd: 4.6%, and
// with twelve rows a third of identical pairs would differ somewhere).
const poissonSD = 3

// rateNoise compares two rates of counted events over their windows: n
// events in t seconds are n/t +- sqrt(n)/t per second; 3.2 req/s over 60 s
// is +-0.23, and 3.2 against 3.8 over 60 s each is within 3 sd (1.0).
func rateNoise(ra, ta, rb, tb float64, unit string) string {
	if ta <= 0 || tb <= 0 {
		return cannot("no window length (schema-1 run)")
	}
	lim := poissonSD * math.Sqrt(ra/ta+rb/tb)
	if math.Abs(ra-rb) <= lim {
		return notApart("within +-%.2g %s (Poisson, %d sd)", lim, unit, poissonSD)
	}
	return beyond("the difference %.2g %s is above +-%.2g (Poisson, %d sd)", math.Abs(ra-rb), unit, lim, poissonSD)
}

// capacityNoise compares two verified capacities with what each search
// could tell: the capacity lies at or above the verified rate and below
// its ceiling (the first rate above it that missed, or the closed loop's
// peak: no level completed more, and arrivals above it queue without
// end; verified 2.77 req/s, closed-loop peak 3.67: [2.77, 3.67]). A run
// from before ceilings is bounded by the lowest rate above it not
// verified, or without one, when its sweep reached the knee (not the
// test's max_rate), by its closed loop's peak. Ranges that overlap
// cannot tell the two apart. perReplica divides each run's range by its
// replicas (the capacity per replica).
func capacityNoise(a, b *Report, perReplica bool) string {
	switch {
	case a.Capacity == nil && b.Capacity == nil:
		return ""
	case a.Capacity == nil:
		return cannot("A verified no rate (%s)", a.Verdict)
	case b.Capacity == nil:
		return cannot("B verified no rate (%s)", b.Verdict)
	}
	// rng is the run's capacity range: from v to hi.
	rng := func(r *Report) (v, hi float64, text string) {
		d := 1.0
		if perReplica && r.Capacity.Replicas > 1 {
			d = float64(r.Capacity.Replicas)
		}
		v = r.Capacity.VerifiedRate / d
		// Up to the closed loop's peak, raised by its noise.
		upToPeak := func(peak float64) (float64, float64, string) {
			hi := (peak + peakNoise(r, peak)) / d
			return v, hi, fmt.Sprintf("[%.3g, %.3g] (up to the closed loop's peak, %.3g with its noise)", v, peak/d, hi)
		}
		switch c := r.Capacity; {
		case c.Ceiling > 0 && c.CeilingFrom == capacity.CeilingClosedLoop:
			return upToPeak(c.Ceiling)
		case c.Ceiling > 0:
			// The first rate above that missed: a rate undecided below
			// it is no evidence that the capacity lies lower.
			return v, c.Ceiling / d, fmt.Sprintf("[%.3g, %.3g)", v, c.Ceiling/d)
		case c.Bound > 0:
			return v, c.Bound / d, fmt.Sprintf("[%.3g, %.3g)", v, c.Bound/d)
		}
		if k := r.Capacity.Knee; k != nil && k.Reached && r.Capacity.LimitedBy == "" {
			// The closed loop's peak bounds the capacity only where
			// the prober measured the whole sweep: a level it limited
			// completed a lower bound of the target's throughput, and
			// the sweep may have ended or gone on past it.
			peak, limited := 0.0, false
			for _, l := range r.Levels {
				if l.Concurrency > 0 {
					peak = max(peak, l.CompletedRate)
					limited = limited || l.ProberBound
				}
			}
			if !limited && peak > r.Capacity.VerifiedRate {
				return upToPeak(peak)
			}
		}
		return v, math.Inf(1), fmt.Sprintf("[%.3g, -)", v)
	}
	va, ha, ra := rng(a)
	vb, hb, rb := rng(b)
	if va < hb && vb < ha {
		return notApart("the capacity lies in %s and in %s, which overlap", ra, rb)
	}
	return beyond("%s and %s do not overlap", ra, rb)
}

// peakNoise is the Poisson noise (poissonSD sd) of a closed loop's peak
// of peak req/s: of the sweep level that completed the rate nearest it,
// over its window. The peak is a throughput measured like any other, so
// a ceiling it sets is as uncertain: 7.19 req/s over 3 s is +-4.6 at 3
// sd, and two runs of one simulator on a busy host (its CPU shared with
// a burner) measured peaks of 12 and 7.19 req/s, which the closed-loop
// row itself did not tell apart. 0 without a window.
func peakNoise(r *Report, peak float64) float64 {
	var at *Level
	for i, l := range r.Levels {
		if l.Concurrency > 0 && (at == nil || math.Abs(l.CompletedRate-peak) < math.Abs(at.CompletedRate-peak)) {
			at = &r.Levels[i]
		}
	}
	if at == nil || at.WindowSeconds <= 0 {
		return 0
	}
	return poissonSD * math.Sqrt(peak/at.WindowSeconds)
}

// atCapacity compares a number measured at each run's verified level.
// The two levels may have offered different rates (the searches verified
// 2.8 and 3.19 req/s); then the rows at capacity differ by the rate
// before anything else, and what tells the runs apart is the capacity
// row: a difference that goes the way the rate does (more goodput, a
// higher latency at the higher rate) is not told apart from it. same
// judges two levels at one load (their offered rates within 2%); dir is
// +1 for a number that grows with the load (goodput, latency), 0 for one
// that need not (attainment: judged by its intervals alone).
func atCapacity(a, b *Report, dir int, same func(la, lb *Level) string, get func(*Level) float64) string {
	la, lb := verifiedLevel(a), verifiedLevel(b)
	switch {
	case la == nil && lb == nil:
		return ""
	case la == nil:
		return cannot("A verified no rate (%s)", a.Verdict)
	case lb == nil:
		return cannot("B verified no rate (%s)", b.Verdict)
	}
	v := same(la, lb)
	ra, rb := la.OfferedRate, lb.OfferedRate
	if dir == 0 || math.Abs(ra-rb) <= 0.02*max(ra, rb) || !strings.HasPrefix(v, beyondNoise) {
		return v
	}
	// Beyond the noise of one load, at two loads: the way the rates go?
	if (rb > ra) == (get(lb) > get(la)) {
		return notApart("measured at %.3g and %.3g req/s offered, and higher at the higher rate (the capacity row judges the rates)", ra, rb)
	}
	return beyond("lower at the higher rate (%.3g and %.3g req/s offered): %s", ra, rb, strings.TrimPrefix(v, beyondNoise+": "))
}

// goodputNoise compares the goodputs of two levels with their Poisson
// noise.
func goodputNoise(la, lb *Level) string {
	return rateNoise(la.Goodput, la.WindowSeconds, lb.Goodput, lb.WindowSeconds, "req/s")
}

// attainmentNoise compares the attainments of two levels by their 95%
// intervals: two that overlap are not told apart (two 95% intervals of
// equal width overlap for all but 0.6% of identical pairs).
func attainmentNoise(la, lb *Level) string {
	ia, ib := la.Interval, lb.Interval
	if ia == nil || ib == nil {
		return cannot("no intervals (schema-1 run)")
	}
	iv := func(i *capacity.Interval) string {
		return fmt.Sprintf("[%.1f, %.1f] of %d", lower(i), upper(i), i.N)
	}
	if ia.Lower <= ib.Upper && ib.Lower <= ia.Upper {
		return notApart("95%% intervals %s and %s overlap", iv(ia), iv(ib))
	}
	return beyond("95%% intervals %s and %s do not overlap", iv(ia), iv(ib))
}

// quantileRange is the 95% interval of a level's q-quantile (0.5 or 0.99)
// from what the run keeps of its sample: the ranks a sample of n puts it
// between, q +- 1.96 sqrt(q(1-q)/n) with n the sample's effective size
// (the level's attainment interval says how many requests in a row are
// worth one: latencies queue together as misses do), read off the
// quantile function through P50, P95 and P99 (linear between them, an
// exponential tail above P99 with the tail's slope from P95 to P99).
// A P99 of 3,000 independent requests lies between ranks 0.986 and
// 0.994: between P95 and P99 below, 0.28 of P99-P95 above P99. A P99
// of 227 reaches rank 1: its interval has no upper end.
func quantileRange(p capacity.Percentiles, q float64, iv *capacity.Interval) (lo, hi float64) {
	n := float64(p.N)
	if iv != nil && iv.N > 0 && iv.NEff > 0 && iv.NEff < float64(iv.N) {
		n *= iv.NEff / float64(iv.N)
	}
	if n < 1 {
		return 0, math.Inf(1)
	}
	h := 1.96 * math.Sqrt(q*(1-q)/n)
	return quantileAt(p, q-h), quantileAt(p, q+h)
}

// quantileAt reads the quantile function drawn through P50, P95 and P99.
func quantileAt(p capacity.Percentiles, q float64) float64 {
	switch {
	case q >= 1:
		return math.Inf(1)
	case q > 0.99:
		return p.P99 + (p.P99-p.P95)*math.Log(0.01/(1-q))/math.Log(5)
	case q > 0.95:
		return p.P95 + (q-0.95)/0.04*(p.P99-p.P95)
	case q > 0.5:
		return p.P50 + (q-0.5)/0.45*(p.P95-p.P50)
	}
	return max(0, p.P50-(0.5-q)/0.45*(p.P95-p.P50))
}

// quantileNoise compares two levels' q-quantiles by their 95% intervals
// (quantileRange); scale writes them in the row's unit.
func quantileNoise(pa, pb capacity.Percentiles, q float64, ia, ib *capacity.Interval, scale float64, unit string) string {
	if pa.N == 0 || pb.N == 0 {
		return cannot("no sample")
	}
	la, ha := quantileRange(pa, q, ia)
	lb, hb := quantileRange(pb, q, ib)
	r := func(lo, hi float64, n int) string {
		if math.IsInf(hi, 1) {
			return fmt.Sprintf("[%.4g, -) %s of %d", scale*lo, unit, n)
		}
		return fmt.Sprintf("[%.4g, %.4g] %s of %d", scale*lo, scale*hi, unit, n)
	}
	if la <= hb && lb <= ha {
		return notApart("95%% intervals %s and %s overlap", r(la, ha, pa.N), r(lb, hb, pb.N))
	}
	return beyond("95%% intervals %s and %s do not overlap", r(la, ha, pa.N), r(lb, hb, pb.N))
}

// sweepLevels are a run's closed-loop levels by their clients, the last
// measurement of each (a level re-measured keeps its last).
func sweepLevels(r *Report) map[int]*Level {
	m := map[int]*Level{}
	for i := range r.Levels {
		if l := &r.Levels[i]; l.Concurrency > 0 {
			m[l.Concurrency] = l
		}
	}
	return m
}

// closedLoopNoise compares two closed-loop capacities (the most clients
// at which every objective held): the same level is not told apart; two
// levels apart are told apart only when the runs disagree beyond noise
// on a level between them: at some client count in [lower, higher] both
// measured, their attainments' intervals do not overlap. A run that met
// at 16 clients and one that missed at 16 with 93.1% [90.2, 95.6] of
// 1,200 against 96.0% [94.2, 97.5] are not told apart: 16 clients sits
// on the objective in both.
func closedLoopNoise(a, b *Report) string {
	ca, cb := a.ClosedLoop, b.ClosedLoop
	switch {
	case ca == nil && cb == nil:
		return ""
	case ca == nil:
		return cannot("A met at no closed-loop level")
	case cb == nil:
		return cannot("B met at no closed-loop level")
	case ca.Concurrency == cb.Concurrency:
		return notApart("the same level")
	}
	return curvesNoise(a, b, min(ca.Concurrency, cb.Concurrency), max(ca.Concurrency, cb.Concurrency), "attainment",
		func(la, lb *Level) string { return attainmentNoise(la, lb) })
}

// curvesNoise judges two runs' sweeps level by level over the client
// counts in [lo, hi] both measured: beyond noise at the first level where judge says so, not told
// apart when none does, cannot tell when they measured none in common.
func curvesNoise(a, b *Report, lo, hi int, what string, judge func(la, lb *Level) string) string {
	sa, sb := sweepLevels(a), sweepLevels(b)
	var common []int
	for c := range sa {
		if sb[c] != nil && c >= lo && c <= hi {
			common = append(common, c)
		}
	}
	if len(common) == 0 {
		return cannot("the runs measured no level in common between %s and %s", clients(lo), clients(hi))
	}
	slices.Sort(common)
	for _, c := range common {
		switch v := judge(sa[c], sb[c]); {
		case strings.HasPrefix(v, beyondNoise):
			return beyond("%s at %s: %s", what, clients(c), strings.TrimPrefix(v, beyondNoise+": "))
		case strings.HasPrefix(v, cannotTell):
			return v
		}
	}
	return notApart("their %s agree within noise at every level from %s to %s both measured", what, clients(lo), clients(hi))
}

// closedRateNoise compares the closed-loop capacities' completed rates:
// at the same clients by their Poisson noise; at different clients as
// the clients row judges them, unless the rates agree anyway.
func closedRateNoise(a, b *Report) string {
	ca, cb := a.ClosedLoop, b.ClosedLoop
	if ca == nil || cb == nil {
		return closedLoopNoise(a, b)
	}
	la, lb := sweepLevels(a)[ca.Concurrency], sweepLevels(b)[cb.Concurrency]
	if la == nil || lb == nil {
		return cannot("the level is not in the run")
	}
	v := rateNoise(ca.Rate, la.WindowSeconds, cb.Rate, lb.WindowSeconds, "req/s")
	if ca.Concurrency == cb.Concurrency || !strings.HasPrefix(v, beyondNoise) {
		return v
	}
	if c := closedLoopNoise(a, b); strings.HasPrefix(c, notToldApart) {
		return notApart("at %s and %s, which are not told apart", clients(ca.Concurrency), clients(cb.Concurrency))
	}
	return v
}

// kneeNoise compares two knees (where goodput stops growing): the same
// level is not told apart; otherwise the goodput curves are compared at
// every client count both measured between the two knees (or up to the
// last level of a run whose goodput still grew): a knee found at 8 in
// one run and at 16 in the other, where 16 clients added 3% goodput in
// one and 6% in the other within their Poisson noise, is not told apart.
func kneeNoise(a, b *Report) string {
	at := func(r *Report) (int, bool) {
		if r.Knee == nil {
			return 0, false
		}
		return r.Knee.Concurrency, true
	}
	ka, oka := at(a)
	kb, okb := at(b)
	switch {
	case !oka && !okb:
		return ""
	case !oka:
		return cannot("A has no sweep")
	case !okb:
		return cannot("B has no sweep")
	case ka == kb && a.Knee.Reached == b.Knee.Reached:
		return notApart("the same level")
	}
	return curvesNoise(a, b, min(ka, kb), max(ka, kb), "goodputs", func(la, lb *Level) string {
		return goodputNoise(la, lb)
	})
}

// tokensNoise compares the median input or output tokens of two runs'
// measured requests (their samples are independent draws of the load
// model).
func tokensNoise(pa, pb capacity.Percentiles) string {
	if pa.N > 0 && pb.N > 0 && pa.P50 == pb.P50 {
		return notApart("the same median of %d and %d requests", pa.N, pb.N)
	}
	return quantileNoise(pa, pb, 0.5, nil, nil, 1, "tokens")
}

// shareNoise compares two shares of n requests each (the cached share of
// the prompt tokens: a request's prefix is cached or not as a whole) by
// their binomial noise, in points.
func shareNoise(pa float64, na int, pb float64, nb int) string {
	if na == 0 || nb == 0 {
		return cannot("no sample")
	}
	if pa == pb {
		return notApart("the same share of %d and %d requests", na, nb)
	}
	lim := poissonSD * math.Sqrt(pa*(1-pa)/float64(na)+pb*(1-pb)/float64(nb))
	if math.Abs(pa-pb) <= lim {
		return notApart("within +-%.2g pt (binomial over %d and %d requests, %d sd)", 100*lim, na, nb, poissonSD)
	}
	return beyond("the difference %.2g pt is above +-%.2g (binomial over %d and %d requests, %d sd)", 100*math.Abs(pa-pb), 100*lim, na, nb, poissonSD)
}

// drainNoise judges two bursts' drain times by what the verdict asks of
// them, drained within the time allowed: one drain a run has no interval,
// so two on the same side of the limit (11.9 and 14.2 s within 30) are
// not told apart, and two on either side (11.9 and 34.1 s) cannot be:
// the verdicts that differ on it say so first.
func drainNoise(a, b *Report) string {
	ba, bb := a.Risk.Burst, b.Risk.Burst
	if ba == nil || bb == nil || ba.Timeline == nil || bb.Timeline == nil {
		return cannot("only one run has a burst")
	}
	in := func(x *Burst) bool { return x.Drained && x.DrainSeconds <= x.DrainWithin }
	switch ia, ib := in(ba), in(bb); {
	case ia && ib:
		return notApart("both drained within the time allowed (%s, %s)", fmtSeconds(ba.DrainWithin), fmtSeconds(bb.DrainWithin))
	case !ia && !ib:
		return notApart("neither drained within the time allowed (%s, %s)", fmtSeconds(ba.DrainWithin), fmtSeconds(bb.DrainWithin))
	case ia:
		return cannot("one drain a run has no interval: A's within %s, B's not", fmtSeconds(ba.DrainWithin))
	}
	return cannot("one drain a run has no interval: B's within %s, A's not", fmtSeconds(bb.DrainWithin))
}

// verdictOf classes a row's noise verdict: notToldApart, beyondNoise,
// cannotTell, or "" for a row without one.
func verdictOf(noise string) string {
	for _, v := range []string{notToldApart, beyondNoise, cannotTell} {
		if strings.HasPrefix(noise, v) {
			return v
		}
	}
	return ""
}
