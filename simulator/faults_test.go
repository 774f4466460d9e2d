package simulator_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/simulator"
)

// observed is what a client saw of a batch of requests under faults.
type observed struct {
	requests, ok                         int
	status                               map[int]int
	reset, stall, malformed, missingDone int
}

// classify sends n streaming requests from 8 workers and classifies what
// each reply did. A stall shows as a gap of at least stallMS between events.
func classify(t *testing.T, s *testSim, n int, stallMS float64) observed {
	t.Helper()
	o := observed{requests: n, status: map[int]int{}}
	var mu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range work {
				r := s.post(t, "/v1/chat/completions", chat("fault?", 4, true), nil)
				mu.Lock()
				o.status[r.status]++
				if r.status == http.StatusOK {
					o.ok++
					for i, e := range r.events {
						if e.data != "[DONE]" && !json.Valid([]byte(e.data)) {
							o.malformed++
						}
						if i > 0 && msSince(r.events[i-1].at, e.at) >= stallMS {
							o.stall++
						}
					}
					switch {
					case r.readErr != nil:
						o.reset++
						if msSince(r.events[len(r.events)-1].at, r.ended) >= stallMS {
							o.stall++ // stalled, then reset
						}
					case !r.done():
						o.missingDone++
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return o
}

// requireBinomial checks that k successes out of n are consistent with rate
// p: within four standard deviations (a false alarm about once in 16,000 runs).
func requireBinomial(t *testing.T, name string, k, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	require.InDelta(t, mean, float64(k), 4*sd+1, "%s: %d of %d at rate %g", name, k, n, p)
}

// TestFaultRates: every fault happens at its configured rate, and the
// simulator counts exactly the faults clients saw.
func TestFaultRates(t *testing.T) {
	s := startSim(t, fastSim+`
faults:
  error_rate: {"429": 0.1, "500": 0.1, "503": 0.05}
  reset_rate: 0.1
  stall: {rate: 0.1, duration: 300ms}
  malformed_rate: 0.1
  missing_done_rate: 0.1
`)
	// A stall of 300 ms is told from a gap of 250 ms or more: a loaded
	// machine running the race detector makes gaps of 90 ms without one.
	const n = 400
	o := classify(t, s, n, 250)
	requireBinomial(t, "429", o.status[429], n, 0.1)
	requireBinomial(t, "500", o.status[500], n, 0.1)
	requireBinomial(t, "503", o.status[503], n, 0.05)
	require.Equal(t, n, o.status[200]+o.status[429]+o.status[500]+o.status[503])
	requireBinomial(t, "reset", o.reset, o.ok, 0.1)
	requireBinomial(t, "stall", o.stall, o.ok, 0.1)
	requireBinomial(t, "malformed", o.malformed, o.ok, 0.1)
	requireBinomial(t, "missing [DONE]", o.missingDone, o.ok-o.reset, 0.1)

	st := s.Stats()
	require.Equal(t, int64(o.status[429]+o.status[500]+o.status[503]), st.FaultsInjected["error"])
	require.Equal(t, int64(o.reset), st.FaultsInjected["reset"])
	require.Equal(t, int64(o.stall), st.FaultsInjected["stall"])
	require.Equal(t, int64(o.malformed), st.FaultsInjected["malformed"])
	require.Equal(t, int64(o.missingDone), st.FaultsInjected["missing_done"])
	require.Equal(t, int64(o.status[429]), st.Responses["429"])
}

// TestFaultsAtRunTime: PUT /sim/faults replaces the faults, as JSON or YAML;
// omitted keys are 0, and a bad block changes nothing.
func TestFaultsAtRunTime(t *testing.T) {
	s := startSim(t, fastSim)
	put := func(body string) int {
		req, err := http.NewRequest(http.MethodPut, s.url+"/sim/faults", strings.NewReader(body))
		require.NoError(t, err)
		resp, err := s.client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	o := classify(t, s, 20, 90)
	require.Equal(t, 20, o.status[200])

	require.Equal(t, http.StatusOK, put(`{"error_rate": {"500": 1}}`))
	require.Equal(t, 20, classify(t, s, 20, 90).status[500])

	require.Equal(t, http.StatusOK, put("error_rate: {503: 1}\nmissing_done_rate: 1\n"))
	require.Equal(t, 20, classify(t, s, 20, 90).status[503])

	require.Equal(t, http.StatusBadRequest, put(`{"error_rate": {"503": 0.7, "500": 0.7}}`))
	require.Equal(t, 20, classify(t, s, 20, 90).status[503], "a rejected block must not change the faults")

	require.Equal(t, http.StatusOK, put(`missing_done_rate: 1`))
	o = classify(t, s, 20, 90)
	require.Equal(t, 20, o.status[200], "error_rate was omitted, so it is 0")
	require.Equal(t, 20, o.missingDone)

	require.Equal(t, http.StatusOK, put(`{}`))
	o = classify(t, s, 20, 90)
	require.Equal(t, 20, o.status[200])
	require.Zero(t, o.missingDone+o.reset+o.stall+o.malformed)

	require.Equal(t, simulator.Faults{Stall: simulator.StallConfig{Duration: simulator.DefaultConfig.Faults.Stall.Duration}}, s.Config().Faults)
}

// TestHeaderDelay: every response's headers come header_delay late.
func TestHeaderDelay(t *testing.T) {
	s := startSim(t, fastSim+`
faults: {header_delay: 150ms}
`)
	for _, stream := range []bool{true, false} {
		r := s.post(t, "/v1/chat/completions", chat("slow", 2, stream), nil)
		require.Equal(t, http.StatusOK, r.status)
		require.GreaterOrEqual(t, msSince(r.sent, r.headers), 150.0)
	}
	require.Equal(t, int64(2), s.Stats().FaultsInjected["header_delay"])
}

// TestResetWholeReply: a non-streaming reply can be reset too.
func TestNonStreamingFaults(t *testing.T) {
	s := startSim(t, fastSim+`
faults: {reset_rate: 1}
`)
	r := s.post(t, "/v1/chat/completions", chat("x", 2, false), nil)
	require.Error(t, r.readErr, "the connection must be reset")

	s = startSim(t, fastSim+`
faults: {malformed_rate: 1}
`)
	r = s.post(t, "/v1/chat/completions", chat("x", 2, false), nil)
	require.Equal(t, http.StatusOK, r.status)
	require.False(t, json.Valid(r.body), "the body must not be valid JSON: %s", r.body)
}
