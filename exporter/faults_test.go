package exporter_test

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/simulator/simtest"
)

// faultRunEnv sets the duration of TestToggledFaults (a Go duration): 30 s
// by default, as `make test` runs it; `make bench-long` runs it for 10
// minutes.
const faultRunEnv = "SLOPROBER_FAULT_RUN"

// liveHeapBound is how much the live heap may grow from the end of the
// warm-up to any later sample. A probe keeps nothing per request beyond
// the last results of the landing page, so the live heap is flat whatever
// the run's length (about 1 MiB, simulator included); the bound leaves
// room for what a loaded 2-core machine under -race holds at one sample
// (requests piling up in flight, the race detector's own bookkeeping),
// and a leak of 1 KiB a request (at 40 req/s) still fails the 10-minute
// run.
const liveHeapBound = 16 << 20

// liveHeap returns the bytes of live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// faultCycle is what TestToggledFaults puts on the simulator in turn, by
// PUT /sim/faults; {} clears every fault.
var faultCycle = []string{
	`{}`,
	`{"error_rate": {"503": 0.3, "429": 0.2, "400": 0.1}}`,
	`{"reset_rate": 0.5}`,
	`{"malformed_rate": 0.3, "missing_done_rate": 0.3}`,
	`{"error_rate": {"500": 0.3}, "reset_rate": 0.3, "stall": {"rate": 0.2, "duration": "300ms"}}`,
}

// TestToggledFaults probes the simulator while its faults are toggled
// every 500 ms, scraping /metrics and the landing page as an operator
// would: every fault ends in its outcome, the live heap stays flat and no
// goroutine outlives the run. Its length is a parameter (faultRunEnv), so
// that `make bench-long` can run it for 10 minutes.
func TestToggledFaults(t *testing.T) {
	d := 30 * time.Second
	if s := os.Getenv(faultRunEnv); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		require.NoError(t, err, "$%s", faultRunEnv)
	}
	if testing.Short() {
		d = min(d, 5*time.Second)
	}
	// Registered first, so it runs after the simulator has stopped.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })

	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 5ms, itl: 2ms}\n")
	cfg := mustConfig(t, fmt.Sprintf(`
targets: [{name: sim, url: "%s/v1", model: sim-model, timeout: 2s}]
scenarios:
  - {name: chat, input_tokens: 64, output_tokens: 20, ignore_eos: true, slo: {ttft: 1s, tpot: 100ms}}
canary:
  - {target: sim, scenario: chat, rate: 40, arrival: poisson}
`, sim.URL))
	recent := exporter.NewRecent(20)
	reg, _, mgr := run(t, cfg, recent)
	defer mgr.Stop(0)
	h := exporter.NewHandler(webOptions(reg, recent, mgr.Loads))

	putFaults := func(body string) {
		req, err := http.NewRequest(http.MethodPut, sim.URL+"/sim/faults", strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
	}

	warmUp := max(3*time.Second, d/10)
	start := time.Now()
	toggle := time.NewTicker(500 * time.Millisecond)
	defer toggle.Stop()
	sample := time.NewTicker(max(time.Second, d/30))
	defer sample.Stop()
	var base, peak uint64
	for i := 0; time.Since(start) < d; {
		select {
		case <-toggle.C:
			i++
			putFaults(faultCycle[i%len(faultCycle)])
		case <-sample.C:
			for _, path := range []string{"/metrics", "/"} {
				code, _ := serve(t, h, http.MethodGet, path)
				require.Equal(t, http.StatusOK, code, path)
			}
			if time.Since(start) < warmUp {
				continue
			}
			heap := liveHeap()
			if base == 0 {
				base = heap
			}
			peak = max(peak, heap)
		}
	}
	putFaults(`{}`)
	mgr.Stop(5 * time.Second)
	t.Logf("%v of toggled faults: live heap %d KiB after the warm-up, at most %d KiB after", d, base>>10, peak>>10)
	require.NotZero(t, base, "no heap sample after the warm-up")
	require.LessOrEqual(t, peak, base+liveHeapBound, "live heap grew by %d KiB (%d KiB after the warm-up, at most %d KiB after; bound %d KiB)",
		(peak-base)>>10, base>>10, peak>>10, liveHeapBound>>10)

	v := func(name string, extra ...string) float64 { return value(t, reg, name, load("chat", extra...)) }
	for _, o := range []string{"ok", "http_5xx", "http_429", "http_4xx", "protocol_error", "stream_error"} {
		require.Positive(t, v("sloprober_requests_finished_total", "outcome", o), "outcome %s", o)
	}
	require.Zero(t, v("sloprober_requests_in_flight"))
	require.Zero(t, v("sloprober_requests_dropped_total", "reason", "late"), "the prober kept up")
}
