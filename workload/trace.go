package workload

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sloprober/sloprober/internal/regularfile"
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

// MaxTraceSpan bounds the time from a trace's earliest record to its
// latest: 366 days. Real traces span an hour (the Mooncake and Azure
// conversation traces in examples/traces) to a few weeks. A timestamp far
// beyond (1e300 ms, a year typed wrong, seconds in a field of milliseconds)
// used to overflow time.Duration, whose range is 292 years, without a word:
// Mooncake's 1e300 gave a duration of -2562047h and a mean rate of 0 req/s.
// Within the bound, every offset stays far inside time.Duration, also when a
// replay slows it down: 366 days at speed 0.01 are 100 years.
const MaxTraceSpan = 366 * 24 * time.Hour

// MaxTraceFileBytes bounds a trace file: 1 GiB, about 20 million records
// (the Azure conversation trace is 1 MB for 19,366). A trace is read whole
// on every load and reload, and its records stay in memory.
const MaxTraceFileBytes = 1 << 30

// MaxTraceLineBytes bounds a line of a trace file, line end excluded: 1 MiB.
// The longest valid record is far shorter: a Mooncake record of MaxTokens
// input tokens has 1,954 hash ids, at most about 43 KB of JSON. The bound
// keeps a file without line ends (a binary, a CSV with CR-only line ends)
// from being read into memory whole.
const MaxTraceLineBytes = 1 << 20

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

// LoadTrace reads a trace file; errors name the file and line, in the form
// "FILE: line N: what". Only a regular file is read: a FIFO or a device
// (/dev/stdin, /dev/zero) would block or never end, and a configuration
// reload reads its traces again.
func LoadTrace(path, format string) (*Trace, error) {
	f, fi, err := regularfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > MaxTraceFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, larger than the limit of %d bytes (1 GiB)", path, fi.Size(), int64(MaxTraceFileBytes))
	}
	t, err := ReadTrace(f, format)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// errEmpty is the error of a file without a byte.
var errEmpty = errors.New("the file is empty")

// ReadTrace parses a trace in the given format. Every record is checked:
// lengths between 0 and MaxTokens and not both 0, at most one hash id per
// MooncakeBlockTokens of input (rounded up), timestamps that are not
// negative and span at most MaxTraceSpan, lines of at most
// MaxTraceLineBytes. Errors name the line: "line N: what".
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

var azureHeader = []string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"}

