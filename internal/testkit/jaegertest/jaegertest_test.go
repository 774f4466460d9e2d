package jaegertest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/internal/testkit/jaegertest"
)

// TestSpanRoundTrip sends a parent and a child span to Jaeger as OTLP/JSON
// over HTTP, built by hand so that the harness is proven without the OTel
// SDK, and reads them back through the query helpers.
func TestSpanRoundTrip(t *testing.T) {
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	const (
		traceID = "5b8efff798038103d269b633813fc60c"
		rootID  = "eee19b7ec3c1b174"
		childID = "eee19b7ec3c1b173"
		linkID  = "0102030405060708"
		service = "jaegertest-svc"
	)
	start := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	end := start.Add(250 * time.Millisecond)
	// OTLP/JSON: IDs in hex, 64-bit integers (times too) as strings, enums
	// as numbers: kind 3 is client, 1 internal; status code 2 is error.
	sendOTLP(t, j, `{"resourceSpans": [{
	  "resource": {"attributes": [
	    {"key": "service.name", "value": {"stringValue": "$SERVICE"}},
	    {"key": "host.name", "value": {"stringValue": "probe-1"}}]},
	  "scopeSpans": [{
	    "scope": {"name": "jaegertest", "version": "0.1"},
	    "spans": [{
	      "traceId": "$TRACE", "spanId": "$ROOT", "name": "probe", "kind": 3,
	      "startTimeUnixNano": "$START", "endTimeUnixNano": "$END",
	      "attributes": [
	        {"key": "gen_ai.request.model", "value": {"stringValue": "m1"}},
	        {"key": "http.response.status_code", "value": {"intValue": "200"}},
	        {"key": "big", "value": {"intValue": "9007199254740993"}},
	        {"key": "ok", "value": {"boolValue": true}},
	        {"key": "ratio", "value": {"doubleValue": 0.25}},
	        {"key": "raw", "value": {"bytesValue": "AQI="}}],
	      "events": [{"timeUnixNano": "$EVENT", "name": "first_token",
	        "attributes": [{"key": "tokens", "value": {"intValue": "1"}}]}],
	      "status": {"code": 2, "message": "deadline exceeded"}
	    }, {
	      "traceId": "$TRACE", "spanId": "$CHILD", "parentSpanId": "$ROOT", "name": "stream", "kind": 1,
	      "startTimeUnixNano": "$START", "endTimeUnixNano": "$END",
	      "links": [{"traceId": "$TRACE", "spanId": "$LINK"}]
	    }]
	  }]
	}]}`, "$SERVICE", service, "$TRACE", traceID, "$ROOT", rootID, "$CHILD", childID, "$LINK", linkID,
		"$START", ns(start), "$END", ns(end), "$EVENT", ns(start.Add(10*time.Millisecond)))

	tr, err := j.WaitTrace(ctx, traceID, 2)
	require.NoError(t, err)
	require.Len(t, tr.Spans, 2)
	assert.Equal(t, traceID, tr.TraceID)

	root, ok := tr.SpanByName("probe")
	require.True(t, ok)
	assert.Equal(t, rootID, root.SpanID)
	assert.Empty(t, root.Parent())
	assert.Equal(t, start.UnixMicro(), root.StartTime)
	assert.Equal(t, int64(250_000), root.Duration)
	// big is beyond a JavaScript number, which the query API sends as a
	// string; the last five tags are Jaeger's, from the kind, status and scope.
	for key, want := range map[string]any{
		"gen_ai.request.model":      "m1",
		"http.response.status_code": int64(200),
		"big":                       int64(1<<53 + 1),
		"ok":                        true,
		"ratio":                     0.25,
		"raw":                       []byte{1, 2},
		"span.kind":                 "client",
		"otel.status_code":          "ERROR",
		"otel.status_description":   "deadline exceeded",
		"error":                     true,
		"otel.scope.name":           "jaegertest",
	} {
		got, ok := root.Tag(key)
		if assert.True(t, ok, "tag %s", key) {
			assert.Equal(t, want, got, "tag %s", key)
		}
	}
	_, ok = root.Tag("absent")
	assert.False(t, ok)
	ev, ok := root.Event("first_token")
	require.True(t, ok)
	assert.Equal(t, start.Add(10*time.Millisecond).UnixMicro(), ev.Timestamp)
	tokens, _ := ev.Field("tokens")
	assert.Equal(t, int64(1), tokens)
	require.NotNil(t, root.Process)
	assert.Equal(t, service, root.Process.ServiceName)
	host, _ := root.Process.Tag("host.name")
	assert.Equal(t, "probe-1", host)

	child, ok := tr.SpanByID(childID)
	require.True(t, ok)
	assert.Equal(t, "stream", child.OperationName)
	assert.Equal(t, rootID, child.Parent())
	assert.Contains(t, child.References, jaegertest.Reference{RefType: jaegertest.FollowsFrom, TraceID: traceID, SpanID: linkID})
	kind, _ := child.Tag("span.kind")
	assert.Equal(t, "internal", kind)

	found, err := j.Find(ctx, service, 10)
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, traceID, found[0].TraceID)
	found, err = j.Find(ctx, "no-such-service", 10)
	require.NoError(t, err)
	assert.Empty(t, found)

	services, err := j.Services(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{service}, services)

	_, err = j.Trace(ctx, "00000000000000000000000000000001")
	assert.ErrorIs(t, err, jaegertest.ErrTraceNotFound)

	// Jaeger writes a trace ID whose upper half is zero as 16 digits; the
	// helpers pad it back to the 32 of OTLP and W3C trace context.
	const shortID = "0000000000000000d269b633813fc60c"
	sendOTLP(t, j, `{"resourceSpans": [{
	  "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "$SERVICE"}}]},
	  "scopeSpans": [{"spans": [{"traceId": "$TRACE", "spanId": "$ROOT", "name": "short",
	    "startTimeUnixNano": "$START", "endTimeUnixNano": "$END"}]}]
	}]}`, "$SERVICE", service, "$TRACE", shortID, "$ROOT", rootID, "$START", ns(start), "$END", ns(end))
	tr, err = j.WaitTrace(ctx, shortID, 1)
	require.NoError(t, err)
	assert.Equal(t, shortID, tr.TraceID)
	assert.Equal(t, shortID, tr.Spans[0].TraceID)
}

