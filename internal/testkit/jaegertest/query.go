package jaegertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The query helpers read Jaeger's "legacy" HTTP API, /api/traces and
// /api/services: the JSON its UI reads, which Jaeger v2 still serves. Its
// model is Jaeger's, converted from OTLP on the way in:
//
//   - a span's parent is a CHILD_OF reference, and its links are FOLLOWS_FROM
//     references;
//   - span attributes are tags, with the span kind, status and
//     instrumentation scope added as the tags span.kind, otel.status_code,
//     otel.status_description, error, otel.scope.name and otel.scope.version;
//   - resource attributes are the tags of the span's process, but for
//     service.name, which is its ServiceName;
//   - span events are logs whose "event" field is the event's name;
//   - array and map attributes are string tags holding their JSON.
//
// Jaeger v2 also serves OTLP itself, as grpc-gateway JSON, at
// /api/v3/traces/{id}: it keeps arrays as arrays, but needs an OTLP decoder
// where this flat model needs none.

// ErrTraceNotFound is returned by Trace when Jaeger has no span of the trace.
var ErrTraceNotFound = errors.New("trace not found")

// Trace is one trace as the query API returns it.
type Trace struct {
	// TraceID is 32 lowercase hex digits.
	TraceID string `json:"traceID"`
	Spans   []Span `json:"spans"`
	// Processes are the spans' processes, by Span.ProcessID.
	Processes map[string]Process `json:"processes"`
	// Warnings are what Jaeger found wrong with the trace, such as a span
	// whose parent it does not have.
	Warnings []string `json:"warnings"`
}

// Span is one span of a Trace.
type Span struct {
	// TraceID is 32 lowercase hex digits, SpanID 16.
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	Flags         uint32      `json:"flags"`
	// StartTime is in microseconds since the Unix epoch, Duration in
	// microseconds: time.UnixMicro and time.Microsecond convert them.
	StartTime int64      `json:"startTime"`
	Duration  int64      `json:"duration"`
	Tags      []KeyValue `json:"tags"`
	Logs      []Log      `json:"logs"`
	ProcessID string     `json:"processID"`
	// Process is the span's entry of Trace.Processes.
	Process  *Process `json:"process"`
	Warnings []string `json:"warnings"`
}

// Reference is a span's reference to another span: its parent (CHILD_OF) or
// a link (FOLLOWS_FROM).
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// Reference types.
const (
	ChildOf     = "CHILD_OF"
	FollowsFrom = "FOLLOWS_FROM"
)

// Process is the process, in OTLP terms the resource, that emitted a span.
type Process struct {
	ServiceName string     `json:"serviceName"`
	Tags        []KeyValue `json:"tags"`
}

// Log is a timestamped event of a span: an OTLP span event.
type Log struct {
	// Timestamp is in microseconds since the Unix epoch.
	Timestamp int64      `json:"timestamp"`
	Fields    []KeyValue `json:"fields"`
}

// KeyValue is a typed tag or log field.
type KeyValue struct {
	Key string `json:"key"`
	// Type is string, bool, int64, float64 or binary.
	Type string `json:"type"`
	// Value is a string, bool, int64, float64 or []byte, after Type.
	Value any `json:"value"`
}

