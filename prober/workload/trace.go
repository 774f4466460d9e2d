package workload

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Trace formats.
const (
	// FormatAzure is the Azure LLM inference trace: CSV with a header
	// TIMESTAMP,ContextTokens,GeneratedTokens; wall-clock timestamps.
	FormatAzure = "azure"
	// FormatMooncake is the Mooncake trace: JSON lines with timestamp (ms
	// from the start), input_length, output_length and hash_ids (one id per
	// 512-token prompt block; equal ids are equal blocks).
	FormatMooncake = "mooncake"
	// FormatJSONL is sloprober's own: JSON lines with input_tokens,
	// output_tokens and, optionally, timestamp (ms) and hash_ids.
	FormatJSONL = "jsonl"
)

// Formats lists the trace formats.
var Formats = []string{FormatAzure, FormatMooncake, FormatJSONL}

// MooncakeBlockTokens is the prompt block size of Mooncake's hash_ids.
const MooncakeBlockTokens = 512

// Record is one request of a trace.
type Record struct {
	// At is the request's time from the trace's first request; zero for
	// every record of a trace without timestamps.
	At     time.Duration
	Input  int
	Output int
	// HashIDs identify the prompt's blocks of MooncakeBlockTokens tokens.
	HashIDs []int
}

// Trace is a parsed trace, sorted by time.
type Trace struct {
	Records []Record
	// Timed says whether the trace has arrival times (jsonl may not).
	Timed bool
}

// LoadTrace reads a trace file; errors name the file and line.
func LoadTrace(path, format string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ReadTrace(f, format)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ReadTrace parses a trace in the given format.
func ReadTrace(r io.Reader, format string) (*Trace, error) {
	var (
		t   *Trace
		err error
	)
	switch format {
	case FormatAzure:
		t, err = readAzure(r)
	case FormatMooncake, FormatJSONL:
		t, err = readJSONL(r, format)
	default:
		return nil, fmt.Errorf("unknown trace format %q (known: %s)", format, strings.Join(Formats, ", "))
	}
	if err != nil {
		return nil, err
	}
	if len(t.Records) == 0 {
		return nil, errors.New("the trace has no records")
	}
	sort.SliceStable(t.Records, func(i, j int) bool { return t.Records[i].At < t.Records[j].At })
	first := t.Records[0].At
	for i := range t.Records {
		t.Records[i].At -= first
	}
	return t, nil
}

// azureTime is the layout of the Azure trace's timestamps; fractional
// seconds of any length are accepted.
const azureTime = "2006-01-02 15:04:05.999999999"

func readAzure(r io.Reader) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("line 1: %w", err)
	}
	want := []string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
	for i, h := range header {
		if strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) != want[i] {
			return nil, fmt.Errorf("line 1: header must be %s, got %s", strings.Join(want, ","), strings.Join(header, ","))
		}
	}
	t := &Trace{Timed: true}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, err // csv errors name their line
		}
		ts, err := time.Parse(azureTime, strings.TrimSpace(rec[0]))
		if err != nil {
			return nil, fmt.Errorf("line %d: TIMESTAMP %q: want a time like 2023-11-16 18:15:46.6805900", line, rec[0])
		}
		in, err := tokens(rec[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: ContextTokens: %w", line, err)
		}
		out, err := tokens(rec[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: GeneratedTokens: %w", line, err)
		}
		t.Records = append(t.Records, Record{At: time.Duration(ts.UnixNano()), Input: in, Output: out})
	}
}

func tokens(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("%d is negative", n)
	}
	return n, nil
}

// jsonRecord is a line of a mooncake or jsonl trace.
type jsonRecord struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	InputTokens  *int     `json:"input_tokens"`
	OutputTokens *int     `json:"output_tokens"`
	HashIDs      []int    `json:"hash_ids"`
}

func readJSONL(r io.Reader, format string) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	t := &Trace{Timed: true}
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var jr jsonRecord
		if err := json.Unmarshal(b, &jr); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		in, out := jr.InputTokens, jr.OutputTokens
		inKey, outKey := "input_tokens", "output_tokens"
		if format == FormatMooncake {
			in, out = jr.InputLength, jr.OutputLength
			inKey, outKey = "input_length", "output_length"
			if jr.Timestamp == nil {
				return nil, fmt.Errorf("line %d: timestamp is missing", line)
			}
		}
		if in == nil || *in < 0 {
			return nil, fmt.Errorf("line %d: %s is missing or negative", line, inKey)
		}
		if out == nil || *out < 0 {
			return nil, fmt.Errorf("line %d: %s is missing or negative", line, outKey)
		}
		rec := Record{Input: *in, Output: *out, HashIDs: jr.HashIDs}
		if jr.Timestamp != nil {
			if *jr.Timestamp < 0 {
				return nil, fmt.Errorf("line %d: timestamp is negative", line)
			}
			rec.At = time.Duration(*jr.Timestamp * float64(time.Millisecond))
		} else {
			t.Timed = false
		}
		t.Records = append(t.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if !t.Timed {
		for i := range t.Records {
			t.Records[i].At = 0
		}
	}
	return t, nil
}

// MeanRate is the trace's request rate, req/s: a replay that loops sends
// len(records) requests every duration plus one mean gap.
func MeanRate(t *Trace) float64 {
	n := len(t.Records)
	if !t.Timed || n < 2 {
		return 0
	}
	d := t.Records[n-1].At - t.Records[0].At
	if d <= 0 {
		return 0
	}
	return float64(n-1) / d.Seconds()
}
