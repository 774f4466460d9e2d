package config

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"golang.org/x/net/http/httpguts"
)

// Phases are the parts a probe's time is split into (sloprober_phase_duration_seconds's
// phase label, and the child spans of its trace), in the order they happen:
// network (connect, TLS, write, to the first response byte), gateway (a
// proxy in front of the engine), queue (waiting for a batch slot), prefill
// (ends with the first token), decode (first token to last), and
// unattributed: time no source explains.
var Phases = []string{PhaseNetwork, PhaseGateway, PhaseQueue, PhasePrefill, PhaseDecode, PhaseUnattributed}

// The phases.
const (
	PhaseNetwork      = "network"
	PhaseGateway      = "gateway"
	PhaseQueue        = "queue"
	PhasePrefill      = "prefill"
	PhaseDecode       = "decode"
	PhaseUnattributed = "unattributed"
)

// Timing sources, which a target's timing.sources orders: for each phase
// the first source that reports it is used.
const (
	// SourceTimings is a "timings" object in the last chunk of the stream
	// (llama.cpp's, which the simulator extends with queue_ms).
	SourceTimings = "timings"
	// SourceServerTiming is the W3C Server-Timing response header.
	SourceServerTiming = "server_timing"
	// SourceHeaders are response headers whose value is a time in
	// milliseconds (a gateway's own overhead, e.g. Kong's
	// X-Kong-Proxy-Latency).
	SourceHeaders = "headers"
)

// TimingSources lists the timing sources, in their default order.
var TimingSources = []string{SourceTimings, SourceServerTiming, SourceHeaders}

// Bounds of the tracing, timing and server_metrics sections.
const (
	// MaxTimingMappings bounds each mapping of a target's timing section:
	// the client looks every mapped name up in every reply.
	MaxTimingMappings = 16
	// MaxTracingHeaders bounds the headers sent to the trace collector.
	MaxTracingHeaders = 32
	// MaxTracingQueue bounds tracing.queue_size: a queued request holds
	// what its spans need (its attributes, phases and at most 32 stalls:
	// at most 4.9 KiB, measured for 4,096 tokens that all stalled), so
	// 100,000 are under 500 MiB, the most a prober should hold for a
	// collector that is slow; the default 2,048 under 10 MiB.
	MaxTracingQueue = 100_000
	// MinServerMetricsInterval bounds how often an engine's /metrics is
	// read: a large vLLM exposition is a few hundred KiB.
	MinServerMetricsInterval = time.Second
)

// DefaultTracingConfig is the tracing section's defaults. Tracing is off
// until an endpoint is set. One good request in a hundred is traced (bad
// ones always are): a canary at 1 req/s gives a good trace every 100 s.
var DefaultTracingConfig = TracingConfig{
	ClientType:       TracingClientGRPC,
	SamplingFraction: 0.01,
	Timeout:          model.Duration(10 * time.Second),
	QueueSize:        2048,
}

// Tracing client types.
const (
	TracingClientGRPC = "grpc"
	TracingClientHTTP = "http"
)

// TracingConfig is where sloprober sends the OpenTelemetry spans of its
// probes (OTLP). Its keys are Prometheus's tracing section's, plus
// queue_size.
type TracingConfig struct {
	// ClientType is grpc or http (OTLP over gRPC, or over HTTP/protobuf).
	ClientType string `yaml:"client_type,omitempty"`
	// Endpoint is the collector's host:port; empty (the default) turns
	// tracing off.
	Endpoint string `yaml:"endpoint,omitempty"`
	// SamplingFraction is the share of good requests traced, decided when
	// a request is sent (its traceparent's sampled flag). A request that
	// fails or misses an SLO is traced whatever the head decision.
	SamplingFraction float64 `yaml:"sampling_fraction"`
	// Insecure sends without TLS.
	Insecure bool `yaml:"insecure,omitempty"`
	// Headers are sent with every export (e.g. an API key).
	Headers map[string]commoncfg.Secret `yaml:"headers,omitempty"`
	// Compression is "" or gzip.
	Compression string `yaml:"compression,omitempty"`
	// Timeout bounds one export.
	Timeout model.Duration `yaml:"timeout,omitempty"`
	// TLSConfig is the client's TLS configuration.
	TLSConfig commoncfg.TLSConfig `yaml:"tls_config,omitempty"`
	// QueueSize bounds the spans waiting for export; beyond it spans are
	// dropped (counted), never waited for.
	QueueSize int `yaml:"queue_size,omitempty"`
}

