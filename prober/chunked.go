package prober

import (
	"bytes"
	"errors"
	"fmt"
)

// chunkedDecoder decodes HTTP/1.1's chunked transfer coding (RFC 9112,
// section 7.1) from pieces of any size pushed to it as they are read: the
// fast read path (reader_linux.go) dechunks a read of the socket in place,
// handing the data between the framing to the SSE parser without a copy.
// It accepts and refuses what net/http's chunked reader does, so the two
// read paths judge a server alike: size lines end in CRLF, at most
// maxChunkLine bytes, extensions ignored, at most 16 hex digits; chunk
// data is followed by CRLF; and framing beyond 16 KiB more than its data
// is a server attacking its client. The trailer after the last chunk is
// read and discarded, at most maxTrailerBytes.
type chunkedDecoder struct {
	state   chunkedState
	left    uint64 // data bytes left in the current chunk
	line    []byte // the start of a size or trailer line split across pieces
	excess  int64  // framing beyond the data, net/http's measure
	trailer int    // trailer bytes read
}

type chunkedState uint8

const (
	chunkSize    chunkedState = iota // reading a chunk-size line
	chunkData                        // reading chunk data
	chunkDataCR                      // expecting the CR after chunk data
	chunkDataLF                      // expecting the LF after chunk data
	chunkTrailer                     // reading trailer lines up to an empty one
	chunkDone                        // the body ended
)

// maxChunkLine is net/http's bound on a chunk-size line; maxTrailerBytes
// bounds the trailer (net/http bounds it by its header limit, 1 MB; a
// stream's trailer is empty in practice).
const (
	maxChunkLine    = 4096
	maxTrailerBytes = 16 << 10
)

// The errors say what net/http's chunked reader says (the SSE reader
// reports either as "stream broken: ..."), but for the trailer's bound,
// which net/http does not have.
var (
	errChunkedMalformed = errors.New("malformed chunked encoding")
	errChunkLineTooLong = errors.New("header line too long")
	errChunkExcess      = errors.New("chunked encoding contains too much non-data")
	errTrailerTooLong   = fmt.Errorf("chunked trailer longer than %d bytes", maxTrailerBytes)
)

// done reports whether the last chunk and the trailer were read.
func (d *chunkedDecoder) done() bool { return d.state == chunkDone }

// next decodes the start of p. It returns the chunk data found there (a
// slice of p, empty when p held only framing) and the rest of p, not yet
// decoded; it consumes all of p when no data comes before its end. Once
// done, it consumes nothing: rest is what followed the body.
func (d *chunkedDecoder) next(p []byte) (data, rest []byte, err error) {
	for len(p) > 0 {
		switch d.state {
		case chunkData:
			n := uint64(len(p))
			if n > d.left {
				n = d.left
			}
			d.left -= n
			if d.left == 0 {
				d.state = chunkDataCR
			}
			return p[:n], p[n:], nil
		case chunkDataCR, chunkDataLF:
			want := byte('\r')
			if d.state == chunkDataLF {
				want = '\n'
			}
			if p[0] != want {
				return nil, nil, errChunkedMalformed
			}
			p = p[1:]
			if d.state++; d.state > chunkDataLF {
				d.state = chunkSize
			}
		case chunkSize, chunkTrailer:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				if err := d.grow(len(p)); err != nil {
					return nil, nil, err
				}
				d.line = append(d.line, p...)
				return nil, nil, nil
			}
			if err := d.grow(i + 1); err != nil {
				return nil, nil, err
			}
			line := p[:i+1]
			if len(d.line) > 0 {
				line = append(d.line, line...)
				d.line = line[:0]
			}
			p = p[i+1:]
			if err := d.endLine(line); err != nil {
				return nil, nil, err
			}
		case chunkDone:
			return nil, p, nil
		}
	}
	return nil, nil, nil
}

// grow checks that n more bytes of a line keep it within its bound.
func (d *chunkedDecoder) grow(n int) error {
	if d.state == chunkTrailer {
		if d.trailer += n; d.trailer > maxTrailerBytes {
			return errTrailerTooLong
		}
		return nil
	}
	// A CRLF ends the line: it may take maxChunkLine-1 bytes and its end.
	if len(d.line)+n > maxChunkLine+1 {
		return errChunkLineTooLong
	}
	return nil
}

// endLine handles a whole size or trailer line, its LF included.
func (d *chunkedDecoder) endLine(line []byte) error {
	if d.state == chunkTrailer {
		// Trailer fields are discarded; an empty line ends them.
		if len(line) == 1 || len(line) == 2 && line[0] == '\r' {
			d.state = chunkDone
		}
		return nil
	}
	if cr := bytes.IndexByte(line, '\r'); cr < 0 || cr != len(line)-2 {
		if cr < 0 {
			return errors.New("chunked line ends with bare LF")
		}
		return errors.New("invalid CR in chunked line")
	}
	line = line[:len(line)-2]
	if len(line) >= maxChunkLine {
		return errChunkLineTooLong
	}
	d.excess += int64(len(line)) + 2 // net/http counts the data's CRLF
	for len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	if semi := bytes.IndexByte(line, ';'); semi >= 0 {
		line = line[:semi]
	}
	n, err := parseChunkSize(line)
	if err != nil {
		return err
	}
	d.excess = max(d.excess-16-2*int64(min(n, 1<<40)), 0)
	if d.excess > 16<<10 {
		return errChunkExcess
	}
	if n == 0 {
		d.state = chunkTrailer
		return nil
	}
	d.left, d.state = n, chunkData
	return nil
}

// parseChunkSize parses a chunk size: 1 to 16 hex digits.
func parseChunkSize(v []byte) (uint64, error) {
	if len(v) == 0 {
		return 0, errors.New("empty hex number for chunk length")
	}
	var n uint64
	for i, b := range v {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			b = b - 'A' + 10
		default:
			return 0, errors.New("invalid byte in chunk length")
		}
		if i == 16 {
			return 0, errors.New("http chunk length too large")
		}
		n = n<<4 | uint64(b)
	}
	return n, nil
}