// UnmarshalJSON decodes Value after Type. The API writes int64 values
// outside ±(2^53-1), which a JavaScript number cannot hold, as strings, and
// binary values as base64; both come back as they were sent.
func (kv *KeyValue) UnmarshalJSON(b []byte) error {
	var raw struct {
		Key   string          `json:"key"`
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	kv.Key, kv.Type = raw.Key, raw.Type
	var err error
	switch raw.Type {
	case "bool":
		var v bool
		err = json.Unmarshal(raw.Value, &v)
		kv.Value = v
	case "int64":
		var n json.Number
		if err = json.Unmarshal(raw.Value, &n); err == nil {
			kv.Value, err = strconv.ParseInt(string(n), 10, 64)
		}
	case "float64":
		var v float64
		err = json.Unmarshal(raw.Value, &v)
		kv.Value = v
	case "binary":
		var v []byte // base64 in JSON
		err = json.Unmarshal(raw.Value, &v)
		kv.Value = v
	default:
		var v any
		err = json.Unmarshal(raw.Value, &v)
		kv.Value = v
	}
	if err != nil {
		return fmt.Errorf("%s value of %q: %w", raw.Type, raw.Key, err)
	}
	return nil
}

func lookup(kvs []KeyValue, key string) (any, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Tag returns the value of the span's tag key, and whether it has one.
func (s *Span) Tag(key string) (any, bool) { return lookup(s.Tags, key) }

// Parent returns the span ID of the span's parent, "" for a root span.
func (s *Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == ChildOf {
			return r.SpanID
		}
	}
	return ""
}

// Event returns the span's first log made from the OTLP span event name.
func (s *Span) Event(name string) (*Log, bool) {
	for i := range s.Logs {
		if v, ok := s.Logs[i].Field("event"); ok && v == name {
			return &s.Logs[i], true
		}
	}
	return nil, false
}

// Field returns the value of the log's field key, and whether it has one.
func (l *Log) Field(key string) (any, bool) { return lookup(l.Fields, key) }

// Tag returns the value of the process's tag key, and whether it has one.
func (p *Process) Tag(key string) (any, bool) { return lookup(p.Tags, key) }

// SpanByName returns the trace's first span named operationName.
func (t *Trace) SpanByName(operationName string) (*Span, bool) {
	for i := range t.Spans {
		if t.Spans[i].OperationName == operationName {
			return &t.Spans[i], true
		}
	}
	return nil, false
}

// SpanByID returns the trace's span with the span ID (16 hex digits).
func (t *Trace) SpanByID(spanID string) (*Span, bool) {
	spanID = strings.ToLower(spanID)
	for i := range t.Spans {
		if t.Spans[i].SpanID == spanID {
			return &t.Spans[i], true
		}
	}
	return nil, false
}

// normalize pads trace IDs to 32 hex digits (Jaeger drops the upper 16 when
// they are all zero) and points each span at its process.
func (t *Trace) normalize() {
	t.TraceID = padTraceID(t.TraceID)
	for i := range t.Spans {
		s := &t.Spans[i]
		s.TraceID = padTraceID(s.TraceID)
		for k := range s.References {
			s.References[k].TraceID = padTraceID(s.References[k].TraceID)
		}
		if s.Process == nil {
			if p, ok := t.Processes[s.ProcessID]; ok {
				s.Process = &p
			}
		}
	}
}

func padTraceID(id string) string {
	if len(id) < 32 {
		return strings.Repeat("0", 32-len(id)) + id
	}
	return id
}

// Trace returns the trace with the ID, 32 hex digits (or 16 for a 64-bit
// ID). It returns ErrTraceNotFound when Jaeger has no span of it: spans are
// exported asynchronously, so a test waits for them with WaitTrace.
func (j *Jaeger) Trace(ctx context.Context, traceID string) (*Trace, error) {
	var traces []Trace
	err := j.get(ctx, "/api/traces/"+url.PathEscape(traceID), nil, &traces)
	if err != nil {
		return nil, err
	}
	if len(traces) != 1 {
		return nil, fmt.Errorf("jaeger returned %d traces for trace ID %s", len(traces), traceID)
	}
	return &traces[0], nil
}

// Find returns up to limit traces with a span of the service in the last
// two days, Jaeger's default search window; limit <= 0 is Jaeger's default
// of 100. The traces come in no particular order.
func (j *Jaeger) Find(ctx context.Context, service string, limit int) ([]Trace, error) {
	q := url.Values{"service": {service}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var traces []Trace
	if err := j.get(ctx, "/api/traces", q, &traces); err != nil {
		return nil, err
	}
	return traces, nil
}

// Services returns the names of the services Jaeger has spans of.
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	var services []string
	if err := j.get(ctx, "/api/services", nil, &services); err != nil {
		return nil, err
	}
	return services, nil
}

// WaitTrace polls Trace until the trace has at least wantSpans spans, and
// returns it. When ctx ends first it returns the error, with the trace as
// far as it got (nil if Jaeger had no span of it). An exporter's batching
// delays spans, so ctx should allow for that and for a loaded machine.
func (j *Jaeger) WaitTrace(ctx context.Context, traceID string, wantSpans int) (*Trace, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last *Trace
	for {
		tr, err := j.Trace(ctx, traceID)
		switch {
		case err == nil:
			last = tr
			if len(tr.Spans) >= wantSpans {
				return tr, nil
			}
		case errors.Is(err, ErrTraceNotFound):
		case ctx.Err() != nil:
			// The request failed because ctx ended.
		default:
			return last, err
		}
		select {
		case <-ctx.Done():
			have := 0
			if last != nil {
				have = len(last.Spans)
			}
			return last, fmt.Errorf("trace %s: %d of %d spans before %w", traceID, have, wantSpans, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// response is the envelope of the query API's answers.
type response struct {
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

// get GETs path?query from the query API and decodes the envelope's data
// into v.
func (j *Jaeger) get(ctx context.Context, path string, query url.Values, v any) error {
	u := j.QueryURL() + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	var r response
	jsonErr := json.Unmarshal(body, &r)
	if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/api/traces/") {
		return ErrTraceNotFound
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if jsonErr == nil && len(r.Errors) > 0 {
			msg = r.Errors[0].Msg
		}
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, msg)
	}
	if jsonErr != nil {
		return fmt.Errorf("GET %s: %w", u, jsonErr)
	}
	if len(r.Errors) > 0 {
		return fmt.Errorf("GET %s: %s", u, r.Errors[0].Msg)
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		return fmt.Errorf("GET %s: decoding data: %w", u, err)
	}
	if traces, ok := v.(*[]Trace); ok {
		for i := range *traces {
			(*traces)[i].normalize()
		}
	}
	return nil
}
