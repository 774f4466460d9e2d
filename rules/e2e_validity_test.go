package rules

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEndToEndStarvedProber starves sloprober on purpose (GOMAXPROCS=1 and
// a canary of about 64,000 chunks a second, more than one core reads,
// beside the simulator on the same machine) against a target that misses
// its SLO on every request, with a real Prometheus: the prober knows it
// is the problem (sloprober_measurement_valid 0, with a reason), the
// burn-rate alert that would page for the target is held while
// SloproberMeasurementInvalid's expression holds, and when the load is
// reloaded down, the measurements are valid again. The validity rule runs
// with a 10 s window and sustain (--validity.window, --validity.sustain)
// instead of 1 and 2 minutes, so the test takes about a minute.
func TestEndToEndStarvedProber(t *testing.T) {
	prom, bin, dir := e2eSetup(t)
	simAddr, proberAddr, promAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	simCfg := filepath.Join(dir, "sim.yml")
	require.NoError(t, os.WriteFile(simCfg, []byte("slots: 0\nfixed: {ttft: 10ms, itl: 1ms}\n"), 0o600))
	start(t, "simulator", bin, "sim", "--config.file="+simCfg, "--web.listen-address="+simAddr)
	cfg := filepath.Join(dir, "sloprober.yml")
	writeCfg := func(rate int) {
		require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
global: {max_rate: 1000, max_in_flight: 5000}
targets: [{name: sim, url: "http://%s/v1", model: sim-model, timeout: 10s, max_in_flight: 5000}]
# TTFT is 10 ms: every request misses a 1 ms SLO, and the target burns.
scenarios: [{name: chat, input_tokens: 16, output_tokens: 128, ignore_eos: true, slo: {ttft: 1ms}}]
canary: [{target: sim, scenario: chat, rate: %d, arrival: poisson}]
`, simAddr, rate)), 0o600))
	}
	writeCfg(500)
	startEnv(t, "sloprober", []string{"GOMAXPROCS=1"}, bin, "run", "--config.file="+cfg, "--web.listen-address="+proberAddr,
		"--storage.path="+filepath.Join(dir, "runs"), "--validity.window=10s", "--validity.sustain=10s")
	api := startPrometheus(t, prom, dir, proberAddr, promAddr, "1s")

	burn := alertExpr(t, "SloproberErrorBudgetBurn")
	hold := regexp.MustCompile(`\s+or\s+min by \(target\) \(min_over_time\(sloprober_target_measurement_valid\[5m\]\)\) == 0`)
	ungated := hold.ReplaceAllString(burn, "")
	require.NotEqual(t, burn, ungated, "the burn-rate alert is held by the targets' validity")

	require.Eventually(t, func() bool { return api.nonEmpty(`sloprober_measurement_valid == 0`) }, 90*time.Second, 500*time.Millisecond,
		"the starved prober does not know it")
	require.True(t, api.nonEmpty(`sloprober_target_measurement_valid{target="sim"} == 0`))
	require.True(t, api.nonEmpty(`sloprober_measurement_invalid_reason{reason=~"cpu|scheduler_latency|send_lag"} == 1`),
		"a reason the starvation explains")
	require.True(t, api.nonEmpty(alertExpr(t, "SloproberMeasurementInvalid")), "the prober's own alert holds")
	require.Eventually(t, func() bool { return api.nonEmpty(ungated) }, 30*time.Second, 500*time.Millisecond,
		"the target burns its budget (the alert without its hold)")
	require.False(t, api.nonEmpty(burn), "the page is held while the prober is the problem")

	// The load goes down to what one core carries: valid again.
	writeCfg(5)
	resp, err := http.Post("http://"+proberAddr+"/-/reload", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool { return api.nonEmpty(`sloprober_measurement_valid == 1`) }, 60*time.Second, 500*time.Millisecond,
		"valid again once the starvation ends")
	require.False(t, api.nonEmpty(alertExpr(t, "SloproberMeasurementInvalid")))
}
