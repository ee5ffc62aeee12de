package node

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is a raft.StreamLayer over TLS: raft peers accept and dial
// only TLS connections verified against the cluster's CA.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	client    func() *tls.Config // a new one per dial: the files in force (tls.go)
}

// newStreamLayer listens on bind with server and dials with a
// configuration from client. advertise, when set, is the address other
// members reach this one on.
func newStreamLayer(bind, advertise string, server *tls.Config, client func() *tls.Config) (*streamLayer, error) {
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raft TLS listener %s: %w", bind, err)
	}
	adv, err := advertiseAddr(l, advertise)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &streamLayer{Listener: tls.NewListener(l, server), advertise: adv, client: client}, nil
}

// Addr is the advertised address.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial opens a TLS connection to a peer.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	cfg := s.client()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(string(address))
		if err == nil {
			cfg.ServerName = host
		}
	}
	d := &net.Dialer{Timeout: min(timeout, dialTimeout)}
	return tls.DialWithDialer(d, "tcp", string(address), cfg)
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// advertiseAddr is the raft address other members reach l on: advertise,
// kept as written (a host name is resolved at each dial), else l's own.
func advertiseAddr(l net.Listener, advertise string) (net.Addr, error) {
	if advertise == "" {
		return l.Addr(), nil
	}
	if _, _, err := net.SplitHostPort(advertise); err != nil {
		return nil, fmt.Errorf("raft advertise address %s: %w", advertise, err)
	}
	return hostAddr(advertise), nil
}

// hostAddr is an address as written (host:port).
type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

// dialTimeout bounds a dial to a peer that does not answer (a killed
// container), below raft's I/O timeout.
const dialTimeout = 2 * time.Second
