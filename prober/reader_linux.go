//go:build linux

package prober

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FastReaderSupported reports whether --prober.reader=fast can be used here.
const FastReaderSupported = true

// DefaultReader is the reader used unless another is asked for: the fast
// one, which passes the whole test suite, costs 10-35% less CPU a chunk
// than std at 100, 1,000 and 5,000 streams and as much where both
// saturate the host (2,000 on 2 vCPUs), with a third of the goroutines
// (BENCHMARKS.md); std stays a flag away.
const DefaultReader = ReaderFast

// poller reads the streams of the fast reader: one goroutine waits for
// many sockets at once on an epoll instance of its own and, for each ready
// one, reads what arrived, dechunks it and parses its events in place.
//
// Why: on net/http's path every chunk of every stream costs a read that
// returns it, a read that returns EAGAIN, a park of the stream's goroutine
// in the netpoller and a wake, through three buffered layers (BENCHMARKS.md:
// 11.2 µs a chunk at 1,000 streams, of which parsing is 0.6). Here a ready
// chunk costs one read: sockets are registered edge-triggered, and a read
// that returns less than the buffer has emptied the socket (the next data
// is a new edge), so no read returns EAGAIN; and the goroutine parks only
// when no socket at all is ready, so at 50,000 chunks a second one wake
// serves a batch of them.
//
// The goroutine blocks in epoll_wait itself (run says why), and runs only
// while sockets are registered; with none it exits, so an idle prober holds
// nothing.
//
// A chunk's arrival time is when the kernel received it (SO_TIMESTAMPNS,
// pollStream.arrival), not when the poller got to it: the standard path's
// is the moment its goroutine is woken, later by however long the host
// kept it waiting.
type poller struct {
	epfd int

	mu      sync.Mutex
	slots   []*h1Conn // by token's slot; nil when free
	free    []uint32
	gens    []uint32 // each slot's generation: an event of a slot's earlier connection is ignored
	active  int
	running bool
	// again are the connections whose last pump stopped at its budget
	// with data left: no new edge may come for it, so the poller reads
	// them again after the next batch.
	again []*h1Conn
}

var (
	pollersOnce sync.Once
	pollers     []*poller
	pollersErr  error
	pollerNext  atomic.Uint64
)

// pollerFor returns a poller for a new stream; streams are spread over
// one poller for every two CPUs.
func pollerFor() (*poller, error) {
	pollersOnce.Do(func() {
		for range max(1, runtime.GOMAXPROCS(0)/2) {
			p, err := newPoller()
			if err != nil {
				pollersErr = err
				return
			}
			pollers = append(pollers, p)
		}
	})
	if pollersErr != nil {
		return nil, pollersErr
	}
	return pollers[pollerNext.Add(1)%uint64(len(pollers))], nil
}

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fast reader: epoll_create1: %w", err)
	}
	return &poller{epfd: epfd}, nil
}

// pollEvents is how many ready sockets one epoll_wait returns at most;
// pollReadBytes the size of the poller's read buffer, shared by its
// streams (a stream's state keeps only a line split across reads).
const (
	pollEvents    = 256
	pollReadBytes = 64 << 10
)

