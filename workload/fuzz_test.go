package workload

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// addSeeds adds the testdata files with the given extension, and the first
// lines of a real trace, to a fuzz corpus.
func addSeeds(f *testing.F, ext, real string) {
	files, err := filepath.Glob("testdata/*" + ext)
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	if b, err := os.ReadFile(real); err == nil {
		b = b[:min(len(b), 4096)]
		f.Add(b[:bytes.LastIndexByte(b, '\n')+1])
	}
}

// fuzzTrace reads data in format: whatever it is, the reader must not panic,
// and a trace it accepts must keep every documented bound.
func fuzzTrace(t *testing.T, data []byte, format string) {
	tr, err := ReadTrace(bytes.NewReader(data), format)
	if err != nil {
		if tr != nil {
			t.Fatalf("a trace and an error: %v", err)
		}
		return
	}
	if len(tr.Records) == 0 {
		t.Fatal("an accepted trace has no records")
	}
	var prev time.Duration
	for i, r := range tr.Records {
		if r.At < prev || r.At < 0 || r.At > MaxTraceSpan {
			t.Fatalf("record %d: At %v out of order or beyond [0, %v]", i, r.At, MaxTraceSpan)
		}
		if !tr.Timed && r.At != 0 {
			t.Fatalf("record %d: At %v in a trace without timestamps", i, r.At)
		}
		prev = r.At
		if r.Input < 0 || r.Input > MaxTokens || r.Output < 0 || r.Output > MaxTokens || r.Input+r.Output == 0 {
			t.Fatalf("record %d: lengths %d, %d out of bounds", i, r.Input, r.Output)
		}
		if len(r.HashIDs) > (r.Input+MooncakeBlockTokens-1)/MooncakeBlockTokens {
			t.Fatalf("record %d: %d hash ids for %d tokens", i, len(r.HashIDs), r.Input)
		}
	}
	if m := MeanRate(tr); math.IsNaN(m) || math.IsInf(m, 0) || m < 0 {
		t.Fatalf("mean rate %g", m)
	}
	s := ComputeStats(tr)
	if s.Duration < 0 || s.Duration > MaxTraceSpan {
		t.Fatalf("duration %v", s.Duration)
	}
}

// FuzzReadTraceAzure: go test -run='^$' -fuzz=FuzzReadTraceAzure ./prober/workload/
func FuzzReadTraceAzure(f *testing.F) {
	addSeeds(f, ".csv", azureTrace)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzTrace(t, data, FormatAzure) })
}

// FuzzReadTraceMooncake: go test -run='^$' -fuzz=FuzzReadTraceMooncake ./prober/workload/
func FuzzReadTraceMooncake(f *testing.F) {
	addSeeds(f, ".jsonl", mooncakeTrace)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzTrace(t, data, FormatMooncake) })
}

// FuzzReadTraceJSONL: go test -run='^$' -fuzz=FuzzReadTraceJSONL ./prober/workload/
func FuzzReadTraceJSONL(f *testing.F) {
	addSeeds(f, ".jsonl", mooncakeTrace)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzTrace(t, data, FormatJSONL) })
}
