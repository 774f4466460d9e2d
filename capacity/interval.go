package capacity

import (
	"math"
	"slices"
	"time"

	"gonum.org/v1/gonum/dsp/fourier"
	"gonum.org/v1/gonum/stat/distuv"
)

// The decision rule of a level (the measurement contract's amendment "A
// level's verdict"): a level is judged on the confidence interval of its
// attainment, not on the attainment alone. 89 requests of which 86 were
// good attain 96.6%, above an objective of 95%; the interval is
// [90.4%, 98.8%], and another window at the same rate could as well
// attain 93%. Such a level is inconclusive: its window is extended until
// the interval lies on one side of the objective, or until its maximum.

// Decisions of a level, or of one scenario in it.
const (
	// DecisionMet: the interval's lower end is at or above the objective.
	DecisionMet = "met"
	// DecisionMissed: the interval's upper end is below the objective.
	DecisionMissed = "missed"
	// DecisionInconclusive: the interval straddles the objective, or
	// nothing was counted; it verifies nothing.
	DecisionInconclusive = "inconclusive"
)

// confidence is the two-sided level of every decision: 95%. A level that
// may be looked at several times (its batches as they come, stopping at
// the first look that decides) shares it among its looks (sequential.go):
// stopping at the first look that decides would otherwise raise the
// chance of a wrong decision with every look (at the objective itself,
// three looks at 95% each meet it 2.5% to 4.5% of the time instead of at
// most 2.5%).
const confidence = 0.95

// batchesPerWindow is how many batches a level's steady window is cut
// into for the batch means: 10 batches of a 2 min window are 12 s each,
// longer than a queue's busy period at any load a level is judged at.
// An extended window keeps the batch length, so it has more batches.
const batchesPerWindow = 10

// minBatches is the fewest non-empty batches whose means estimate a
// variance: with fewer, the interval assumes independent requests.
const minBatches = 3

// Interval is an attainment (good requests over counted ones) with its
// 95% confidence interval.
//
// Requests are not independent: while a queue lasts, the requests sent
// into it miss their TTFT together, and a binomial interval over N of
// them would be too narrow. The interval is Wilson's score interval over
// an effective sample size: the window is cut into batches of equal
// length (by the requests' send times), the variance of the attainment
// is estimated from the batches' own attainments (the batch means
// method, as a ratio estimator: the batches hold different numbers of
// requests), at the batch length and at twice it (the larger variance
// stands: misses that outlast a batch show at the longer one), and NEff
// = p(1-p) / variance is the number of independent requests that would
// have that variance, never more than N. With a
// variance from batches, the quantile is Student's t with batches - 1
// degrees of freedom rather than the normal one. Where the batches cannot
// tell (fewer than 3, or every request good or every one bad), NEff is N
// over the autocorrelation time below.
//
// Batches see only the correlation they are longer than, and a queue's
// swings can outlast them: 8 slots of 1.35 s at 4.4 req/s build a queue
// for tens of seconds, then none, and a minute of requests can be all
// good (or all but one) where the long run misses 10% of its TTFTs; the
// batch means over 3 s batches then claim hundreds of independent
// requests, and 12% of such levels met an objective of 95% in a
// simulation of that queue (sequential_test.go). So NEff is also at most
// N over the integrated autocorrelation time of the requests in the order
// they were sent (Geyer's initial monotone sequence, TestIntegratedTime):
// of their good-or-not, and of their SLO pressure, each request's worst
// latency over its SLO (a TTFT of 300 ms against 500 ms is 0.6), which
// shows the queue's swings even where no request missed. Where that bound
// is the lower, the quantile is the normal one.
//
// Worked numbers: 86 good of 89 (96.6%) in batches that vary no more than
// chance gives NEff 89 and [90.6%, 98.8%]. 810 good of 900 over 10 s,
// the 90 misses in two queues of 45 requests, gives NEff 23 (t with 9
// degrees of freedom) and [68.1%, 97.4%], where a binomial interval over
// 900 would claim [87.9%, 91.8%] and meet an objective of 80%.
type Interval struct {
	Lower float64 `json:"lower"`
	Upper float64 `json:"upper"`
	// N is the requests counted; NEff the effective sample size the
	// interval is of; Batches the non-empty batches of the window.
	N       int     `json:"n"`
	NEff    float64 `json:"n_eff"`
	Batches int     `json:"batches"`
	// Correlation is the requests' integrated autocorrelation time: how
	// many requests in a row are worth one independent one (1 when
	// they are independent); NEff is at most N over it.
	Correlation float64 `json:"correlation,omitempty"`
	// Confidence is the interval's own level: 0.95 for a level judged
	// once, the confidence of the look that settled a level looked at
	// as its batches came (sequential.go).
	Confidence float64 `json:"confidence,omitempty"`

	// nearest is the largest SLO pressure of its requests (0 where none
	// has a latency SLO): how close the closest came to a miss.
	nearest float64
	// p is the attainment the interval is of, and q the quantile its
	// ends are at (Student's t's where the batches' variance stood):
	// what a pool of levels weighs it by (pooledInterval).
	p, q float64
}

