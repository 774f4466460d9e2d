// Package freeport hands the tests loopback addresses for the processes
// they start (a simulator, a daemon, Prometheus), which bind them later.
//
// Why not just listen on :0 and close: the kernel may hand the same
// ephemeral port to the next listen on :0 while the first process is still
// starting, so two processes of one test get one address and the second
// stops with "address already in use" (TestEndToEndShards did so in CI:
// shard 2 and the single process both got 127.0.0.1:36623). Addr never
// returns an address twice in one test binary.
package freeport

import (
	"net"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Addr returns a loopback address "127.0.0.1:port" free when asked and
// never returned before in this process.
func Addr(t testing.TB) string {
	t.Helper()
	return (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: Port(t)}).String()
}

// Port is Addr's port.
func Port(t testing.TB) int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	// A port is returned again only after all the others the kernel has
	// handed out: 1,000 tries are far more than any test needs.
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("freeport: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			t.Fatalf("freeport: closing %s: %v", ln.Addr(), err)
		}
		if !handed[port] {
			handed[port] = true
			return port
		}
	}
	t.Fatalf("freeport: the kernel returned only ports handed out before")
	return 0
}
