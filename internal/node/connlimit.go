package node

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The client API's connections are counted by remote address: a node
// keeps at most Config.MaxConnsPerIP open from one IP address and closes
// each one past it as soon as it is accepted, before any TLS or HTTP/2
// work (issue 24: one client held 2,002 idle connections open on a
// node). Every open connection costs the node a few goroutines and
// buffers (about 16 KiB when idle) and a file descriptor; with the cap,
// one address cannot take them all. A refused client sees its connection
// closed, and retries as for any failed connection.
//
// Clients behind one address (NAT, a proxy, a load generator on one
// machine) share the cap: raise it, or turn it off (-1), for them.

// DefaultMaxConnsPerIP is the cap unless Config.MaxConnsPerIP says
// otherwise. A client (the Go client, the CLI) has one connection to a
// node: 512 clients may share an address. An idle connection costs the
// node about 28 KiB of heap (gRPC's read buffer) and three goroutines'
// stacks: 512 of them, about 30 MiB.
const DefaultMaxConnsPerIP = 512

// connLimiter is a listener that counts its open connections by remote IP
// and refuses (closes) one that would take its address past max (0: no
// cap).
type connLimiter struct {
	net.Listener
	max int
	// userTimeout is set as TCP_USER_TIMEOUT on every accepted connection:
	// gRPC sets it from its keepalive timeout only on a *net.TCPConn, which
	// the connections it gets from here are not.
	userTimeout time.Duration
	refusedHook func() // counts a refusal (metrics)
	log         hclog.Logger

	mu      sync.Mutex
	open    map[netip.Addr]int
	total   int
	refused uint64    // since the last log line
	logged  time.Time // the last log line about refusals
}

// refusalLogEvery paces the log lines about refused connections.
const refusalLogEvery = time.Minute

func newConnLimiter(l net.Listener, max int, userTimeout time.Duration, refused func(), log hclog.Logger) *connLimiter {
	if refused == nil {
		refused = func() {}
	}
	return &connLimiter{Listener: l, max: max, userTimeout: userTimeout, refusedHook: refused, log: log, open: map[netip.Addr]int{}}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		if !l.admit(ip) {
			c.Close()
			continue
		}
		if l.userTimeout > 0 {
			setUserTimeout(c, l.userTimeout)
		}
		return &countedConn{Conn: c, l: l, ip: ip}, nil
	}
}

// admit counts a connection from ip, or refuses it.
func (l *connLimiter) admit(ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.open[ip] >= l.max {
		l.refused++
		if now := time.Now(); now.Sub(l.logged) >= refusalLogEvery {
			l.log.Warn("refusing client API connections: the address has as many open as a node allows one address (--max-conns-per-ip)",
				"address", ip.String(), "open", l.open[ip], "max", l.max, "refused", l.refused)
			l.logged, l.refused = now, 0
		}
		l.refusedHook()
		return false
	}
	l.open[ip]++
	l.total++
	return true
}

func (l *connLimiter) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
	l.total--
}

// Open is how many accepted connections are open.
func (l *connLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// remoteIP is the address c comes from, without its port (IPv4 in IPv6
// unwrapped); the zero Addr for a connection that has none (every such
// connection counts as one address).
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// countedConn gives its count back when it is closed, once.
type countedConn struct {
	net.Conn
	l      *connLimiter
	ip     netip.Addr
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.ip)
	}
	return c.Conn.Close()
}

// DefaultMaxConcurrentStreams is the calls and streams one client API
// connection may have open at once unless Config.MaxConcurrentStreams
// says otherwise (gRPC's own default has no bound). A Go client has its
// session stream on its connection, and its unary calls in flight (its
// requests and releases travel on the stream); the load generator's
// idle workload puts at most 100 session streams on one. Each stream a
// client does not read holds what gRPC has queued for it (up to about
// 2 MiB) until the client reads or goes.
const DefaultMaxConcurrentStreams = 256

// DefaultConnIdleTimeout closes a client API connection with no call or
// stream open for that long, unless Config.ConnIdleTimeout says
// otherwise. A client with a session always has its stream open.
const DefaultConnIdleTimeout = time.Minute

// keepaliveTimeout is how long the node waits for a ping's answer before
// it drops the connection (and its TCP_USER_TIMEOUT).
const keepaliveTimeout = 5 * time.Second

// connHandshakeTimeout bounds a new connection's TLS and HTTP/2 handshake.
const connHandshakeTimeout = 20 * time.Second