// outcome is one counted request for an interval: when it was sent,
// whether it was good, and its SLO pressure on each latency SLO (its
// latency over that SLO's threshold, in the order of config.SLONames;
// NaN where it has none).
type outcome struct {
	sent     time.Time
	good     bool
	pressure pressures
}

// pressures are a request's SLO pressures, in the order of
// config.SLONames (ttft, tpot, e2e, max_itl, ttfa).
type pressures [5]float64

// noPressure is a request's pressures where its scenario has no latency
// SLO.
var noPressure = pressures{math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()}

// attainmentInterval is the interval at level of the attainment of
// outcomes sent from start on, in batches of batch (0: one batch); nil
// with none.
func attainmentInterval(outcomes []outcome, start time.Time, batch time.Duration, level float64) *Interval {
	n := len(outcomes)
	if n == 0 {
		return nil
	}
	iv := batchInterval(batchesOf(outcomes, start, batch), goodOf(outcomes), n, level, correlation(outcomes))
	for _, o := range outcomes {
		for _, p := range o.pressure {
			if p > iv.nearest { // NaN is not
				iv.nearest = p
			}
		}
	}
	return iv
}

// goodOf counts the good outcomes.
func goodOf(outcomes []outcome) int {
	good := 0
	for _, o := range outcomes {
		if o.good {
			good++
		}
	}
	return good
}

// correlation is the integrated autocorrelation time of outcomes in the
// order they were sent: the largest of their good-or-not's and of each
// SLO's pressure series (where every one has it, and one came near it),
// at least 1.
func correlation(outcomes []outcome) float64 {
	bySent := func(a, b outcome) int { return a.sent.Compare(b.sent) }
	sorted := outcomes // most often in the order sent already: no copy
	if !slices.IsSortedFunc(outcomes, bySent) {
		sorted = slices.SortedStableFunc(slices.Values(outcomes), bySent)
	}
	goods := make([]float64, len(sorted))
	for i, o := range sorted {
		if o.good {
			goods[i] = 1
		}
	}
	var ac autocorrelator // one FFT and its buffers for every series
	tau := ac.integratedTime(goods)
	series := goods // goods is read: its array holds each series in turn
	for k := range len(pressures{}) {
		near, every := false, true
		for i, o := range sorted {
			p := o.pressure[k]
			if math.IsNaN(p) {
				every = false
				break
			}
			// Only a pressure near the SLO can turn into a miss:
			// below pressureFloor every request is alike, however
			// its latency wanders.
			series[i] = max(p, pressureFloor)
			near = near || p >= pressureNear
		}
		if every && near {
			tau = max(tau, ac.integratedTime(series))
		}
	}
	return tau
}

// pressureNear is the SLO pressure a request must reach for that SLO's
// series' correlation to count: where every request stayed under half of
// an SLO, its latency wanders (a TPOT of 15 to 23 ms against 50 ms
// follows the batch's size) without coming near a miss of it.
const pressureNear = 0.5

// pressureFloor is the SLO pressure below which requests count alike for
// their correlation: a fifth of their SLO. A floor of a third hid the
// first waits of a queue from the simulation study (4% of its levels at
// 93.5% decided met), a fifth did not.
const pressureFloor = 0.2

// integratedTime is the integrated autocorrelation time of a series, 1 +
// 2 sum of its autocorrelations, estimated by Geyer's initial monotone
// sequence (Geyer 1992, "Practical Markov chain Monte Carlo"): the sums
// of pairs of autocorrelations, (rho_0 + rho_1), (rho_2 + rho_3), ...,
// are positive and falling for a stationary series; the estimate sums
// them while they are, each at most the one before, which stops the sum
// where noise takes over. The autocorrelations come from the series'
// FFT (gonum's dsp/fourier), in N log N. 1 for fewer than 16 values or a
// constant series.
func integratedTime(x []float64) float64 {
	var ac autocorrelator
	return ac.integratedTime(x)
}

