package tracing

import (
	"context"
	"crypto/rand"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sloprober/sloprober/prober"
)

// maxStallEvents bounds the stall events of one span; the span's
// sloprober.stalls attribute counts them all. A stream that stalls on every
// token (a server 100 times slower than the SLO) would otherwise add one
// event a token.
const maxStallEvents = 32

// idsKey carries the ids a probe's CLIENT span must have (its
// traceparent's) to the ID generator.
type idsKey struct{}

// probeIDs is the SDK's ID generator for probe spans: the CLIENT span gets
// the trace and span id the request carried in its traceparent, so that an
// engine's own spans (children of that traceparent) join its trace; the
// phase spans get random span ids.
type probeIDs struct{}

func (probeIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if sc, ok := ctx.Value(idsKey{}).(trace.SpanContext); ok {
		return sc.TraceID(), sc.SpanID()
	}
	var tid trace.TraceID
	_, _ = rand.Read(tid[:])
	return tid, probeIDs{}.NewSpanID(ctx, tid)
}

func (probeIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}

// newJob copies what the spans of a finished request need.
func newJob(ti targetInfo, r *prober.Result, m *prober.Measurement, maxITL time.Duration, hasMaxITL bool) *job {
	if ti.operation == "" { // a target removed by a reload while the request ran
		ti.operation, ti.model, ti.provider = operations["chat"], r.Model, defaultProvider("chat")
	}
	j := &job{
		name:        ti.operation + " " + ti.model,
		sc:          r.SpanContext,
		start:       r.Sent,
		end:         r.Sent.Add(r.Ended),
		attrs:       attributes(ti, r, m),
		firstToken:  -1,
		firstAnswer: -1,
		phases:      m.Split.Phases,
		failed:      r.Outcome != prober.OutcomeOK,
	}
	if j.failed {
		j.errMsg = r.Error()
	}
	if len(r.Chunks) > 0 {
		j.firstToken = r.Chunks[0]
	}
	if m.HasTTFA && r.FirstAnswer > 0 {
		j.firstAnswer = m.TTFA // after reasoning
	}
	if hasMaxITL {
		for i := 1; i < len(r.Chunks); i++ {
			if gap := r.Chunks[i] - r.Chunks[i-1]; gap > maxITL {
				if j.stallCount++; j.stallCount <= maxStallEvents {
					j.stalls = append(j.stalls, stall{at: r.Chunks[i], gap: gap, index: i})
				}
			}
		}
		if j.stallCount > 0 {
			j.attrs = append(j.attrs, keyStallsCount.Int(j.stallCount))
		}
	}
	return j
}

// emit builds the spans of one finished request, on its real timeline.
func emit(tr trace.Tracer, j *job) {
	ctx := context.WithValue(context.Background(), idsKey{}, j.sc)
	ctx, span := tr.Start(ctx, j.name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(j.start),
		trace.WithAttributes(j.attrs...),
	)
	if j.firstToken >= 0 {
		span.AddEvent(eventFirstToken, trace.WithTimestamp(j.start.Add(j.firstToken)))
	}
	if j.firstAnswer >= 0 {
		span.AddEvent(eventFirstAnswer, trace.WithTimestamp(j.start.Add(j.firstAnswer)))
	}
	for _, st := range j.stalls {
		span.AddEvent(eventStall, trace.WithTimestamp(j.start.Add(st.at)), trace.WithAttributes(
			keyStallGap.Float64(st.gap.Seconds()), keyStallIndex.Int(st.index)))
	}
	for _, p := range j.phases {
		_, child := tr.Start(ctx, p.Phase,
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(j.start.Add(p.Start)),
			trace.WithAttributes(keySource.String(p.Source)),
		)
		child.End(trace.WithTimestamp(j.start.Add(p.End)))
	}
	if j.failed {
		span.SetStatus(codes.Error, j.errMsg)
	}
	span.End(trace.WithTimestamp(j.end))
}

// attributes are the CLIENT span's attributes.
func attributes(ti targetInfo, r *prober.Result, m *prober.Measurement) []attribute.KeyValue {
	a := []attribute.KeyValue{
		keyOperation.String(ti.operation),
		keyProvider.String(ti.provider),
		keyRequestModel.String(ti.model),
		keyMaxTokens.Int(r.OutputTokens),
		keyStream.Bool(true),
		keyServerAddress.String(ti.address),
		keyServerPort.Int(ti.port),
		keyTarget.String(r.Target),
		keyScenario.String(r.Scenario),
		keyTest.String(r.Test),
		keyOutcome.String(string(r.Outcome)),
		keyLag.Float64(r.Lag().Seconds()),
		keyRequestID.String(r.RequestID),
		keyHeadSampled.Bool(r.SpanContext.IsSampled()),
		keyClientOnly.Bool(m.Split.ClientOnly()),
	}
	if r.StatusCode != 0 {
		a = append(a, keyStatusCode.Int(r.StatusCode))
	}
	if r.Model != "" {
		a = append(a, keyResponseModel.String(r.Model))
	}
	if r.ServerHeader != "" {
		a = append(a, keyServerHeader.String(r.ServerHeader))
	}
	if m.HasTTFT {
		a = append(a, keyTimeToFirstChunk.Float64(m.TTFT.Seconds()))
	}
	if m.HasTTFA {
		a = append(a, keyTTFA.Float64(m.TTFA.Seconds()))
	}
	if m.ReasoningTokens > 0 {
		a = append(a, keyReasoning.Int(m.ReasoningTokens))
	}
	if r.SystemFingerprint != "" {
		a = append(a, keyFingerprint.String(r.SystemFingerprint))
	}
	if c := r.Check; c != nil {
		a = append(a, keyCheck.String(c.Name), keyCheckPassed.Bool(c.Passed))
		if !c.Passed {
			a = append(a, keyCheckReason.String(c.Reason))
		}
	}
	if r.FinishReason != "" {
		a = append(a, keyFinishReasons.StringSlice([]string{r.FinishReason}))
	}
	if u := r.Usage; u != nil {
		a = append(a, keyInputTokens.Int(u.PromptTokens), keyOutputTokens.Int(u.CompletionTokens))
		if u.CachedTokens != nil {
			a = append(a, keyCacheReadTokens.Int(*u.CachedTokens))
		}
	}
	switch {
	case !m.Counted:
		a = append(a, keyVerdict.String(verdictNotCounted))
	case m.Good:
		a = append(a, keyVerdict.String(verdictGood))
	default:
		a = append(a, keyVerdict.String(verdictBad))
	}
	if len(m.Missed) > 0 {
		a = append(a, keySLOsMissed.StringSlice(m.Missed))
	}
	if r.Outcome != prober.OutcomeOK {
		a = append(a, keyErrorType.String(string(r.Outcome)))
		if msg := r.Error(); msg != "" {
			a = append(a, keyError.String(msg))
		}
	}
	if len(m.Split.Rejected) > 0 {
		a = append(a, keyRejected.StringSlice(m.Split.Rejected))
	}
	return a
}
