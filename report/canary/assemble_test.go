package canary

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// loadResults are the load queries' vectors of one load: a query name
// and its samples' values, each with labels beyond target and scenario.
type loadResults map[string][]labeled

type labeled struct {
	v      float64
	labels []string
}

func one(v float64, labels ...string) []labeled { return []labeled{{v, labels}} }

// addLoad adds a load's results to res.
func addLoad(res map[string]model.Vector, target, scenario string, lr loadResults) {
	for q, samples := range lr {
		for _, s := range samples {
			res[q] = append(res[q], sampleOf(s.v, append([]string{"target", target, "scenario", scenario}, s.labels...)...))
		}
	}
}

// chatLoad is a load over an hour: 3,600 sent, 3,564 ended and counted
// (36 cancelled or shut down), 3,500 good; objective 0.99; a TTFT SLO of
// 500 ms.
func chatLoad() loadResults {
	return loadResults{
		qScheduled: one(3610),
		qSent:      one(3600),
		qGood:      one(3500),
		qDropped:   []labeled{{10, []string{"reason", "max_in_flight"}}, {0, []string{"reason", "late"}}},
		qFinished: []labeled{
			{3500, []string{"outcome", "ok"}}, {50, []string{"outcome", "http_5xx"}}, {14, []string{"outcome", "timeout"}},
			{30, []string{"outcome", "cancelled"}}, {6, []string{"outcome", "shutdown"}},
		},
		qMissed:        []labeled{{64, []string{"slo", "ttft"}}},
		qObjectiveEnd:  one(0.99),
		qObjectiveMin:  one(0.99),
		qObjectiveMax:  one(0.99),
		qThresholdMin:  []labeled{{0.5, []string{"slo", "ttft"}}, {0.2, []string{"slo", "max_itl"}}},
		qThresholdMax:  []labeled{{0.5, []string{"slo", "ttft"}}, {0.2, []string{"slo", "max_itl"}}},
		"ttft_count":   one(3550),
		"ttft_buckets": []labeled{{1000, []string{"le", "0.1"}}, {3000, []string{"le", "0.25"}}, {3500, []string{"le", "0.5"}}, {3550, []string{"le", "+Inf"}}},
		"ttft_p50":     one(0.17),
		"ttft_p95":     one(0.45),
		"ttft_p99":     one(math.Inf(1)),
		"itl_count":    one(999.6),
		"itl_p50":      one(0.01),
		"itl_p95":      one(0.02),
		"itl_p99":      one(0.03),
	}
}

func hourOptions() *Options {
	return &Options{URL: "http://u:s3cr3t@127.0.0.1:9090", End: testEnd, Range: time.Hour, Selector: DefaultSelector}
}