// autocorrelator computes integratedTime for series of one length with
// one FFT and its buffers: a level's correlation reads two or more series
// of its n requests, each padded to 2n (at 200 req/s over a minute, 32,768
// values), and allocating them again for each was most of a simulation
// study's time under -race.
type autocorrelator struct {
	fft         *fourier.FFT
	padded, acf []float64
	coeff       []complex128
}

func (ac *autocorrelator) integratedTime(x []float64) float64 {
	n := len(x)
	if n < 16 {
		return 1
	}
	mean := 0.0
	for _, v := range x {
		mean += v
	}
	mean /= float64(n)
	m := 1
	for m < 2*n {
		m *= 2
	}
	if len(ac.padded) != m {
		ac.fft, ac.padded, ac.coeff, ac.acf = fourier.NewFFT(m), make([]float64, m), nil, nil
	}
	for i, v := range x {
		ac.padded[i] = v - mean
	}
	clear(ac.padded[n:])
	ac.coeff = ac.fft.Coefficients(ac.coeff, ac.padded)
	for i, c := range ac.coeff {
		ac.coeff[i] = complex(real(c)*real(c)+imag(c)*imag(c), 0)
	}
	ac.acf = ac.fft.Sequence(ac.acf, ac.coeff)
	acf := ac.acf
	if acf[0] <= 1e-12*float64(n) {
		return 1 // constant
	}
	tau, last := -1.0, math.Inf(1)
	for k := 0; k+1 < n/2; k += 2 {
		pair := (acf[k] + acf[k+1]) / acf[0]
		if pair <= 0 {
			break
		}
		pair = min(pair, last)
		tau += 2 * pair
		last = pair
	}
	return max(tau, 1)
}

// batchesOf counts outcomes in batches of batch from start (0: one
// batch): batch i is [start + i batch, start + (i+1) batch).
func batchesOf(outcomes []outcome, start time.Time, batch time.Duration) []batchCount {
	var batches []batchCount
	for _, o := range outcomes {
		i := 0
		if batch > 0 {
			i = max(0, int(o.sent.Sub(start)/batch))
		}
		for len(batches) <= i {
			batches = append(batches, batchCount{})
		}
		batches[i].n++
		if o.good {
			batches[i].good++
		}
	}
	return batches
}

// batchInterval is the interval at level of good of n requests counted in
// batches, whose integrated autocorrelation time is tau
// (attainmentInterval); n is positive.
func batchInterval(batches []batchCount, good, n int, level, tau float64) *Interval {
	p := float64(good) / float64(n)
	iv := &Interval{N: n, NEff: float64(n), Confidence: level, Correlation: max(tau, 1)}
	z := distuv.UnitNormal.Quantile(1 - (1-level)/2)
	q := z
	// The correlation the batches may not see (see Interval): N over
	// the integrated autocorrelation time, at the normal quantile.
	iv.NEff = max(float64(n)/iv.Correlation, 1)
	// The batch means at two batch lengths, the batch and twice it: a
	// queue whose misses last longer than a batch shows at the longer
	// one. The wider interval stands (its half-width goes as
	// q / sqrt(NEff)). Where the batches' variance is below the
	// binomial's, the requests are taken as independent (the binomial's
	// variance, the normal quantile): never narrower than the binomial
	// interval over the requests counted. Where it is above, the
	// interval is over the sample size it implies, with Student's t (the
	// variance is itself an estimate).
	for scale, bs := range [][]batchCount{batches, pairs(batches)} {
		k, variance := ratioVariance(bs, p)
		if scale == 0 {
			iv.Batches = k
		}
		if k < minBatches || good == 0 || good == n || variance <= 0 {
			continue
		}
		neff := min(max(p*(1-p)/variance, 1), float64(n))
		qk := z
		if neff < float64(n) {
			qk = max(z, distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(k - 1)}.Quantile(1-(1-level)/2))
		}
		if qk*qk/neff > q*q/iv.NEff {
			iv.NEff, iv.Batches, q = neff, k, qk
		}
	}
	iv.Lower, iv.Upper = wilson(p, iv.NEff, q)
	iv.p, iv.q = p, q
	return iv
}

