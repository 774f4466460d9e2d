package rules

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v2"

	"github.com/sloprober/sloprober/internal/testkit/freeport"
)

// TestEndToEnd runs sloprober on its embedded default and a real
// Prometheus that scrapes it every 2s with the bundled rules, and checks
// that every recording rule and every dashboard query returns data; then it
// makes the simulator fail every request and checks that the error-ratio
// rules and the fast-burn alert expression respond. It takes about a
// minute; `go test -short` or SLOPROBER_SKIP_E2E=1 skips it locally (CI
// runs it).
func TestEndToEnd(t *testing.T) {
	prom, bin, dir := e2eSetup(t)

	proberAddr, simAddr, promAddr := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	start(t, "sloprober", bin, "run", "--web.listen-address="+proberAddr, "--sim.listen-address="+simAddr, "--storage.path="+t.TempDir())

	api := startPrometheus(t, prom, dir, proberAddr, promAddr, "2s")

	require.Eventually(t, func() bool { return api.nonEmpty(`up{job="sloprober"} == 1`) }, 30*time.Second, 200*time.Millisecond,
		"Prometheus does not scrape sloprober")

	// Every recording rule returns data.
	for _, name := range recordNames(t) {
		require.Eventually(t, func() bool { return api.nonEmpty(name) }, 60*time.Second, 500*time.Millisecond,
			"recording rule %s returns nothing", name)
	}
	// Every dashboard query returns data, variables substituted.
	for _, q := range dashboardQueries(t) {
		require.Eventually(t, func() bool { return api.nonEmpty(q) }, 30*time.Second, 500*time.Millisecond,
			"dashboard query returns nothing: %s", q)
	}
	// The dashboards as internal/dashrender draws them for the
	// documentation: every panel draws something, and Chromium shows
	// each page without an error.
	drawDashboards(t, api, 2*time.Minute, 2*time.Second, "")

	// Where did TTFT go: the simulator reports its queue and prefill, the
	// client measures the network; the phases before the first token add
	// up to the mean TTFT (within 1%), and decode has its own mean.
	for _, q := range []string{
		`target_scenario_test_phase:sloprober_phase_duration_seconds:ttft_mean5m{scenario="chat",phase="queue"}`,
		`target_scenario_test_phase:sloprober_phase_duration_seconds:ttft_mean5m{scenario="chat",phase="prefill"}`,
		`target_scenario_test_phase:sloprober_phase_duration_seconds:ttft_mean5m{scenario="chat",phase="network"}`,
		`target_scenario_test_phase:sloprober_phase_duration_seconds:mean5m{scenario="chat",phase="decode"} > 0`,
		`abs(sum by (target, scenario, test) (target_scenario_test_phase:sloprober_phase_duration_seconds:ttft_mean5m{scenario="chat"})
		   - on (target, scenario, test) target_scenario_test:sloprober_time_to_first_token_seconds:mean5m)
		 / on (target, scenario, test) target_scenario_test:sloprober_time_to_first_token_seconds:mean5m < 0.01`,
	} {
		require.Eventually(t, func() bool { return api.nonEmpty(q) }, 30*time.Second, 500*time.Millisecond, "no data: %s", q)
	}
	for _, q := range []string{
		`target_scenario_test_phase:sloprober_phase_duration_seconds:ttft_mean5m{phase="gateway"}`,
		`target_scenario_test_phase:sloprober_phase_duration_seconds:ttft_mean5m{phase="decode"}`,
	} {
		require.False(t, api.nonEmpty(q), "expected no data: %s", q)
	}

	// Healthy: once 20 requests count (the burn-rate guard), the chat error
	// ratio is 0 and nothing burns.
	burn := alertExpr(t, "SloproberErrorBudgetBurn")
	require.Eventually(t, func() bool {
		return api.nonEmpty(`target_scenario_test:sloprober_slo_requests:increase1h{scenario="chat"} >= 20`)
	}, 60*time.Second, 500*time.Millisecond, "the burn-rate guard needs 20 requests")
	require.True(t, api.nonEmpty(`target_scenario_test:sloprober_slo_error_ratio:ratio_rate5m{scenario="chat"} == 0`),
		"the healthy simulator has no errors")
	require.False(t, api.nonEmpty(chatOnly(burn)), "no burn while the simulator is healthy")

	// The simulator fails every request: the error ratios rise and the
	// fast-burn expression (the alert without its `for`) holds.
	req, err := http.NewRequest(http.MethodPut, "http://"+simAddr+"/sim/faults", strings.NewReader(`{"error_rate": {"500": 1}}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.Eventually(t, func() bool {
		return api.nonEmpty(`target_scenario_test_outcome:sloprober_requests_finished:rate5m{scenario="chat",outcome="http_5xx"} > 0`) &&
			api.nonEmpty(`target_scenario_test:sloprober_slo_error_ratio:ratio_rate5m{scenario="chat"} > 0.5`)
	}, 60*time.Second, 500*time.Millisecond, "the error-ratio rules do not respond")
	// Failed requests have no TTFT, and no phases in the histogram.
	require.Eventually(t, func() bool {
		return api.nonEmpty(`increase(sloprober_requests_finished_total{scenario="chat",outcome="http_5xx"}[10s]) > 0`) &&
			api.nonEmpty(`sum(increase(sloprober_phase_duration_seconds_count{scenario="chat"}[10s])) == 0`)
	}, 60*time.Second, 500*time.Millisecond, "failed requests are not in the phase histogram")
	require.Eventually(t, func() bool {
		return api.nonEmpty(chatOnly(burn)) &&
			api.nonEmpty(`ALERTS{alertname="SloproberErrorBudgetBurn",scenario="chat"}`)
	}, 90*time.Second, 500*time.Millisecond, "the fast-burn expression does not hold")
}

// e2eSetup skips an end-to-end test when asked to, and returns the
// Prometheus binary, a sloprober built for the test, and its directory.
func e2eSetup(t *testing.T) (prom, bin, dir string) {
	t.Helper()
	if testing.Short() || os.Getenv("SLOPROBER_SKIP_E2E") != "" {
		t.Skip("end-to-end test skipped (-short or SLOPROBER_SKIP_E2E)")
	}
	prom = os.Getenv("PROMETHEUS")
	if prom == "" {
		var err error
		prom, err = exec.LookPath("prometheus")
		require.NoError(t, err, "prometheus not found: run `make test` (it installs Debian's prometheus), set $PROMETHEUS, or skip with SLOPROBER_SKIP_E2E=1")
	}
	dir = t.TempDir()
	bin = filepath.Join(dir, "sloprober")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/sloprober").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return prom, bin, dir
}

// startPrometheus runs Prometheus on promAddr with the bundled rules,
// scraping sloprober on proberAddr and evaluating every interval.
func startPrometheus(t *testing.T, prom, dir, proberAddr, promAddr, interval string) *promAPI {
	t.Helper()
	rulesFile, err := filepath.Abs("sloprober.rules.yml")
	require.NoError(t, err)
	promCfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(promCfg, []byte(fmt.Sprintf(`
global: {scrape_interval: %s, evaluation_interval: %s}
rule_files: [%q]
scrape_configs:
  - job_name: sloprober
    static_configs: [{targets: [%q]}]
`, interval, interval, rulesFile, proberAddr)), 0o600))
	start(t, "prometheus", prom, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	return &promAPI{base: "http://" + promAddr}
}

// chatOnly keeps the series of an expression's result that belong to the
// embedded default's chat scenario.
func chatOnly(expr string) string {
	return fmt.Sprintf(`(%s) * on (target, scenario, test) group_left () (target_scenario_test:sloprober_intended_request_rate:sum{scenario="chat"} * 0 + 1)`, expr)
}

// start runs a process for the rest of the test, and shows its output if
// the test fails.
func start(t *testing.T, name, bin string, args ...string) {
	t.Helper()
	startEnv(t, name, nil, bin, args...)
}

// startEnv is start with environment variables added to the test's.
func startEnv(t *testing.T, name string, env []string, bin string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var mu sync.Mutex
	var log strings.Builder
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	require.NoError(t, cmd.Start(), name)
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		pw.Close()
		if t.Failed() {
			mu.Lock()
			t.Logf("%s output:\n%s", name, log.String())
			mu.Unlock()
		}
	})
}

type promAPI struct{ base string }

// nonEmpty reports whether an instant query returns at least one sample.
func (p *promAPI) nonEmpty(query string) bool {
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&r) != nil || r.Status != "success" {
		return false
	}
	return len(r.Data.Result) > 0
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile("sloprober.rules.yml")
	require.NoError(t, err)
	var rf ruleFile
	require.NoError(t, yaml.Unmarshal(b, &rf))
	return rf
}

func recordNames(t *testing.T) []string {
	var names []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				names = append(names, r.Record)
			}
		}
	}
	require.NotEmpty(t, names)
	return names
}

func alertExpr(t *testing.T, name string) string {
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == name {
				return r.Expr
			}
		}
	}
	t.Fatalf("no alert %s", name)
	return ""
}

// dashboardQueries returns every panel query of the dashboards, with the
// template variables replaced as Grafana would with "All" selected.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../dashboards/*.json")
	require.NoError(t, err)
	require.Len(t, files, 2)
	vars := regexp.MustCompile(`\$(target|scenario|test|instance)\b`)
	var queries []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var d struct {
			Panels []struct {
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		require.NoError(t, json.Unmarshal(b, &d), f)
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				q := vars.ReplaceAllString(tg.Expr, ".+")
				q = strings.ReplaceAll(q, "$__rate_interval", "30s")
				require.NotContains(t, q, "$", "an unknown variable in %s: %s", f, tg.Expr)
				queries = append(queries, q)
			}
		}
	}
	return queries
}