// Enabled reports whether tracing is on.
func (t *TracingConfig) Enabled() bool { return t.Endpoint != "" }

// UnmarshalYAML implements yaml.Unmarshaler.
func (t *TracingConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*t = DefaultTracingConfig
	type plain TracingConfig
	return unmarshal((*plain)(t))
}

// TimingConfig says where a target's probes get their phase split from
// (see Phases): the sources in order, and which names of each map to
// which phase. Values are milliseconds.
type TimingConfig struct {
	// Sources are tried in order for each phase; the first that reports
	// it gives it. Default: timings, server_timing, headers.
	Sources []string `yaml:"sources,omitempty"`
	// Timings maps fields of the last chunk's "timings" object to phases.
	// Default: queue_ms to queue, prompt_ms to prefill, predicted_ms to
	// decode (llama.cpp's names, and the simulator's queue_ms).
	Timings map[string]string `yaml:"timings,omitempty"`
	// ServerTiming maps Server-Timing metric names to phases (their dur).
	// Default: each phase's own name (gateway, queue, prefill, decode).
	ServerTiming map[string]string `yaml:"server_timing,omitempty"`
	// Headers maps response header names to phases. Default: none.
	Headers map[string]string `yaml:"headers,omitempty"`
}

// DefaultTimingConfig is the timing of a target without a timing section.
var DefaultTimingConfig = TimingConfig{
	Sources: TimingSources,
	Timings: map[string]string{"queue_ms": PhaseQueue, "prompt_ms": PhasePrefill, "predicted_ms": PhaseDecode},
	ServerTiming: map[string]string{
		PhaseGateway: PhaseGateway, PhaseQueue: PhaseQueue, PhasePrefill: PhasePrefill, PhaseDecode: PhaseDecode,
	},
}

// UnmarshalYAML implements yaml.Unmarshaler: keys left out keep their
// defaults, so `timing: {headers: {x-kong-proxy-latency: gateway}}` adds
// a header and keeps the timings and Server-Timing mappings.
func (t *TimingConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*t = TimingConfig{}
	type plain TimingConfig
	if err := unmarshal((*plain)(t)); err != nil {
		return err
	}
	d := DefaultTimingConfig
	if t.Sources == nil {
		t.Sources = d.Sources
	}
	if t.Timings == nil {
		t.Timings = d.Timings
	}
	if t.ServerTiming == nil {
		t.ServerTiming = d.ServerTiming
	}
	return nil
}

// reportedPhases are the phases a source may report: network and
// unattributed are the client's.
var reportedPhases = []string{PhaseGateway, PhaseQueue, PhasePrefill, PhaseDecode}

// ServerMetricsConfig is an optional scrape of the engine's own /metrics
// (vLLM, SGLang, TGI, llama.cpp), whose queue depth, batch and cache usage
// sloprober re-exports beside its own numbers with the target label.
type ServerMetricsConfig struct {
	// URL is the engine's metrics endpoint, e.g. http://127.0.0.1:8000/metrics.
	URL string `yaml:"url"`
	// Interval is how often it is read. Default 15s.
	Interval model.Duration `yaml:"interval,omitempty"`
	// Timeout bounds one read, at most the interval. Default 5s, or the
	// interval where that is shorter: interval 2s alone reads every 2 s
	// and gives each read 2 s, where a default of 5 s would be refused.
	Timeout model.Duration `yaml:"timeout,omitempty"`
	// HTTPClientConfig is prometheus/common's (auth, TLS, proxy).
	HTTPClientConfig commoncfg.HTTPClientConfig `yaml:",inline"`
}

// DefaultServerMetricsConfig is the server_metrics section's defaults.
var DefaultServerMetricsConfig = ServerMetricsConfig{
	Interval:         model.Duration(15 * time.Second),
	Timeout:          model.Duration(5 * time.Second),
	HTTPClientConfig: commoncfg.DefaultHTTPClientConfig,
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *ServerMetricsConfig) UnmarshalYAML(unmarshal func(any) error) error {
	*s = DefaultServerMetricsConfig
	const unset = -1 // a duration YAML cannot spell
	s.Timeout = unset
	type plain ServerMetricsConfig
	if err := unmarshal((*plain)(s)); err != nil {
		return err
	}
	if s.Timeout == unset {
		s.Timeout = min(DefaultServerMetricsConfig.Timeout, s.Interval)
	}
	return nil
}

