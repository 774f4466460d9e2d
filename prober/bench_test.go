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

// namedStreamOf is a recorded stream of the Responses or Messages API of n
// text deltas, every event named ("event: ..."), as those APIs send them.
func namedStreamOf(api string, n int) []byte {
	var b bytes.Buffer
	switch api {
	case "responses":
		b.WriteString("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"model\":\"m\"}}\n\n")
		for i := range n {
			fmt.Fprintf(&b, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"w%02d \"}\n\n", i+1, i%100)
		}
		b.WriteString("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":3,\"output_tokens\":200}}}\n\n")
	case "messages":
		b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n")
		for i := range n {
			fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"w%02d \"}}\n\n", i%100)
		}
		b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":200}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}
	return b.Bytes()
}

// TestReadStreamAllocsPerEvent: the Responses and Messages APIs name
// every event ("event: content_block_delta"); reading their streams
// allocates per stream too, not per event.
func TestReadStreamAllocsPerEvent(t *testing.T) {
	for _, api := range []string{"responses", "messages"} {
		allocs := func(n int) float64 {
			data := namedStreamOf(api, n)
			start := time.Now()
			return testing.AllocsPerRun(50, func() {
				r := &Result{Chunks: make([]time.Duration, 0, n)}
				readStream(apiOf(api), io.NopCloser(bytes.NewReader(data)), r, func() time.Duration { return time.Since(start) }, nil, LimitsFor(n))
				if len(r.Chunks) != n || !r.Done {
					t.Fatalf("%s: read %d chunks, done %v: %s", api, len(r.Chunks), r.Done, r.Error())
				}
			})
		}
		if a20, a200 := allocs(20), allocs(200); a200 != a20 {
			t.Fatalf("%s: %v allocations for 20 events, %v for 200", api, a20, a200)
		}
	}
}

// chunkedOf frames data as the chunked transfer coding does, one chunk an
// SSE event, as a server flushing every event writes it.
func chunkedOf(data []byte) []byte {
	var b bytes.Buffer
	for ev := range bytes.SplitAfterSeq(data, []byte("\n\n")) {
		if len(ev) > 0 {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(ev), ev)
		}
	}
	b.WriteString("0\r\n\r\n")
	return b.Bytes()
}

// processChunked runs the fast reader's hot path over a chunked stream read
// in pieces of piece bytes: dechunking, SSE framing, chunk parsing, the
// byte bound and a timestamp per chunk (bodyStream.process, as the poller
// calls it; the read system calls are not in it).
func processChunked(data []byte, n, piece int) *Result {
	r := &Result{Chunks: make([]time.Duration, 0, n), OutputTokens: n}
	st := newStreamState(&chatAPI, r, nil, LimitsFor(n))
	st.clock = func() time.Duration { return time.Millisecond }
	s := newBodyStream(&h1Body{framing: framingChunked}, st, LimitsFor(n).Bytes)
	for len(data) > 0 && !s.ended {
		p := data[:min(piece, len(data))]
		data = data[len(p):]
		s.process(p)
	}
	return r
}

// BenchmarkFastProcess is BenchmarkReadStream's work on the fast reader's
// path, a chunk a read. Reported per chunk.
func BenchmarkFastProcess(b *testing.B) {
	const n = 200
	data := chunkedOf(streamOf(n))
	piece := len(data) / (n + 3)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if r := processChunked(data, n, piece); len(r.Chunks) != n || !r.Done {
			b.Fatalf("read %d chunks", len(r.Chunks))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/chunk")
}

// TestFastProcessAllocsPerChunk: the fast reader's path allocates per
// stream, not per chunk, and reads what the standard path reads.
func TestFastProcessAllocsPerChunk(t *testing.T) {
	allocs := func(n int) float64 {
		data := chunkedOf(streamOf(n))
		return testing.AllocsPerRun(50, func() { processChunked(data, n, 97) })
	}
	if a20, a200 := allocs(20), allocs(200); a200 != a20 {
		t.Fatalf("%v allocations for 20 chunks, %v for 200", a20, a200)
	}
	r := processChunked(chunkedOf(streamOf(200)), 200, 97)
	if len(r.Chunks) != 200 || !r.Done || r.Usage == nil || r.Usage.CompletionTokens != 200 || r.FinishReason != "length" {
		t.Fatalf("read %d chunks, done %v, usage %+v, finish %q", len(r.Chunks), r.Done, r.Usage, r.FinishReason)
	}
}
