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

// sseEvent is one dispatched event. Data is valid until the next call to next.
type sseEvent struct {
	Name string
	Data []byte
}

// sseReader reads server-sent events as the WHATWG spec defines them: lines
// end in LF or CRLF, a blank line dispatches the event, "data:" lines are
// joined with LF, one space after the colon is dropped, comment lines
// (":keep-alive") and id/retry fields are skipped, and an event not
// dispatched when the stream ends is discarded. It reuses its buffers, so a
// steady stream of events allocates nothing.
type sseReader struct {
	br      *bufio.Reader
	long    []byte // a line longer than the bufio buffer, assembled
	data    []byte
	name    []byte
	hasData bool
	lines   int
}

// newSSEReader reads from r through a 1 KiB buffer: a chunk is a few
// hundred bytes, longer lines are assembled, and at 5,000 concurrent
// streams every KiB a stream costs is 5 MB.
func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 1<<10), data: make([]byte, 0, 512)}
}

// readLine returns the next line without its line end. The slice is valid
// until the next call.
func (s *sseReader) readLine() ([]byte, error) {
	line, err := s.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(s.long) > maxEventBytes {
				return nil, fmt.Errorf("SSE line longer than %d bytes", maxEventBytes)
			}
			line, err = s.br.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			// A last line without its line end: the event it belongs to
			// is never dispatched, so it is dropped.
			return nil, io.EOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
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
				return sseEvent{Name: string(s.name), Data: s.data}, nil
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
				return sseEvent{}, fmt.Errorf("SSE event longer than %d bytes", maxEventBytes)
			}
		case "event":
			s.name = append(s.name[:0], value...)
		case "id", "retry":
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

func excerpt(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
