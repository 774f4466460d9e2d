package capacity

import (
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
)

// Low-confidence thresholds of the README's "Percentiles in reports": a
// P99 over fewer than 1,000 samples has fewer than 10 samples above it, a
// P95 over fewer than 200 fewer than 10 too.
const (
	minSamplesP95 = 200
	minSamplesP99 = 1000
)

// percentiles computes Percentiles of values (sorted in place).
func percentiles(values []float64) Percentiles {
	p := Percentiles{N: len(values)}
	if len(values) == 0 {
		return p
	}
	slices.Sort(values)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(values)))) - 1
		return values[max(i, 0)]
	}
	p.P50, p.P95, p.P99 = rank(0.50), rank(0.95), rank(0.99)
	if p.N < minSamplesP95 {
		p.LowConfidence = append(p.LowConfidence, "p95")
	}
	if p.N < minSamplesP99 {
		p.LowConfidence = append(p.LowConfidence, "p99")
	}
	return p
}

// serverSignals summarizes the server's own account of records, or nil.
func serverSignals(records []Record) *ServerSignals {
	var s ServerSignals
	var queue, prefill, decode []float64
	cached, prompt, reportedCache := 0, 0, false
	for i := range records {
		r := &records[i].Server
		if r.HasCached {
			reportedCache = true
			cached += r.Cached
			prompt += r.Prompt
		}
		if r.Implausible {
			s.Implausible++
		}
		if !r.HasTimings {
			continue
		}
		s.Reported++
		prefill = append(prefill, r.Prefill)
		if r.HasQueue {
			queue = append(queue, r.Queue)
		}
		if r.DecodePerToken > 0 {
			decode = append(decode, r.DecodePerToken)
		}
	}
	if s.Reported == 0 && s.Implausible == 0 && !reportedCache {
		return nil
	}
	s.Queue, s.Prefill, s.DecodePerToken = percentiles(queue), percentiles(prefill), percentiles(decode)
	if reportedCache {
		share := ratio(cached, prompt)
		s.CachedShare, s.CachedTokens, s.PromptTokens = &share, cached, prompt
	}
	return &s
}

