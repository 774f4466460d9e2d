package prober

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"
)

// streamOf is a recorded chat stream of n token chunks, as the simulator
// writes it.
func streamOf(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`data: {"id":"chatcmpl-sim-1","object":"chat.completion.chunk","created":1700000000,"model":"sim-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	for i := range n {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-sim-1","object":"chat.completion.chunk","created":1700000000,"model":"sim-model","choices":[{"index":0,"delta":{"content":"w%02d "},"logprobs":null,"finish_reason":null}]}`+"\n\n", i%100)
	}
	b.WriteString(`data: {"id":"chatcmpl-sim-1","object":"chat.completion.chunk","created":1700000000,"model":"sim-model","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}` + "\n\n")
	b.WriteString(`data: {"id":"chatcmpl-sim-1","object":"chat.completion.chunk","created":1700000000,"model":"sim-model","choices":[],"usage":{"prompt_tokens":32,"completion_tokens":200,"total_tokens":232}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkReadStream is the client's hot path for one 200-token stream:
// SSE framing, chunk parsing and a timestamp per chunk (the clock read and
// the append into a slice sized as Client.Do sizes it). Reported per chunk.
func BenchmarkReadStream(b *testing.B) {
	const n = 200
	data := streamOf(n)
	start := time.Now()
	now := func() time.Duration { return time.Since(start) }
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r := &Result{Chunks: make([]time.Duration, 0, n)}
		readStream(&chatAPI, io.NopCloser(bytes.NewReader(data)), r, now, nil, LimitsFor(n))
		if len(r.Chunks) != n || !r.Done {
			b.Fatalf("read %d chunks", len(r.Chunks))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/chunk")
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds()/1e6, "Mchunks/s")
}

// BenchmarkMeasure is the measurement of one finished 200-chunk request.
func BenchmarkMeasure(b *testing.B) {
	r := &Result{Outcome: OutcomeOK, Chunks: make([]time.Duration, 200), Usage: &Usage{PromptTokens: 32, CompletionTokens: 200}, InputTokens: 32, OutputTokens: 200}
	for i := range r.Chunks {
		r.Chunks[i] = time.Duration(80+20*i) * time.Millisecond
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = Measure(r, nil)
	}
}

// TestReadStreamAllocsPerChunk: reading a stream allocates per stream, not
// per chunk: 200 chunks cost as many allocations as 20.
func TestReadStreamAllocsPerChunk(t *testing.T) {
	allocs := func(n int) float64 {
		data := streamOf(n)
		start := time.Now()
		return testing.AllocsPerRun(50, func() {
			r := &Result{Chunks: make([]time.Duration, 0, n)}
			readStream(&chatAPI, io.NopCloser(bytes.NewReader(data)), r, func() time.Duration { return time.Since(start) }, nil, LimitsFor(n))
		})
	}
	if a20, a200 := allocs(20), allocs(200); a200 != a20 {
		t.Fatalf("%v allocations for 20 chunks, %v for 200", a20, a200)
	}
}