// run is the poller's goroutine: it waits in epoll_wait for ready sockets
// and reads them. It blocks in the system call itself rather than parking
// on the epoll instance in Go's netpoller: a wake then costs one
// epoll_wait, not the runtime's epoll_wait, a goroutine wake and ours
// (measured: 2 µs a chunk at 1,000 streams). It exits when no socket is
// registered, looking every pollIdle.
func (p *poller) run() {
	events := make([]unix.EpollEvent, pollEvents)
	buf := make([]byte, pollReadBytes)
	var again []*h1Conn
	for {
		wait := int(pollIdle / time.Millisecond)
		if len(again) > 0 {
			wait = 0
		}
		n, err := unix.EpollWait(p.epfd, events, wait)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			panic(fmt.Sprintf("fast reader: epoll_wait: %v", err)) // only a bad epfd or buffer fails
		}
		now := time.Now()
		for i := range events[:n] {
			if pc := p.lookup(events[i]); pc != nil {
				pc.ready(now, buf, events[i].Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0)
			}
		}
		for _, pc := range again {
			pc.ready(now, buf, false)
		}
		p.mu.Lock()
		again, p.again = p.again, again[:0]
		if n == 0 && len(again) == 0 && p.active == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// pumpBudget is how many reads one wake of a connection makes at most
// (4 x 64 KiB): a server that floods its stream must not keep the poller
// from the others, nor a cancellation from its connection.
const pumpBudget = 4

// pollIdle is how often a poller with no socket registered looks whether
// it may exit.
const pollIdle = 50 * time.Millisecond

// lookup returns the connection an event is for, nil when it was closed.
func (p *poller) lookup(ev unix.EpollEvent) *h1Conn {
	slot, gen := uint32(ev.Fd), uint32(ev.Pad)
	p.mu.Lock()
	defer p.mu.Unlock()
	if int(slot) >= len(p.slots) || p.gens[slot] != gen {
		return nil
	}
	return p.slots[slot]
}

// register registers pc's socket with p for the rest of its life; the
// caller holds pc.mu.
func (pc *h1Conn) register(p *poller) error {
	p.mu.Lock()
	var slot uint32
	if n := len(p.free); n > 0 {
		slot = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		slot = uint32(len(p.slots))
		p.slots = append(p.slots, nil)
		p.gens = append(p.gens, 0)
	}
	p.gens[slot]++
	p.slots[slot] = pc
	pc.p, pc.slot, pc.gen = p, slot, p.gens[slot]
	p.active++
	start := !p.running
	p.running = true
	p.mu.Unlock()
	if start {
		go p.run()
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(pc.slot), Pad: int32(pc.gen)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, pc.fd, &ev); err != nil {
		p.release(pc)
		return fmt.Errorf("fast reader: epoll_ctl: %w", err)
	}
	pc.registered = true
	return nil
}

// watch registers an idle connection that never streamed, so that the
// server's close is seen when it comes; the caller holds pc.mu.
func (pc *h1Conn) watch() {
	if pc.registered || pc.fd < 0 {
		return
	}
	if p, err := pollerFor(); err == nil {
		_ = pc.register(p)
	}
}

// unregister takes pc's socket off its poller, before it is closed; the
// caller holds pc.mu.
func (pc *h1Conn) unregister() {
	if !pc.registered {
		return
	}
	pc.registered = false
	_ = unix.EpollCtl(pc.p.epfd, unix.EPOLL_CTL_DEL, pc.fd, nil)
	pc.p.release(pc)
}

func (p *poller) release(pc *h1Conn) {
	p.mu.Lock()
	p.slots[pc.slot] = nil
	p.gens[pc.slot]++
	p.free = append(p.free, pc.slot)
	p.active--
	p.mu.Unlock()
}

// ready handles an event of pc's socket at now; closing: the event
// includes the peer's close or an error.
func (pc *h1Conn) ready(now time.Time, buf []byte, closing bool) {
	pc.mu.Lock()
	discard := false
	switch pc.state {
	case connStreaming:
		pc.stream.pump(now, buf, closing)
	case connIdle:
		// Nothing may come on an idle connection but its close (the
		// server's, or its idle timeout's); an edge of its last stream's
		// data may still be reported, so the socket is peeked. Over TLS,
		// data may be a session ticket, left to crypto/tls.
		closed, data := peek(pc.fd)
		switch {
		case closing || closed:
			pc.serverClosed()
			discard = true
		case data && pc.nb == nil:
			pc.gone, discard = true, true // an answer to nothing
		}
	case connBusy:
		// Its request's goroutine reads it; a close is kept for when the
		// connection would be reused.
		if closing {
			pc.serverClosed()
		}
	}
	pc.mu.Unlock()
	if discard {
		pc.t.discard(pc)
	}
}

// serverClosed records that the server closed pc; the caller holds pc.mu.
func (pc *h1Conn) serverClosed() {
	pc.gone = true
	if pc.tc != nil {
		pc.tc.readErr(io.EOF)
	}
}

// unusable reports whether an idle connection must not carry a request:
// the server closed it (which the connection tracker is told), or
// something came on it that answers nothing.
func (pc *h1Conn) unusable() bool {
	if pc.fd < 0 {
		return peerClosed(pc.tcpConn())
	}
	closed, data := peek(pc.fd)
	if closed {
		pc.mu.Lock()
		pc.serverClosed()
		pc.mu.Unlock()
	}
	return closed || data
}

// rawWrite writes p to the socket fd without blocking: all of it, or an
// error.
func rawWrite(fd int, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		w, err := unix.Write(fd, p[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return n, errors.New("fast reader: the server does not read what it asked for (a write would block)")
		case err != nil:
			return n, os.NewSyscallError("write", err)
		}
		n += w
	}
	return n, nil
}

// recvReader returns a reader of c, the connection's socket, that blocks
// as c.Read does (the runtime's poller, c's deadlines) and reads with
// rawRecv, leaving the receive stamp of its last read in pc.stamp: the
// response's head, and what came with it, is timed when it came, not
// when the request's goroutine got to it. It turns the stamps on
// (SO_TIMESTAMPNS): a socket that refuses them is read as c.
func (pc *h1Conn) recvReader(c net.Conn) io.Reader {
	keepStampsOn()
	sc, ok := pc.tcpConn().(syscall.Conn)
	if !ok || pc.fd < 0 {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil || unix.SetsockoptInt(pc.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) != nil {
		return c
	}
	return &recvReader{pc: pc, rc: rc}
}

// keepStampsOn holds a socket with receive stamps on for the process's
// life. The kernel stamps packets only while some socket asks for it, and
// turns stamping on a moment after the first does (a deferred work item):
// without a socket that stays, the first packets of a prober whose
// connections all closed (a low rate, a server that closes each one)
// would come unstamped and be timed when read. One UDP socket, never
// bound, never read.
var keepStampsOn = sync.OnceFunc(func() {
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) == nil {
			return
		}
		_ = unix.Close(fd)
	}
})

