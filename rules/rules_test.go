// Package rules holds sloprober's Prometheus rules; its tests check them
// with promtool (Prometheus 3.x and 2.42) and end to end against a real
// Prometheus scraping a real sloprober.
package rules

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sloprober/sloprober/internal/doccheck"
)

// promtools returns the promtool binaries to check the rules with: the
// Prometheus 3.x one that `make test` installs ($PROMTOOL) and Debian's
// Prometheus 2.42 one ($PROMTOOL_2, or promtool on the PATH).
func promtools(t *testing.T) map[string]string {
	t.Helper()
	tools := map[string]string{}
	p3 := os.Getenv("PROMTOOL")
	if p3 == "" {
		p3, _ = filepath.Abs("../.tools/bin/promtool")
	}
	_, err := os.Stat(p3)
	require.NoError(t, err, "Prometheus 3.x promtool not found: run `make test`, or set $PROMTOOL")
	tools["3.x"] = p3
	p2 := os.Getenv("PROMTOOL_2")
	if p2 == "" {
		p2, err = exec.LookPath("promtool")
		if err == nil && p2 == p3 {
			err = os.ErrNotExist
		}
		require.NoError(t, err, "Prometheus 2.42 promtool not found: run `make test` (it installs Debian's prometheus), or set $PROMTOOL_2")
	}
	tools["2.42"] = p2
	return tools
}

// TestPromtool: the rules load in Prometheus 2.42 and 3.x, and every unit
// test in tests/ passes with both.
func TestPromtool(t *testing.T) {
	tests, err := filepath.Glob("tests/*.yml")
	require.NoError(t, err)
	require.NotEmpty(t, tests)
	for version, tool := range promtools(t) {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(tool, "check", "rules", "sloprober.rules.yml").CombinedOutput()
			require.NoError(t, err, "promtool check rules:\n%s", out)
			out, err = exec.Command(tool, append([]string{"test", "rules"}, tests...)...).CombinedOutput()
			require.NoError(t, err, "promtool test rules:\n%s", out)
		})
	}
}

// TestDashboards: every dashboard query (variables set to "All", as the
// end-to-end test sets them) is valid PromQL for Prometheus 2.42 and 3.x,
// checked by promtool as the expression of a recording rule, and every
// recorded series it names (level:metric:operations) is one of the rules'.
// The end-to-end test then requires each query to return data.
func TestDashboards(t *testing.T) {
	queries := dashboardQueries(t)
	require.NotEmpty(t, queries)
	recorded := map[string]bool{}
	for _, name := range recordNames(t) {
		recorded[name] = true
	}
	names := regexp.MustCompile(`\b[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]*[a-zA-Z0-9_]\b`)
	var file strings.Builder
	file.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	for i, q := range queries {
		for _, name := range names.FindAllString(q, -1) {
			require.True(t, recorded[name], "a dashboard query names %s, which no recording rule records: %s", name, q)
		}
		fmt.Fprintf(&file, "      - record: dashboard_query_%d\n        expr: %q\n", i, q)
	}
	rules := filepath.Join(t.TempDir(), "dashboards.rules.yml")
	require.NoError(t, os.WriteFile(rules, []byte(file.String()), 0o600))
	for version, tool := range promtools(t) {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(tool, "check", "rules", rules).CombinedOutput()
			require.NoError(t, err, "promtool check rules on the dashboards' queries:\n%s", out)
		})
	}
}

