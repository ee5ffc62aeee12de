package composetest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// freePort returns a free loopback address for a container's published
// port (node processes started on this machine get theirs from
// internal/proccluster, which keeps processes from sharing a port), with a
// port in [lo, hi), a range below the kernel's ephemeral one (32768 and up on Linux) and outside
// proccluster's (20000-32767): there neither outgoing connections nor ":0"
// listeners take ports, so the port stays free until Docker binds it.
func freePort(lo, hi int) (string, error) {
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
