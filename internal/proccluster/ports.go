package proccluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Ports for node processes come from [portLo, portHi), below the kernel's
// ephemeral range (32768 and up on Linux): there neither outgoing
// connections nor ":0" listeners take them, so a port stays free between
// being picked and the node binding it. The range is cut into blocks; a
// process claims a block with an exclusive flock on a file named after it
// in os.TempDir()/lockcluster-ports and hands out its ports one after the
// other, claiming another block when it runs out. The kernel drops the
// lock when the process exits, so no claim outlives its process, and two
// processes (test packages run at the same time, a 'lockcluster bench
// --local' beside them) never hand out the same port.
const (
	portLo    = 20000
	portHi    = 32768
	blockSize = 128
)

var ports struct {
	sync.Mutex
	claims     []*os.File // the blocks' lock files, held for the process's life
	next, stop int        // the current block's next port and its end
}

// FreeAddr returns host:port with a port no other process hands out and
// nothing listens on.
func FreeAddr(host string) (string, error) {
	p, err := FreePorts(host, 1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// FreePorts returns the first of span consecutive ports that no other
// process hands out and nothing listens on ('lockcluster dev --base-port'
// takes base..base+10n-8).
func FreePorts(host string, span int) (int, error) {
	if span > blockSize {
		return 0, fmt.Errorf("%d ports: at most %d", span, blockSize)
	}
	ports.Lock()
	defer ports.Unlock()
	for {
		if ports.next+span > ports.stop {
			if err := claimBlock(); err != nil {
				return 0, err
			}
		}
		p := ports.next
		ports.next += span
		if free(host, p, span) {
			return p, nil
		}
	}
}

// free reports whether every port in [p, p+span) can be listened on.
func free(host string, p, span int) bool {
	for q := p; q < p+span; q++ {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(q)))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// claimBlock claims a block no other process holds, starting at a random
// one. The caller holds ports' lock.
func claimBlock() error {
	dir := filepath.Join(os.TempDir(), "lockcluster-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	n := (portHi - portLo) / blockSize
	first := rand.IntN(n)
	for k := range n {
		lo := portLo + (first+k)%n*blockSize
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(lo)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return err
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another process's, or one this process had
			continue
		}
		ports.claims = append(ports.claims, f)
		ports.next, ports.stop = lo, lo+blockSize
		return nil
	}
	return fmt.Errorf("every block of ports in [%d, %d) is claimed by another process (%s)", portLo, portHi, dir)
}