// knownMetrics are the series that rules and dashboards may select: what
// sloprober exports (the measurement contract and its amendments, the
// test scheduler's gauges, the engine metrics it re-exports per target)
// and the standard process and Go collectors'. true marks a histogram,
// whose _bucket, _sum and _count series count as known. The end-to-end
// test cannot catch a misspelt name in a query that is empty by design
// (engine metrics of a target without server_metrics, a test's capacity
// before its first run), so names are checked here.
var knownMetrics = map[string]bool{
	"sloprober_time_to_first_token_seconds":        true,
	"sloprober_time_per_output_token_seconds":      true,
	"sloprober_inter_token_latency_seconds":        true,
	"sloprober_request_duration_seconds":           true,
	"sloprober_schedule_lag_seconds":               true,
	"sloprober_phase_duration_seconds":             true,
	"sloprober_time_to_first_answer_token_seconds": true,
	"sloprober_request_input_tokens":               true,
	"sloprober_request_output_tokens":              true,

	"sloprober_requests_scheduled_total":                     false,
	"sloprober_requests_dropped_total":                       false,
	"sloprober_requests_sent_total":                          false,
	"sloprober_requests_finished_total":                      false,
	"sloprober_responses_total":                              false,
	"sloprober_requests_good_total":                          false,
	"sloprober_slo_missed_total":                             false,
	"sloprober_input_tokens_total":                           false,
	"sloprober_output_tokens_total":                          false,
	"sloprober_good_output_tokens_total":                     false,
	"sloprober_output_chunks_total":                          false,
	"sloprober_token_count_fallbacks_total":                  false,
	"sloprober_length_mismatches_total":                      false,
	"sloprober_requests_in_flight":                           false,
	"sloprober_intended_request_rate":                        false,
	"sloprober_intended_concurrency":                         false,
	"sloprober_slo_threshold_seconds":                        false,
	"sloprober_slo_objective_ratio":                          false,
	"sloprober_target_info":                                  false,
	"sloprober_target_cost_per_hour":                         false,
	"sloprober_target_served_info":                           false,
	"sloprober_target_identity_changes_total":                false,
	"sloprober_reasoning_tokens_total":                       false,
	"sloprober_measurement_valid":                            false,
	"sloprober_measurement_invalid_reason":                   false,
	"sloprober_target_measurement_valid":                     false,
	"sloprober_target_measurement_invalid_reason":            false,
	"sloprober_self_cpu_saturation_ratio":                    false,
	"sloprober_self_scheduler_latency_p99_seconds":           false,
	"sloprober_self_gc_pause_p99_seconds":                    false,
	"sloprober_self_send_lag_p99_seconds":                    false,
	"sloprober_self_pool_wait_p99_seconds":                   false,
	"sloprober_calibration_frozen":                           false,
	"sloprober_calibration_rejected_total":                   false,
	"sloprober_config_last_reload_successful":                false,
	"sloprober_shard_count":                                  false,
	"sloprober_config_last_reload_success_timestamp_seconds": false,
	"sloprober_build_info":                                   false,

	"sloprober_test_info":                                 false,
	"sloprober_test_running":                              false,
	"sloprober_test_runs_total":                           false,
	"sloprober_test_runs_skipped_total":                   false,
	"sloprober_test_storage_failures_total":               false,
	"sloprober_test_last_verdict":                         false,
	"sloprober_test_last_run_timestamp_seconds":           false,
	"sloprober_test_next_run_timestamp_seconds":           false,
	"sloprober_test_capacity_requests_per_second":         false,
	"sloprober_test_capacity_goodput_requests_per_second": false,
	"sloprober_test_capacity_concurrency":                 false,

	"sloprober_server_requests_running":              false,
	"sloprober_server_requests_waiting":              false,
	"sloprober_server_kv_cache_usage_ratio":          false,
	"sloprober_server_prefix_cache_hit_ratio":        false,
	"sloprober_server_metrics_up":                    false,
	"sloprober_server_metrics_scrape_failures_total": false,

	"process_cpu_seconds_total":     false,
	"process_resident_memory_bytes": false,
	"go_memstats_heap_inuse_bytes":  false,
	"go_goroutines":                 false,
}

// exemplarMetrics are the histograms whose observations carry trace_id
// exemplars.
var exemplarMetrics = []string{
	"sloprober_time_to_first_token_seconds",
	"sloprober_time_per_output_token_seconds",
	"sloprober_inter_token_latency_seconds",
	"sloprober_request_duration_seconds",
}