// recvReader: see h1Conn.recvReader.
type recvReader struct {
	pc *h1Conn
	rc syscall.RawConn
}

func (r *recvReader) Read(p []byte) (int, error) {
	var n int
	var err error
	werr := r.rc.Read(func(uintptr) bool {
		n, _, err = r.pc.recv(p)
		return err != errWouldBlock
	})
	if werr != nil {
		// A deadline passed, or the connection was closed: RawConn
		// names its op "raw-read"; the error is put as Read puts it.
		err = werr
		var op *net.OpError
		if errors.As(werr, &op) {
			err = op.Err
		}
	}
	if err != nil && err != io.EOF {
		err = r.pc.readError(err) // "read tcp a->b: i/o timeout"
	}
	return n, err
}

// timespecSize and stampSpace size the control message of a receive stamp.
const (
	timespecSize = int(unsafe.Sizeof(unix.Timespec{}))
	stampSpace   = 32 // unix.CmsgSpace(timespecSize) on 64-bit Linux; more on none
)

// peek reports whether the socket fd has been closed by its peer (the end
// of its stream or a reset), and whether it has data to read, without
// reading or waiting.
func peek(fd int) (closed, data bool) {
	var b [1]byte
	n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return n == 0 && err == nil || err == unix.ECONNRESET, n > 0
}

