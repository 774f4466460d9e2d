//go:build linux && race

package prober

import "syscall"

// raceAcquireIO tells the race detector what syscall.Read tells it after
// every read: what was written to a file descriptor (by net, through
// syscall.Write) happens before what is read from one. rawRecv reads with
// a raw recvmsg, which says nothing, so that a test's server state written
// before its response would look unsynchronised with the test that read
// the response. A read of nothing does it: the socket returns 0 at once,
// and nothing is consumed. Race builds only.
func raceAcquireIO(fd int) { _, _ = syscall.Read(fd, nil) }
