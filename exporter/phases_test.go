package exporter_test

import (
	"fmt"
	"math"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
)

// histogram returns the histogram of a series, which must exist.
func histogram(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	m := find(t, reg, name, labels)
	require.NotNil(t, m, "no series %s%v", name, labels)
	return m.GetHistogram()
}

// exemplars returns the trace ids of a histogram's exemplars, classic
// buckets and native ones.
func exemplars(h *dto.Histogram) []string {
	var ids []string
	add := func(e *dto.Exemplar) {
		for _, l := range e.GetLabel() {
			if l.GetName() == "trace_id" {
				ids = append(ids, l.GetValue())
			}
		}
	}
	for _, b := range h.GetBucket() {
		if e := b.GetExemplar(); e != nil {
			add(e)
		}
	}
	for _, e := range h.GetExemplars() {
		add(e)
	}
	return ids
}

const phasesConfig = `
targets:
  - {name: sim, url: "%s", model: sim-model}
scenarios:
  - {name: pass, input_tokens: 40, output_tokens: 5, ignore_eos: true, slo: {ttft: 5s}}
  - {name: fail, input_tokens: 40, output_tokens: 5, ignore_eos: true, slo: {ttft: 1ms}}
canary:
  - {target: sim, scenario: pass, rate: 20, arrival: constant}
  - {target: sim, scenario: fail, rate: 20, arrival: constant}
`

// TestPhasesAndExemplars: against the simulator's engine, which reports
// its queue, prefill and decode time, every ok request observes queue,
// prefill and decode, and most the network before them; the phases before the first token add up to
// TTFT over all requests. With tracing on at a head ratio of 0, only the
// requests that missed an SLO are traced, and exactly their observations
// carry their trace id as an exemplar.
func TestPhasesAndExemplars(t *testing.T) {
	url := startSim(t, "slots: 8\n")
	cfg := mustConfig(t, fmt.Sprintf(phasesConfig, url))
	reg, _, mgr := run(t, cfg)
	mgr.SetTracing(true, 0)
	waitSent(t, reg, 20, "pass", "fail")
	mgr.Stop(5e9)

	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, scenario := range []string{"pass", "fail"} {
		ok := value(t, reg, "sloprober_requests_finished_total", load(scenario, "outcome", "ok"))
		require.Positive(t, ok)
		ttft := histogram(t, reg, "sloprober_time_to_first_token_seconds", load(scenario))
		var pre float64
		for _, phase := range config.Phases {
			h := histogram(t, reg, "sloprober_phase_duration_seconds", load(scenario, "phase", phase))
			switch phase {
			case config.PhaseQueue, config.PhasePrefill, config.PhaseDecode:
				require.Equal(t, ok, float64(h.GetSampleCount()), "every ok request has a %s phase", phase)
			case config.PhaseNetwork:
				// Network is what the server's reported time leaves
				// before it: none when the simulator stamps its first
				// token microseconds after the chunk left (within the
				// 1 ms of slack), as it may on a loaded machine.
				require.LessOrEqual(t, float64(h.GetSampleCount()), ok)
				require.GreaterOrEqual(t, float64(h.GetSampleCount()), ok/2, "most ok requests have a network phase")
			case config.PhaseGateway:
				require.Zero(t, h.GetSampleCount(), "no gateway in front")
			}
			if phase != config.PhaseDecode {
				pre += h.GetSampleSum()
			}
		}
		require.InDelta(t, ttft.GetSampleSum(), pre, 1e-6*float64(ttft.GetSampleCount()),
			"the phases before the first token add up to TTFT (%s)", scenario)

		ids := exemplars(ttft)
		if scenario == "pass" {
			require.Empty(t, ids, "good requests are not traced at a head ratio of 0")
			continue
		}
		require.NotEmpty(t, ids, "every bad request is traced, and its TTFT carries its trace id")
		for _, id := range ids {
			require.Regexp(t, hex32, id)
		}
		for _, name := range []string{"sloprober_request_duration_seconds", "sloprober_time_per_output_token_seconds", "sloprober_inter_token_latency_seconds"} {
			require.NotEmpty(t, exemplars(histogram(t, reg, name, load(scenario))), name)
		}
	}
	require.False(t, math.IsNaN(value(t, reg, "sloprober_phase_duration_seconds", load("pass", "phase", "queue"))))
}
