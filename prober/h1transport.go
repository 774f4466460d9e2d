package prober

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// h1Transport is the fast reader's transport (--prober.reader=fast): HTTP/1.1
// over plain TCP or TLS, each connection its own, so that a streamed
// response's body can be read from the socket by the poller
// (reader_linux.go) instead of through net/http's three buffered layers
// and a goroutine woken for every chunk.
//
// It sends as net/http does (Request.Write) and reads the response's head
// with http.ReadResponse; a body read with Read is net/http's own (error
// pages, /tokenize). It calls the request's httptrace hooks as net/http
// does, so the tracer, the connection tracker and the retries see the same
// events on both paths: DNS and connect (from the dialer), TLS, GotConn,
// WroteRequest and GotFirstResponseByte. Like net/http it sends a request
// again on a new connection only when not one byte of it was written to a
// kept-alive one, bounds a response's head at 10 MiB, closes a connection
// that carried bytes after its response, and closes idle connections after
// idleTimeout. Instead of net/http's goroutine reading each idle
// connection, the poller watches them (reader_linux.go), and a connection
// is peeked when it goes idle and when it is taken: one the server closed
// is counted for the connection tracker and dialed anew.
type h1Transport struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	tlsConfig   *tls.Config // nil: https is not served (the client keeps net/http for it)
	keepAlive   bool
	idleTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*h1Conn // by scheme and address, the most recent last
}

// maxIdlePerHost is net/http's limit as prometheus/common sets it
// (idlePerPool).
const maxIdlePerHost = idlePerPool

// h1Conn is one connection of an h1Transport.
type h1Conn struct {
	t      *h1Transport
	key    string
	conn   net.Conn      // what requests are written to: the tracked connection, or TLS over it
	tc     *trackedConn  // nil when the dialer does not track
	nb     *nbConn       // the connection under TLS, nil for plain TCP
	fd     int           // the socket, -1 when not known
	stamp  int64         // the kernel's receive stamp of the last read (rawRecv), 0 when none
	br     *bufio.Reader // over lr: the response's head is bounded
	lr     headLimit
	bw     *bufio.Writer
	cw     countingWriter
	idleAt time.Time
	// idleTimer closes the connection once idle for idleTimeout, as
	// net/http's IdleConnTimeout does.
	idleTimer *time.Timer

	// The poller's view (reader_linux.go), under mu. A connection that
	// carried a stream stays registered with its poller until it is
	// closed: while idle, the poller notices the server's close at once,
	// as net/http's reader of an idle connection does.
	mu    sync.Mutex
	state connState
	gone  bool // the server closed it, or sent what nobody asked for
	connPoll
}

// connState is what an h1Conn is doing.
type connState uint8

const (
	connBusy      connState = iota // a request's goroutine writes it or reads its response's head
	connStreaming                  // the poller reads its stream
	connIdle                       // in the idle list
	connClosed
)

// countingWriter counts what reaches the connection: a request of which
// not one byte was written may be sent again.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// errNothingWritten wraps the error of a request of which not one byte
// reached its connection.
type errNothingWritten struct{ err error }

func (e errNothingWritten) Error() string { return e.err.Error() }
func (e errNothingWritten) Unwrap() error { return e.err }

// connKey returns the pool key of a URL and the address to dial.
func connKey(u *urlParts) (key, addr string) {
	port := u.port
	if port == "" {
		port = "80"
		if u.scheme == "https" {
			port = "443"
		}
	}
	addr = net.JoinHostPort(u.host, port)
	return u.scheme + "://" + addr, addr
}

// urlParts are the parts of a request URL the transport needs.
type urlParts struct{ scheme, host, port string }

func partsOf(req *http.Request) (*urlParts, error) {
	u := req.URL
	if u == nil || u.Host == "" {
		return nil, errors.New("http: no Host in request URL")
	}
	switch u.Scheme {
	case "http", "https":
	default:
		return nil, fmt.Errorf("unsupported protocol scheme %q", u.Scheme)
	}
	return &urlParts{scheme: u.Scheme, host: u.Hostname(), port: u.Port()}, nil
}

