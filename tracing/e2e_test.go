package tracing_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/exporter"
	"github.com/sloprober/sloprober/internal/testkit/jaegertest"
	"github.com/sloprober/sloprober/prober"
	"github.com/sloprober/sloprober/simulator/simtest"
	"github.com/sloprober/sloprober/tracing"
)

// finished keeps every finished request with its measurement.
type finished struct {
	mu      sync.Mutex
	results []*prober.Result
	meas    []prober.Measurement
}

func (f *finished) Observe(prober.LoadInfo) prober.Observer { return f }
func (f *finished) Update(prober.LoadInfo)                  {}
func (f *finished) Forget(prober.LoadInfo)                  {}
func (f *finished) Scheduled()                              {}
func (f *finished) Dropped(prober.DropReason)               {}
func (f *finished) Sent(time.Time, time.Duration)           {}
func (f *finished) Finished(r *prober.Result, m *prober.Measurement) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results = append(f.results, r)
	f.meas = append(f.meas, *m)
}

// traceparents records the traceparent header of every request by its
// request id, as the simulator received it.
type traceparents struct {
	mu sync.Mutex
	by map[string]string
}

func (tp *traceparents) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(prober.RequestIDHeader); id != "" {
			tp.mu.Lock()
			tp.by[id] = r.Header.Get("Traceparent")
			tp.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

const e2eConfig = `
global: {max_rate: 50, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model, metadata: {provider: sloprober-sim}}]
scenarios:
  - {name: chat, input_tokens: 200, output_tokens: 16, ignore_eos: true, slo: {ttft: 150ms, max_itl: 30ms}}
canary: [{target: sim, scenario: chat, rate: 12, arrival: poisson}]
tracing:
  endpoint: %s
  client_type: %s
  insecure: true
  sampling_fraction: 0.3
  timeout: 5s
`

// TestTracesInJaeger: sloprober probes the simulator (two batch slots, so
// requests queue at 12 req/s; one in five answered 503) and exports its
// spans to a real Jaeger. Every traced request, and only those, has its
// trace there: the CLIENT span with the traceparent's ids and the GenAI and
// sloprober attributes, and one child span per phase whose queue, prefill
// and decode agree with the simulator's own timings within 1 ms. Every
// failed request's span is there, marked as an error. The exemplars on
// /metrics name traces Jaeger has.
func TestTracesInJaeger(t *testing.T) {
	for _, client := range []string{config.TracingClientGRPC, config.TracingClientHTTP} {
		t.Run(client, func(t *testing.T) { testTracesInJaeger(t, client) })
	}
}

func testTracesInJaeger(t *testing.T, client string) {
	jaeger := jaegertest.Start(t)
	tps := &traceparents{by: map[string]string{}}
	sim := simtest.StartWith(t, "slots: 2\nfaults: {error_rate: {\"503\": 0.2}}\n", tps.wrap)
	endpoint := jaeger.OTLPGRPCEndpoint()
	if client == config.TracingClientHTTP {
		endpoint = jaeger.OTLPHTTPEndpoint()
	}
	cfg, err := config.Load(fmt.Appendf(nil, e2eConfig, sim.URL, endpoint, client), false)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	metrics := exporter.NewMetrics(reg)
	tr := tracing.New(promslog.NewNopLogger(), tracing.NewMetrics(reg), "e2e")
	require.NoError(t, tr.ApplyConfig(cfg))
	fin := &finished{}
	m := prober.NewManager(promslog.NewNopLogger(), prober.Fanout(metrics, fin, tr), "sloprober/test")
	m.SetTracing(cfg.Tracing.Enabled(), cfg.Tracing.SamplingFraction)
	metrics.ApplyConfig(cfg)
	require.NoError(t, m.ApplyConfig(cfg))
	require.Eventually(t, func() bool {
		fin.mu.Lock()
		defer fin.mu.Unlock()
		return len(fin.results) >= 40
	}, 30*time.Second, 20*time.Millisecond)
	m.Stop(10 * time.Second)
	tr.Stop() // exports what is left

	// The exemplars of /metrics, as Prometheus scrapes them (OpenMetrics).
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeOpenMetrics)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	exemplarIDs := map[string]bool{}
	for _, match := range regexp.MustCompile(`# \{trace_id="([0-9a-f]{32})"\}`).FindAllStringSubmatch(string(body), -1) {
		exemplarIDs[match[1]] = true
	}
	require.NotEmpty(t, exemplarIDs, "the histograms carry trace id exemplars")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fin.mu.Lock()
	defer fin.mu.Unlock()
	traced, failed, queued, stalled := 0, 0, 0, 0
	for i, r := range fin.results {
		meas := &fin.meas[i]
		sc := r.SpanContext
		require.True(t, sc.IsValid(), "every probe carries a trace context while tracing is on")
		tps.mu.Lock()
		sent, seen := tps.by[r.RequestID]
		tps.mu.Unlock()
		if seen {
			require.Equal(t, fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags()), sent, "the traceparent the simulator received")
		}
		require.Equal(t, r.RequestID, sc.TraceID().String(), "the trace id is the request id")
		if !prober.Traced(r, meas) {
			_, err := jaeger.Trace(ctx, sc.TraceID().String())
			require.ErrorIs(t, err, jaegertest.ErrTraceNotFound, "a good request outside the head sample is not exported")
			continue
		}
		traced++
		trace, err := jaeger.WaitTrace(ctx, sc.TraceID().String(), 1+len(meas.Split.Phases))
		require.NoError(t, err, "request %s (%s)", r.RequestID, r.Outcome)
		root, ok := trace.SpanByName("chat sim-model")
		require.True(t, ok, "the CLIENT span is named after the operation and model")
		require.Equal(t, sc.SpanID().String(), root.SpanID, "the CLIENT span is the traceparent's span")
		require.Empty(t, root.Parent())
		require.Equal(t, r.Sent.UnixMicro(), root.StartTime)
		require.InDelta(t, r.Ended.Microseconds(), root.Duration, 1)
		tag := func(s *jaegertest.Span, key string) any {
			v, ok := s.Tag(key)
			require.True(t, ok, "span %s has no %s", s.OperationName, key)
			return v
		}
		require.Equal(t, "client", tag(root, "span.kind"))
		require.Equal(t, "chat", tag(root, "gen_ai.operation.name"))
		require.Equal(t, "sloprober-sim", tag(root, "gen_ai.provider.name"))
		require.Equal(t, "sim-model", tag(root, "gen_ai.request.model"))
		require.EqualValues(t, 16, tag(root, "gen_ai.request.max_tokens"))
		require.Equal(t, true, tag(root, "gen_ai.request.stream"))
		require.Equal(t, "127.0.0.1", tag(root, "server.address"))
		require.Equal(t, "sim", tag(root, "sloprober.target"))
		require.Equal(t, "chat", tag(root, "sloprober.scenario"))
		require.Equal(t, "canary", tag(root, "sloprober.test"))
		require.Equal(t, string(r.Outcome), tag(root, "sloprober.outcome"))
		require.Equal(t, r.RequestID, tag(root, "sloprober.request_id"))
		require.Equal(t, "sloprober", trace.Processes[root.ProcessID].ServiceName)
		if meas.Good {
			require.Equal(t, "good", tag(root, "sloprober.verdict"))
		} else {
			require.Equal(t, "bad", tag(root, "sloprober.verdict"))
		}
		if r.Outcome != prober.OutcomeOK {
			failed++
			require.Equal(t, string(r.Outcome), tag(root, "error.type"))
			require.Equal(t, true, tag(root, "error"), "a failed request's span is an error")
			continue
		}
		require.Equal(t, "sim-model", tag(root, "gen_ai.response.model"))
		require.EqualValues(t, r.Usage.PromptTokens, tag(root, "gen_ai.usage.input_tokens"))
		require.EqualValues(t, 16, tag(root, "gen_ai.usage.output_tokens"))
		require.InDelta(t, meas.TTFT.Seconds(), tag(root, "gen_ai.response.time_to_first_chunk"), 1e-9)
		if len(meas.Missed) > 0 {
			require.NotNil(t, tag(root, "sloprober.slo_missed"))
		}
		if meas.MaxITL > 30*time.Millisecond {
			stall, ok := root.Event("stall")
			require.True(t, ok, "a gap over the scenario's max ITL (%s) is a stall event", meas.MaxITL)
			gap, _ := stall.Field("sloprober.stall.gap")
			require.Greater(t, gap, 0.030)
			stalled++
		}
		first, ok := root.Event("first_token")
		require.True(t, ok)
		require.Equal(t, r.Sent.Add(r.Chunks[0]).UnixMicro(), first.Timestamp)

		// The phases: children of the CLIENT span, and the simulator's truth.
		truth := map[string]float64{
			config.PhaseQueue: *r.Timings.QueueMS, config.PhasePrefill: r.Timings.PromptMS, config.PhaseDecode: r.Timings.PredictedMS,
		}
		for _, p := range meas.Split.Phases {
			s, ok := trace.SpanByName(p.Phase)
			require.True(t, ok, "phase %s", p.Phase)
			require.Equal(t, root.SpanID, s.Parent())
			require.Equal(t, r.Sent.Add(p.Start).UnixMicro(), s.StartTime, "%s starts where the split put it", p.Phase)
			require.Equal(t, p.Source, tag(s, "sloprober.phase.source"))
			if want, ok := truth[p.Phase]; ok {
				require.InDelta(t, want, float64(s.Duration)/1e3, 1, "%s agrees with the simulator's own timing within 1 ms", p.Phase)
				delete(truth, p.Phase)
			}
		}
		require.Empty(t, truth, "queue, prefill and decode are all there")
		if *r.Timings.QueueMS > 10 {
			queued++
		}
	}
	t.Logf("%d requests, %d traced, %d of them failed, %d queued over 10 ms, %d stalled; %d exemplars", len(fin.results), traced, failed, queued, stalled, len(exemplarIDs))
	require.Positive(t, failed, "failed requests are traced")
	require.Positive(t, queued, "some requests queued")

	for id := range exemplarIDs {
		_, err := jaeger.Trace(ctx, id)
		require.NoError(t, err, "exemplar %s names a trace Jaeger has", id)
	}
}