func TestAssemble(t *testing.T) {
	res := results(healthy("a:9477", 0, 1))
	addLoad(res, "sim", "chat", chatLoad())
	r, err := Assemble(hourOptions(), &Results{Vectors: res, Warnings: []string{"ttft_p99: something"}})
	require.NoError(t, err)
	require.Equal(t, "http://u:xxxxx@127.0.0.1:9090", r.Prometheus, "no password")
	require.Equal(t, Window{Start: testStart, End: testEnd, Seconds: 3600}, r.Window)
	require.True(t, r.Completeness.Complete)
	require.Equal(t, []string{"ttft_p99: something"}, r.Warnings)
	require.Len(t, r.Queries, len(Queries(hourOptions())))
	require.Len(t, r.Loads, 1)
	l := r.Loads[0]
	require.Equal(t, "sim", l.Target)
	require.Equal(t, 3610.0, l.Scheduled)
	require.Equal(t, 3600.0, l.Sent)
	require.Equal(t, 3564.0, l.Counted, "errors and timeouts count; cancelled and shutdown do not")
	require.Equal(t, 1.0, l.SentRate)
	require.InDelta(t, 3500.0/3600, l.Goodput, 0.001)
	require.InDelta(t, 3500.0/3564, *l.Attainment, 1e-12)
	require.Equal(t, 0.99, *l.Objective)
	require.False(t, *l.ObjectiveMet)
	require.Equal(t, 35.64, l.ErrorBudget.Allowed)
	require.Equal(t, 64.0, l.ErrorBudget.Bad)
	require.InDelta(t, 64/35.64, *l.ErrorBudget.Consumed, 1e-12)
	require.Equal(t, map[string]float64{"max_in_flight": 10, "late": 0}, l.Dropped)
	require.Equal(t, map[string]float64{"ttft": 64}, l.Missed)
	require.Empty(t, l.Notes)

	require.Len(t, l.Latencies, 4)
	ttft, tpot, itl := l.Latencies[0], l.Latencies[1], l.Latencies[2]
	require.Equal(t, "ttft", ttft.Name)
	require.Equal(t, 0.5, *ttft.ThresholdSeconds)
	require.Equal(t, 3550.0, ttft.Samples)
	require.Equal(t, 0.17, *ttft.Percentiles[0].Seconds)
	require.Equal(t, []float64{0.1, 0.25}, ttft.Percentiles[0].Bucket)
	require.Equal(t, []float64{0.25, 0.5}, ttft.Percentiles[1].Bucket)
	require.Equal(t, "above the highest finite bucket", ttft.Percentiles[2].Note)
	require.Nil(t, tpot.ThresholdSeconds, "no TPOT SLO")
	require.Equal(t, "no samples", tpot.Percentiles[0].Note)
	require.Equal(t, "max_itl", itl.SLO)
	require.Equal(t, 0.2, *itl.ThresholdSeconds, "the max_itl SLO beside the ITL")
	require.Equal(t, 0.03, *itl.Percentiles[2].Seconds, "999.6 samples round to 1,000")
	require.Nil(t, itl.Percentiles[2].Bucket, "no buckets returned")
}

// TestAssembleJudgement: attainment, the objective and the budget in the
// cases that have no plain answer.
func TestAssembleJudgement(t *testing.T) {
	for _, tc := range []struct {
		name       string
		change     func(loadResults)
		attainment float64 // -1: none
		met        *bool
		consumed   float64 // -1: none
		budget     bool
		notes      []string
	}{
		{name: "as is", change: func(loadResults) {}, attainment: 3500.0 / 3564, met: new(false), consumed: 64 / 35.64, budget: true},
		{
			name: "met",
			change: func(lr loadResults) {
				lr[qGood] = one(3560)
			},
			attainment: 3560.0 / 3564, met: new(true), consumed: 4 / 35.64, budget: true,
		},
		{
			name: "more good than counted (extrapolation): clamped at 1",
			change: func(lr loadResults) {
				lr[qGood] = one(3564.4)
			},
			attainment: 1, met: new(true), consumed: 0, budget: true,
		},
		{
			name: "nothing ended",
			change: func(lr loadResults) {
				lr[qFinished] = []labeled{{0, []string{"outcome", "ok"}}, {5, []string{"outcome", "cancelled"}}}
			},
			attainment: -1, consumed: -1, notes: []string{"No request ended in the window: no attainment."},
		},
		{
			name: "no objective series",
			change: func(lr loadResults) {
				delete(lr, qObjectiveEnd)
			},
			attainment: 3500.0 / 3564, consumed: -1, notes: []string{"No sloprober_slo_objective_ratio series: no objective to judge against."},
		},
		{
			name: "an objective of 1 allows no bad request",
			change: func(lr loadResults) {
				lr[qObjectiveEnd], lr[qObjectiveMin], lr[qObjectiveMax] = one(1), one(1), one(1)
			},
			attainment: 3500.0 / 3564, met: new(false), consumed: -1, budget: true,
		},
		{
			name: "the objective and a threshold changed",
			change: func(lr loadResults) {
				lr[qObjectiveMin], lr[qObjectiveEnd] = one(0.95), one(0.95)
				lr[qThresholdMin] = []labeled{{0.25, []string{"slo", "ttft"}}, {0.1, []string{"slo", "max_itl"}}}
			},
			attainment: 3500.0 / 3564, met: new(true), consumed: 64 / (0.05 * 3564), budget: true,
			notes: []string{
				"The objective changed in the window (from 95.00% to 99.00%, or the processes disagree); the error budget uses 95.00%, the value at its end.",
				"The max_itl threshold changed in the window (from 100 ms to 200 ms, or the processes disagree); 200 ms is shown.",
				"The ttft threshold changed in the window (from 250 ms to 500 ms, or the processes disagree); 500 ms is shown.",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := chatLoad()
			tc.change(lr)
			res := results(healthy("a:9477", 0, 1))
			addLoad(res, "sim", "chat", lr)
			r, err := Assemble(hourOptions(), &Results{Vectors: res})
			require.NoError(t, err)
			l := r.Loads[0]
			if tc.attainment < 0 {
				require.Nil(t, l.Attainment)
			} else {
				require.InDelta(t, tc.attainment, *l.Attainment, 1e-9)
			}
			require.Equal(t, tc.met, l.ObjectiveMet)
			require.Equal(t, tc.budget, l.ErrorBudget != nil)
			if tc.consumed < 0 {
				require.True(t, l.ErrorBudget == nil || l.ErrorBudget.Consumed == nil)
			} else {
				require.InDelta(t, tc.consumed, *l.ErrorBudget.Consumed, 1e-3)
			}
			require.Equal(t, tc.notes, l.Notes)
		})
	}
}

