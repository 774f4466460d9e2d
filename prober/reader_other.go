//go:build !linux

package prober

import (
	"context"
	"io"
	"net"
	"time"
)

// FastReaderSupported reports whether --prober.reader=fast can be used here:
// its poller needs Linux's epoll.
const FastReaderSupported = false

// DefaultReader is the reader used unless another is asked for.
const DefaultReader = ReaderStd

// stream reads the body in the calling goroutine.
func (b *h1Body) stream(ctx context.Context, st *streamState, limit int64, sent time.Time) {
	b.streamBlocking(ctx, st, limit, sent)
}

func rawRecv(int, []byte) (int, int64, error) { return 0, 0, errWouldBlock }

// recvReader returns c: there are no receive stamps here.
func (pc *h1Conn) recvReader(c net.Conn) io.Reader { return c }

func (pc *h1Conn) watch()      {}
func (pc *h1Conn) unregister() {}

// connPoll is empty: there is no poller.
type connPoll struct{}

func (pc *h1Conn) unusable() bool { return peerClosed(pc.tcpConn()) }

func rawWrite(int, []byte) (int, error) { return 0, errWouldBlock }