// summarize computes a level from a window's records.
func summarize(l *Level, spec *config.LoadSpec, w windowData, minRequests int, batch time.Duration, level float64) {
	records := w.records
	secs := w.end.Sub(w.start).Seconds()
	l.Start, l.WindowSeconds = w.start, secs
	l.Scheduled = w.scheduled
	l.Sent = len(records)
	l.Outcomes = map[prober.Outcome]int{}
	if len(w.dropped) > 0 {
		l.Dropped = map[string]int{}
		for r, n := range w.dropped {
			l.Dropped[string(r)] = n
		}
	}
	type acc struct {
		counted, good int
		missed        map[string]int
	}
	byScenario := map[string]*acc{}
	for _, s := range spec.Scenarios {
		byScenario[s.Key.Scenario] = &acc{missed: map[string]int{}}
	}
	missed := map[string]int{}
	var ttft, tpot, e2e []float64
	var ok, good, in, out int
	mismatch := func(kind string) {
		if l.LengthMismatches == nil {
			l.LengthMismatches = map[string]int{}
		}
		l.LengthMismatches[kind]++
	}
	for i := range records {
		r := &records[i]
		l.Outcomes[r.Outcome]++
		a := byScenario[r.Scenario]
		if a == nil {
			continue
		}
		if r.Outcome == prober.OutcomeOK {
			ok++
		}
		in += r.InputTokens
		out += r.OutputTokens
		if r.InputMismatch {
			mismatch("input")
		}
		if r.OutputMismatch {
			mismatch("output")
		}
		if r.Counted {
			a.counted++
			l.Counted++
			for _, slo := range r.Missed {
				a.missed[slo]++
				missed[slo]++
			}
		}
		if r.Good {
			a.good++
			good++
		}
		if r.HasTTFT {
			ttft = append(ttft, r.TTFT.Seconds())
		}
		if r.HasTPOT {
			tpot = append(tpot, r.TPOT.Seconds())
		}
		if r.HasE2E {
			e2e = append(e2e, r.E2E.Seconds())
		}
	}
	per := func(n int) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(n) / secs
	}
	// Offered: every arrival of the window, sent or dropped (a closed
	// loop drops none); never below the requests sent.
	l.OfferedRate = per(max(w.scheduled, len(records)))
	l.CompletedRate, l.Goodput = per(ok), per(good)
	l.InputTokensRate, l.OutputTokensRate = per(in), per(out)
	l.Attainment = ratio(good, l.Counted)
	l.SLOAttainment = sloAttainment(spec, missed, l.Counted)
	slos := sloMap(spec)
	l.Interval = attainmentInterval(countedOutcomes(records, "", slos), w.start, batch, level)
	decisions := map[string]int{}
	for _, s := range spec.Scenarios {
		a := byScenario[s.Key.Scenario]
		sr := ScenarioResult{
			Scenario: s.Key.Scenario, Counted: a.counted, Good: a.good, Goodput: per(a.good),
			Attainment: ratio(a.good, a.counted), Objective: s.Objective,
			SLOAttainment: sloAttainment(&config.LoadSpec{Scenarios: []config.ScenarioSpec{s}}, a.missed, a.counted),
		}
		// A scenario of a mix that drew no request in the window does
		// not decide the level; one that drew requests is judged on its
		// own objective.
		sr.Met = a.counted == 0
		if a.counted > 0 {
			sr.Interval = attainmentInterval(countedOutcomes(records, s.Key.Scenario, slos), w.start, batch, level)
			sr.Decision = decide(sr.Interval, s.Objective)
			sr.Met = sr.Decision == DecisionMet
			decisions[sr.Decision]++
		}
		l.Scenarios = append(l.Scenarios, sr)
	}
	switch {
	case l.Counted == 0:
		l.Decision = DecisionInconclusive
	case decisions[DecisionMissed] > 0:
		l.Decision = DecisionMissed
	case decisions[DecisionInconclusive] > 0:
		l.Decision = DecisionInconclusive
	default:
		l.Decision = DecisionMet
	}
	l.Met = l.Decision == DecisionMet
	l.TTFT, l.TPOT, l.E2E = percentiles(ttft), percentiles(tpot), percentiles(e2e)
	l.ITL = percentiles(float64s(w.gaps))
	l.ITL.Sampled = w.gapsSeen > int64(len(w.gaps))
	l.Insufficient = len(records) < minRequests
	l.Server = serverSignals(records)
	l.Lengths, l.Longest = lengths(spec, records)
	l.Prober = proberHealth(w)
	if h := spec.HotTenant; h != nil {
		l.HotTenant = hotTenantResult(spec, records, w.start, batch, level)
	}
}

// countedOutcomes are the counted requests of records, of one scenario
// ("": of all), for an interval, with their SLO pressure under the
// scenarios' SLOs (sloMap).
func countedOutcomes(records []Record, scenario string, slos map[string][]config.SLO) []outcome {
	var out []outcome
	for i := range records {
		if r := &records[i]; r.Counted && (scenario == "" || r.Scenario == scenario) {
			out = append(out, outcome{sent: r.Sent, good: r.Good, pressure: pressure(r, slos[r.Scenario])})
		}
	}
	return out
}

// sloMap is the SLOs of a load's scenarios, by name.
func sloMap(spec *config.LoadSpec) map[string][]config.SLO {
	out := map[string][]config.SLO{}
	for _, s := range spec.Scenarios {
		out[s.Key.Scenario] = s.SLOs()
	}
	return out
}

// maxPressure bounds a request's SLO pressure: a failed request is at
// it, and no server's latency weighs more (a TTFT of an hour against an
// SLO of 100 ms would otherwise swamp the series it is judged in).
const maxPressure = 4