// RoundTrip sends req on a kept-alive connection or a new one and reads the
// response's head.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	parts, err := partsOf(req)
	if err == nil && parts.scheme == "https" && t.tlsConfig == nil {
		err = errors.New("https is not served by the fast reader's transport")
	}
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	key, addr := connKey(parts)
	for attempt := 0; ; attempt++ {
		pc, idleFor, err := t.takeIdle(key)
		reused := pc != nil
		if pc == nil {
			if pc, err = t.dialConn(ctx, key, addr, parts); err != nil {
				if req.Body != nil {
					_ = req.Body.Close()
				}
				return nil, err
			}
		}
		if trace != nil && trace.GotConn != nil {
			trace.GotConn(httptrace.GotConnInfo{Conn: pc.conn, Reused: reused, WasIdle: reused, IdleTime: idleFor})
		}
		resp, err := t.roundTrip(ctx, pc, req, trace)
		if err == nil {
			return resp, nil
		}
		pc.close()
		var nothing errNothingWritten
		if reused && attempt == 0 && errors.As(err, &nothing) && ctx.Err() == nil && req.GetBody != nil {
			// As net/http does: not one byte reached a kept-alive
			// connection, so the request goes again on another.
			again := *req
			if again.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
			req = &again
			continue
		}
		return nil, err
	}
}

// takeIdle returns the most recent idle connection of key that the server
// has not closed, and how long it was idle; nil when there is none.
func (t *h1Transport) takeIdle(key string) (*h1Conn, time.Duration, error) {
	for {
		t.mu.Lock()
		list := t.idle[key]
		if len(list) == 0 {
			t.mu.Unlock()
			return nil, 0, nil
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		t.idle[key] = list[:len(list)-1]
		t.mu.Unlock()
		idleFor := time.Since(pc.idleAt)
		if pc.idleTimer != nil {
			pc.idleTimer.Stop()
		}
		pc.mu.Lock()
		gone := pc.gone
		pc.state = connBusy
		pc.mu.Unlock()
		if gone || t.idleTimeout > 0 && idleFor > t.idleTimeout || pc.unusable() {
			pc.close()
			continue
		}
		return pc, idleFor, nil
	}
}

// tcpConn is the connection under TLS, or the connection.
func (pc *h1Conn) tcpConn() net.Conn {
	if pc.tc != nil {
		return pc.tc.Conn
	}
	if pc.nb != nil {
		return pc.nb.Conn
	}
	return pc.conn
}

// put returns a connection whose response was read to its end to the idle
// list, or closes it.
func (t *h1Transport) put(pc *h1Conn) {
	pc.mu.Lock()
	gone := pc.gone
	if !gone {
		pc.state = connIdle
		pc.watch()
	}
	pc.mu.Unlock()
	if gone || pc.br.Buffered() > 0 || pc.unusable() {
		// Closed by the server, or bytes after the response's end: not
		// a response to anything (net/http closes such a connection).
		pc.close()
		return
	}
	pc.idleAt = time.Now() // the tracked connection's idle() is Client.Do's
	if t.idleTimeout > 0 {
		pc.idleTimer = time.AfterFunc(t.idleTimeout, func() { t.discard(pc) })
	}
	t.mu.Lock()
	if len(t.idle[pc.key]) >= maxIdlePerHost {
		t.mu.Unlock()
		pc.close()
		return
	}
	if t.idle == nil {
		t.idle = map[string][]*h1Conn{}
	}
	t.idle[pc.key] = append(t.idle[pc.key], pc)
	t.mu.Unlock()
}

// CloseIdleConnections closes the idle connections.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.close()
		}
	}
}

