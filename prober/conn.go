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

// RetryReasons lists every retry reason, for zero-initialised series.
var RetryReasons = []string{RetryServerClosedIdle, RetryNothingWritten}

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
// (oneShot) from the first close it sees soon after a response, which
// costs nothing the server did not already impose.
//
// The first reuse is the race no close has warned of: a sequential load
// sends its second request 0.1 ms after the first response, and a server
// that closes 3 ms after its responses reads none of it. So until the
// server has shown what it does (a connection carried a second response,
// or one was closed soon after its response), a request that would reuse
// a connection idle for less than settle goes on a connection of its own
// (unsettled): by the next, the close has come or the connection is
// known to be kept.
type connTracker struct {
	mu    sync.Mutex
	conns map[string]*trackedConn // by local address, unique per open connection

	serverClosed      atomic.Int64 // connections the server closed
	serverClosedAfter atomic.Int64 // of those, closed after exactly one response
	// streak counts the connections closed by the server soon after one
	// response since a connection last carried a second one.
	streak atomic.Int64
	// kept: a connection carried a second response (the server keeps
	// connections, or did until its last close).
	kept atomic.Bool
	// lastIdle is when a kept-alive connection last became idle (unix
	// nanoseconds); diverted counts the requests sent on connections of
	// their own while the server's behaviour was unknown.
	lastIdle atomic.Int64
	diverted atomic.Int64
}

// oneShotAfter is how many connections in a row the server must close
// soon after one response each, with none reused meanwhile, before the
// client stops keeping connections alive: one, a close within closeSoon
// of the response's end (an idle timeout of seconds does not count).
const (
	oneShotAfter = 1
	closeSoon    = time.Second
)

// settle is how long a connection must have been idle before a client
// that does not yet know whether the server keeps connections reuses it,
// and maxDiverted how many requests at most are sent on connections of
// their own meanwhile (a load of 1,000 streams always has a connection
// just idle: past maxDiverted it reuses, and the retries cover it).
// llama.cpp's server closes as it ends its response; 50 ms covers a
// server that closes a few milliseconds later.
const (
	settle      = 50 * time.Millisecond
	maxDiverted = 64
)

// oneShot reports whether requests should go on new connections: the
// server closed the last oneShotAfter connections after one response each.
func (t *connTracker) oneShot() bool { return t.streak.Load() >= oneShotAfter }

// unsettled reports whether a request should go on a connection of its
// own because the server's keep-alive behaviour is unknown and a
// connection became idle less than settle ago (see connTracker).
func (t *connTracker) unsettled() bool {
	return t.settling() && t.diverted.Add(1) <= maxDiverted
}

// settling reports whether the server's keep-alive behaviour is unknown
// and a connection became idle less than settle ago.
func (t *connTracker) settling() bool {
	if t.kept.Load() || t.streak.Load() > 0 {
		return false
	}
	last := t.lastIdle.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < settle
}

// response records a response beginning on c: a second one on a connection
// shows the server keeps connections after all.
func (c *trackedConn) response() {
	c.idleSince.Store(0)
	if c.responses.Add(1) > 1 {
		c.t.streak.Store(0)
		c.t.kept.Store(true)
	}
}

// idle records that the response on c ended: the connection may be given
// to the next request.
func (c *trackedConn) idle() {
	if c.oneShot {
		return
	}
	now := time.Now().UnixNano()
	c.idleSince.Store(now)
	c.t.lastIdle.Store(now)
}

func newConnTracker() *connTracker {
	return &connTracker{conns: map[string]*trackedConn{}}
}

// dialer is the dialer prometheus/common uses by default.
var dialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

// dial dials as prometheus/common's transport does and tracks the connection.
func (t *connTracker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return t.dialConn(ctx, network, addr, false)
}

// dialOneShot dials a connection for one request (keep-alives off): the
// client asks for its close, which tells nothing of the server.
func (t *connTracker) dialOneShot(ctx context.Context, network, addr string) (net.Conn, error) {
	return t.dialConn(ctx, network, addr, true)
}

func (t *connTracker) dialConn(ctx context.Context, network, addr string, oneShot bool) (net.Conn, error) {
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: t, key: c.LocalAddr().String(), oneShot: oneShot}
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
	oneShot    bool         // dialed for one request, its close asked for
	responses  atomic.Int32 // responses that began on the connection
	idleSince  atomic.Int64 // when its last response ended (unix ns); 0 while one runs
	peerClosed atomic.Bool
	closeOnce  sync.Once
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.readErr(err)
	return n, err
}

// readErr notes a read's error: an EOF or a reset is the server's close.
// The fast reader, reading the socket itself, reports its errors here too.
func (c *trackedConn) readErr(err error) {
	if err != nil && !c.oneShot && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && c.peerClosed.CompareAndSwap(false, true) {
		c.t.serverClosed.Add(1)
		if c.responses.Load() == 1 {
			c.t.serverClosedAfter.Add(1)
			// Soon after its response (or as it ended): the server
			// closes after responses; later, an idle timeout.
			if idle := c.idleSince.Load(); idle == 0 || time.Since(time.Unix(0, idle)) <= closeSoon {
				c.t.streak.Add(1)
			}
		}
	}
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
