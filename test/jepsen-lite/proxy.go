package main

import (
	"net"
	"sync"
	"time"
)

// The kernel here has no netem, so network faults are made in user space:
// node i reaches node j's raft port only through a proxy of its own for
// the directed link i→j (serve --raft-dial). Bytes on a connection that i
// opened to j flow i→j (its requests) and j→i (the answers); each
// direction obeys the state of its own directed link, so a one-way cut
// i→j stalls i's requests to j and i's answers to j's requests, and
// nothing else.
//
// A change of a link's state closes the connections that carry it, so
// bytes held back by a cut are dropped, not delivered late: raft sees a
// broken connection and dials again.

// Links is the fault state of every directed link and the proxies that
// apply it.
type Links struct {
	mu      sync.Mutex
	cut     [][]bool
	delay   time.Duration
	changed chan struct{} // closed and replaced at every change
	proxies [][]*Proxy
}

// NewLinks starts a proxy for every directed link between the nodes
// whose raft addresses are given. Proxy(i, j) is the address node i must
// dial to reach node j.
func NewLinks(raftAddrs []string) (*Links, error) {
	n := len(raftAddrs)
	ls := &Links{cut: square(n), changed: make(chan struct{}), proxies: make([][]*Proxy, n)}
	for i := range n {
		ls.proxies[i] = make([]*Proxy, n)
		for j := range n {
			if i == j {
				continue
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				ls.Close()
				return nil, err
			}
			p := &Proxy{links: ls, src: i, dst: j, l: l, target: raftAddrs[j], conns: map[*pconn]bool{}}
			ls.proxies[i][j] = p
			go p.serve()
		}
	}
	return ls, nil
}

func square(n int) [][]bool {
	m := make([][]bool, n)
	for i := range m {
		m[i] = make([]bool, n)
	}
	return m
}

// Proxy is the address of the proxy node i dials to reach node j.
func (ls *Links) Proxy(i, j int) string { return ls.proxies[i][j].l.Addr().String() }

// Cut implements Network.
func (ls *Links) Cut(cut [][]bool) error {
	ls.mu.Lock()
	var reset []*Proxy
	for i := range ls.cut {
		for j := range ls.cut[i] {
			if i != j && ls.cut[i][j] != cut[i][j] {
				reset = append(reset, ls.proxies[i][j], ls.proxies[j][i])
			}
			ls.cut[i][j] = cut[i][j]
		}
	}
	ls.broadcastLocked()
	ls.mu.Unlock()
	for _, p := range reset {
		p.closeAll()
	}
	return nil
}

// Delay implements Network.
func (ls *Links) Delay(d time.Duration) error {
	ls.mu.Lock()
	ls.delay = d
	ls.broadcastLocked()
	ls.mu.Unlock()
	return nil
}

// Heal implements Network.
func (ls *Links) Heal() error {
	if err := ls.Cut(square(len(ls.cut))); err != nil {
		return err
	}
	return ls.Delay(0)
}

func (ls *Links) broadcastLocked() {
	close(ls.changed)
	ls.changed = make(chan struct{})
}

// state is the state of the directed link from→to.
func (ls *Links) state(from, to int) (cut bool, delay time.Duration, changed <-chan struct{}) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.cut[from][to], ls.delay, ls.changed
}

// Close stops every proxy.
func (ls *Links) Close() {
	for _, row := range ls.proxies {
		for _, p := range row {
			if p != nil {
				p.l.Close()
				p.closeAll()
			}
		}
	}
}

// Proxy forwards the connections node src opens to node dst.
type Proxy struct {
	links    *Links
	src, dst int
	l        net.Listener
	target   string
	mu       sync.Mutex
	conns    map[*pconn]bool
}

type pconn struct {
	a, b net.Conn
	once sync.Once
	done chan struct{}
}

func (c *pconn) close() {
	c.once.Do(func() { close(c.done); c.a.Close(); c.b.Close() })
}

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *Proxy) handle(c net.Conn) {
	fwd, _, _ := p.links.state(p.src, p.dst)
	back, _, _ := p.links.state(p.dst, p.src)
	if fwd && back { // a partition: nothing gets through, fail fast
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	pc := &pconn{a: c, b: up, done: make(chan struct{})}
	p.mu.Lock()
	p.conns[pc] = true
	p.mu.Unlock()
	go p.pipe(pc, c, up, p.src, p.dst)
	go p.pipe(pc, up, c, p.dst, p.src)
	<-pc.done
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	cs := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies bytes in→out for the directed link from→to, holding them
// while the link is cut and for the link's delay.
func (p *Proxy) pipe(pc *pconn, in, out net.Conn, from, to int) {
	defer pc.close()
	ch := make(chan chunk, 64)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := in.Read(buf)
			if n > 0 {
				select {
				case ch <- chunk{buf[:n], time.Now()}:
				case <-pc.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		for {
			cut, delay, changed := p.links.state(from, to)
			if !cut {
				if wait := time.Until(c.at.Add(delay)); wait > 0 {
					select {
					case <-time.After(wait):
					case <-pc.done:
						return
					}
				}
				break
			}
			select {
			case <-changed:
			case <-pc.done:
				return
			}
		}
		if _, err := out.Write(c.b); err != nil {
			return
		}
	}
}