// rawRecv reads the socket fd without blocking: errWouldBlock when there
// is nothing to read, io.EOF at its end. stamp is when the kernel received
// the last segment read (wall clock, Unix nanoseconds; SO_TIMESTAMPNS, set
// by recvReader at dial), 0 when it gave none.
//
// The socket is non-blocking, so the read never waits: it is made as a raw
// system call, without telling the scheduler (unix.Recvmsg would: 0.2 µs a
// chunk). recvmsg rather than read: the stamp comes as its control message.
func rawRecv(fd int, p []byte) (n int, stamp int64, err error) {
	if len(p) == 0 {
		return 0, 0, nil
	}
	var oob [stampSpace / 8]uint64 // 8-byte aligned, as the kernel writes it
	iov := unix.Iovec{Base: &p[0]}
	iov.SetLen(len(p))
	msg := unix.Msghdr{Iov: &iov, Control: (*byte)(unsafe.Pointer(&oob[0]))}
	msg.SetIovlen(1)
	for {
		msg.SetControllen(stampSpace)
		r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return 0, 0, errWouldBlock
		case e != 0:
			return 0, 0, os.NewSyscallError("read", e)
		case r == 0:
			return 0, 0, io.EOF
		}
		raceAcquireIO(fd)
		if int(msg.Controllen) >= unix.CmsgLen(timespecSize) {
			h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
			if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS {
				stamp = (*unix.Timespec)(unsafe.Add(unsafe.Pointer(&oob[0]), unix.CmsgLen(0))).Nano()
			}
		}
		return int(r), stamp, nil
	}
}

// readBuffers are the buffers of a stream's first read, made by its
// request's goroutine (the poller has its own).
var readBuffers = sync.Pool{New: func() any { b := make([]byte, pollReadBytes); return &b }}

// stream reads the body as an SSE stream into st, through the poller: it
// returns when the stream ended, was cut, drained after its end event,
// or when ctx is done (the request's deadline or cancellation).
func (b *h1Body) stream(ctx context.Context, st *streamState, limit int64, sent time.Time) {
	b.mu.Lock()
	used := b.used
	b.mu.Unlock()
	p, err := pollerFor()
	if used || b.pc.fd < 0 || err != nil {
		b.streamBlocking(ctx, st, limit, sent)
		return
	}
	pc := b.pc
	s := &pollStream{pc: pc, body: b, bs: newBodyStream(b, st, limit), sent: sent, done: make(chan struct{})}
	st.clock = func() time.Duration { return s.at }
	st.onDone = func() { s.drain = time.AfterFunc(drainTimeout, s.abort) }

	pc.mu.Lock()
	pc.state, pc.stream = connStreaming, s
	// What came with the head (a first token, often) came by the head's
	// last read: its stamp times it.
	now := time.Now()
	s.at = s.arrival(now, pc.stamp)
	if s.bs.ended {
		s.finish()
	}
	// What came with the response's head first, then whatever crypto/tls
	// holds or the socket has; then the poller takes over. The socket is
	// registered before it is read: data that comes after the read is an
	// edge the poller sees.
	if n := pc.br.Buffered(); n > 0 && !s.ended {
		head, _ := pc.br.Peek(n)
		s.bs.process(head)
		_, _ = pc.br.Discard(n)
		if s.bs.ended {
			s.finish()
		}
	}
	if !s.ended && !pc.registered {
		if err := pc.register(p); err != nil {
			s.bs.stop(err)
			s.finish()
		}
	}
	if !s.ended {
		if pc.nb != nil {
			pc.nb.nonblock = true
		}
		bufp := readBuffers.Get().(*[]byte)
		s.pump(now, *bufp, pc.gone)
		readBuffers.Put(bufp)
	}
	pc.mu.Unlock()

	select {
	case <-s.done:
	case <-ctx.Done():
		s.abort()
	}
}

// connPoll is a connection's registration with a poller, under its mu.
type connPoll struct {
	stream     *pollStream // while streaming
	p          *poller
	slot, gen  uint32
	registered bool
}

