package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sloprober/sloprober/servermetrics"
)

// lyingServer answers every chat completion with three tokens and usage
// that counts 647 prompt tokens whatever the prompt, as llama.cpp does
// with a prompt longer than its context. Under /cached/ the usage reports
// cached tokens, under /verbose/ the reply has ten tokens whatever the
// maximum, under /error/ the answer is a 500 with errorMessage as its body.
// Under /hanging/ every other endpoint (/v1/models, /props, /tokenize,
// /apply-template) never answers.
func lyingServer(t *testing.T, errorMessage string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/v1/chat/completions") {
			if strings.HasPrefix(r.URL.Path, "/hanging/") {
				// The server sees the client go away only once it
				// has read the request body.
				_, _ = io.Copy(io.Discard, r.Body)
				<-r.Context().Done()
				return
			}
			http.NotFound(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/error/") {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, errorMessage)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/closing/") {
			// As llama.cpp's server: keep-alive answered, the
			// connection closed after the response all the same.
			_, _ = io.Copy(io.Discard, r.Body)
			c, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w\"}}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":647,\"completion_tokens\":1}," +
				"\"timings\":{\"prompt_n\":647,\"prompt_ms\":1.5,\"predicted_n\":1,\"predicted_ms\":2}}\n\ndata: [DONE]\n\n"
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			_ = buf.Flush()
			return
		}
		details := ""
		if strings.HasPrefix(r.URL.Path, "/cached/") {
			details = `,"prompt_tokens_details":{"cached_tokens":512}`
			// A queue of 5 s in a reply that takes a millisecond.
			w.Header().Set("Server-Timing", "queue;dur=5000")
		}
		n := 3
		if strings.HasPrefix(r.URL.Path, "/verbose/") {
			n = 10
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word%d \"}}]}\n\n", i)
		}
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`+"\n\n")
		counted := n
		if strings.HasPrefix(r.URL.Path, "/inflated/") {
			counted = 1000000 // a usage no stream of 3 chunks had
			details = `,"prompt_tokens_details":{"cached_tokens":99999999}`
		}
		if strings.HasPrefix(r.URL.Path, "/deflated/") {
			counted = 1 // fewer tokens than the text chunks sent
		}
		fmt.Fprintf(w, `data: {"choices":[],"usage":{"prompt_tokens":647,"completion_tokens":%d%s}}`+"\n\n", counted, details)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// probeConfig is the configuration of the probe tests against lyingServer.
const probeConfig = `
targets:
  - {name: lying, url: "%[1]s/lying/v1", model: m}
  - {name: small, url: "%[1]s/lying/v1", model: m, max_context: 1024}
  - {name: cached, url: "%[1]s/cached/v1", model: m}
  - {name: verbose, url: "%[1]s/verbose/v1", model: m, max_tokens_field: max_completion_tokens}
  - {name: failing, url: "%[1]s/error/v1", model: m}
  - {name: hanging, url: "%[1]s/hanging/v1", model: m}
  - {name: closing, url: "%[1]s/closing/v1", model: m}
  - {name: inflated, url: "%[1]s/inflated/v1", model: m}
  - {name: deflated, url: "%[1]s/deflated/v1", model: m}
scenarios:
  - {name: long-prompt, input_tokens: 3000, output_tokens: 3, ignore_eos: true}
  - {name: fits, input_tokens: 647, output_tokens: 3, ignore_eos: true}
  - {name: long-output, input_tokens: 647, output_tokens: 64, ignore_eos: true}
