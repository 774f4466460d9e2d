package prober

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Retry reasons: why a request that never reached the server was sent
// again (Result.Retry, sloprober_request_retries_total{reason}).
const (
	// RetryServerClosedIdle: the request was given a kept-alive
	// connection the server had already closed (net/http's "server
	// closed idle connection", or the server's FIN seen on the socket
	// before the request was written). llama.cpp's server closes every
	// connection after its response although it answers keep-alive.
	RetryServerClosedIdle = "server_closed_idle"
	// RetryNothingWritten: net/http itself sent the request again on
	// another connection because not one byte of it had been written to
	// the first (its nothingWrittenError); counted, not repeated.
	RetryNothingWritten = "nothing_written"
)

// errServerClosedIdle is the message of net/http's unexported
// errServerClosedIdle: a connection taken from the idle pool was closed by
// the server before the request went out. net/http retries it only for
// idempotent requests, and a probe is a POST.
const errServerClosedIdle = "http: server closed idle connection"

// isServerClosedIdle reports whether err is net/http's errServerClosedIdle.
func isServerClosedIdle(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == errServerClosedIdle {
			return true
		}
	}
	return false
}

// connTracker follows a client's TCP connections: which one a request was
// given, whether its server had already closed it, and how many requests a
// connection carried before the server closed it.
//
// A server that closes every connection after one response although it
// answered keep-alive (llama.cpp's server) makes every request pay a new
// connection anyway, and races each reuse: the next request may be written
// on the connection just as the server's close arrives, and then fails
// without proof that the server never saw it (a reset, or an EOF: not
// retried). Against such a server the client stops reusing connections
// (oneShot), which costs nothing the server did not already impose.
type connTracker struct {
	mu    sync.Mutex
	conns map[string]*trackedConn // by local address, unique per open connection

	serverClosed      atomic.Int64 // connections the server closed
	serverClosedAfter atomic.Int64 // of those, closed after exactly one response
	// streak counts the connections closed by the server after one
	// response since a connection last carried a second one.
	streak atomic.Int64
}

// oneShotAfter is how many connections in a row the server must close
// after one response each, with none reused meanwhile, before the client
// stops keeping connections alive: four, so that an idle timeout closing
// a connection now and then does not count.
const oneShotAfter = 4

// oneShot reports whether requests should go on new connections: the
// server closed the last oneShotAfter connections after one response each.
func (t *connTracker) oneShot() bool { return t.streak.Load() >= oneShotAfter }

// response records a response beginning on c: a second one on a connection
// shows the server keeps connections after all.
func (c *trackedConn) response() {
	if c.responses.Add(1) > 1 {
		c.t.streak.Store(0)
	}
}

func newConnTracker() *connTracker {
	return &connTracker{conns: map[string]*trackedConn{}}
}

// dialer is the dialer prometheus/common uses by default.
var dialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

// dial dials as prometheus/common's transport does and tracks the connection.
func (t *connTracker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: t, key: c.LocalAddr().String()}
	t.mu.Lock()
	t.conns[tc.key] = tc
	t.mu.Unlock()
	return tc, nil
}

// gotConn records that a request was given the connection whose local
// address is local and returns it (nil when not tracked), with whether the
// server had closed it already.
func (t *connTracker) gotConn(local net.Addr) (*trackedConn, bool) {
	if local == nil {
		return nil, false
	}
	t.mu.Lock()
	tc := t.conns[local.String()]
	t.mu.Unlock()
	if tc == nil {
		return nil, false
	}
	return tc, tc.peerClosed.Load() || peerClosed(tc.Conn)
}

// closesEveryConnection reports how many connections the server closed and
// whether it closed each after exactly one response.
func (t *connTracker) closesEveryConnection() (closed int64, afterOne bool) {
	n := t.serverClosed.Load()
	return n, n > 0 && t.serverClosedAfter.Load() == n
}

// OneShot reports whether the client sends each request on a connection of
// its own because the server closes every connection after one response.
func (c *Client) OneShot() bool { return c.conns.oneShot() }

// ServerConnections reports how many of the client's connections the
// server closed, and whether it closed every one after a single response
// (although it answered keep-alive): `sloprober probe` says so.
func (c *Client) ServerConnections() (closed int64, afterEveryResponse bool) {
	return c.conns.closesEveryConnection()
}

// trackedConn is a connection of a connTracker. It notes when a read sees
// the server's end of the connection (EOF or a reset).
type trackedConn struct {
	net.Conn
	t          *connTracker
	key        string
	responses  atomic.Int32 // responses that began on the connection
	peerClosed atomic.Bool
	closeOnce  sync.Once
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && c.peerClosed.CompareAndSwap(false, true) {
		c.t.serverClosed.Add(1)
		if c.responses.Load() == 1 {
			c.t.serverClosedAfter.Add(1)
			c.t.streak.Add(1)
		}
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.closeOnce.Do(func() {
		c.t.mu.Lock()
		if c.t.conns[c.key] == c {
			delete(c.t.conns, c.key)
		}
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}
