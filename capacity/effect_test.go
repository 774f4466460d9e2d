package capacity

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/validity"
)

// TestReadDelays: a request's read delay is the sampler's period and
// floor, plus the longest stall overlapping its flight; a stall that
// began before the request and lasted into it counts, one that ended
// before it or began after it does not.
func TestReadDelays(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := newStalls(t0)
	s.add(at(100), 30*time.Millisecond)  // 100-130 ms, kept to 140
	s.add(at(500), 300*time.Millisecond) // 500-800 ms, kept to 810
	s.add(at(505), 20*time.Millisecond)  // the same 10 ms: the longest stays
	s.add(at(900), 5*time.Millisecond)   // 900-905 ms, kept to 915
	stalls := s.between(t0, at(3000))
	require.Len(t, stalls, 3, "the longest of each 10 ms")
	base := stallPeriod + stallFloor
	for _, tc := range []struct {
		name     string
		from, to int
		want     time.Duration
	}{
		{"before any stall", 0, 90, base},
		{"over the first", 90, 200, base + 30*time.Millisecond},
		{"between", 150, 490, base},
		{"inside the long one", 600, 700, base + 300*time.Millisecond},
		{"from inside the long one to past the short one", 790, 950, base + 300*time.Millisecond},
		{"after all", 1000, 2000, base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readDelays(stalls, [][2]time.Time{{at(tc.from), at(tc.to)}})
			require.Equal(t, []time.Duration{tc.want}, got)
			// between looks back the longest stall before from.
			require.Equal(t, got, readDelays(s.between(at(tc.from), at(tc.to)), [][2]time.Time{{at(tc.from), at(tc.to)}}))
		})
	}
}

// TestStallSampler: the sampler runs and stops, keeps the longest stall
// of each 10 ms for two hours, and between returns those that may overlap
// a span (one added here stands for a wake-up 40 ms past due, which a
// test cannot make the host cause).
func TestStallSampler(t *testing.T) {
	s := startStalls()
	t0 := time.Now()
	s.add(t0, 40*time.Millisecond)
	s.stop()
	got := s.between(t0.Add(-time.Second), t0.Add(time.Second))
	require.NotEmpty(t, got)
	require.Equal(t, 40*time.Millisecond, got[len(got)-1].late)
	require.Empty(t, s.between(t0.Add(time.Hour), t0.Add(time.Hour+time.Second)))
	// Two hours on, the ring has reused the bucket: it is gone.
	s.add(t0.Add(stallRetention), time.Millisecond)
	require.Empty(t, s.between(t0.Add(-time.Second), t0.Add(time.Second)))
	var none *stallSampler
	require.Nil(t, none.between(t0, t0), "a collector without stalls tracked")
}

// TestGoodIfEarlierOrLater: what a request would be with its stamps
// corrected by a read delay. Earlier (a missed or undecided level): a
// miss by less than the delay is good, a failure or a quality check
// stays bad. Later (a met level): only TPOT and the longest gap can look
// better with a late read, so only they are made worse.
func TestGoodIfEarlierOrLater(t *testing.T) {
	slos := []config.SLO{{Name: "ttft", Threshold: 500 * time.Millisecond}, {Name: "tpot", Threshold: 50 * time.Millisecond},
		{Name: "max_itl", Threshold: 200 * time.Millisecond}, {Name: "json_schema"}}
	ok := func(ttft, tpot, maxITL time.Duration, missed ...string) *Record {
		return &Record{Counted: true, Outcome: prober.OutcomeOK, HasE2E: true, E2E: time.Second, HasTTFT: true, TTFT: ttft,
			HasTPOT: true, TPOT: tpot, HasMaxITL: true, MaxITL: maxITL, OutputTokens: 11, Missed: missed, Good: len(missed) == 0}
	}
	d := 40 * time.Millisecond
	for _, tc := range []struct {
		name    string
		r       *Record
		earlier bool
	}{
		{"TTFT 530 ms, 40 ms late", ok(530*time.Millisecond, 0, 0, "ttft"), true},
		{"TTFT 560 ms, 40 ms late", ok(560*time.Millisecond, 0, 0, "ttft"), false},
		{"TPOT 53 ms over 10 tokens: 4 ms a token less", ok(0, 53*time.Millisecond, 0, "tpot"), true},
		{"TPOT 55 ms over 10 tokens", ok(0, 55*time.Millisecond, 0, "tpot"), false},
		{"a quality check", ok(0, 0, 0, "json_schema"), false},
		{"a TTFT and a quality check", ok(530*time.Millisecond, 0, 0, "ttft", "json_schema"), false},
		{"failed", &Record{Counted: true, Outcome: prober.OutcomeHTTP5xx, Missed: []string{"ttft"}}, false},
		{"good already: not a question for earlier", ok(0, 0, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.earlier, goodIfEarlier(tc.r, slos, d))
		})
	}
	require.True(t, goodIfLater(ok(900*time.Millisecond, 45*time.Millisecond, 150*time.Millisecond), slos, d), "TTFT is as measured: 900 ms only looked worse")
	require.False(t, goodIfLater(ok(0, 47*time.Millisecond, 0), slos, d), "47 ms + 4 ms a token is over 50")
	require.False(t, goodIfLater(ok(0, 0, 170*time.Millisecond), slos, d), "a gap of 170 ms may have been 210")
}