func TestAssembleLoadsAndErrors(t *testing.T) {
	// Two targets and scenarios, in order whatever the vectors' order.
	res := results(healthy("a:9477", 0, 1))
	for _, k := range []loadKey{{"vllm", "chat"}, {"sim", "rag"}, {"sim", "chat"}} {
		addLoad(res, k.target, k.scenario, chatLoad())
	}
	r, err := Assemble(hourOptions(), &Results{Vectors: res})
	require.NoError(t, err)
	var got []loadKey
	for _, l := range r.Loads {
		got = append(got, loadKey{l.Target, l.Scenario})
	}
	require.Equal(t, []loadKey{{"sim", "chat"}, {"sim", "rag"}, {"vllm", "chat"}}, got)

	// A paused load: its series are there, at no increase.
	res = results(healthy("a:9477", 0, 1))
	addLoad(res, "sim", "chat", loadResults{qSent: one(0), qFinished: []labeled{{0, []string{"outcome", "ok"}}}})
	r, err = Assemble(hourOptions(), &Results{Vectors: res})
	require.NoError(t, err)
	require.Equal(t, 0.0, r.Loads[0].Sent)

	// Nothing at all: the error names the selector and the window.
	_, err = Assemble(hourOptions(), &Results{Vectors: map[string]model.Vector{}})
	require.ErrorIs(t, err, ErrNoSeries)
	require.EqualError(t, err, `no sloprober series match {job="sloprober"} between 2026-05-01T12:00:00Z and 2026-05-01T13:00:00Z on http://u:xxxxx@127.0.0.1:9090: `+
		`no sloprober_shard_count{job="sloprober"} nor sloprober_requests_sent_total{job="sloprober", test="canary"} (check --selector, --range and --end)`)

	// Processes, but no canary of the targets asked for.
	o := hourOptions()
	o.Targets = []string{"nope"}
	_, err = Assemble(o, &Results{Vectors: results(healthy("a:9477", 0, 1))})
	require.ErrorIs(t, err, ErrNoSeries)
	require.ErrorContains(t, err, `sloprober_requests_sent_total{job="sloprober", test="canary", target=~"nope"} matches nothing, though 1 process reports (check --target and --scenario)`)
}