func readAzure(r io.Reader) (*Trace, error) {
	cr := csv.NewReader(&lineLimiter{r: r, line: 1})
	cr.FieldsPerRecord = len(azureHeader)
	cr.ReuseRecord = true
	header, err := cr.Read()
	switch {
	case errors.Is(err, io.EOF):
		return nil, errEmpty
	case err != nil && !errors.Is(err, csv.ErrFieldCount):
		return nil, csvError(err)
	}
	ok := len(header) == len(azureHeader)
	for i := 0; ok && i < len(header); i++ {
		ok = strings.TrimSpace(strings.TrimPrefix(header[i], "\ufeff")) == azureHeader[i]
	}
	if !ok {
		return nil, fmt.Errorf("line 1: header must be %s, got %q", strings.Join(azureHeader, ","), clip(strings.Join(header, ",")))
	}
	t := &Trace{Timed: true}
	var (
		first time.Time
		sp    span
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return nil, csvError(err)
		}
		line, _ := cr.FieldPos(0)
		ts, err := time.Parse(azureTime, strings.TrimSpace(rec[0]))
		if err != nil {
			return nil, fmt.Errorf("line %d: TIMESTAMP %q: want a time like 2023-11-16 18:15:46.6805900", line, clip(rec[0]))
		}
		in, err := tokens(azureHeader[1], rec[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out, err := tokens(azureHeader[2], rec[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if in == 0 && out == 0 {
			return nil, fmt.Errorf("line %d: %s and %s are both 0", line, azureHeader[1], azureHeader[2])
		}
		if len(t.Records) == 0 {
			first = ts
		}
		at := ts.Sub(first) // saturates at the bounds of time.Duration
		if err := sp.add(line, at, azureHeader[0], strings.TrimSpace(rec[0])); err != nil {
			return nil, err
		}
		t.Records = append(t.Records, Record{At: at, Input: in, Output: out})
	}
}

// csvError puts an error of encoding/csv in the form "line N: what"; its
// own form is "record on line N: what" or "parse error on line N, column C:
// what".
func csvError(err error) error {
	var pe *csv.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	if errors.Is(pe.Err, csv.ErrFieldCount) {
		return fmt.Errorf("line %d: want %d fields (%s)", pe.Line, len(azureHeader), strings.Join(azureHeader, ","))
	}
	return fmt.Errorf("line %d, column %d: %w", pe.Line, pe.Column, pe.Err)
}

// tokens parses a length in tokens from a CSV field.
func tokens(key, s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("%s: must be at most %d tokens, got %s", key, MaxTokens, clip(strings.TrimSpace(s)))
	case err != nil:
		return 0, fmt.Errorf("%s: must be a whole number, got %q", key, clip(s))
	}
	return n, checkTokens(key, n)
}

// checkTokens checks a record's length.
func checkTokens(key string, n int) error {
	if n < 0 {
		return fmt.Errorf("%s: must not be negative, got %d", key, n)
	}
	if n > MaxTokens {
		return fmt.Errorf("%s: must be at most %d tokens, got %d", key, MaxTokens, n)
	}
	return nil
}

// span keeps the earliest and the latest time of the records read so far,
// relative to the first record, with their lines, and rejects a record
// that would make the trace span more than MaxTraceSpan. The comparisons
// are written so that they cannot overflow: every kept time lies within
// MaxTraceSpan of the first record's 0.
type span struct {
	n                int
	min, max         time.Duration
	minLine, maxLine int
	minRaw, maxRaw   string
}

func (s *span) add(line int, at time.Duration, key, raw string) error {
	if s.n == 0 {
		s.min, s.max, s.minLine, s.maxLine, s.minRaw, s.maxRaw = at, at, line, line, raw, raw
	}
	switch {
	case at > s.min+MaxTraceSpan:
		return fmt.Errorf("line %d: %s: %s is more than %s after line %d's %s: a trace spans at most %s",
			line, key, raw, days(MaxTraceSpan), s.minLine, s.minRaw, days(MaxTraceSpan))
	case at < s.max-MaxTraceSpan:
		return fmt.Errorf("line %d: %s: %s is more than %s before line %d's %s: a trace spans at most %s",
			line, key, raw, days(MaxTraceSpan), s.maxLine, s.maxRaw, days(MaxTraceSpan))
	}
	s.n++
	if at < s.min {
		s.min, s.minLine, s.minRaw = at, line, raw
	}
	if at > s.max {
		s.max, s.maxLine, s.maxRaw = at, line, raw
	}
	return nil
}

// maxQuoted bounds a value quoted in an error: a line may be 1 MiB long.
const maxQuoted = 64

// clip shortens s to maxQuoted bytes, on a rune boundary, marking the cut.
func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	i := maxQuoted
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func days(d time.Duration) string { return fmt.Sprintf("%d days", d/(24*time.Hour)) }

// lineLimiter fails a read on the first line longer than MaxTraceLineBytes
// (line end excluded), naming the line: encoding/csv, unlike
// bufio.Scanner, has no bound of its own.
type lineLimiter struct {
	r    io.Reader
	line int // 1-based number of the line being read
	n    int // bytes of it so far
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i, c := range p[:n] {
		switch c {
		case '\n':
			l.line, l.n = l.line+1, 0
		case '\r':
		default:
			if l.n++; l.n > MaxTraceLineBytes {
				return i, tooLong(l.line)
			}
		}
	}
	return n, err
}

func tooLong(line int) error {
	return fmt.Errorf("line %d: longer than %d bytes", line, MaxTraceLineBytes)
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
	// Room for a line of MaxTraceLineBytes and its CR LF; a longer line
	// that still fits is caught below, so both say the same.
	sc.Buffer(make([]byte, 64<<10), MaxTraceLineBytes+2)
	t := &Trace{Timed: true}
	var (
		line    int
		firstTS float64
		sp      span
	)
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) > MaxTraceLineBytes {
			return nil, tooLong(line)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var jr jsonRecord
		if err := json.Unmarshal(b, &jr); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, jsonError(err))
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
		for _, l := range []struct {
			key string
			n   *int
		}{{inKey, in}, {outKey, out}} {
			if l.n == nil {
				return nil, fmt.Errorf("line %d: %s is missing", line, l.key)
			}
			if err := checkTokens(l.key, *l.n); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
		}
		if *in == 0 && *out == 0 {
			return nil, fmt.Errorf("line %d: %s and %s are both 0", line, inKey, outKey)
		}
		if blocks := (*in + MooncakeBlockTokens - 1) / MooncakeBlockTokens; len(jr.HashIDs) > blocks {
			return nil, fmt.Errorf("line %d: hash_ids: %s %d has at most %d blocks of %d tokens, got %d hash ids",
				line, inKey, *in, blocks, MooncakeBlockTokens, len(jr.HashIDs))
		}
		rec := Record{Input: *in, Output: *out, HashIDs: jr.HashIDs}
		if ts := jr.Timestamp; ts != nil {
			if *ts < 0 {
				return nil, fmt.Errorf("line %d: timestamp: must not be negative, got %g", line, *ts)
			}
			if sp.n == 0 {
				firstTS = *ts
			}
			// Milliseconds from the first record, clamped to twice the
			// bound before they become a Duration, so that span reports
			// them instead of an overflow.
			const limit = 2 * float64(MaxTraceSpan/time.Millisecond)
			ms := max(-limit, min(*ts-firstTS, limit))
			rec.At = time.Duration(ms * float64(time.Millisecond))
			if err := sp.add(line, rec.At, "timestamp", formatMS(*ts)); err != nil {
				return nil, err
			}
		} else {
			t.Timed = false
		}
		t.Records = append(t.Records, rec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, tooLong(line + 1)
		}
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if line == 0 {
		return nil, errEmpty
	}
	if !t.Timed {
		for i := range t.Records {
			t.Records[i].At = 0
		}
	}
	return t, nil
}

// formatMS prints a timestamp in milliseconds as a trace would have it:
// 31708800000, not 3.17088e+10; 1e+300, not 301 digits.
func formatMS(ms float64) string {
	if ms < 1e15 {
		return strconv.FormatFloat(ms, 'f', -1, 64)
	}
	return strconv.FormatFloat(ms, 'g', -1, 64)
}

// jsonError says what encoding/json's type errors mean in the words of the
// trace: "input_length: must be an integer, got 1e30", not "cannot
// unmarshal number 1e30 into Go struct field jsonRecord.input_length of
// type int".
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err
	}
	got, isNumber := strings.CutPrefix(te.Value, "number ")
	switch {
	case isNumber:
		got = clip(got)
	case te.Value == "number":
		got = "a number"
	case te.Value == "object" || te.Value == "array":
		got = "an " + te.Value
	default:
		got = "a " + te.Value
	}
	want := "a JSON object"
	switch {
	case te.Field == "hash_ids":
		want = "a list of integers"
	case te.Type.Kind() == reflect.Int:
		want = "an integer"
	case te.Type.Kind() == reflect.Float64:
		want = "a finite number"
	}
	if te.Field == "" {
		return fmt.Errorf("a record must be %s, got %s", want, got)
	}
	return fmt.Errorf("%s: must be %s, got %s", te.Field, want, got)
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
