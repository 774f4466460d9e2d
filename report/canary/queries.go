package canary

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// A Query is one PromQL expression of the report, evaluated at the end of
// the window; Name is how Assemble finds its result.
type Query struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
}

// Names of the queries about instances and shards. Their results are by
// (job, instance): a shard is a process, and Prometheus tells processes
// apart by their instance label.
const (
	qShardCountMax = "shard_count_max"
	qShardCountMin = "shard_count_min"
	qShardIndexMax = "shard_index_max"
	qShardIndexMin = "shard_index_min"
	qFirstSample   = "first_sample"
	qLastSample    = "last_sample"
	qSamples       = "shard_samples"
	qReportingEnd  = "reporting_at_end"
	qScrapes       = "scrapes"
	qScrapesUp     = "scrapes_up"
	qRestarts      = "restarts"
	qInstanceSent  = "instance_canary_sent"
)

// Names of the queries about loads, by (target, scenario) and at most one
// more label.
const (
	qScheduled    = "scheduled"
	qSent         = "sent"
	qGood         = "good"
	qDropped      = "dropped"
	qFinished     = "finished"
	qMissed       = "slo_missed"
	qObjectiveEnd = "objective_end"
	qObjectiveMin = "objective_min"
	qObjectiveMax = "objective_max"
	qThresholdMin = "threshold_min"
	qThresholdMax = "threshold_max"
)

// latency is one of the request histograms the report takes percentiles
// of, and the SLO that bounds it.
type latency struct {
	Name, Title, Metric, SLO string
}

var latencies = []latency{
	{"ttft", "TTFT", "sloprober_time_to_first_token_seconds", "ttft"},
	{"tpot", "TPOT", "sloprober_time_per_output_token_seconds", "tpot"},
	// The max_itl SLO bounds a request's longest gap; the histogram pools
	// every gap. The threshold is shown beside it all the same: it is the
	// line the tail of the gaps is judged against.
	{"itl", "ITL", "sloprober_inter_token_latency_seconds", "max_itl"},
	{"e2e", "E2E", "sloprober_request_duration_seconds", "e2e"},
}

func countQuery(l latency) string                { return l.Name + "_count" }
func bucketsQuery(l latency) string              { return l.Name + "_buckets" }
func quantileQuery(l latency, q quantile) string { return l.Name + "_" + q.Name }

