package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEndToEndShards runs the same canary (20 req/s, one request in ten
// answered 503) as three shards and as one process, side by side against
// one simulator, scraped by a real Prometheus as two jobs: the shards
// together send the configured rate, and their goodput and attainment are
// those of the single process within 5%. It takes about 40 s.
func TestEndToEndShards(t *testing.T) {
	prom, bin, dir := e2eSetup(t)
	simAddr, promAddr := freeAddr(t), freeAddr(t)
	simCfg := filepath.Join(dir, "sim.yml")
	require.NoError(t, os.WriteFile(simCfg, []byte("slots: 0\nfixed: {ttft: 5ms, itl: 2ms}\nfaults: {error_rate: {\"503\": 0.1}}\n"), 0o600))
	start(t, "simulator", bin, "sim", "--config.file="+simCfg, "--web.listen-address="+simAddr)
	cfg := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
global: {max_rate: 50, max_in_flight: 100}
targets: [{name: sim, url: "http://%s/v1", model: sim-model, timeout: 10s}]
scenarios: [{name: chat, input_tokens: 16, output_tokens: 4, ignore_eos: true, slo: {ttft: 1s}}]
canary: [{target: sim, scenario: chat, rate: 20, arrival: constant}]
`, simAddr)), 0o600))
	var shards []string
	for i := range 3 {
		addr := freeAddr(t)
		shards = append(shards, fmt.Sprintf("%q", addr))
		start(t, fmt.Sprintf("shard %d", i), bin, "run", "--config.file="+cfg, "--web.listen-address="+addr,
			"--storage.path="+filepath.Join(dir, fmt.Sprint("runs", i)), fmt.Sprintf("--shard=%d/3", i))
	}
	single := freeAddr(t)
	start(t, "single", bin, "run", "--config.file="+cfg, "--web.listen-address="+single, "--storage.path="+filepath.Join(dir, "runs-single"))

	rulesFile, err := filepath.Abs("sloprober.rules.yml")
	require.NoError(t, err)
	promCfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(promCfg, []byte(fmt.Sprintf(`
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: sharded
    static_configs: [{targets: [%s]}]
  - job_name: single
    static_configs: [{targets: [%q]}]
`, rulesFile, strings.Join(shards, ", "), single)), 0o600))
	start(t, "prometheus", prom, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	api := &promAPI{base: "http://" + promAddr}

	// Thirty seconds of both, then compare the last twenty.
	require.Eventually(t, func() bool {
		return api.nonEmpty(`min by (job) (sum_over_time(up[30s])) >= 28`) && api.nonEmpty(`count(count by (job) (up)) == 2`)
	}, 60*time.Second, 500*time.Millisecond, "Prometheus does not scrape every process for 30 s")
	// rate returns the relative difference of a counter's rate between
	// the shards together and the single process.
	rate := func(counter string) string {
		return fmt.Sprintf(`abs(sum(rate(%[1]s{job="sharded"}[20s])) - sum(rate(%[1]s{job="single"}[20s]))) / sum(rate(%[1]s{job="single"}[20s]))`, counter)
	}
	for _, q := range []string{
		`abs(sum(sloprober_intended_request_rate{job="sharded"}) - 20) < 1e-9`,
		`count(abs(sloprober_intended_request_rate{job="sharded"} - 20 / 3) < 1e-9) == 3`,
		`count(sloprober_shard_count{job="sharded"} == 3) == 3`,
		`abs(sum(rate(sloprober_requests_sent_total{job="sharded"}[20s])) - 20) < 1`,
		// Goodput, and attainment: good over finished.
		rate("sloprober_requests_good_total") + ` < 0.05`,
		`abs(
		   sum(increase(sloprober_requests_good_total{job="sharded"}[20s])) / sum(increase(sloprober_requests_finished_total{job="sharded"}[20s]))
		 - sum(increase(sloprober_requests_good_total{job="single"}[20s])) / sum(increase(sloprober_requests_finished_total{job="single"}[20s]))) < 0.05`,
		// Some requests failed: attainment is not trivially 1.
		`sum(increase(sloprober_requests_finished_total{job="sharded",outcome="http_5xx"}[20s])) > 0`,
	} {
		require.Eventually(t, func() bool { return api.nonEmpty(q) }, 20*time.Second, 500*time.Millisecond, "no data: %s", q)
	}
	require.False(t, api.nonEmpty(`ALERTS{alertname="SloproberShardMissing"}`), "every shard reports")
}
