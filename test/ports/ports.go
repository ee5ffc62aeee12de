// Package ports picks free host ports in a range for the Docker test
// (test/composetest), which publishes its containers' ports there. Node
// processes started on this machine get their ports from
// cmd/lockcluster/proccluster instead, which keeps processes from handing
// out the same port.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// Free returns a free loopback address with a port in [lo, hi), a range
// below the kernel's ephemeral one (32768 and up on Linux) and outside
// proccluster's (20000-32767): there neither outgoing connections nor ":0"
// listeners take ports, so the port stays free until Docker binds it.
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