// Queries returns every query of the report, in the order Fetch runs
// them. Counters are increase() over the window at its end: it adds the
// increases of each series across counter resets (a restarted shard), and
// sums over instances come after it, never before (a sum of counters
// resets whenever one of them does).
func Queries(o *Options) []Query {
	r := rangeString(o.Range)
	inst := o.selector()
	load := o.loadSelector()
	step := rangeString(subqueryStep(o.Range))
	qs := []Query{
		{qShardCountMax, fmt.Sprintf(`max by (job, instance) (max_over_time(sloprober_shard_count%s[%s]))`, inst, r)},
		{qShardCountMin, fmt.Sprintf(`min by (job, instance) (min_over_time(sloprober_shard_count%s[%s]))`, inst, r)},
		{qShardIndexMax, fmt.Sprintf(`max by (job, instance) (max_over_time(sloprober_shard_index%s[%s]))`, inst, r)},
		{qShardIndexMin, fmt.Sprintf(`min by (job, instance) (min_over_time(sloprober_shard_index%s[%s]))`, inst, r)},
		// When each process reported first and last, to the subquery's
		// step: range vectors do not give their samples' times.
		{qFirstSample, fmt.Sprintf(`min by (job, instance) (min_over_time(timestamp(sloprober_shard_count%s)[%s:%s]))`, inst, r, step)},
		{qLastSample, fmt.Sprintf(`max by (job, instance) (max_over_time(timestamp(sloprober_shard_count%s)[%s:%s]))`, inst, r, step)},
		// Each process's samples, for its scrape interval.
		{qSamples, fmt.Sprintf(`sum by (job, instance) (count_over_time(sloprober_shard_count%s[%s]))`, inst, r)},
		// A stopped process's series are marked stale by its first
		// failed scrape, so they are gone from an instant query at once.
		{qReportingEnd, fmt.Sprintf(`max by (job, instance) (sloprober_shard_count%s)`, inst)},
		{qScrapes, fmt.Sprintf(`sum by (job, instance) (count_over_time(up%s[%s]))`, inst, r)},
		{qScrapesUp, fmt.Sprintf(`sum by (job, instance) (sum_over_time(up%s[%s]))`, inst, r)},
		{qRestarts, fmt.Sprintf(`max by (job, instance) (changes(process_start_time_seconds%s[%s]))`, inst, r)},
		{qInstanceSent, fmt.Sprintf(`sum by (job, instance) (increase(sloprober_requests_sent_total%s[%s]))`, load, r)},

		{qScheduled, fmt.Sprintf(`sum by (target, scenario) (increase(sloprober_requests_scheduled_total%s[%s]))`, load, r)},
		{qSent, fmt.Sprintf(`sum by (target, scenario) (increase(sloprober_requests_sent_total%s[%s]))`, load, r)},
		{qGood, fmt.Sprintf(`sum by (target, scenario) (increase(sloprober_requests_good_total%s[%s]))`, load, r)},
		{qDropped, fmt.Sprintf(`sum by (target, scenario, reason) (increase(sloprober_requests_dropped_total%s[%s]))`, load, r)},
		{qFinished, fmt.Sprintf(`sum by (target, scenario, outcome) (increase(sloprober_requests_finished_total%s[%s]))`, load, r)},
		{qMissed, fmt.Sprintf(`sum by (target, scenario, slo) (increase(sloprober_slo_missed_total%s[%s]))`, load, r)},
		{qObjectiveEnd, fmt.Sprintf(`max by (target, scenario) (last_over_time(sloprober_slo_objective_ratio%s[%s]))`, load, r)},
		{qObjectiveMin, fmt.Sprintf(`min by (target, scenario) (min_over_time(sloprober_slo_objective_ratio%s[%s]))`, load, r)},
		{qObjectiveMax, fmt.Sprintf(`max by (target, scenario) (max_over_time(sloprober_slo_objective_ratio%s[%s]))`, load, r)},
		{qThresholdMin, fmt.Sprintf(`min by (target, scenario, slo) (min_over_time(sloprober_slo_threshold_seconds%s[%s]))`, load, r)},
		{qThresholdMax, fmt.Sprintf(`max by (target, scenario, slo) (max_over_time(sloprober_slo_threshold_seconds%s[%s]))`, load, r)},
	}
	for _, l := range latencies {
		qs = append(qs, Query{countQuery(l), fmt.Sprintf(`sum by (target, scenario) (increase(%s_count%s[%s]))`, l.Metric, load, r)})
		// The buckets themselves, for the bounds of the bucket each
		// percentile falls in: histogram_quantile interpolates within it.
		qs = append(qs, Query{bucketsQuery(l), fmt.Sprintf(`sum by (target, scenario, le) (increase(%s_bucket%s[%s]))`, l.Metric, load, r)})
		for _, q := range quantiles {
			qs = append(qs, Query{quantileQuery(l, q),
				fmt.Sprintf(`histogram_quantile(%g, sum by (target, scenario, le) (increase(%s_bucket%s[%s])))`, q.Q, l.Metric, load, r)})
		}
	}
	return qs
}

// selector is the user's selector, with extra matchers.
func (o *Options) selector(extra ...string) string {
	m, _ := selectorMatchers(o.Selector) // checked by Validate
	parts := make([]string, 0, 1+len(extra))
	if m != "" {
		parts = append(parts, m)
	}
	return "{" + strings.Join(append(parts, extra...), ", ") + "}"
}

// loadSelector picks the canary's series of the chosen targets and
// scenarios: step and soak tests have reports of their own, and their
// requests push a target on purpose.
func (o *Options) loadSelector() string {
	extra := []string{`test="canary"`}
	if len(o.Targets) > 0 {
		extra = append(extra, fmt.Sprintf(`target=~"%s"`, alternation(o.Targets)))
	}
	if len(o.Scenarios) > 0 {
		extra = append(extra, fmt.Sprintf(`scenario=~"%s"`, alternation(o.Scenarios)))
	}
	return o.selector(extra...)
}

// alternation is a regular expression matching exactly the names.
func alternation(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return strings.Join(q, "|")
}

// rangeString writes a range of whole seconds as Prometheus does: 1d,
// 1h30m, 38s.
func rangeString(d time.Duration) string {
	return model.Duration(d.Truncate(time.Second)).String()
}

// subqueryStep is the resolution of the first and last sample times: at
// most 1,000 steps over the window, whatever its length, and at least 1s.
func subqueryStep(d time.Duration) time.Duration {
	return time.Duration(max(1, (int64(d/time.Second)+999)/1000)) * time.Second
}