// pressure is a request's SLO pressure on each latency SLO of its
// scenario: its latency over that SLO's threshold (a TTFT of 300 ms
// against an SLO of 500 ms is 0.6; a request is good on latency at 1 or
// under), at most maxPressure; maxPressure on each for a request that
// failed or carried no text; NaN for an SLO the scenario does not set. A
// queue shows in it before it shows in misses: the interval's
// correlation (Interval) reads it.
func pressure(r *Record, slos []config.SLO) pressures {
	out := noPressure
	failed := r.Outcome != prober.OutcomeOK || !r.HasE2E
	for _, s := range slos {
		k := slices.Index(config.SLONames, s.Name)
		if k < 0 || k >= len(out) || s.Threshold <= 0 {
			continue // a quality check
		}
		var v time.Duration
		known := false
		switch s.Name {
		case "ttft":
			v, known = r.TTFT, r.HasTTFT
		case "ttfa":
			v, known = r.TTFA, r.HasTTFA
		case "tpot":
			v, known = r.TPOT, r.HasTPOT
		case "e2e":
			v, known = r.E2E, r.HasE2E
		case "max_itl":
			v, known = r.MaxITL, r.HasMaxITL
		}
		switch {
		case failed:
			out[k] = maxPressure
		case known:
			out[k] = min(v.Seconds()/s.Threshold.Seconds(), maxPressure)
		default:
			out[k] = 0 // met, as Measure counts a TPOT or gap it cannot measure
		}
	}
	return out
}

func float64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// lengths computes a level's Lengths and its Longest decile.
func lengths(spec *config.LoadSpec, records []Record) (*Lengths, *Longest) {
	if len(records) == 0 {
		return nil, nil
	}
	var in, out []float64
	for i := range records {
		if r := &records[i]; r.InputSent > 0 {
			in = append(in, float64(r.InputSent))
		}
		if r := &records[i]; r.Outcome == prober.OutcomeOK {
			out = append(out, float64(records[i].OutputTokens))
		}
	}
	ls := &Lengths{Input: percentiles(in), Output: percentiles(out)}
	if len(records) < 10 {
		return ls, nil
	}
	byInput := slices.Clone(records)
	slices.SortStableFunc(byInput, func(a, b Record) int { return b.InputSent - a.InputSent })
	top := byInput[:len(byInput)/10]
	lg := &Longest{MinInputTokens: top[len(top)-1].InputSent, Requests: len(top), SameLength: byInput[0].InputSent == byInput[len(byInput)-1].InputSent}
	lg.Counted, lg.Good, lg.TTFT = goodAndTTFT(top)
	lg.Attainment = ratio(lg.Good, lg.Counted)
	return ls, lg
}

// goodAndTTFT counts the counted and the good requests of records, and
// the percentiles of their TTFTs.
func goodAndTTFT(records []Record) (counted, good int, ttft Percentiles) {
	var ts []float64
	for i := range records {
		r := &records[i]
		if r.Counted {
			counted++
		}
		if r.Good {
			good++
		}
		if r.HasTTFT {
			ts = append(ts, r.TTFT.Seconds())
		}
	}
	return counted, good, percentiles(ts)
}

// ProberLagLimit and ProberCPULimit are where the prober's own health
// starts to shape what it measures: a send lag P99 over 10 ms, or more
// than 90% of its CPUs busy. A level over either says so.
const (
	ProberLagLimit = 10 * time.Millisecond
	ProberCPULimit = 0.9
)

func proberHealth(w windowData) *ProberHealth {
	h := &ProberHealth{Sends: int(w.lagsSeen), CPUSeconds: w.cpu.Seconds(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		SchedulerP99: w.sched.Seconds(), GCPauseP99: w.gc.Seconds()}
	lags := percentiles(float64s(w.lags))
	h.LagP99, h.LagP50 = lags.P99, lags.P50
	for _, v := range w.lags {
		h.LagMax = max(h.LagMax, float64(v))
	}
	if secs := w.end.Sub(w.start).Seconds(); secs > 0 {
		h.CPUShare = h.CPUSeconds / secs / float64(h.GOMAXPROCS)
	}
	return h
}

// sloAttainment is 1 - missed/counted for every SLO of the spec's
// scenarios.
func sloAttainment(spec *config.LoadSpec, missed map[string]int, counted int) map[string]float64 {
	out := map[string]float64{}
	for _, s := range spec.Scenarios {
		for _, slo := range s.SLOs() {
			out[slo.Name] = 1 - ratio(missed[slo.Name], counted)
		}
	}
	return out
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