var (
	promqlStrings    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers   = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges     = regexp.MustCompile(`\[[^\]]*\]`)
	promqlLabelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdents     = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*\b\s*\(?`)
	promqlKeywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "NaN": true, "Inf": true}
)

// selectedMetrics returns the metric names a PromQL expression selects,
// recorded series (level:metric:operations) left out: what remains once
// strings, label matchers, ranges and label lists are removed, and
// functions and keywords skipped.
func selectedMetrics(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = promqlMatchers.ReplaceAllString(e, "")
	e = promqlRanges.ReplaceAllString(e, "")
	e = promqlLabelLists.ReplaceAllString(e, "")
	var names []string
	for _, m := range promqlIdents.FindAllString(e, -1) {
		m = strings.TrimSpace(m)
		if strings.HasSuffix(m, "(") || strings.Contains(m, ":") || promqlKeywords[m] {
			continue
		}
		names = append(names, m)
	}
	return names
}

// known reports whether a selected series is one of knownMetrics.
func known(name string) bool {
	if _, ok := knownMetrics[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && knownMetrics[base] {
			return true
		}
	}
	return false
}

// TestSelectedMetricsKnown: every series the rules and the dashboards
// select is one sloprober (or the Go client) exports.
func TestSelectedMetricsKnown(t *testing.T) {
	require.ElementsMatch(t, []string{"sloprober_phase_duration_seconds_bucket", "go_goroutines"},
		selectedMetrics(`histogram_quantile(0.99, sum by (target, le) (rate(sloprober_phase_duration_seconds_bucket{phase=~"a|b"}[5m]))) > 0 and on (x) go_goroutines offset 1d or a:b:c * NaN`))
	var exprs []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	exprs = append(exprs, dashboardQueries(t)...)
	for _, e := range exprs {
		for _, name := range selectedMetrics(e) {
			require.True(t, known(name), "%s is no metric sloprober exports (add it to knownMetrics if it is new): %s", name, e)
		}
	}
}

// TestDashboardLayout: the dashboards' panels have unique ids, lie on the
// 24-column grid without overlapping, query the ${datasource} variable,
// repeat only over a multi-value variable, and ask for exemplars only
// where the query selects the buckets of a histogram that carries them.
func TestDashboardLayout(t *testing.T) {
	files, err := filepath.Glob("../dashboards/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	type datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	type panel struct {
		ID      int         `json:"id"`
		Type    string      `json:"type"`
		Title   string      `json:"title"`
		DS      *datasource `json:"datasource"`
		Repeat  string      `json:"repeat"`
		GridPos struct {
			H, W, X, Y int
		} `json:"gridPos"`
		Targets []struct {
			RefID    string      `json:"refId"`
			DS       *datasource `json:"datasource"`
			Expr     string      `json:"expr"`
			Exemplar bool        `json:"exemplar"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	want := datasource{Type: "prometheus", UID: "${datasource}"}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var d struct {
			UID        string  `json:"uid"`
			Panels     []panel `json:"panels"`
			Templating struct {
				List []struct {
					Name  string `json:"name"`
					Multi bool   `json:"multi"`
				} `json:"list"`
			} `json:"templating"`
		}
		require.NoError(t, json.Unmarshal(b, &d), f)
		require.NotEmpty(t, d.UID, f)
		multi := map[string]bool{}
		for _, v := range d.Templating.List {
			multi[v.Name] = v.Multi
		}
		ids := map[int]string{}
		for i, p := range d.Panels {
			name := fmt.Sprintf("%s: panel %d %q", f, p.ID, p.Title)
			require.NotZero(t, p.ID, name)
			require.NotContains(t, ids, p.ID, "%s: id also used by %q", name, ids[p.ID])
			ids[p.ID] = p.Title
			// Panels inside a collapsed row are not read by
			// dashboardQueries: keep rows open.
			require.Empty(t, p.Panels, "%s: a row with panels inside (collapsed)", name)
			g := p.GridPos
			require.True(t, g.W > 0 && g.H > 0 && g.X >= 0 && g.Y >= 0 && g.X+g.W <= 24, "%s: gridPos %+v", name, g)
			for _, q := range d.Panels[:i] {
				o := q.GridPos
				overlap := g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H
				require.False(t, overlap, "%s overlaps panel %d %q", name, q.ID, q.Title)
			}
			if p.Repeat != "" {
				require.True(t, multi[p.Repeat], "%s repeats over %q, no multi-value variable", name, p.Repeat)
			}
			if p.Type == "row" {
				require.Empty(t, p.Targets, name)
				continue
			}
			require.NotNil(t, p.DS, name)
			require.Equal(t, want, *p.DS, name)
			require.NotEmpty(t, p.Targets, name)
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.RefID, name)
				require.False(t, refs[tg.RefID], "%s: refId %s twice", name, tg.RefID)
				refs[tg.RefID] = true
				require.NotNil(t, tg.DS, "%s %s", name, tg.RefID)
				require.Equal(t, want, *tg.DS, "%s %s", name, tg.RefID)
				if tg.Exemplar {
					ok := false
					for _, m := range selectedMetrics(tg.Expr) {
						for _, h := range exemplarMetrics {
							ok = ok || m == h+"_bucket"
						}
					}
					require.True(t, ok, "%s %s asks for exemplars but selects no histogram carrying them: %s", name, tg.RefID, tg.Expr)
				}
			}
		}
	}
}

// TestRunbooks: every alert has a runbook_url, and it points to the
// alert's own section of docs/alerts.md.
func TestRunbooks(t *testing.T) {
	b, err := os.ReadFile("sloprober.rules.yml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &file))
	doc, err := os.ReadFile("../docs/alerts.md")
	require.NoError(t, err)
	anchors := doccheck.Anchors(string(doc))
	const base = "https://github.com/sloprober/sloprober/blob/main/docs/alerts.md#"
	n := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			url := r.Annotations["runbook_url"]
			require.Equal(t, base+strings.ToLower(r.Alert), url, r.Alert)
			require.True(t, anchors[strings.TrimPrefix(url, base)], "docs/alerts.md has no section %s", r.Alert)
		}
	}
	require.Equal(t, 16, n, "every alert checked")
}
