package raftmux

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// node is one process's raft port: a Mux and a transport per group.
type node struct {
	m  *Mux
	tr map[uint16]*raft.NetworkTransport
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newNode(t *testing.T, l net.Listener, dial Dialer, groups ...uint16) *node {
	t.Helper()
	n := &node{m: New(l, nil, dial, nil), tr: map[uint16]*raft.NetworkTransport{}}
	for _, g := range groups {
		layer, err := n.m.Group(g)
		if err != nil {
			t.Fatal(err)
		}
		n.tr[g] = raft.NewNetworkTransport(layer, 2, 2*time.Second, io.Discard)
	}
	t.Cleanup(func() {
		for _, tr := range n.tr {
			tr.Close()
		}
		n.m.Close()
	})
	return n
}

// serveOne answers the next AppendEntries on tr with term, and reports
// the request's term.
func serveOne(tr raft.Transport, term uint64) <-chan uint64 {
	got := make(chan uint64, 1)
	go func() {
		rpc := <-tr.Consumer()
		req := rpc.Command.(*raft.AppendEntriesRequest)
		rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: true}, nil)
		got <- req.Term
	}()
	return got
}

// appendEntries sends an AppendEntries with term from tr to addr and
// returns the responder's term.
func appendEntries(t *testing.T, tr raft.Transport, addr raft.ServerAddress, term uint64) uint64 {
	t.Helper()
	var resp raft.AppendEntriesResponse
	if err := tr.AppendEntries("peer", addr, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("x"), Addr: []byte("x")}, Term: term}, &resp); err != nil {
		t.Fatalf("AppendEntries (term %d) to %s: %v", term, addr, err)
	}
	return resp.Term
}

func within(t *testing.T, ch <-chan uint64, what string) uint64 {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing arrived", what)
		return 0
	}
}

// Each group's RPCs reach that group's transport on the peer, and only
// it: groups 0, 1 and 300 share one port on each of two nodes.
func TestGroupsShareOnePort(t *testing.T) {
	a := newNode(t, listen(t), nil, 0, 1, 300)
	b := newNode(t, listen(t), nil, 0, 1, 300)
	addr := raft.ServerAddress(b.m.l.Addr().String())
	for _, g := range []uint16{300, 0, 1} {
		term := uint64(g) + 1000
		got := serveOne(b.tr[g], term+1)
		if resp := appendEntries(t, a.tr[g], addr, term); resp != term+1 {
			t.Fatalf("group %d: response term %d, want %d", g, resp, term+1)
		}
		if req := within(t, got, "group's request"); req != term {
			t.Fatalf("group %d's transport got term %d, want %d", g, req, term)
		}
	}
	// Pooled connections carry later RPCs of the same group.
	got := serveOne(b.tr[1], 7)
	if appendEntries(t, a.tr[1], addr, 6) != 7 || within(t, got, "second RPC") != 6 {
		t.Fatal("a second RPC on group 1's pooled connection went astray")
	}
}

// A node of the release before groups (a plain TCP transport, no mux)
// and a node with a mux reach each other's group 0 in both directions:
// group 0's bytes are raft's own.
func TestGroupZeroSpeaksToANodeWithoutMux(t *testing.T) {
	old, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	n := newNode(t, listen(t), nil, 0, 1)
	got := serveOne(old, 11)
	if appendEntries(t, n.tr[0], old.LocalAddr(), 10) != 11 || within(t, got, "old node") != 10 {
		t.Fatal("mux → old node failed")
	}
	got = serveOne(n.tr[0], 21)
	if appendEntries(t, old, raft.ServerAddress(n.m.l.Addr().String()), 20) != 21 || within(t, got, "new node's group 0") != 20 {
		t.Fatal("old node → mux failed")
	}
}

// The bytes a group-0 dial sends are raft's, from the first: no header.
// A group g ≥ 1 dial sends the header and g first.
func TestDialHeaders(t *testing.T) {
	l := listen(t)
	defer l.Close()
	m := New(listen(t), nil, nil, nil)
	defer m.Close()
	first := make(chan []byte, 2)
	go func() {
		for range 2 {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 3)
			n, _ := io.ReadFull(c, b)
			first <- b[:n]
			c.Close()
		}
	}()
	for _, g := range []uint16{0, 300} {
		layer, _ := m.Group(g)
		c, err := layer.Dial(raft.ServerAddress(l.Addr().String()), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{0, 0, 0}) // raft's AppendEntries type and some body
		got := <-first
		want := []byte{0, 0, 0}
		if g != 0 {
			want = binary.AppendUvarint([]byte{Header}, uint64(g))
		}
		if string(got) != string(want) {
			t.Fatalf("group %d dial sent % x first, want % x", g, got, want)
		}
		c.Close()
	}
}

