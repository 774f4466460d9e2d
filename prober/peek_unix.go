//go:build linux || darwin || freebsd || netbsd || openbsd

package prober

import (
	"net"
	"syscall"
)

// peerClosed reports whether the peer of c has closed it, without reading:
// a peek that does not wait finds the end of the stream (the server's FIN)
// or a reset. Pending data is not a close (a TLS close_notify is data and
// is left to the transport).
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var closed bool
	var b [1]byte
	_ = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil || err == syscall.ECONNRESET
	})
	return closed
}