// TimingOf returns a target's timing configuration: its own, else the
// default.
func (t *TargetConfig) TimingOf() *TimingConfig {
	if t.Timing != nil {
		return t.Timing
	}
	return &DefaultTimingConfig
}

func (v *validation) validateTracing(t *TracingConfig) {
	const key = "tracing"
	if t.ClientType != TracingClientGRPC && t.ClientType != TracingClientHTTP {
		v.bad(key+".client_type", "must be grpc or http, got %q", t.ClientType)
	}
	if t.Endpoint != "" {
		if _, port, err := net.SplitHostPort(t.Endpoint); err != nil || port == "" {
			v.bad(key+".endpoint", "must be host:port, got %q", t.Endpoint)
		}
	}
	if !(t.SamplingFraction >= 0 && t.SamplingFraction <= 1) {
		v.bad(key+".sampling_fraction", "must be between 0 and 1, got %g", t.SamplingFraction)
	}
	if len(t.Headers) > MaxTracingHeaders {
		v.bad(key+".headers", "must have at most %d headers, got %d", MaxTracingHeaders, len(t.Headers))
	}
	for _, h := range slices.Sorted(maps.Keys(t.Headers)) {
		if !httpguts.ValidHeaderFieldName(h) {
			v.bad(key+".headers", "%q is not a valid header name", h)
		}
	}
	if t.Compression != "" && t.Compression != "gzip" {
		v.bad(key+".compression", "must be gzip or left out, got %q", t.Compression)
	}
	if t.Timeout <= 0 {
		v.bad(key+".timeout", "must be positive, got %s", t.Timeout)
	}
	if t.QueueSize < 1 || t.QueueSize > MaxTracingQueue {
		v.bad(key+".queue_size", "must be between 1 and %d, got %d", MaxTracingQueue, t.QueueSize)
	}
	if err := t.TLSConfig.Validate(); err != nil {
		v.bad(key+".tls_config", "%v", err)
	}
}

func (v *validation) validateTiming(key string, t *TimingConfig) {
	if t == nil {
		return
	}
	key += ".timing"
	seen := map[string]bool{}
	for i, s := range t.Sources {
		switch {
		case !slices.Contains(TimingSources, s):
			v.bad(fmt.Sprintf("%s.sources[%d]", key, i), "must be one of %s, got %q", strings.Join(TimingSources, ", "), s)
		case seen[s]:
			v.bad(fmt.Sprintf("%s.sources[%d]", key, i), "duplicate source %q", s)
		}
		seen[s] = true
	}
	check := func(name string, m map[string]string, validName func(string) bool) {
		if len(m) > MaxTimingMappings {
			v.bad(key+"."+name, "must map at most %d names, got %d", MaxTimingMappings, len(m))
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if !validName(k) {
				v.bad(key+"."+name, "%q is not a valid name", k)
			}
			if !slices.Contains(reportedPhases, m[k]) {
				v.bad(key+"."+name+"."+k, "must be one of %s, got %q", strings.Join(reportedPhases, ", "), m[k])
			}
		}
	}
	jsonField := func(s string) bool { return s != "" && len(s) <= MaxNameBytes }
	check("timings", t.Timings, jsonField)
	check("server_timing", t.ServerTiming, httpguts.ValidHeaderFieldName)
	check("headers", t.Headers, func(h string) bool {
		return httpguts.ValidHeaderFieldName(h) && http.CanonicalHeaderKey(h) != "Server-Timing"
	})
}

func (v *validation) validateServerMetrics(key string, s *ServerMetricsConfig) {
	if s == nil {
		return
	}
	key += ".server_metrics"
	if s.URL == "" && v.absent(key+".url") {
		v.required(key+".url", "the engine's metrics endpoint, e.g. http://127.0.0.1:8000/metrics")
	} else if err := validateURL(s.URL); err != nil {
		v.bad(key+".url", "%v, got %q", err, RedactURL(s.URL))
	}
	if d := time.Duration(s.Interval); d < MinServerMetricsInterval || d > time.Hour {
		v.bad(key+".interval", "must be between %s and 1h, got %s", MinServerMetricsInterval, s.Interval)
	}
	if s.Timeout <= 0 || s.Timeout > s.Interval {
		v.bad(key+".timeout", "must be positive and at most the interval (%s), got %s", s.Interval, s.Timeout)
	}
	if err := s.HTTPClientConfig.Validate(); err != nil {
		v.bad(key, "%v", err)
	}
	v.validateHeaderValues(key, &s.HTTPClientConfig)
}