// A connection that starts with anything but a raft RPC type or the
// header, names a group not served here, or sends nothing, is closed; a
// silent one holds up no other connection.
func TestBadConnectionsAreClosed(t *testing.T) {
	dropped := make(chan string, 10)
	l := listen(t)
	m := New(l, nil, nil, func(_ net.Addr, why string) { dropped <- why })
	defer m.Close()
	layer, _ := m.Group(1)
	tr := raft.NewNetworkTransport(layer, 2, 2*time.Second, io.Discard)
	defer tr.Close()

	silent, err := net.Dial("tcp", l.Addr().String()) // sends nothing
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, b := range [][]byte{{0x47, 'E', 'T'}, {Header, 9}, {Header, 0}, {0}} { // HTTP, group 9, group 0 in a header, group 0 (none here)
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("% x: the connection was answered", b)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("% x: the connection was left open", b)
		}
		c.Close()
		select {
		case <-dropped:
		case <-time.After(5 * time.Second):
			t.Fatalf("% x: not reported dropped", b)
		}
	}
	// Group 1 still works, the silent connection still waiting.
	b := newNode(t, listen(t), nil, 1)
	got := serveOne(tr, 31)
	if appendEntries(t, b.tr[1], raft.ServerAddress(l.Addr().String()), 30) != 31 || within(t, got, "group 1") != 30 {
		t.Fatal("group 1 failed")
	}
}

// Closing one group's Layer (its transport shutting down) leaves the
// listener and the other groups serving; the group can start again.
func TestClosingOneGroupLeavesTheOthers(t *testing.T) {
	a := newNode(t, listen(t), nil, 1)
	l := listen(t)
	b := &node{m: New(l, nil, nil, nil), tr: map[uint16]*raft.NetworkTransport{}}
	defer b.m.Close()
	for _, g := range []uint16{0, 1} {
		layer, _ := b.m.Group(g)
		b.tr[g] = raft.NewNetworkTransport(layer, 2, time.Second, io.Discard)
	}
	b.tr[0].Close()
	addr := raft.ServerAddress(l.Addr().String())
	got := serveOne(b.tr[1], 41)
	if appendEntries(t, a.tr[1], addr, 40) != 41 || within(t, got, "group 1 after group 0 closed") != 40 {
		t.Fatal("group 1 failed after group 0 closed")
	}
	// Group 1 stops and starts again (a new transport on a new Layer).
	b.tr[1].Close()
	layer, err := b.m.Group(1)
	if err != nil {
		t.Fatal(err)
	}
	b.tr[1] = raft.NewNetworkTransport(layer, 2, time.Second, io.Discard)
	defer b.tr[1].Close()
	a2 := newNode(t, listen(t), nil, 1) // a fresh pool: the old one's connections died with group 1
	got = serveOne(b.tr[1], 51)
	if appendEntries(t, a2.tr[1], addr, 50) != 51 || within(t, got, "group 1 restarted") != 50 {
		t.Fatal("group 1 failed after a restart")
	}
}

// Over TLS the header is the first byte after the handshake.
func TestGroupsOverTLS(t *testing.T) {
	cert := selfSigned(t)
	srv := &tls.Config{Certificates: []tls.Certificate{cert}}
	dial := func(addr string, timeout time.Duration) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	}
	a := newNode(t, tls.NewListener(listen(t), srv), dial, 0, 2)
	b := newNode(t, tls.NewListener(listen(t), srv), dial, 0, 2)
	addr := raft.ServerAddress(b.m.l.Addr().String())
	var wg sync.WaitGroup
	for _, g := range []uint16{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := serveOne(b.tr[g], uint64(g)+61)
			if appendEntries(t, a.tr[g], addr, uint64(g)+60) != uint64(g)+61 || within(t, got, "TLS") != uint64(g)+60 {
				t.Errorf("group %d over TLS failed", g)
			}
		}()
		wg.Wait()
	}
}

// Close does not wait for a connection that sends nothing.
func TestCloseDoesNotWaitForSilentConnections(t *testing.T) {
	l := listen(t)
	m := New(l, nil, nil, nil)
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	deadline := time.Now().Add(HeaderTimeout / 2)
	for { // until the mux reads it
		m.mu.Lock()
		n := len(m.reading)
		m.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the silent connection was never accepted")
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(HeaderTimeout / 2):
		t.Fatal("Close waited for a silent connection")
	}
}
