package prober

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestStampSpace(t *testing.T) {
	require.LessOrEqual(t, unix.CmsgSpace(timespecSize), stampSpace, "rawRecv's control buffer holds a receive stamp")
}

// TestArrival: a chunk is timed by the kernel's receive stamp where it is
// plausible, by the poller's wake otherwise, and never out of order.
func TestArrival(t *testing.T) {
	sent := time.Now().Add(-time.Second) // the request went a second ago
	now := sent.Add(900 * time.Millisecond)
	wall := func(d time.Duration) int64 { return now.Add(d).UnixNano() } // a stamp d from now
	for _, tc := range []struct {
		name  string
		prev  time.Duration // the stream's previous data
		stamp int64
		want  time.Duration // from sent
	}{
		{"no stamp: the wake", 0, 0, 900 * time.Millisecond},
		{"came 20 ms before the wake", 0, wall(-20 * time.Millisecond), 880 * time.Millisecond},
		{"came as the wake", 0, wall(0), 900 * time.Millisecond},
		{"before the request was sent: not plausible", 0, wall(-950 * time.Millisecond), 900 * time.Millisecond},
		{"not before the previous data", 890 * time.Millisecond, wall(-20 * time.Millisecond), 890 * time.Millisecond},
		{"came while the poller read others", 0, wall(5 * time.Millisecond), 905 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &pollStream{sent: sent, at: tc.prev}
			require.Equal(t, tc.want, s.arrival(now, tc.stamp))
		})
	}
	t.Run("not after this moment", func(t *testing.T) {
		s := &pollStream{sent: sent}
		before := time.Since(sent)
		at := s.arrival(now, wall(time.Hour))
		require.GreaterOrEqual(t, at, before)
		require.LessOrEqual(t, at, time.Since(sent))
	})
}

// TestReceiveStamp: over loopback TCP, the stamp rawRecv returns is when
// the data was written, not when it was read 100 ms later, on a socket
// set up as the fast transport's (recvReader).
func TestReceiveStamp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer client.Close()
	server, err := ln.Accept()
	require.NoError(t, err)
	defer server.Close()

	raw, err := client.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var fd int
	require.NoError(t, raw.Control(func(f uintptr) { fd = int(f) }))
	require.NoError(t, unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1))
	keepStampsOn()
	buf := make([]byte, 64)
	var n int
	var stamp int64
	recv := func() error {
		var rerr error
		if err := raw.Read(func(uintptr) bool {
			n, stamp, rerr = rawRecv(fd, buf)
			return rerr != errWouldBlock
		}); err != nil {
			return err
		}
		return rerr
	}
	// The kernel turns stamping on a moment after it is first asked
	// for (keepStampsOn): until the first stamped packet.
	require.Eventually(t, func() bool {
		if _, err := server.Write([]byte("x")); err != nil {
			return false
		}
		return recv() == nil && stamp != 0
	}, 5*time.Second, time.Millisecond, "no receive stamp")

	before := time.Now()
	_, err = server.Write([]byte("data: {}\n\n"))
	require.NoError(t, err)
	after := time.Now()
	// Read late: the stamp must not move with the read. The data is in
	// the socket once the write returned (loopback delivers within it).
	time.Sleep(100 * time.Millisecond)
	read := time.Now()
	require.NoError(t, recv())
	require.Equal(t, "data: {}\n\n", string(buf[:n]))
	require.NotZero(t, stamp, "no receive stamp")
	at := time.Unix(0, stamp)
	require.False(t, at.Before(before.Round(0)), "stamp %s before the write began %s", at, before)
	// Nearer the write than the read, which came at least 100 ms later:
	// a busy host may defer loopback's receive to ksoftirqd, not by that.
	require.Less(t, at.Sub(after.Round(0)), read.Sub(at), "stamp %s is the read's time (%s), not the write's (%s)", at, read, after)
}

// TestReceived: the first response byte is moved back to its receive
// stamp, never forward.
func TestReceived(t *testing.T) {
	now := time.Now()
	require.Equal(t, now, received(now, 0), "no stamp")
	require.Equal(t, now.Add(-7*time.Millisecond), received(now, now.Add(-7*time.Millisecond).UnixNano()))
	require.Equal(t, now, received(now, now.Add(time.Millisecond).UnixNano()), "a stamp after now is not plausible")
}