// pooledInterval is the interval at level of the attainment pooled over
// the samples of several levels' intervals (nil with none, or one
// without its attainment: read from a file): each weighs its effective
// sample at the normal quantile of its own confidence, NEff (z / q)^2 (a
// sample whose variance came from 10 batches, judged with Student's t,
// weighs less than its NEff), the pooled attainment is their weighted
// mean and its effective sample their sum, judged at the normal quantile.
// Worked numbers (regime c, a level at 3.27 req/s under one at 3.69 left
// undecided): 97.9% of 2,352 (NEff 254) and 96.9% of 2,658 (NEff 332),
// each [94.7, 99.2] and [94.0, 98.4] at 97.5%, pool to 97.3% of NEff 586:
// [95.3, 98.5], above an objective of 95%.
func pooledInterval(level float64, ivs ...*Interval) *Interval {
	if len(ivs) == 0 {
		return nil
	}
	z := distuv.UnitNormal.Quantile(1 - (1-level)/2)
	out := &Interval{Confidence: level, Correlation: 1}
	sum := 0.0
	for _, iv := range ivs {
		if iv == nil || iv.q <= 0 || iv.NEff <= 0 {
			return nil
		}
		own := distuv.UnitNormal.Quantile(1 - (1-iv.Confidence)/2)
		w := iv.NEff * (own / iv.q) * (own / iv.q)
		out.N += iv.N
		out.NEff += w
		out.Batches += iv.Batches
		sum += w * iv.p
		out.nearest = max(out.nearest, iv.nearest)
	}
	out.p, out.q = sum/out.NEff, z
	out.Lower, out.Upper = wilson(out.p, out.NEff, z)
	return out
}

// Percent is the interval in percent, rounded outward to a tenth: the
// interval shown holds the interval computed, so that a lower end of
// 94.96% against an objective of 95% reads 94.9, not 95.0, beside its
// "inconclusive".
func (iv *Interval) Percent() (lower, upper float64) {
	return math.Floor(1000*iv.Lower+1e-9) / 10, math.Ceil(1000*iv.Upper-1e-9) / 10
}

// batchCount is the requests of one batch and the good ones among them.
type batchCount struct{ n, good int }

// pairs merges adjacent batches: the batches of twice the length.
func pairs(bs []batchCount) []batchCount {
	out := make([]batchCount, 0, (len(bs)+1)/2)
	for i := 0; i < len(bs); i += 2 {
		c := bs[i]
		if i+1 < len(bs) {
			c.n, c.good = c.n+bs[i+1].n, c.good+bs[i+1].good
		}
		out = append(out, c)
	}
	return out
}

// ratioVariance is the ratio estimator's variance of the attainment p over
// the non-empty batches of bs, k/(k-1) * sum (g_i - p n_i)^2 / N^2, and k.
func ratioVariance(bs []batchCount, p float64) (k int, variance float64) {
	sum, n := 0.0, 0
	for _, b := range bs {
		if b.n == 0 {
			continue
		}
		k++
		n += b.n
		d := float64(b.good) - p*float64(b.n)
		sum += d * d
	}
	if k < 2 || n == 0 {
		return k, 0
	}
	return k, float64(k) / float64(k-1) * sum / (float64(n) * float64(n))
}

// wilson is Wilson's score interval of a proportion p over n trials at
// quantile q.
func wilson(p, n, q float64) (lower, upper float64) {
	q2 := q * q
	centre := (p + q2/(2*n)) / (1 + q2/n)
	half := q / (1 + q2/n) * math.Sqrt(p*(1-p)/n+q2/(4*n*n))
	return max(0, centre-half), min(1, centre+half)
}

// decide judges an interval against an objective.
func decide(iv *Interval, objective float64) string {
	switch {
	case iv == nil:
		return DecisionInconclusive
	case iv.Lower >= objective:
		return DecisionMet
	case iv.Upper < objective:
		return DecisionMissed
	}
	return DecisionInconclusive
}

// quantileInterval is a distribution-free 95% interval of the q-quantile
// of sorted values: the order statistics X(l) and X(u) with l and u the
// normal approximation's bounds of the binomial count of values below
// the quantile (l = floor(nq - z sd), u = ceil(nq + z sd) + 1). It
// reports false when a rank falls outside the values: the P99 of 50
// values has no upper bound in them, and the median of 5 none at all.
func quantileInterval(sorted []float64, q float64) (lower, upper float64, ok bool) {
	n := float64(len(sorted))
	if n == 0 {
		return 0, 0, false
	}
	z := distuv.UnitNormal.Quantile(1 - (1-confidence)/2)
	half := z * math.Sqrt(n*q*(1-q))
	lo := int(math.Floor(n*q - half))
	hi := int(math.Ceil(n*q+half)) + 1
	if lo < 1 || hi > len(sorted) {
		return 0, 0, false
	}
	return sorted[lo-1], sorted[hi-1], true
}

// lower and upper are an interval's ends in percent, rounded outward.
func lower(iv *Interval) float64 { l, _ := iv.Percent(); return l }
func upper(iv *Interval) float64 { _, u := iv.Percent(); return u }
