package prober

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"
)

// splitReader returns at most n bytes a read, so frames split across reads
// at every position.
type splitReader struct {
	r io.Reader
	n int
}

func (s splitReader) Read(p []byte) (int, error) {
	if len(p) > s.n {
		p = p[:s.n]
	}
	return s.r.Read(p)
}

// readRecorded reads a recorded stream as a 200 response, with a clock that
// advances 1ms every time it is read.
func readRecorded(t *testing.T, data []byte, wrap func(io.Reader) io.Reader) *Result {
	t.Helper()
	r := &Result{StatusCode: 200}
	tick := time.Duration(0)
	readStream(io.NopCloser(wrap(bytes.NewReader(data))), r, func() time.Duration {
		tick += time.Millisecond
		return tick
	}, nil)
	r.Outcome = Classify(r)
	return r
}

func TestReadStream(t *testing.T) {
	usage := &Usage{PromptTokens: 12, CompletionTokens: 3, CachedTokens: 4}
	for _, tc := range []struct {
		file     string
		outcome  Outcome
		chunks   int
		usage    *Usage
		finish   string
		timings  bool
		errorHas string
	}{
		{file: "vllm_chat.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "length", timings: true},
		{file: "crlf.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "length", timings: true},
		{file: "comments_and_fields.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "stop", timings: true},
		{file: "multiline_data.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "stop", timings: true},
		{file: "usage_on_finish.sse", outcome: OutcomeOK, chunks: 3, usage: &Usage{PromptTokens: 12, CompletionTokens: 3}, finish: "stop"},
		{file: "no_usage.sse", outcome: OutcomeOK, chunks: 2, finish: "stop"},
		{file: "error_in_stream.sse", outcome: OutcomeStreamError, chunks: 1, errorHas: "error in stream: engine overloaded"},
		{file: "error_event.sse", outcome: OutcomeStreamError, chunks: 1, errorHas: `error event in stream: {"message":"upstream went away"}`},
		{file: "no_done.sse", outcome: OutcomeStreamError, chunks: 3, usage: usage, finish: "stop", timings: true, errorHas: "stream ended without [DONE]"},
		{file: "truncated_frame.sse", outcome: OutcomeStreamError, chunks: 2, errorHas: "stream ended without [DONE]"},
		{file: "done_without_blank_line.sse", outcome: OutcomeStreamError, chunks: 2, finish: "stop", errorHas: "stream ended without [DONE]"},
		{file: "html.sse", outcome: OutcomeProtocolError, errorHas: `response body is not an SSE stream: it starts with "<!DOCTYPE html>"`},
		{file: "json_error.sse", outcome: OutcomeProtocolError, errorHas: `response body is not an SSE stream: it starts with "{\"error\":{\"message\":\"model not loaded\",\"..."`},
		{file: "malformed_chunk.sse", outcome: OutcomeProtocolError, chunks: 2, finish: "stop", errorHas: "chunk is not valid JSON"},
		{file: "long_line.sse", outcome: OutcomeOK, chunks: 2, usage: usage, finish: "stop", timings: true},
		{file: "reasoning.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "stop", timings: true},
		{file: "completions.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "length", timings: true},
		{file: "empty_chunks.sse", outcome: OutcomeOK, chunks: 3, usage: usage, finish: "stop", timings: true},
		{file: "data_no_space.sse", outcome: OutcomeOK, chunks: 2},
		{file: "empty.sse", outcome: OutcomeStreamError, errorHas: "stream ended without [DONE]"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "streams", tc.file))
			require.NoError(t, err)
			whole := readRecorded(t, data, func(r io.Reader) io.Reader { return r })
			require.Equal(t, tc.outcome, whole.Outcome, whole.Error())
			require.Len(t, whole.Chunks, tc.chunks)
			require.Equal(t, tc.usage, whole.Usage)
			require.Equal(t, tc.finish, whole.FinishReason)
			require.Equal(t, tc.timings, whole.Timings != nil)
			if tc.errorHas != "" {
				require.Contains(t, whole.Error(), tc.errorHas)
			} else {
				require.Empty(t, whole.Error())
			}
			for i := 1; i < len(whole.Chunks); i++ {
				require.Greater(t, whole.Chunks[i], whole.Chunks[i-1], "offsets increase")
			}
			// The same stream split at every byte, and in 7-byte reads,
			// gives the same result.
			for name, wrap := range map[string]func(io.Reader) io.Reader{
				"one byte": iotest.OneByteReader,
				"7 bytes":  func(r io.Reader) io.Reader { return splitReader{r, 7} },
			} {
				split := readRecorded(t, data, wrap)
				require.Equal(t, whole, split, name)
			}
		})
	}
}

func TestReadStreamTimings(t *testing.T) {
	data, err := os.ReadFile("testdata/streams/vllm_chat.sse")
	require.NoError(t, err)
	r := readRecorded(t, data, func(r io.Reader) io.Reader { return r })
	q := 1.5
	require.Equal(t, &ServerTimings{QueueMS: &q, PromptN: 8, PromptMS: 5.25, PredictedN: 3, PredictedMS: 20, CacheN: 4}, r.Timings)
	// The role chunk is read at 1ms and is no token: t1 is the second event.
	require.Equal(t, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}, r.Chunks)
}

// TestSSEReaderSteadyStateAllocs: reading events reuses the reader's buffers.
func TestSSEReaderSteadyStateAllocs(t *testing.T) {
	event := []byte(`data: {"choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}` + "\n\n")
	body := bytes.Repeat(event, 2000)
	sr := newSSEReader(bytes.NewReader(body))
	_, err := sr.next() // warm up
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := sr.next(); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}
