package rules

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/testkit/freeport"
	"github.com/sloprober/sloprober/report/canary"
)

// TestEndToEndShards runs the same canary (20 req/s, 3 requests in 100
// answered 503) as three shards and as one process, side by side against
// one simulator, scraped by a real Prometheus as two jobs: the shards
// together send the configured rate, and their goodput and attainment are
// those of the single process within 5%. Then `sloprober report canary`
// reads that Prometheus: the shards' report and the single process's
// agree, the shards' sent count is what their /metrics say, and a
// selector that leaves a shard out, or a shard stopped, make the report
// say the shards are incomplete. It takes about 50 s.
func TestEndToEndShards(t *testing.T) {
	prom, bin, dir := e2eSetup(t)
	simAddr, promAddr := freeport.Addr(t), freeport.Addr(t)
	simCfg := filepath.Join(dir, "sim.yml")
	require.NoError(t, os.WriteFile(simCfg, []byte("slots: 0\nfixed: {ttft: 5ms, itl: 2ms}\nfaults: {error_rate: {\"503\": 0.03}}\n"), 0o600))
	start(t, "simulator", bin, "sim", "--config.file="+simCfg, "--web.listen-address="+simAddr)
	cfg := filepath.Join(dir, "sloprober.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
global: {max_rate: 50, max_in_flight: 100}
targets: [{name: sim, url: "http://%s/v1", model: sim-model, timeout: 10s}]
scenarios: [{name: chat, input_tokens: 16, output_tokens: 4, ignore_eos: true, slo: {ttft: 1s}}]
canary: [{target: sim, scenario: chat, rate: 20, arrival: constant}]
`, simAddr)), 0o600))
	var shards, shardAddrs []string
	var stopShard2 func()
	for i := range 3 {
		addr := freeport.Addr(t)
		shards, shardAddrs = append(shards, fmt.Sprintf("%q", addr)), append(shardAddrs, addr)
		args := []string{"run", "--config.file=" + cfg, "--web.listen-address=" + addr,
			"--storage.path=" + filepath.Join(dir, fmt.Sprint("runs", i)), fmt.Sprintf("--shard=%d/3", i)}
		if i == 2 {
			stopShard2 = startStoppable(t, "shard 2", bin, args...) // stopped at the end
			continue
		}
		start(t, fmt.Sprintf("shard %d", i), bin, args...)
	}
	sentLog := logSent(t, shardAddrs)
	single := freeport.Addr(t)
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
	// Every process was scraped from here on (28 samples a second apart
	// span 27 s): the reports' window starts here.
	scraped := time.Now().Add(-26 * time.Second)
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

	checkCanaryReports(t, bin, promAddr, scraped, shardAddrs, sentLog, stopShard2)
}

// checkCanaryReports runs `sloprober report canary` against the test's
// Prometheus while the shards and the single process run the same canary,
// then stops shard 2. About 13 s.
func checkCanaryReports(t *testing.T, bin, promAddr string, scraped time.Time, shardAddrs []string, sentLog *sentLog, stopShard2 func()) {
	// The window of the reports: whole seconds since every process was
	// scraped, at least 32 s. The 503s are injected at random, so the two
	// jobs' goodput differs by chance: over 32 s (about 620 good requests
	// a job, 19 failed) by 1.0% at one standard deviation, so the 5%
	// allowed is 5 standard deviations. (With one request in ten failed it
	// was 1.9%, and the check failed about once in 140 runs.)
	end := time.Now()
	if e := scraped.Add(32 * time.Second); e.After(end) {
		time.Sleep(time.Until(e))
		end = e
	}
	sent1 := shardsSent(t, shardAddrs)
	length := end.Sub(scraped).Truncate(time.Second)
	sent0, at := sentLog.at(end.Add(-length))
	sentLog.close()
	require.Less(t, at.Abs(), 100*time.Millisecond, "no reading of the shards' /metrics near the window's start")
	time.Sleep(500 * time.Millisecond) // the last scrapes before end ingested

	// The shards' report sent what their /metrics counted in the window.
	// increase() extrapolates the first and last samples in the window to
	// its edges at the window's mean rate; what is left is a request or
	// two per shard at each edge (the arrivals falling to a shard are
	// uneven), and up to one request of the reading's distance from the
	// start: 10 requests, half a second of the canary's 20 req/s.
	sharded := canaryReport(t, bin, promAddr, `{job="sharded"}`, end, length)
	require.Len(t, sharded.Loads, 1)
	require.InDelta(t, sent1-sent0, sharded.Loads[0].Sent, 10, "the shards' report against their /metrics")
	var perInstance float64
	for _, in := range sharded.Completeness.Instances {
		perInstance += in.CanarySent
	}
	require.InDelta(t, sharded.Loads[0].Sent, perInstance, 0.01, "the instances' shares add up to the load's")

	// The single process over the same window: the same numbers.
	single := canaryReport(t, bin, promAddr, `{job="single"}`, end, length)
	c := sharded.Completeness
	require.True(t, c.Complete, "the shards' report is complete: %q", c.Notes)
	require.Equal(t, []int{3, 3, 3}, []int{c.ShardCount, c.ShardsReported, c.ShardsAtEnd})
	require.Len(t, c.Instances, 3)
	require.True(t, single.Completeness.Complete, "%q", single.Completeness.Notes)
	require.Equal(t, 1, single.Completeness.ShardCount)
	s, o := sharded.Loads[0], single.Loads[0]
	require.Equal(t, []string{"sim", "chat"}, []string{s.Target, s.Scenario})
	t.Logf("over %s: sent %g on the shards' /metrics, %g in their report; shards against single: sent %g/%g req/s, goodput %g/%g, attainment %.4f/%.4f",
		length, sent1-sent0, s.Sent, s.SentRate, o.SentRate, s.Goodput, o.Goodput, *s.Attainment, *o.Attainment)
	within5 := func(what string, a, b float64) {
		require.InEpsilon(t, b, a, 0.05, "%s: shards %g, single %g", what, a, b)
	}
	within5("sent rate", s.SentRate, o.SentRate)
	require.InDelta(t, 20, s.SentRate, 1, "the configured rate")
	within5("goodput", s.Goodput, o.Goodput)
	within5("attainment", *s.Attainment, *o.Attainment)
	require.Less(t, *s.Attainment, 0.995, "3 requests in 100 fail: attainment is not trivially 1")
	require.Equal(t, 0.99, *s.Objective)
	require.Equal(t, 1.0, *s.Latencies[0].ThresholdSeconds, "the TTFT SLO beside it")
	// TTFT is 5 ms: both medians lie in the first bucket (0-10 ms), where
	// histogram_quantile's estimate moves only with the share of samples
	// under 10 ms. They agree within 10%.
	sp, op := s.Latencies[0].Percentiles[0], o.Latencies[0].Percentiles[0]
	require.NotNil(t, sp.Seconds, sp.Note)
	require.NotNil(t, op.Seconds, op.Note)
	require.Equal(t, op.Bucket, sp.Bucket)
	t.Logf("TTFT P50: shards %g s, single %g s", *sp.Seconds, *op.Seconds)
	require.InEpsilon(t, *op.Seconds, *sp.Seconds, 0.1, "TTFT P50: shards %g s, single %g s", *sp.Seconds, *op.Seconds)
	require.Nil(t, s.Latencies[0].Percentiles[2].Seconds, "no P99 of %g samples", s.Latencies[0].Samples)
	require.Contains(t, s.Latencies[0].Percentiles[2].Note, "not enough samples")
	md := canaryReportText(t, bin, promAddr, `{job="sharded"}`, end, length)
	require.Contains(t, md, "**Complete**: 3 of 3 shards reported in the window, 3 at its end, from 3 processes.")
	t.Logf("report canary --selector='{job=\"sharded\"}' --range=%s:\n%s", length, md)

	// A selector that leaves shard 2 out: incomplete, and it says which.
	partial := canaryReport(t, bin, promAddr, fmt.Sprintf(`{job="sharded", instance!=%q}`, shardAddrs[2]), end, length)
	c = partial.Completeness
	require.False(t, c.Complete)
	require.Equal(t, []int{3, 2, 2}, []int{c.ShardCount, c.ShardsReported, c.ShardsAtEnd})
	require.Contains(t, c.Notes, "1 of 3 shards reported nothing in the window (missing: 2): their share of every canary load is not in the numbers, and the rates are below the configured ones.")
	// Its rate is what the other two sent, as the whole report counted
	// them: the arrivals fall to the shards unevenly (185, 209 and 247
	// of 641 in one run, where 2/3 of 20 req/s was 1.04 req/s off).
	var others float64
	for _, in := range sharded.Completeness.Instances {
		if in.Instance != shardAddrs[2] {
			others += in.CanarySent
		}
	}
	require.InDelta(t, others/length.Seconds(), partial.Loads[0].SentRate, 0.25, "shards 0 and 1 sent %g", others)

	// Shard 2 stops: once Prometheus failed to scrape it five times, the
	// report over the last 20 s says it stopped reporting.
	stopping := time.Now()
	stopShard2()
	down := fmt.Sprintf(`count_over_time(up{instance=%[1]q}[20s]) - sum_over_time(up{instance=%[1]q}[20s]) >= 5`, shardAddrs[2])
	api := &promAPI{base: "http://" + promAddr}
	require.Eventually(t, func() bool { return api.nonEmpty(down) }, 20*time.Second, 200*time.Millisecond, "shard 2 is still scraped")
	stopped := canaryReport(t, bin, promAddr, `{job="sharded"}`, time.Now(), 20*time.Second)
	t.Logf("shard 2 stopped and missed 5 scrapes in %s", time.Since(stopping).Round(time.Millisecond))
	c = stopped.Completeness
	require.False(t, c.Complete)
	require.Equal(t, []int{3, 3, 2}, []int{c.ShardCount, c.ShardsReported, c.ShardsAtEnd})
	notes := strings.Join(c.Notes, "\n")
	require.Contains(t, notes, fmt.Sprintf("Shard 2 of 3 (%s) reported nothing after ", shardAddrs[2]))
	require.Contains(t, notes, fmt.Sprintf("%s (shard 2) failed ", shardAddrs[2]))
	require.False(t, c.Instances[2].ToEnd)
}

// canaryReport runs `sloprober report canary --format=json` on the
// Prometheus at promAddr and decodes the report.
func canaryReport(t *testing.T, bin, promAddr, selector string, end time.Time, length time.Duration) *canary.Report {
	t.Helper()
	var r canary.Report
	out := runReport(t, bin, promAddr, selector, end, length, "json")
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return &r
}

// canaryReportText is the same report in Markdown.
func canaryReportText(t *testing.T, bin, promAddr, selector string, end time.Time, length time.Duration) string {
	t.Helper()
	return runReport(t, bin, promAddr, selector, end, length, "md")
}

func runReport(t *testing.T, bin, promAddr, selector string, end time.Time, length time.Duration, format string) string {
	t.Helper()
	cmd := exec.Command(bin, "report", "canary", "--prometheus.url=http://"+promAddr, "--selector="+selector,
		"--end="+end.UTC().Format(time.RFC3339Nano), "--range="+length.String(), "--format="+format)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "report canary --selector=%s: %s", selector, stderr.String())
	return stdout.String()
}

// sentLog is the shards' canary requests sent, read from their /metrics
// every 100 ms while the test runs: what a report's window should count,
// from a time before the test knew it would be the window's start.
type sentLog struct {
	mu       sync.Mutex
	times    []time.Time
	sums     []float64
	stop     chan struct{}
	stopOnce sync.Once
	finished chan struct{}
}

// close stops the readings.
func (l *sentLog) close() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.finished
}

// logSent starts reading the shards' /metrics until the test ends.
func logSent(t *testing.T, addrs []string) *sentLog {
	l := &sentLog{stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(l.finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			at := time.Now()
			var sum float64
			for _, addr := range addrs {
				v, err := readSent(addr)
				if err != nil {
					sum = math.NaN() // not up yet: no reading
					break
				}
				sum += v
			}
			if !math.IsNaN(sum) {
				l.mu.Lock()
				l.times, l.sums = append(l.times, at), append(l.sums, sum)
				l.mu.Unlock()
			}
		}
	}()
	t.Cleanup(l.close)
	return l
}

// at returns the reading nearest to ts, and how far from it it was.
func (l *sentLog) at(ts time.Time) (float64, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	best, dist := math.NaN(), time.Duration(math.MaxInt64)
	for i, at := range l.times {
		if d := at.Sub(ts); d.Abs() < dist.Abs() {
			best, dist = l.sums[i], d
		}
	}
	return best, dist
}

// shardsSent is the processes' canary requests sent, from their /metrics.
func shardsSent(t *testing.T, addrs []string) float64 {
	t.Helper()
	var sum float64
	for _, addr := range addrs {
		sum += sentOnMetrics(t, addr)
	}
	return sum
}

// sentOnMetrics is a process's canary requests sent, from its /metrics.
func sentOnMetrics(t *testing.T, addr string) float64 {
	t.Helper()
	v, err := readSent(addr)
	require.NoError(t, err)
	return v
}

// readSent sums a process's sloprober_requests_sent_total{test="canary"}
// on its /metrics.
func readSent(addr string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "sloprober_requests_sent_total{") || !strings.Contains(line, `test="canary"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, errors.New("no sloprober_requests_sent_total of the canary yet")
	}
	return sum, nil
}

// startStoppable runs a process like start, and returns a function that
// stops it with SIGTERM and waits for it to exit (sloprober drains, then
// waits for one last scrape).
func startStoppable(t *testing.T, name, bin string, args ...string) (stop func()) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), name)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Errorf("%s did not stop within 30 s of SIGTERM", name)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return stop
}

// lockedBuffer is a bytes.Buffer for a process's output, read while it
// may still write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