`

// probeLying runs `sloprober probe` against a lyingServer and returns its
// exit code and output.
func probeLying(t *testing.T, url, target, scenario string) (int, string) {
	t.Helper()
	file := writeConfig(t, fmt.Sprintf(probeConfig, url))
	code, stdout, stderr := runCLI(t, "probe", "--config.file="+file, "--target="+target, "--scenario="+scenario)
	return code, stdout + "\nstderr:\n" + stderr
}

// TestProbeLengthsAndErrors: `sloprober probe` points out a prompt the
// server counted off the requested length (and one sloprober cut to the
// target's context itself) and output shorter than asked, or longer than
// asked, tells a cache count the server did not report from a zero, and
// shows a server's error message whole, with characters that would act on
// the terminal escaped.
func TestProbeLengthsAndErrors(t *testing.T) {
	t.Parallel()
	message := "upstream model crashed <b>hard</b> \u202eevil\u202c: " + strings.Repeat("details of the failure ", 12) + "END"
	url := lyingServer(t, message)
	probe := func(target, scenario string) (int, string) {
		t.Helper()
		return probeLying(t, url, target, scenario)
	}

	code, out := probe("lying", "long-prompt")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "\ninput:      3000 tokens asked, 647 counted by the server: MISMATCH beyond tolerance (the server may truncate)\n")
	require.Contains(t, out, "\ncache:      not reported\n")
	require.NotContains(t, out, "cached")
	require.Contains(t, out, "\noutput:     3 tokens asked, 3 counted by the server\n")
	// Decode is absent when every chunk came in one read (the fast
	// reader gives them one time; the server writes them at once).
	require.Regexp(t, `\nphases:     (network [0-9.]+ ms \(client\), )?unattributed [0-9.]+ ms \(client\)(, decode [0-9.]+ ms \(client\))?; no server timing source: the client's view only\n`, out)

	// The same prompt cut by sloprober to fit the context is not the
	// server's doing.
	code, out = probe("small", "long-prompt")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "\ninput:      3000 tokens asked, 647 counted by the server: MISMATCH beyond tolerance (sloprober cut the prompt to the target's context, 1024 tokens)\n")
	require.NotContains(t, out, "the server may truncate")
	require.Contains(t, out, "\ncontext:    1024 tokens (from max_context)\n")

	code, out = probe("cached", "fits")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "\ninput:      647 tokens asked, 647 counted by the server (within tolerance)\n")
	require.Contains(t, out, "\ncache:      512 of 647 prompt tokens cached\n")
	require.Regexp(t, `\nphases:     (network [0-9.]+ ms \(client\), )?unattributed [0-9.]+ ms \(client\)(, decode [0-9.]+ ms \(client\))?; no server timing source: the client's view only; not used \(more than the client saw\): server_timing\n`, out)

	// A server that closes its connections after every response, and
	// reports timings without a cache count.
	code, out = probe("closing", "fits")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "\nconnection: the server closed the connection after its response although it answered keep-alive")
	require.Contains(t, out, "\nserver timings: queue -, prefill 1.500 ms (647 tokens), decode 2.000 ms (1 tokens)\n")
	code, out = probe("lying", "fits")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "connection:")

	_, out = probe("lying", "long-output")
	require.Contains(t, out, "\noutput:     64 tokens asked, 3 counted by the server: MISMATCH, shorter than asked although ignore_eos was sent (the server ignores ignore_eos)\n")
	// A count no stream had: said as the server's, not as the N it bounds.
	_, out = probe("inflated", "long-output")
	require.Contains(t, out, "\noutput:     64 tokens asked, 1000000 counted by the server: MISMATCH, above what was asked and the 3 text chunks received (its usage is wrong, or it ignores max_tokens); TPOT counts 64\n")
	require.Contains(t, out, "\ncache:      99999999 of 647 prompt tokens cached: not counted (impossible: more cached than prompt, or negative)\n")
	_, out = probe("deflated", "fits")
	require.Contains(t, out, "\noutput:     3 tokens asked, 1 counted by the server: MISMATCH, fewer than the 3 text chunks received (its usage is wrong); TPOT counts 3\n")
	_, out = probe("verbose", "fits")
	require.Contains(t, out, "\noutput:     3 tokens asked, 10 counted by the server: MISMATCH, longer than asked (the server ignores max_completion_tokens)\n")

	code, out = probe("failing", "fits")
	require.Equal(t, 1, code)
	require.Contains(t, out, "\noutcome: http_5xx\n")
	// The prober keeps the message whole as one safe line: the bidi
	// overrides become spaces.
	safe := strings.NewReplacer("\u202e", " ", "\u202c", " ").Replace(message)
	safe = strings.Join(strings.Fields(safe), " ")
	require.Contains(t, out, "\nerror:      HTTP 500: "+safe+"\n", "the message whole (%d bytes), made safe", len(message))
	require.NotContains(t, out, "\u202e")
	require.Contains(t, out, "\ninput:      647 tokens asked, not counted by the server (no usage)\n")
	require.Contains(t, out, "\noutput:     3 tokens asked, none received\n")
}

// TestProbeCalibrationDeadline: against a target whose /v1/models, /props,
// /apply-template and /tokenize never answer, `sloprober probe` gives up
// calibrating after probeCalibrationTimeout in all, not after 10 s for
// each of them, and still sends its request.
func TestProbeCalibrationDeadline(t *testing.T) {
	t.Parallel()
	url := lyingServer(t, "")
	began := time.Now()
	code, out := probeLying(t, url, "hanging", "fits")
	took := time.Since(began)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, fmt.Sprintf("(no calibration within %s: one token a word assumed)\n", probeCalibrationTimeout))
	require.Contains(t, out, "\noutcome: ok\n")
	require.GreaterOrEqual(t, took, probeCalibrationTimeout, "the calibration had its time")
	require.Less(t, took, probeCalibrationTimeout+5*time.Second, "probe took %s", took)
}

// TestProbeRefused: a dial refused is no connection, and SLOs it never
// measured are not "MISSED" as a slow first token would be. Before, the
// timeline said "connected +0.06 ms" and every SLO "MISSED".
func TestProbeRefused(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(nil)
	url := closed.URL + "/v1"
	closed.Close()
	code, stdout, stderr := runCLI(t, "probe", url, "--model", "m")
	require.Equal(t, 1, code, "%s\n%s", stdout, stderr)
	require.Regexp(t, `\n  connect failed +\+[0-9.]+ ms\n`, stdout)
	require.NotContains(t, stdout, "connected ")
	require.Regexp(t, `\nslo ttft +<= 2s +not measured \(connect_error\): counted as missed\n`, stdout)
	require.NotContains(t, stdout, "MISSED")
}

// TestEngineText: what an engine's metrics serve, and what they do not,
// said as such: llama.cpp's /metrics has no KV-cache usage.
func TestEngineText(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		snap servermetrics.Snapshot
		want string
	}{
		{servermetrics.Snapshot{Engine: "llamacpp", Running: f(1), Waiting: f(0)},
			"llamacpp: 1 running, 0 waiting, KV-cache usage not exposed by the engine, prefix cache not exposed"},
		{servermetrics.Snapshot{Engine: "vllm", Running: f(3), Waiting: f(2), KVCacheUsage: f(0.021), PrefixCacheHitRatio: f(0.5)},
			"vllm: 3 running, 2 waiting, KV cache 2.1% used"},
		{servermetrics.Snapshot{},
			"unknown engine (none of vLLM's, SGLang's, TGI's or llama.cpp's names): running not exposed, waiting not exposed, KV-cache usage not exposed by the engine, prefix cache not exposed"},
	} {
		require.Equal(t, tc.want, engineText(tc.snap))
	}
}