// pollStream is one stream read by a poller.
type pollStream struct {
	pc     *h1Conn
	body   *h1Body
	bs     *bodyStream
	sent   time.Time
	at     time.Duration // when the data being parsed arrived, from sent
	drain  *time.Timer
	ended  bool
	closed bool // the connection was seen to end
	done   chan struct{}
}

// pump reads the socket until it is empty or the stream ends; the caller
// holds pc.mu. now is when the poller learnt the socket was ready (or the
// stream's goroutine began reading it). A socket whose peer closed it
// (closing) is read to its end: the close came with the data or after it,
// and no edge follows it.
func (s *pollStream) pump(now time.Time, buf []byte, closing bool) {
	pc := s.pc
	if closing {
		pc.serverClosed()
	}
	for reads := 0; !s.ended; reads++ {
		if reads == pumpBudget {
			// Data may be left: read it again after the next batch.
			pc.p.mu.Lock()
			pc.p.again = append(pc.p.again, pc)
			pc.p.mu.Unlock()
			return
		}
		var n int
		var stamp int64
		var err error
		if pc.nb != nil {
			// TLS: records already read from the socket wait in
			// crypto/tls, so read until it would block. A record
			// returned from crypto/tls's buffer came by the last
			// socket read: its stamp stands.
			n, err = pc.conn.Read(buf)
			stamp = pc.stamp
		} else {
			n, stamp, err = pc.recv(buf)
		}
		if n > 0 {
			s.at = s.arrival(now, stamp)
			if s.bs.process(buf[:n]); s.bs.ended {
				s.finish()
				return
			}
		}
		switch {
		case err == nil:
			if pc.nb == nil && n < len(buf) && !closing {
				return // the socket is empty: its next data is a new edge
			}
		case errors.Is(err, errWouldBlock):
			return
		default:
			s.closed = true
			s.bs.readErr(s.opError(err))
			s.finish()
			return
		}
	}
}

// arrival returns when data read after now arrived, from the request's
// sending: the kernel's receive stamp of the last segment read (stamp,
// Unix nanoseconds) where it is plausible, now otherwise. Data that waited
// in the socket while the poller was busy or descheduled is then timed
// when it came, not when it was read: a chunk read 20 ms late is timed
// when it came. Chunks that waited together share the last one's stamp
// (one is known a read), so a reader late by more than the gap between
// them still shortens that gap. The stamp is a wall-clock time
// and the rest monotonic, so it is used as an offset from now, bounded:
// never before the request was sent, never after this moment, never
// before the stream's previous data (chunks arrive in order).
func (s *pollStream) arrival(now time.Time, stamp int64) time.Duration {
	at := now.Sub(s.sent)
	if stamp != 0 {
		switch d := time.Duration(stamp - now.UnixNano()); {
		case d <= 0 && -d < at:
			at += d // came before the poller looked
		case d > 0:
			at = min(at+d, time.Since(s.sent)) // came while it read others
		}
	}
	return max(at, s.at)
}

// opError names the connection in a read's system call error, as
// net/http's does.
func (s *pollStream) opError(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return s.pc.readError(se)
	}
	return err
}

// finish ends the stream; the caller holds pc.mu. The connection can
// carry the next request when the body was read to its end with nothing
// after it, and the server has not closed it.
func (s *pollStream) finish() {
	if s.ended {
		return
	}
	s.ended = true
	pc := s.pc
	if pc.state == connStreaming {
		pc.state, pc.stream = connBusy, nil
	}
	if s.drain != nil {
		s.drain.Stop()
	}
	if pc.nb != nil {
		pc.nb.nonblock = false
	}
	s.body.mu.Lock()
	s.body.ended = s.bs.ended && s.bs.clean && !s.closed && !pc.gone
	s.body.mu.Unlock()
	close(s.done)
}

// abort ends the stream where it is: the request's deadline, its
// cancellation, or the drain's end after the end event.
func (s *pollStream) abort() {
	s.pc.mu.Lock()
	s.finish()
	s.pc.mu.Unlock()
}
