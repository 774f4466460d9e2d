package prober

import (
	"bytes"
	"errors"
	"fmt"
)

// maxEventBytes bounds one SSE event: a chunk is a few hundred bytes, a
// usage chunk with logprobs a few kilobytes; 4 MiB means a broken server.
const maxEventBytes = 4 << 20

// errNotSSE reports a body that is not a server-sent event stream at all: an
// HTML error page or a JSON object where events were expected.
var errNotSSE = errors.New("response body is not an SSE stream")

// sseEvent is one dispatched event. Name and Data are valid until the next
// line is parsed (a string name would cost an allocation an event, and the
// Responses and Messages APIs name every event).
type sseEvent struct {
	Name []byte
	Data []byte
}

// eventSink takes the events an sseParser dispatches; event returns false
// when reading should stop (the stream was cut at a bound).
type eventSink interface {
	event(sseEvent) bool
}

// sseParser parses server-sent events as the WHATWG spec defines them,
// pushed to it in pieces of any size as they arrive: lines end in LF, CRLF
// or a lone CR, a blank line dispatches the event, "data:" lines are joined
// with LF, one space after the colon is dropped, comment lines
// (":keep-alive") and id/retry fields are skipped, and an event not
// dispatched when the stream ends is discarded. Beyond the spec, a line
// "error: ..." (llama.cpp's in-stream error) is an event named "error".
//
// Being pushed to, not pulling from a reader, lets one parser serve both
// read paths: the standard one feeds it what net/http's body returns, the
// fast one (reader_linux.go) what a read of the socket returns, dechunked in
// place. A line whole within a piece is parsed where it lies; only a line
// split across pieces is copied. Its buffers are reused, so a steady stream
// of events allocates nothing.
type sseParser struct {
	long    []byte // the start of a line split across pieces
	partial bool   // long holds a line's start
	data    []byte
	name    []byte
	hasData bool
	reset   bool // an event was dispatched: the next line starts a new one
	lines   int
	skipLF  bool // the last line ended in CR: a LF right after it is part of that line end
}

func newSSEParser() *sseParser {
	return &sseParser{data: make([]byte, 0, 512)}
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

// feed parses the next piece of the stream, giving sink every event it
// completes. It returns stop when the sink asked to stop, and errNotSSE or
// a cut (errLineTooLong, errEventTooLong) when the stream breaks them.
func (s *sseParser) feed(p []byte, sink eventSink) (stop bool, err error) {
	for len(p) > 0 {
		if s.skipLF {
			s.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := lineEnd(p)
		if i < 0 {
			// No line end: keep the line's start for the next piece.
			if len(s.long)+len(p) > maxEventBytes {
				return false, errLineTooLong
			}
			s.long = append(s.long, p...)
			s.partial = true
			return false, nil
		}
		line := p[:i]
		s.skipLF = p[i] == '\r'
		p = p[i+1:]
		if s.partial {
			s.long = append(s.long, line...)
			line = s.long
		}
		if len(line) > maxEventBytes {
			return false, errLineTooLong
		}
		ev, ok, err := s.line(line)
		s.long, s.partial = s.long[:0], false
		if err != nil {
			return false, err
		}
		if ok && !sink.event(ev) {
			return true, nil
		}
	}
	return false, nil
}

// end reports how the stream's end leaves the parser: errNotSSE for a body
// that is one line without its line end and no SSE field, nil otherwise (a
// last line without its line end belongs to an event never dispatched, and
// is dropped).
func (s *sseParser) end() error {
	if s.partial && s.lines == 0 {
		if field := fieldOf(s.long); !sseFields[string(field)] {
			return fmt.Errorf("%w: it starts with %q", errNotSSE, excerpt(s.long, 40))
		}
	}
	return nil
}

// line parses one line without its line end; ok reports a dispatched event.
func (s *sseParser) line(line []byte) (ev sseEvent, ok bool, err error) {
	if s.reset {
		s.data, s.name, s.hasData, s.reset = s.data[:0], s.name[:0], false, false
	}
	s.lines++
	if len(line) == 0 {
		if s.hasData {
			s.reset = true
			return sseEvent{Name: s.name, Data: s.data}, true, nil
		}
		s.name = s.name[:0]
		return sseEvent{}, false, nil
	}
	if line[0] == ':' {
		return sseEvent{}, false, nil // a comment, such as ": keep-alive"
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
			return sseEvent{}, false, errEventTooLong
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
		s.reset = true
		return sseEvent{Name: errorEventName, Data: s.data}, true, nil
	default:
		// The spec ignores unknown fields; a body that starts with
		// one ("<html>", "{") is not SSE, and saying so beats
		// reporting a stream without [DONE].
		if s.lines == 1 || !s.hasData {
			return sseEvent{}, false, fmt.Errorf("%w: it starts with %q", errNotSSE, excerpt(line, 40))
		}
	}
	return sseEvent{}, false, nil
}

// errorEventName names the event of an "error:" line.
var errorEventName = []byte("error")

func excerpt(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