// TestTracingReload: tracing follows the configuration's reloads. Off, no
// probe carries a trace context; on, with Jaeger as the collector, every
// request is traced at a ratio of 1; moved to a collector that is down,
// the spans are counted as failed and Jaeger receives nothing more; off
// again, the trace context is gone.
func TestTracingReload(t *testing.T) {
	jaeger := jaegertest.Start(t)
	sim := simtest.Start(t, "slots: 0\nfixed: {ttft: 1ms, itl: 1ms}\n")
	const yml = `
global: {max_rate: 50, max_in_flight: 100}
targets: [{name: sim, url: "%s/v1", model: sim-model}]
scenarios: [{name: chat, input_tokens: 8, output_tokens: 2}]
canary: [{target: sim, scenario: chat, rate: 20, arrival: constant}]
%s`
	load := func(tracingSection string) *config.Config {
		cfg, err := config.Load(fmt.Appendf(nil, yml, sim.URL, tracingSection), false)
		require.NoError(t, err)
		return cfg
	}
	reg := prometheus.NewRegistry()
	tr := tracing.New(promslog.NewNopLogger(), tracing.NewMetrics(reg), "reload")
	defer tr.Stop()
	fin := &finished{}
	m := prober.NewManager(promslog.NewNopLogger(), prober.Fanout(fin, tr), "sloprober/test")
	defer m.Stop(time.Second)
	apply := func(cfg *config.Config) {
		require.NoError(t, tr.ApplyConfig(cfg))
		m.SetTracing(cfg.Tracing.Enabled(), cfg.Tracing.SamplingFraction)
		require.NoError(t, m.ApplyConfig(cfg))
	}
	// next waits for n more finished requests and returns them.
	next := func(n int) []*prober.Result {
		fin.mu.Lock()
		from := len(fin.results)
		fin.mu.Unlock()
		require.Eventually(t, func() bool {
			fin.mu.Lock()
			defer fin.mu.Unlock()
			return len(fin.results) >= from+n
		}, 10*time.Second, 5*time.Millisecond)
		fin.mu.Lock()
		defer fin.mu.Unlock()
		return slices.Clone(fin.results[from : from+n])
	}

	apply(load(""))
	for _, r := range next(5) {
		require.False(t, r.SpanContext.IsValid(), "tracing is off: no trace context")
	}

	apply(load(fmt.Sprintf("tracing: {endpoint: %q, insecure: true, sampling_fraction: 1}", jaeger.OTLPGRPCEndpoint())))
	next(2) // requests sent before the reload may still end
	on := next(10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, r := range on {
		require.True(t, r.SpanContext.IsSampled())
		_, err := jaeger.WaitTrace(ctx, r.SpanContext.TraceID().String(), 2)
		require.NoError(t, err)
	}

	apply(load(fmt.Sprintf("tracing: {endpoint: %q, insecure: true, sampling_fraction: 1, timeout: 200ms}", refusedAddr(t))))
	next(2)
	down := next(10)
	require.Eventually(t, func() bool { return counter(t, reg, "sloprober_tracing_spans_failed_total") > 0 }, 10*time.Second, 10*time.Millisecond,
		"the spans sent to the collector that is down fail, counted")
	for _, r := range down {
		require.True(t, r.SpanContext.IsValid())
		_, err := jaeger.Trace(ctx, r.SpanContext.TraceID().String())
		require.ErrorIs(t, err, jaegertest.ErrTraceNotFound, "Jaeger is no longer the collector")
	}

	apply(load(""))
	next(2)
	for _, r := range next(5) {
		require.False(t, r.SpanContext.IsValid(), "tracing is off again")
	}
}
