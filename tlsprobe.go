package lockcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// A client whose TLS setting disagrees with the nodes' gets no answer but
// a failed connection, which gRPC retries like a node that is down: left
// alone, Dial would wait out its whole context and say "unavailable". So
// while a client has never been served, a connection failure sends a probe
// to the endpoint (in the background: the call goes on meanwhile) that
// finds out whether it speaks TLS, and when every endpoint either disagrees
// with the client or cannot be reached at all, the next failure ends the
// call with ErrTLSMismatch.

// probeBudget bounds one probe.
const probeBudget = time.Second

// reprobeAfter is how long an inconclusive probe (no answer, refused)
// stands before the endpoint is probed again: a node that was starting
// may answer by then.
const reprobeAfter = time.Second

// speech is what a probe heard from an endpoint.
type speech int

const (
	speechUnknown     speech = iota // it answered, but neither as a TLS nor as a plaintext HTTP/2 server
	speechUnreachable               // no connection: refused, no route, timed out
	speechTLS                       // it completed a TLS handshake
	speechPlaintext                 // it answered the HTTP/2 preface in plaintext
)

// tlsProbe holds what the probes found, per endpoint.
type tlsProbe struct {
	served  atomic.Bool // a call was served: probes are over
	mu      sync.Mutex
	heard   map[int]probed
	probing map[int]bool
}

type probed struct {
	speech speech
	at     time.Time
}

// mismatch is called when endpoint i failed a call with the retryable err.
// It returns an ErrTLSMismatch error when the probes show that no endpoint
// can serve this client because of TLS: each one disagrees with the
// client's TLS setting or cannot be reached, and at least one disagrees.
// Otherwise it returns nil, after starting a probe of endpoint i if it has
// none that tells. Once a call was served it does nothing.
func (c *Client) mismatch(i int, err error) error {
	p := &c.probe
	if p.served.Load() {
		return nil
	}
	var e *Error
	if errors.As(fromStatus(err), &e) && e.Reason != pb.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return nil // a node answered, and said why it could not serve
	}
	wrong := c.disagreeing()
	p.mu.Lock()
	defer p.mu.Unlock()
	if last, ok := p.heard[i]; (!ok || last.speech != wrong && time.Since(last.at) > reprobeAfter) && !p.probing[i] {
		if p.probing == nil {
			p.probing, p.heard = map[int]bool{}, map[int]probed{}
		}
		p.probing[i] = true
		go func() {
			s := probe(context.Background(), c.addrs[i], c.cfg.tls != nil)
			p.mu.Lock()
			p.heard[i] = probed{speech: s, at: time.Now()}
			delete(p.probing, i)
			p.mu.Unlock()
		}()
	}
	if len(p.heard) < len(c.addrs) {
		return nil
	}
	var at []string
	for j := range c.addrs {
		switch p.heard[j].speech {
		case wrong:
			at = append(at, c.addrs[j])
		case speechUnreachable:
		default:
			return nil // it may serve once it is ready
		}
	}
	if len(at) == 0 {
		return nil
	}
	nodes := "the node at " + at[0]
	if len(at) > 1 {
		nodes = "the nodes at " + strings.Join(at, ", ")
	}
	if c.cfg.tls == nil {
		return &mismatchError{msg: ErrTLSMismatch.Error() + ": " + nodes + " speaks TLS: set --cacert (or LOCKCLUSTER_CACERT) to the cluster's CA certificate " +
			"(in Go: WithTLS); this client connects in plaintext"}
	}
	return &mismatchError{msg: ErrTLSMismatch.Error() + ": " + nodes + " speaks plaintext, not TLS: drop --cacert, --cert and --key " +
		"(and LOCKCLUSTER_CACERT, LOCKCLUSTER_CERT, LOCKCLUSTER_KEY; in Go: WithTLS), or start the nodes with --tls-cert and --tls-key"}
}

// disagreeing is the speech of an endpoint this client cannot talk to.
func (c *Client) disagreeing() speech {
	if c.cfg.tls != nil {
		return speechPlaintext
	}
	return speechTLS
}

// clientPreface opens every HTTP/2 connection without TLS (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// probe connects to addr once and finds out whether it speaks TLS (the
// client would connect in plaintext, asTLS false: it attempts a TLS
// handshake) or plaintext HTTP/2 (asTLS: it sends the HTTP/2 preface and
// reads the server's first frame, which must be SETTINGS). It takes at most
// probeBudget, or what is left of ctx.
func probe(ctx context.Context, addr string, asTLS bool) speech {
	ctx, cancel := context.WithTimeout(ctx, probeBudget)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return speechUnreachable
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if !asTLS {
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		err := tc.HandshakeContext(ctx)
		var alert tls.AlertError
		if err == nil || errors.As(err, &alert) {
			// A handshake, or an alert (it wants a client certificate,
			// say): either way a TLS server.
			return speechTLS
		}
		return speechUnknown
	}
	if _, err := io.WriteString(conn, clientPreface); err != nil {
		return speechUnknown
	}
	// A frame header: length (3 bytes), type, flags, stream id (4 bytes).
	// The server's first frame is SETTINGS (type 4) on stream 0.
	var h [9]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return speechUnknown
	}
	if h[3] == 0x4 && bytes.Equal(h[5:], []byte{0, 0, 0, 0}) {
		return speechPlaintext
	}
	return speechUnknown
}
