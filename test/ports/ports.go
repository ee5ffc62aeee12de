// Package ports picks ports for the node processes tests start: free ones
// below the kernel's ephemeral range, a range per package.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// FreePort returns a free loopback address with a port in [lo, hi). Pick a
// range below the kernel's ephemeral range (32768 and up on Linux): there,
// neither outgoing connections nor other tests' ":0" listeners take ports,
// so the port stays free until a node started as a separate process binds
// it. Give each package that starts processes a range of its own.
func Free(lo, hi int) (string, error) {
	portMu.Lock()
	defer portMu.Unlock()
	next, ok := nextPort[lo]
	if !ok {
		next = lo + rand.IntN(hi-lo)
	}
	defer func() { nextPort[lo] = next }()
	for range hi - lo {
		p := next
		if next++; next >= hi {
			next = lo
		}
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr, nil
		}
	}
	return "", fmt.Errorf("no free port in [%d, %d)", lo, hi)
}

var (
	portMu   sync.Mutex
	nextPort = map[int]int{}
)