// TestWaitTraceTimeout checks that WaitTrace gives up when its context ends,
// saying how far the trace got.
func TestWaitTraceTimeout(t *testing.T) {
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	tr, err := j.WaitTrace(ctx, "5b8efff798038103d269b633813fc60d", 1)
	assert.Nil(t, tr)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "0 of 1 spans")
}

func TestPathFromEnv(t *testing.T) {
	dir := t.TempDir()

	t.Setenv(jaegertest.EnvBinary, filepath.Join(dir, "missing"))
	_, err := jaegertest.Path()
	require.ErrorIs(t, err, jaegertest.ErrNotFound)
	assert.Contains(t, err.Error(), "make jaeger")

	notExec := filepath.Join(dir, "jaeger.txt")
	require.NoError(t, os.WriteFile(notExec, nil, 0o600))
	t.Setenv(jaegertest.EnvBinary, notExec)
	_, err = jaegertest.Path()
	require.ErrorIs(t, err, jaegertest.ErrNotFound)

	bin := filepath.Join(dir, "jaeger")
	require.NoError(t, os.WriteFile(bin, nil, 0o700))
	t.Setenv(jaegertest.EnvBinary, bin)
	got, err := jaegertest.Path()
	require.NoError(t, err)
	assert.Equal(t, bin, got)
}

// sendOTLP POSTs an OTLP/JSON ExportTraceServiceRequest to Jaeger's
// OTLP/HTTP receiver, after replacing the oldnew pairs in it as
// strings.Replacer does, and requires it to be accepted whole.
func sendOTLP(t *testing.T, j *jaegertest.Jaeger, request string, oldnew ...string) {
	t.Helper()
	body := strings.NewReplacer(oldnew...).Replace(request)
	require.True(t, json.Valid([]byte(body)), body)
	resp, err := http.Post("http://"+j.OTLPHTTPEndpoint()+"/v1/traces", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var r struct {
		PartialSuccess struct {
			RejectedSpans string `json:"rejectedSpans"`
			ErrorMessage  string `json:"errorMessage"`
		} `json:"partialSuccess"`
	}
	require.NoError(t, json.Unmarshal(b, &r), "%s", b)
	require.Empty(t, r.PartialSuccess.RejectedSpans, "%s", b)
	require.Empty(t, r.PartialSuccess.ErrorMessage, "%s", b)
}

func ns(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }
