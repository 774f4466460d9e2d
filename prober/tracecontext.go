package prober

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// headSampling is the head sampling of probes' trace context while tracing
// is on: the share of requests whose traceparent says "sampled".
type headSampling struct {
	ratio float64
}

// tracingState holds the manager's head sampling; nil while tracing is off,
// when no traceparent is sent.
type tracingState = atomic.Pointer[headSampling]

// SetTracing turns the trace context of probes on or off. While on, every
// probe carries a W3C traceparent whose trace id is its request id and
// whose sampled flag is set for a share ratio of them (decided on the
// trace id, as OpenTelemetry's TraceIDRatioBased sampler does, so an engine
// that traces follows the same decision). Loads running and started later
// take it at their next request.
func (m *Manager) SetTracing(on bool, ratio float64) {
	if !on {
		m.tracing.Store(nil)
		return
	}
	m.tracing.Store(&headSampling{ratio: ratio})
}

// spanContext returns the trace context of a probe: the trace id is the
// request id (32 hex digits; a random one otherwise), the span id random.
func (h *headSampling) spanContext(requestID string) trace.SpanContext {
	var tid trace.TraceID
	if b, err := hex.DecodeString(requestID); err == nil && len(b) == len(tid) {
		copy(tid[:], b)
	} else {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	var flags trace.TraceFlags
	if sampledByRatio(tid, h.ratio) {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags})
}

// sampledByRatio is OpenTelemetry's TraceIDRatioBased decision: the low 63
// bits of the trace id's last 8 bytes below ratio × 2^63.
func sampledByRatio(tid trace.TraceID, ratio float64) bool {
	if ratio >= 1 {
		return true
	}
	bound := uint64(ratio * (1 << 63))
	return binary.BigEndian.Uint64(tid[8:16])>>1 < bound
}

// traceparent formats a W3C traceparent header value.
func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// Traced reports whether a finished request's span is exported: every
// request whose traceparent said "sampled", and every counted request that
// was not good (an error, a timeout, an SLO missed), whatever the head
// decision: the prober knows the verdict when the request ends. The
// exemplars of its observations point to its trace exactly then.
func Traced(r *Result, m *Measurement) bool {
	if !r.SpanContext.IsValid() {
		return false
	}
	return r.SpanContext.IsSampled() || m.Counted && !m.Good
}
