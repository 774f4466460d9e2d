package jaegertest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListensOnLoopbackOnly checks, from /proc, that the Jaeger Start runs
// listens on loopback only, and on nothing but the two OTLP receivers and
// the query API's HTTP and gRPC servers. A Jaeger upgrade that adds a
// default listener (as the collector's metrics on :8888 once were) fails
// here rather than opening a port on the machine running the tests.
func TestListensOnLoopbackOnly(t *testing.T) {
	j := Start(t)
	inodes := socketInodes(t, j.pid)
	var tcp []string
	for _, f := range []string{"tcp", "tcp6", "udp", "udp6"} {
		for _, s := range procNetSockets(t, j.pid, f) {
			if _, ours := inodes[s.inode]; !ours {
				continue
			}
			if strings.HasPrefix(f, "tcp") && s.state != "0A" { // not LISTEN
				continue
			}
			assert.True(t, s.addr.IP.IsLoopback(), "jaeger has a %s socket on %s", f, s.addr)
			if strings.HasPrefix(f, "tcp") {
				tcp = append(tcp, s.addr.String())
			}
		}
	}
	t.Logf("jaeger listens on %v", tcp)
	for _, addr := range []string{j.otlpGRPC, j.otlpHTTP, j.query} {
		assert.Contains(t, tcp, addr)
	}
	assert.Len(t, tcp, 4, "OTLP gRPC and HTTP, query HTTP and gRPC")
}

// socketInodes returns the inodes of the sockets process pid has open.
func socketInodes(t *testing.T, pid int) map[string]struct{} {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	require.NoError(t, err)
	inodes := make(map[string]struct{})
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue // closed since ReadDir
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = struct{}{}
		}
	}
	require.NotEmpty(t, inodes)
	return inodes
}

type procSocket struct {
	addr  net.TCPAddr
	state string
	inode string
}

// procNetSockets parses /proc/pid/net/file (tcp, tcp6, udp or udp6): the
// sockets of the process's network namespace.
func procNetSockets(t *testing.T, pid int, file string) []procSocket {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", file))
	if os.IsNotExist(err) {
		return nil // no IPv6
	}
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var out []procSocket
	for _, line := range lines[1:] {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 10, line)
		addr, err := parseProcAddr(f[1])
		require.NoError(t, err, line)
		out = append(out, procSocket{addr: addr, state: f[3], inode: f[9]})
	}
	return out
}

// parseProcAddr parses an address of /proc/net/tcp: the IP as hex 32-bit
// words in host byte order, a colon, the port in hex.
func parseProcAddr(s string) (net.TCPAddr, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return net.TCPAddr{}, fmt.Errorf("no port in %q", s)
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return net.TCPAddr{}, fmt.Errorf("bad IP in %q", s)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return net.TCPAddr{}, fmt.Errorf("bad port in %q", s)
	}
	return net.TCPAddr{IP: ip, Port: int(port)}, nil
}
