package freeport

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAddrNeverTwice: addresses asked for one after the other, none bound
// in between (as when processes are started and bind later), are all
// different, and each can be listened on.
func TestAddrNeverTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		a := Addr(t)
		require.False(t, seen[a], "%s handed out twice", a)
		seen[a] = true
	}
	ln, err := net.Listen("tcp", Addr(t))
	require.NoError(t, err)
	require.NoError(t, ln.Close())
}