// dialConn dials addr, and shakes hands for https.
func (t *h1Transport) dialConn(ctx context.Context, key, addr string, parts *urlParts) (*h1Conn, error) {
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	pc := &h1Conn{t: t, key: key, conn: c, fd: -1}
	pc.tc, _ = c.(*trackedConn)
	if sc, ok := pc.tcpConn().(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { pc.fd = int(fd) })
		}
	}
	if parts.scheme == "https" {
		cfg := t.tlsConfig.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = parts.host
		}
		// HTTP/2 stays on net/http's path: this transport speaks 1.1.
		cfg.NextProtos = []string{"http/1.1"}
		pc.nb = &nbConn{Conn: c, pc: pc, r: pc.recvReader(c)}
		tc := tls.Client(pc.nb, cfg)
		trace := httptrace.ContextClientTrace(ctx)
		if trace != nil && trace.TLSHandshakeStart != nil {
			trace.TLSHandshakeStart()
		}
		hctx, cancel := context.WithTimeoutCause(ctx, tlsHandshakeTimeout, errTLSHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		if err != nil && ctx.Err() == nil && hctx.Err() != nil {
			err = errTLSHandshakeTimeout
		}
		cancel()
		if trace != nil && trace.TLSHandshakeDone != nil {
			trace.TLSHandshakeDone(tc.ConnectionState(), err)
		}
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		pc.conn = tc
	}
	pc.cw.w = pc.conn
	pc.lr = headLimit{r: pc.conn, left: -1}
	if pc.nb == nil {
		pc.lr.r = pc.recvReader(c)
	}
	pc.br = bufio.NewReaderSize(&pc.lr, 4<<10)
	pc.bw = bufio.NewWriterSize(&pc.cw, 4<<10)
	return pc, nil
}

// close closes the connection, unregistered from its poller first.
func (pc *h1Conn) close() {
	pc.mu.Lock()
	if pc.state == connClosed {
		pc.mu.Unlock()
		return
	}
	pc.state = connClosed
	pc.unregister()
	pc.mu.Unlock()
	_ = pc.conn.Close()
}

// discard closes an idle connection the server closed, taking it off the
// idle list: the poller found it gone.
func (t *h1Transport) discard(pc *h1Conn) {
	t.mu.Lock()
	list := t.idle[pc.key]
	i := slices.Index(list, pc)
	if i >= 0 {
		t.idle[pc.key] = slices.Delete(list, i, i+1)
	}
	t.mu.Unlock()
	if i >= 0 {
		pc.close()
	} // else a request took it, and finds it gone
}

// tlsHandshakeTimeout is prometheus/common's, with net/http's error.
const tlsHandshakeTimeout = 10 * time.Second

var errTLSHandshakeTimeout = errors.New("net/http: TLS handshake timeout")

// maxHeadBytes bounds a response's head, informational responses
// included: net/http's default (Transport.MaxResponseHeaderBytes).
const maxHeadBytes = 10 << 20

// errHeadTooLong is net/http's error for a head beyond maxHeadBytes.
var errHeadTooLong = fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", maxHeadBytes)

