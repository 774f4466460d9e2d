package prober

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxEventBytes bounds one SSE event: a chunk is a few hundred bytes, a
// usage chunk with logprobs a few kilobytes; 4 MiB means a broken server.
const maxEventBytes = 4 << 20

// errNotSSE reports a body that is not a server-sent event stream at all: an
// HTML error page or a JSON object where events were expected.
var errNotSSE = errors.New("response body is not an SSE stream")

// sseEvent is one dispatched event. Name and Data are valid until the next
// call to next (a string name would cost an allocation an event, and the
// Responses and Messages APIs name every event).
type sseEvent struct {
	Name []byte
	Data []byte
}

// sseReader reads server-sent events as the WHATWG spec defines them: lines
// end in LF, CRLF or a lone CR, a blank line dispatches the event, "data:"
// lines are joined with LF, one space after the colon is dropped, comment
// lines (":keep-alive") and id/retry fields are skipped, and an event not
// dispatched when the stream ends is discarded. Beyond the spec, a line
// "error: ..." (llama.cpp's in-stream error) is an event named "error". It
// reuses its buffers, so a steady stream of events allocates nothing.
type sseReader struct {
	br      *bufio.Reader
	long    []byte // a line longer than the bufio buffer, assembled
	data    []byte
	name    []byte
	hasData bool
	lines   int
	skipLF  bool // the last line ended in CR: a LF right after it is part of that line end
}

// newSSEReader reads from r through a 1 KiB buffer: a chunk is a few
// hundred bytes, longer lines are assembled, and at 5,000 concurrent
// streams every KiB a stream costs is 5 MB.
func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 1<<10), data: make([]byte, 0, 512)}
}

// errLineTooLong and errEventTooLong report a line or an event beyond
// maxEventBytes: the stream is cut there.
var (
	errLineTooLong  = fmt.Errorf("%w: an SSE line longer than %d bytes", errStreamCut, maxEventBytes)
	errEventTooLong = fmt.Errorf("%w: an SSE event longer than %d bytes", errStreamCut, maxEventBytes)
)

// sseFields are the field names sloprober reads ("" is a comment).
var sseFields = map[string]bool{"": true, "data": true, "event": true, "id": true, "retry": true, "error": true}

// fieldOf returns the field name of a line.
func fieldOf(line []byte) []byte {
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		return line[:i]
	}
	return line
}

// lineEnd returns the index of the first CR or LF in b, or -1. Two
// IndexByte scans (vectorised) beat a loop over the bytes: a CR comes, if
// at all, just before the LF.
func lineEnd(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	head := b
	if lf >= 0 {
		head = b[:lf]
	}
	if cr := bytes.IndexByte(head, '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// readLine returns the next line without its line end (LF, CRLF or CR). The
// slice is valid until the next call.
func (s *sseReader) readLine() ([]byte, error) {
	// The common case first: a whole line ending in LF or CRLF buffered,
	// no lone CR in it.
	if n := s.br.Buffered(); n > 0 && !s.skipLF {
		buf, _ := s.br.Peek(n)
		if lf := bytes.IndexByte(buf, '\n'); lf >= 0 {
			line := buf[:lf]
			if k := len(line); k > 0 && line[k-1] == '\r' {
				line = line[:k-1]
			}
			if bytes.IndexByte(line, '\r') < 0 {
				_, _ = s.br.Discard(lf + 1)
				return line, nil
			}
		}
	}
	s.long = s.long[:0]
	assembling := false
	for {
		buf, err := s.br.Peek(1)
		if len(buf) == 0 {
			if errors.Is(err, io.EOF) && (assembling || len(s.long) > 0) {
				// A last line without its line end: the event it belongs
				// to is never dispatched, so it is dropped; but a body
				// that is one such line may be no SSE at all.
				if s.lines == 0 {
					if field := fieldOf(s.long); !sseFields[string(field)] {
						return nil, fmt.Errorf("%w: it starts with %q", errNotSSE, excerpt(s.long, 40))
					}
				}
				return nil, io.EOF
			}
			return nil, err
		}
		if s.skipLF {
			s.skipLF = false
			if buf[0] == '\n' {
				_, _ = s.br.Discard(1)
				continue
			}
		}
		buf, _ = s.br.Peek(s.br.Buffered())
		if i := lineEnd(buf); i >= 0 {
			s.skipLF = buf[i] == '\r'
			line := buf[:i]
			if assembling {
				s.long = append(s.long, line...)
				line = s.long
			}
			if len(line) > maxEventBytes {
				return nil, errLineTooLong
			}
			_, _ = s.br.Discard(i + 1)
			return line, nil
		}
		// No line end buffered: keep what there is and read on.
		s.long = append(s.long, buf...)
		assembling = true
		_, _ = s.br.Discard(len(buf))
		if len(s.long) > maxEventBytes {
			return nil, errLineTooLong
		}
	}
}

// next returns the next event. It returns io.EOF at the end of the stream,
// errNotSSE for a body that is not SSE, and other errors as they come.
func (s *sseReader) next() (sseEvent, error) {
	s.data, s.name, s.hasData = s.data[:0], s.name[:0], false
	for {
		line, err := s.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		s.lines++
		if len(line) == 0 {
			if s.hasData {
				return sseEvent{Name: s.name, Data: s.data}, nil
			}
			s.name = s.name[:0]
			continue
		}
		if line[0] == ':' {
			continue // a comment, such as ": keep-alive"
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if s.hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			s.hasData = true
			if len(s.data) > maxEventBytes {
				return sseEvent{}, errEventTooLong
			}
		case "event":
			s.name = append(s.name[:0], value...)
		case "id", "retry":
		case "error":
			// llama.cpp ends a stream that failed after its headers with
			// a line "error: {...}" (then "data: [DONE]"): an error
			// event, whatever came before it.
			s.data = append(s.data[:0], value...)
			if len(s.data) == 0 {
				s.data = append(s.data, "(no message)"...)
			}
			return sseEvent{Name: errorEventName, Data: s.data}, nil
		default:
			// The spec ignores unknown fields; a body that starts with
			// one ("<html>", "{") is not SSE, and saying so beats
			// reporting a stream without [DONE].
			if s.lines == 1 || !s.hasData {
				return sseEvent{}, fmt.Errorf("%w: it starts with %q", errNotSSE, excerpt(line, 40))
			}
		}
	}
}

// errorEventName names the event of an "error:" line.
var errorEventName = []byte("error")

func excerpt(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
