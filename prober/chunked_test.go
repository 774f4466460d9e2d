package prober

import (
	"bytes"
	"errors"
	"io"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dechunk decodes body fed in pieces of at most piece bytes: the data, what
// followed the body, and the first error.
func dechunk(body []byte, piece int) (data, after []byte, done bool, err error) {
	var d chunkedDecoder
	for len(body) > 0 {
		p := body[:min(piece, len(body))]
		body = body[len(p):]
		for len(p) > 0 {
			var got []byte
			got, p, err = d.next(p)
			if err != nil {
				return data, nil, false, err
			}
			data = append(data, got...)
			if d.done() {
				return data, append(p, body...), true, nil
			}
		}
	}
	return data, nil, d.done(), nil
}

// TestChunkedDecoder: the decoder agrees with net/http's chunked reader on
// well-formed and malformed framing, fed whole or a byte at a time, and
// stops at the body's end.
func TestChunkedDecoder(t *testing.T) {
	for _, tc := range []struct {
		name, body, data, after, errHas string
		done                            bool
	}{
		{name: "chunks", body: "5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n", data: "hello world", done: true},
		{name: "upper hex and extension", body: "A;foo=bar\r\n0123456789\r\n0\r\n\r\n", data: "0123456789", done: true},
		{name: "trailer", body: "3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n", data: "abc", done: true},
		{name: "what follows", body: "3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200", data: "abc", after: "HTTP/1.1 200", done: true},
		{name: "not ended", body: "3\r\nabc\r\n2\r\nd", data: "abcd"},
		{name: "bare LF", body: "3\nabc\r\n", errHas: "bare LF"},
		{name: "no CRLF after data", body: "3\r\nabcd\r\n", data: "abc", errHas: "malformed"},
		{name: "not hex", body: "xyz\r\nabc\r\n", errHas: "invalid byte"},
		{name: "empty size", body: "\r\nabc\r\n", errHas: "empty hex"},
		{name: "too large", body: "10000000000000000\r\n", errHas: "too large"},
		{name: "long line", body: strings.Repeat("0", 5000) + "1\r\nx\r\n", errHas: "line too long"},
		{name: "excess", body: strings.Repeat("1;"+strings.Repeat("e", 200)+"\r\nx\r\n", 200), data: strings.Repeat("x", 88), errHas: "too much non-data"},
		{name: "long trailer", body: "0\r\n" + strings.Repeat("X-A: b\r\n", 3000), errHas: "trailer longer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, piece := range []int{len(tc.body), 1, 3} {
				data, after, done, err := dechunk([]byte(tc.body), piece)
				if tc.errHas != "" {
					require.ErrorContains(t, err, tc.errHas)
				} else {
					require.NoError(t, err)
				}
				require.Equal(t, tc.data, string(data), "piece %d", piece)
				require.Equal(t, tc.after, string(after))
				require.Equal(t, tc.done, done)
			}
			// net/http's reader agrees (it leaves the trailer to its caller).
			want, werr := io.ReadAll(httputil.NewChunkedReader(strings.NewReader(tc.body)))
			if tc.errHas == "" || strings.Contains(tc.errHas, "trailer") {
				if !tc.done && tc.errHas == "" {
					require.ErrorIs(t, werr, io.ErrUnexpectedEOF)
				} else {
					require.NoError(t, werr)
				}
			} else {
				// The same words as net/http's reader.
				_, _, _, err := dechunk([]byte(tc.body), len(tc.body))
				require.EqualError(t, err, werr.Error())
			}
			require.Equal(t, tc.data, string(want))
		})
	}
}

// FuzzChunkedDecoder: on any input, the decoder gives the data net/http's
// chunked reader gives, fails where it fails, and does not depend on how
// the input is split.
func FuzzChunkedDecoder(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), uint8(1))
	f.Add([]byte("3;x\r\nabc\r\n0\r\nT: v\r\n\r\n"), uint8(2))
	f.Add([]byte("3\nabc\r\n"), uint8(7))
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		whole, _, wholeDone, wholeErr := dechunk(body, len(body)+1)
		split, _, splitDone, splitErr := dechunk(body, int(piece)+1)
		require.Equal(t, wholeErr == nil, splitErr == nil)
		require.Equal(t, wholeDone, splitDone)
		if wholeErr == nil {
			require.Equal(t, string(whole), string(split))
		}
		// net/http stops at the last chunk: compare up to it.
		want, werr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(body)))
		if wholeErr == nil && wholeDone {
			require.NoError(t, werr)
			require.Equal(t, string(want), string(whole))
		}
		if werr != nil && !errors.Is(werr, io.ErrUnexpectedEOF) {
			require.True(t, wholeErr != nil || !wholeDone, "net/http refused %q: %v", body, werr)
		}
	})
}
