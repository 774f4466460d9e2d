package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSelectorMatchers(t *testing.T) {
	for _, tc := range []struct {
		sel, want, err string
	}{
		{`{job="sloprober"}`, `job="sloprober"`, ""},
		{` { job="a", instance=~"b:.*" , } `, `job="a", instance=~"b:.*"`, ""},
		{`{}`, ``, ""},
		{`{job="a}b"}`, `job="a}b"`, ""},
		{`{job="a\"}"}`, `job="a\"}"`, ""},
		{"{job=`x}`}", "job=`x}`", ""},
		{`{job='a)'}`, `job='a)'`, ""},
		{`job="a"`, "", "want label matchers in braces"},
		{`up{job="a"}`, "", "want label matchers in braces"},
		{`{job="a"}) or vector(1`, "", "want label matchers in braces"},
		{`{job="a"} or up{job="b"}`, "", `'}' outside a quoted value`},
		{`{job="a"}[5m]`, "", "want label matchers in braces"},
		{`{job="a}`, "", "a quoted value is not closed"},
		{``, "", "want label matchers in braces"},
	} {
		got, err := selectorMatchers(tc.sel)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.sel)
			continue
		}
		require.NoError(t, err, tc.sel)
		require.Equal(t, tc.want, got, tc.sel)
	}
}

func TestValidate(t *testing.T) {
	end := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		name string
		o    Options
		err  string
	}{
		{"defaults", Options{URL: "http://127.0.0.1:9090", Range: 24 * time.Hour, End: end}, ""},
		{"a password stays out of errors", Options{URL: "ftp://u:s3cr3t@host", Range: time.Hour}, "the Prometheus URL ftp://u:xxxxx@host: want http(s)://host:port"},
		{"no host", Options{URL: "http://", Range: time.Hour}, "want http(s)://host:port"},
		{"unparsable", Options{URL: "http://a b:9090/%zz", Range: time.Hour}, "the Prometheus URL: "},
		{"a range under a second", Options{URL: "http://h:9090", Range: 999 * time.Millisecond}, "the range 0s: must be at least 1s"},
		{"an end in the future", Options{URL: "http://h:9090", Range: time.Hour, End: time.Now().Add(time.Hour)}, "is in the future"},
		{"a bad selector", Options{URL: "http://h:9090", Range: time.Hour, Selector: `job="a"`}, "the selector job=\"a\""},
		{"a bad target", Options{URL: "http://h:9090", Range: time.Hour, Targets: []string{"a|b"}}, `"a|b" is no target or scenario name`},
		{"a bad scenario", Options{URL: "http://h:9090", Range: time.Hour, Scenarios: []string{".*"}}, `".*" is no target or scenario name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			err := o.Validate()
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "s3cr3t")
				return
			}
			require.NoError(t, err)
			require.Equal(t, DefaultSelector, o.Selector)
			require.Equal(t, DefaultTimeout, o.Timeout)
			require.Equal(t, DefaultMaxSeries, o.MaxSeries)
			require.Equal(t, end.Truncate(time.Millisecond), o.End)
			require.Equal(t, end.Truncate(time.Millisecond).Add(-24*time.Hour), o.Start())
		})
	}
	o := Options{URL: "http://h:9090", Range: 90*time.Minute + 500*time.Millisecond}
	require.NoError(t, o.Validate())
	require.Equal(t, 90*time.Minute, o.Range, "whole seconds")
	require.WithinDuration(t, time.Now(), o.End, 2*time.Second, "now by default")
}

// TestQueries: every query carries the selector, the canary's and the
// filters' matchers where its metric has them, a range of whole seconds,
// and sums after increase(), never before.
func TestQueries(t *testing.T) {
	o := &Options{URL: "http://h:9090", Range: 24 * time.Hour, Selector: `{job="sharded", instance!="a:1"}`,
		Targets: []string{"sim", "vllm-a"}, Scenarios: []string{"chat"}}
	qs := Queries(o)
	names := map[string]string{}
	for _, q := range qs {
		require.NotContains(t, names, q.Name, "names are unique")
		names[q.Name] = q.Expr
	}
	require.Len(t, qs, 12+11+4*5)
	load := `{job="sharded", instance!="a:1", test="canary", target=~"sim|vllm-a", scenario=~"chat"}`
	for name, want := range map[string]string{
		qShardCountMax: `max by (job, instance) (max_over_time(sloprober_shard_count{job="sharded", instance!="a:1"}[1d]))`,
		qFirstSample:   `min by (job, instance) (min_over_time(timestamp(sloprober_shard_count{job="sharded", instance!="a:1"})[1d:1m27s]))`,
		qReportingEnd:  `max by (job, instance) (sloprober_shard_count{job="sharded", instance!="a:1"})`,
		qScrapes:       `sum by (job, instance) (count_over_time(up{job="sharded", instance!="a:1"}[1d]))`,
		qInstanceSent:  `sum by (job, instance) (increase(sloprober_requests_sent_total` + load + `[1d]))`,
		qSent:          `sum by (target, scenario) (increase(sloprober_requests_sent_total` + load + `[1d]))`,
		qFinished:      `sum by (target, scenario, outcome) (increase(sloprober_requests_finished_total` + load + `[1d]))`,
		qObjectiveEnd:  `max by (target, scenario) (last_over_time(sloprober_slo_objective_ratio` + load + `[1d]))`,
		"ttft_count":   `sum by (target, scenario) (increase(sloprober_time_to_first_token_seconds_count` + load + `[1d]))`,
		"ttft_p99":     `histogram_quantile(0.99, sum by (target, scenario, le) (increase(sloprober_time_to_first_token_seconds_bucket` + load + `[1d])))`,
		"e2e_p50":      `histogram_quantile(0.5, sum by (target, scenario, le) (increase(sloprober_request_duration_seconds_bucket` + load + `[1d])))`,
		"itl_buckets":  `sum by (target, scenario, le) (increase(sloprober_inter_token_latency_seconds_bucket` + load + `[1d]))`,
	} {
		require.Equal(t, want, names[name], name)
	}
	for _, q := range qs {
		require.False(t, strings.Contains(q.Expr, "increase(sum") || strings.Contains(q.Expr, "rate(sum"), q.Expr)
	}

	// An empty selector, no filters, and a window of 38 s: 1 s steps.
	o = &Options{URL: "http://h:9090", Range: 38 * time.Second, Selector: "{}"}
	names = map[string]string{}
	for _, q := range Queries(o) {
		names[q.Name] = q.Expr
	}
	require.Equal(t, `max by (job, instance) (max_over_time(timestamp(sloprober_shard_count{})[38s:1s]))`, names[qLastSample])
	require.Equal(t, `sum by (target, scenario) (increase(sloprober_requests_good_total{test="canary"}[38s]))`, names[qGood])
}

func TestSubqueryStep(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		time.Second: time.Second, 999 * time.Second: time.Second, 1000 * time.Second: time.Second,
		1001 * time.Second: 2 * time.Second, time.Hour: 4 * time.Second, 24 * time.Hour: 87 * time.Second,
	} {
		require.Equal(t, want, subqueryStep(d), d)
	}
	require.Equal(t, "1h30m", rangeString(90*time.Minute))
	require.Equal(t, "1w", rangeString(7*24*time.Hour))
}