// TestDispersion: the index of dispersion of arrivals in bins of their
// mean gap: about 1 for Poisson arrivals, and for the same arrivals each
// sent a little late at random; much more when a prober stalls and sends
// the arrivals of its stall at once.
func TestDispersion(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	t0 := time.Unix(1_700_000_000, 0)
	const rate, secs = 4.0, 300.0
	var due []time.Time
	for s := r.ExpFloat64() / rate; s < secs; s += r.ExpFloat64() / rate {
		due = append(due, t0.Add(time.Duration(s*float64(time.Second))))
	}
	end := t0.Add(secs * time.Second)
	bin := time.Duration(float64(time.Second) / rate)
	poisson := dispersion(due, t0, end, bin)
	require.InDelta(t, 1, poisson, 0.15)
	// Each send 0-30 ms late at random (a busy host at 4 req/s).
	jitter := make([]time.Time, len(due))
	for i, d := range due {
		jitter[i] = d.Add(time.Duration(r.Float64() * float64(30*time.Millisecond)))
	}
	p := &ProberHealth{SendDispersion: dispersion(jitter, t0, end, bin), ScheduleDispersion: poisson}
	require.False(t, p.bursty(), "jitter of 30 ms at 250 ms a gap: %.3f against %.3f", p.SendDispersion, p.ScheduleDispersion)
	// Stalls of 870 ms every 2 s: the arrivals due in them go at once.
	stalled := make([]time.Time, len(due))
	for i, d := range due {
		off := d.Sub(t0) % (2 * time.Second)
		stalled[i] = d
		if off < 870*time.Millisecond {
			stalled[i] = d.Add(870*time.Millisecond - off)
		}
	}
	p.SendDispersion = dispersion(stalled, t0, end, bin)
	require.True(t, p.bursty(), "stalls of 870 ms at 250 ms a gap: %.3f against %.3f", p.SendDispersion, p.ScheduleDispersion)
	require.Zero(t, dispersion(due, t0, t0.Add(bin), bin), "fewer than two bins")
}

// TestJudgeEffect: a level over the validity thresholds is prober-bound
// only when the prober's delays could change its decision, and its note
// says which rule held.
func TestJudgeEffect(t *testing.T) {
	v := validity.DefaultConfig
	over := ProberHealth{Sends: 200, LagP99: 0.033, LagP50: 0.01, CPUShare: 0.05, GOMAXPROCS: 2, ReadDelayP99: 0.03, ReadDelayMax: 0.041,
		ScheduleDispersion: 1, SendDispersion: 1.02}
	for _, tc := range []struct {
		name        string
		decision    string
		concurrency int
		e2eP50      float64
		edit        func(p *ProberHealth)
		bound       bool
		note        string
	}{
		{"met, and met made worse", DecisionMet, 0, 1, func(p *ProberHealth) { p.DecisionIfBetter, p.DecisionIfWorse = DecisionMet, DecisionMet }, false,
			"prober late (send lag P99 33 ms, reads up to 41 ms late): met all the same"},
		{"met, but not with TPOT made worse", DecisionMet, 0, 1, func(p *ProberHealth) { p.DecisionIfBetter, p.DecisionIfWorse = DecisionMet, DecisionInconclusive }, true,
			"with every request's TPOT and longest gap made worse by its read delay it would be inconclusive"},
		{"missed, and missed made better", DecisionMissed, 0, 1, func(p *ProberHealth) { p.DecisionIfBetter, p.DecisionIfWorse = DecisionMissed, DecisionMissed }, false,
			"missed all the same with every request corrected by its read delay"},
		{"missed, but not made better", DecisionMissed, 0, 1, func(p *ProberHealth) { p.DecisionIfBetter, p.DecisionIfWorse = DecisionInconclusive, DecisionMissed }, true,
			"with every request corrected by its read delay it would be inconclusive"},
		{"missed, the sends in bunches", DecisionMissed, 0, 1, func(p *ProberHealth) {
			p.DecisionIfBetter, p.DecisionIfWorse, p.SendDispersion = DecisionMissed, DecisionMissed, 1.8
		}, true, "the sends came in bunches (dispersion 1.80 against the schedule's 1.00)"},
		{"inconclusive stays so", DecisionInconclusive, 0, 1, func(p *ProberHealth) {
			p.DecisionIfBetter, p.DecisionIfWorse = DecisionInconclusive, DecisionInconclusive
		}, false,
			"inconclusive all the same"},
		{"closed loop met while its clients waited on the prober", DecisionMet, 4, 0.2, func(p *ProberHealth) { p.DecisionIfBetter, p.DecisionIfWorse = DecisionMet, DecisionMet }, true,
			"its clients waited on the prober"},
		{"closed loop met, the prober's waits a small share of a cycle", DecisionMet, 4, 1.35, func(p *ProberHealth) { p.DecisionIfBetter, p.DecisionIfWorse = DecisionMet, DecisionMet }, false,
			"met all the same"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := over
			tc.edit(&p)
			l := &Level{Decision: tc.decision, Concurrency: tc.concurrency, Prober: &p}
			l.E2E.P50 = tc.e2eP50
			judgeEffect(l, &v, nil)
			require.Equal(t, []string{validity.ReasonSendLag}, p.Over)
			require.Equal(t, tc.bound, l.ProberBound(), l.Note)
			require.Contains(t, l.Note, tc.note)
			require.Contains(t, p.Diagnosis, "busy host")
		})
	}
	// Under the thresholds: nothing to judge.
	quiet := &Level{Decision: DecisionMissed, Prober: &ProberHealth{Sends: 200, LagP99: 0.001, GOMAXPROCS: 2, DecisionIfBetter: DecisionMet}}
	judgeEffect(quiet, &v, nil)
	require.False(t, quiet.ProberBound())
	require.Empty(t, quiet.Prober.Over)
	require.Empty(t, quiet.Note)
	// Stalls not tracked (a run before them): the thresholds alone.
	untracked := &Level{Decision: DecisionMet, Prober: &ProberHealth{Sends: 200, LagP99: 0.033, GOMAXPROCS: 2}}
	judgeEffect(untracked, &v, nil)
	require.True(t, untracked.ProberBound())
}