// headLimit bounds what is read through it while left >= 0: the
// response's head; the body is bounded by its own limits.
type headLimit struct {
	r    io.Reader
	left int64 // -1: no limit
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		return 0, errHeadTooLong
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// received returns when data read at now arrived: now moved back to its
// receive stamp (wall clock, Unix nanoseconds; 0: none) when that is
// earlier, as the stamp of the read's last segment can only be.
func received(now time.Time, stamp int64) time.Time {
	if d := time.Duration(stamp - now.UnixNano()); stamp != 0 && d < 0 {
		return now.Add(d)
	}
	return now
}

// aLongTimeAgo is a deadline in the past: it ends a blocked read or write.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes req on pc and reads the response's head.
func (t *h1Transport) roundTrip(ctx context.Context, pc *h1Conn, req *http.Request, trace *httptrace.ClientTrace) (*http.Response, error) {
	// A cancelled request ends the write or read it is blocked in.
	stop := context.AfterFunc(ctx, func() { _ = pc.conn.SetDeadline(aLongTimeAgo) })
	cancelled := func(err error) error {
		if !stop() && ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if !t.keepAlive && !req.Close {
		closing := *req
		closing.Close = true // "Connection: close", as net/http without keep-alives
		req = &closing
	}
	pc.cw.n = 0
	err := req.Write(pc.bw)
	if err == nil {
		err = pc.bw.Flush()
	}
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	if err != nil {
		if pc.cw.n == 0 {
			err = errNothingWritten{err}
		}
		return nil, cancelled(err)
	}
	var resp *http.Response
	var firstByte time.Time
	pc.stamp = 0
	pc.lr.left = maxHeadBytes
	defer func() { pc.lr.left = -1 }()
	for {
		if _, err := pc.br.Peek(1); err != nil {
			return nil, cancelled(err)
		}
		if resp == nil {
			firstByte = received(time.Now(), pc.stamp)
			if trace != nil && trace.GotFirstResponseByte != nil {
				trace.GotFirstResponseByte()
			}
		}
		if resp, err = http.ReadResponse(pc.br, req); err != nil {
			return nil, cancelled(err)
		}
		// An informational response (100 Continue, 103 Early Hints)
		// comes before the one that answers.
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if !stop() {
		return nil, ctx.Err()
	}
	body := &h1Body{std: resp.Body, pc: pc, t: t, keep: t.keepAlive && !resp.Close, length: resp.ContentLength, firstByte: firstByte}
	switch {
	case resp.Body == http.NoBody:
		body.framing = framingLength
		body.length = 0
	case len(resp.TransferEncoding) == 1 && strings.EqualFold(resp.TransferEncoding[0], "chunked"):
		body.framing = framingChunked
	case resp.ContentLength >= 0:
		body.framing = framingLength
	default:
		body.framing, body.keep = framingClose, false
	}
	resp.Body = body
	return resp, nil
}

// framing is how a response's body ends.
type framing uint8

const (
	framingChunked framing = iota // the last chunk
	framingLength                 // Content-Length bytes
	framingClose                  // the connection's close
)

// h1Body is the body of an h1Transport's response. Read reads it through
// net/http's body reader (an error page, a JSON answer); stream reads an
// SSE stream from the socket (reader_linux.go). Close keeps the connection
// for the next request when the body was read to its end.
type h1Body struct {
	std     io.ReadCloser
	pc      *h1Conn
	t       *h1Transport
	keep    bool
	framing framing
	length  int64
	// firstByte is when the response's first byte arrived, by its
	// receive stamp (received): the trace's GotFirstResponseByte is
	// when the request's goroutine saw it, as late as the host made it.
	firstByte time.Time

	mu     sync.Mutex
	ended  bool // the body was read to its end, nothing after it
	used   bool // Read was called: the stream cannot be read raw
	closed bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.used = true
	b.mu.Unlock()
	n, err := b.std.Read(p)
	if errors.Is(err, io.EOF) {
		b.mu.Lock()
		b.ended = true
		b.mu.Unlock()
	}
	return n, err
}

// Close releases the connection: to the idle list after a body read to its
// end, closed otherwise.
func (b *h1Body) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	reuse := b.keep && b.ended
	b.mu.Unlock()
	if reuse {
		b.t.put(b.pc)
	} else {
		b.pc.close()
	}
	return nil
}

// nbConn is the connection under TLS. While its stream is read by the
// poller it does not block: a read with nothing to read returns
// errWouldBlock, which crypto/tls takes as temporary (a record half read
// stays buffered) and the poller as "wait for the next readiness".
type nbConn struct {
	net.Conn
	pc       *h1Conn
	r        io.Reader // reads Conn blocking, with receive stamps where it can (recvReader)
	nonblock bool      // set and cleared by the poller's goroutine, under the stream's lock
}

// errWouldBlock is a read that would block.
var errWouldBlock net.Error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "read would block" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// Write writes without blocking while the poller reads: crypto/tls answers a
// KeyUpdate from within a read, and a server that stops reading must not
// block the poller. What cannot be written at once fails the connection.
func (c *nbConn) Write(p []byte) (int, error) {
	if !c.nonblock {
		return c.Conn.Write(p)
	}
	return rawWrite(c.pc.fd, p)
}

func (c *nbConn) Read(p []byte) (int, error) {
	if !c.nonblock {
		return c.r.Read(p)
	}
	n, _, err := c.pc.recv(p)
	return n, err
}

// recv reads pc's socket without blocking (rawRecv), keeps the read's
// receive stamp in pc.stamp, and tells the connection tracker of a close.
func (pc *h1Conn) recv(p []byte) (n int, stamp int64, err error) {
	n, stamp, err = rawRecv(pc.fd, p)
	if stamp != 0 {
		pc.stamp = stamp
	}
	if pc.tc != nil {
		pc.tc.readErr(err)
	}
	return n, stamp, err
}

// readError names the connection in a read's error, as net's Read does:
// "read tcp a->b: connection reset by peer".
func (pc *h1Conn) readError(err error) error {
	c := pc.tcpConn()
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// bodyFramer finds a body's data in the bytes read from its connection.
type bodyFramer struct {
	framing framing
	chunked chunkedDecoder
	left    int64 // framingLength: bytes left
}

// next returns the data at the start of raw and the rest (see
// chunkedDecoder.next).
func (f *bodyFramer) next(raw []byte) (data, rest []byte, err error) {
	switch f.framing {
	case framingChunked:
		return f.chunked.next(raw)
	case framingLength:
		n := min(int64(len(raw)), f.left)
		f.left -= n
		return raw[:n], raw[n:], nil
	}
	return raw, nil, nil
}

// done reports whether the body ended.
func (f *bodyFramer) done() bool {
	switch f.framing {
	case framingChunked:
		return f.chunked.done()
	case framingLength:
		return f.left == 0
	}
	return false
}

// bodyStream turns the bytes read of a body into its stream's events:
// framing, the byte bound, the SSE parser.
type bodyStream struct {
	st    *streamState
	frame bodyFramer
	limit int64 // payload bytes at most (StreamLimits.Bytes)
	read  int64
	ended bool
	clean bool // the body was read to its end with nothing after it
}

func newBodyStream(b *h1Body, st *streamState, limit int64) *bodyStream {
	s := &bodyStream{st: st, limit: limit, frame: bodyFramer{framing: b.framing, left: b.length}}
	if s.frame.done() {
		s.st.end(s.st.sse.end())
		s.ended, s.clean = true, true
	}
	return s
}

// process handles bytes read of the body, until the stream ends.
func (s *bodyStream) process(raw []byte) {
	for len(raw) > 0 && !s.ended {
		data, rest, err := s.frame.next(raw)
		if err != nil {
			s.stop(err)
			return
		}
		raw = rest
		if len(data) > 0 {
			// As limitedBody: a body of limit bytes reads to its end,
			// and one byte more is the cut.
			if left := s.limit + 1 - s.read; int64(len(data)) > left {
				data = data[:left]
			}
			s.read += int64(len(data))
			stop, err := s.st.sse.feed(data, s.st)
			switch {
			case stop:
				s.ended = true
				return
			case err != nil:
				s.stop(err)
				return
			case s.read > s.limit:
				s.stop(fmt.Errorf("%w: more than %d bytes", errStreamCut, s.limit))
				return
			}
		}
		if s.frame.done() {
			s.stop(s.st.sse.end())
			s.clean = len(rest) == 0
			return
		}
	}
}

// readErr ends the stream at a read's error: the connection's end is the
// body's for a body that ends with it, an unexpected EOF for any other.
func (s *bodyStream) readErr(err error) {
	if errors.Is(err, io.EOF) {
		if s.frame.framing == framingClose {
			err = s.st.sse.end()
		} else {
			err = io.ErrUnexpectedEOF
		}
	}
	s.stop(err)
}

func (s *bodyStream) stop(err error) {
	s.st.end(err)
	s.ended = true
}

// streamBlocking reads the stream in the calling goroutine, from the
// connection's buffered reader: where no poller can be used.
func (b *h1Body) streamBlocking(ctx context.Context, st *streamState, limit int64, sent time.Time) {
	s := newBodyStream(b, st, limit)
	stop := context.AfterFunc(ctx, func() { _ = b.pc.conn.SetReadDeadline(aLongTimeAgo) })
	defer stop()
	var drain *time.Timer
	st.clock = func() time.Duration { return time.Since(sent) }
	st.onDone = func() {
		drain = time.AfterFunc(drainTimeout, func() { _ = b.pc.conn.SetReadDeadline(aLongTimeAgo) })
	}
	buf := make([]byte, 4<<10)
	for !s.ended {
		n, err := b.pc.br.Read(buf)
		s.process(buf[:n])
		if err != nil && !s.ended {
			s.readErr(err)
		}
	}
	fired := drain != nil && !drain.Stop()
	cancelled := !stop()
	b.mu.Lock()
	b.ended = s.clean && !fired && !cancelled // else a deadline in the past may be set
	b.mu.Unlock()
}
