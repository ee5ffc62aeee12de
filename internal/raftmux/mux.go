// Package raftmux shares one raft listener between several Raft groups
// (issue 27; ../shared/design/groups.md §10.1). Each group gets a
// raft.StreamLayer (Layer) for its own hashicorp/raft NetworkTransport;
// the connections of all of them arrive on one port.
//
// The wire: a connection dialled for group 0 starts as raft's own do,
// with no header, so a cluster of one group sends exactly the bytes it
// sent before groups existed, and a node of this release and one of the
// release before reach each other's group 0 in both directions (the old
// one simply has no other group). A connection for group g ≥ 1 starts
// with Header and g as a uvarint. The accepting side reads the first
// byte: one of raft's RPC types (0 to MaxRaftRPCType) means group 0, and
// the byte is handed back to raft unread; Header means the group id
// follows; anything else, or a group nobody serves here, closes the
// connection.
//
// The mux sits on whatever listener it is given: with TLS (a
// tls.Listener and a TLS dialer) the header is the first byte after the
// handshake. Closing one group's Layer stops its Accept and nothing else;
// Close closes the listener and every Layer.
package raftmux

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

const (
	// Header starts a connection of a group g ≥ 1; g follows as a uvarint.
	Header byte = 0xEC
	// MaxRaftRPCType is the largest RPC type byte hashicorp/raft v1.7.3
	// starts a connection with (rpcAppendEntries 0 … rpcRequestPreVote
	// 4, net_transport.go): such a first byte is group 0's.
	MaxRaftRPCType byte = 4
	// HeaderTimeout bounds how long an accepted connection may take to
	// send its first bytes (and, with TLS, finish its handshake) before
	// it is closed: a peer that connects and sends nothing holds no one
	// up, since each connection is read on its own goroutine.
	HeaderTimeout = 10 * time.Second
	// acceptQueue is how many routed connections wait for a group's
	// transport to accept them.
	acceptQueue = 16
)

// ErrClosed is Accept's error once the Layer (or the whole Mux) is
// closed.
var ErrClosed = errors.New("raftmux: closed")

// Dialer opens a connection to a peer's raft address (plain TCP, or TLS
// with the peer's certificate checked).
type Dialer func(address string, timeout time.Duration) (net.Conn, error)

// TCPDialer dials plain TCP.
func TCPDialer(address string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", address, timeout)
}

// Mux routes one listener's connections to the Layers of its groups.
type Mux struct {
	l         net.Listener
	advertise net.Addr
	dial      Dialer
	// onDrop, when set, hears why a connection was closed unrouted.
	onDrop func(remote net.Addr, why string)

	mu     sync.Mutex
	groups map[uint16]*Layer
	// reading: the connections whose first bytes route is reading; Close
	// closes them rather than wait out their HeaderTimeout.
	reading map[net.Conn]struct{}
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
}

// New returns a Mux over l that dials with dial and advertises advertise
// (l's address when nil), and starts accepting. onDrop may be nil.
func New(l net.Listener, advertise net.Addr, dial Dialer, onDrop func(remote net.Addr, why string)) *Mux {
	if advertise == nil {
		advertise = l.Addr()
	}
	if dial == nil {
		dial = TCPDialer
	}
	m := &Mux{l: l, advertise: advertise, dial: dial, onDrop: onDrop, groups: map[uint16]*Layer{}, reading: map[net.Conn]struct{}{}, done: make(chan struct{})}
	m.wg.Add(1)
	go m.serve()
	return m
}

// Group returns group g's Layer, made on first use. A Layer closed
// (its transport shut down) is replaced by a new one on the next call,
// so a group can be stopped and started again.
func (m *Mux) Group(g uint16) (*Layer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if l, ok := m.groups[g]; ok && !l.isClosed() {
		return l, nil
	}
	l := &Layer{m: m, group: g, conns: make(chan net.Conn, acceptQueue), closed: make(chan struct{})}
	m.groups[g] = l
	return l, nil
}

// Close closes the listener and every Layer. Connections already routed
// to a transport are its own.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	layers := make([]*Layer, 0, len(m.groups))
	for _, l := range m.groups {
		layers = append(layers, l)
	}
	for c := range m.reading {
		c.Close()
	}
	m.mu.Unlock()
	err := m.l.Close()
	for _, l := range layers {
		l.Close()
	}
	m.wg.Wait()
	return err
}

// serve accepts until the listener is closed; each connection is read
// and routed on its own goroutine.
func (m *Mux) serve() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		c, err := m.l.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || !errors.Is(err, net.ErrClosed) {
				// A transient error (too many open files): wait and go on.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
					continue
				case <-m.done:
					return
				}
			}
			return
		}
		backoff = 0
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

// route reads c's first bytes and hands it to its group's Layer.
func (m *Mux) route(c net.Conn) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		c.Close()
		return
	}
	m.reading[c] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.reading, c)
		m.mu.Unlock()
	}()
	c.SetReadDeadline(time.Now().Add(HeaderTimeout))
	r := bufio.NewReaderSize(c, 16)
	first, err := r.ReadByte()
	if err != nil {
		m.drop(c, fmt.Sprintf("no first byte: %v", err))
		return
	}
	var g uint16
	switch {
	case first <= MaxRaftRPCType:
		r.UnreadByte() // raft reads its RPC type itself
	case first == Header:
		v, err := binary.ReadUvarint(r)
		if err != nil || v > 0xffff || v == 0 {
			m.drop(c, fmt.Sprintf("bad group header (group %d, %v)", v, err))
			return
		}
		g = uint16(v)
	default:
		m.drop(c, fmt.Sprintf("first byte 0x%02x is neither a raft RPC type nor the group header", first))
		return
	}
	c.SetReadDeadline(time.Time{})
	m.mu.Lock()
	l := m.groups[g]
	m.mu.Unlock()
	if l == nil {
		m.drop(c, fmt.Sprintf("group %d is not served here", g))
		return
	}
	conn := &bufferedConn{Conn: c, r: r}
	select {
	case l.conns <- conn:
	case <-l.closed:
		m.drop(c, fmt.Sprintf("group %d is closed", g))
	case <-m.done:
		c.Close()
	}
}

func (m *Mux) drop(c net.Conn, why string) {
	if m.onDrop != nil {
		m.onDrop(c.RemoteAddr(), why)
	}
	c.Close()
}

// Layer is one group's raft.StreamLayer on the shared listener.
type Layer struct {
	m         *Mux
	group     uint16
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

var _ raft.StreamLayer = (*Layer)(nil)

// Accept returns the next connection routed to this group.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, ErrClosed
	}
}

// Close stops this group's Accept; the listener and the other groups
// go on. Connections waiting to be accepted are closed.
func (l *Layer) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *Layer) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// Addr is the advertised address, the same for every group.
func (l *Layer) Addr() net.Addr { return l.m.advertise }

// Dial connects to the peer at address for this group: group 0 as raft
// always did, group g ≥ 1 with the header first.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.m.dial(string(address), timeout)
	if err != nil || l.group == 0 {
		return c, err
	}
	hdr := binary.AppendUvarint([]byte{Header}, uint64(l.group))
	c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write(hdr); err != nil {
		c.Close()
		return nil, fmt.Errorf("raftmux: group %d header to %s: %w", l.group, address, err)
	}
	c.SetWriteDeadline(time.Time{})
	return c, nil
}

// bufferedConn reads what route's reader buffered before the rest of the
// connection (the unread RPC type, or bytes that came with the header).
type bufferedConn struct {
	net.Conn
	r io.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
