package lockcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Option configures Dial.
type Option func(*config)

type config struct {
	namespace string
	label     string
	ttl       time.Duration
	dial      []grpc.DialOption
	tls       *tls.Config
	token     string
	// unaryWrites keeps requests, releases and aborts off the session stream.
	unaryWrites bool
	// deadlineFunc hears every move of the jeopardy deadline (WithDeadlineFunc).
	deadlineFunc func(time.Time)
}

// dialOptions are the gRPC options the config asks for: TLS or plaintext,
// the bearer token, and the caller's own.
func (c *config) dialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if c.tls != nil {
		creds = credentials.NewTLS(c.tls)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		// Find a dead connection (a paused or vanished node) in seconds,
		// not at the OS's TCP timeout, and move to another endpoint.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}}),
		// Fixed flow-control windows turn off gRPC's bandwidth-delay
		// estimator, which pings the server after nearly every response of
		// a small RPC: a write and a wake-up on both sides per call (42 %
		// of a benchmark client's writes, docs/benchmarks.md).
		grpc.WithStaticStreamWindowSize(1 << 20), grpc.WithStaticConnWindowSize(8 << 20),
	}
	if c.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: c.token, tls: c.tls != nil}))
	}
	return append(opts, c.dial...)
}

// WithTLS connects over TLS with cfg (its RootCAs the cluster's CA; its
// Certificates a client certificate for mutual TLS, if any).
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithToken presents a bearer token that grants the namespace (or admin
// rights). Use TLS with it: without, the token crosses the network in the
// clear.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

type bearer struct {
	token string
	tls   bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return false }

// WithNamespace sets the namespace (default "default").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithLabel sets the label query shows for this client (default host
// name and pid).
func WithLabel(l string) Option { return func(c *config) { c.label = l } }

// WithTTL sets the session TTL (default 10s): how long the cluster keeps
// the session without a heartbeat. Heartbeats go every TTL/3.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithDialOptions adds gRPC dial options (interceptors, ...), applied after
// the client's own. The session's requests, releases and aborts travel on
// its stream, which unary interceptors do not see: add WithUnaryWrites to
// have them see every call.
func WithDialOptions(o ...grpc.DialOption) Option {
	return func(c *config) { c.dial = append(c.dial, o...) }
}

// WithUnaryWrites sends requests, releases and aborts as unary calls even
// when the session stream could carry them (by default it does, which
// saves a round trip per call).
func WithUnaryWrites() Option { return func(c *config) { c.unaryWrites = true } }

// Client is a session with a lockcluster cluster. It is safe for
// concurrent use.
type Client struct {
	cfg   config
	conns []*grpc.ClientConn
	addrs []string

	openMu   sync.Mutex // serialises opening a session
	mu       sync.Mutex
	cur      int // the endpoint in use
	sess     *clientSession
	closed   bool
	maxIndex uint64 // the highest Raft index seen, for read-your-writes
	// caller carries the session's writes on its stream (streamcall.go).
	caller atomic.Pointer[caller]
	probe  tlsProbe // tells a TLS mismatch from a node that is down (tlsprobe.go)
}

// Dial connects to a cluster given some of its endpoints (host:port) and
// opens a session. It fails when no endpoint can open one before ctx ends.
func Dial(ctx context.Context, endpoints []string, opts ...Option) (*Client, error) {
	cfg := config{namespace: "default", ttl: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.label == "" {
		host, _ := os.Hostname()
		cfg.label = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	c := &Client{cfg: cfg, addrs: splitEndpoints(endpoints)}
	if len(c.addrs) == 0 {
		return nil, fmt.Errorf("%w: no endpoint given (set --addr or LOCKCLUSTER_ADDR, e.g. 127.0.0.1:7700)", ErrInvalid)
	}
	for _, a := range c.addrs {
		cc, err := grpc.NewClient(a, cfg.dialOptions()...)
		if err != nil {
			c.closeConns()
			return nil, fmt.Errorf("%w: endpoint %q: %v", ErrInvalid, a, err)
		}
		c.conns = append(c.conns, cc)
	}
	if _, err := c.session(ctx); err != nil {
		c.closeConns()
		return nil, err
	}
	return c, nil
}

// closedErr is the error of every call on a closed Client (nil while it
// is open): InvalidStateError, as a closed agent's calls get.
func (c *Client) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("%w: the client is closed", ErrSessionClosed)
	}
	return nil
}

// Namespace is the client's namespace.
func (c *Client) Namespace() string { return c.cfg.namespace }

// Close ends the session: its pending requests are aborted and its locks
// released, on the cluster and here.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	var err error
	if s != nil {
		s.end(ErrSessionClosed)
		err = c.call(ctx, func(ctx context.Context, lc pb.LocksClient) error {
			_, err := lc.CloseSession(ctx, &pb.CloseSessionRequest{Namespace: c.cfg.namespace, SessionId: s.id, SessionSecret: s.secret})
			return err
		})
	}
	c.closeConns()
	return err
}

func (c *Client) closeConns() {
	for _, cc := range c.conns {
		cc.Close()
	}
}

func (c *Client) seen(index uint64) {
	c.mu.Lock()
	if index > c.maxIndex {
		c.maxIndex = index
	}
	c.mu.Unlock()
}

// call runs f against the current endpoint, and on an Unavailable error
// against the next, with backoff, until it succeeds, fails for another
// reason, or ctx ends.
func (c *Client) call(ctx context.Context, f func(context.Context, pb.LocksClient) error) error {
	backoff := 20 * time.Millisecond
	var last error
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		i := c.cur
		c.mu.Unlock()
		// One attempt gets a bounded part of the caller's time: an endpoint
		// that does not answer (a paused node) is left for the next one.
		actx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > attemptTimeout {
			actx, cancel = context.WithTimeout(ctx, attemptTimeout)
		}
		err := f(actx, c.locks(i))
		timedOut := err != nil && ctx.Err() == nil && actx.Err() != nil
		cancel()
		if err == nil {
			c.probe.served.Store(true)
			return nil
		}
		if status.Code(err) == codes.Canceled && ctx.Err() == nil {
			// Not the caller's cancel: Close closed the connections.
			if cerr := c.closedErr(); cerr != nil {
				return cerr
			}
		}
		if !retryable(err) && !timedOut {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fromStatus(err)
		}
		last = err
		if merr := c.mismatch(i, err); merr != nil {
			return merr
		}
		c.mu.Lock()
		if c.cur == i {
			c.cur = (i + 1) % len(c.conns)
		}
		c.mu.Unlock()
		if attempt%len(c.conns) == len(c.conns)-1 {
			// Every endpoint failed once: wait before the next round.
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %v (last error: %v)", ErrUnavailable, ctx.Err(), fromStatus(last))
			case <-time.After(backoff):
			}
			// A short ceiling: an election takes about a second, and a
			// client that backed off to a whole second would notice the new
			// leader up to a second late. A round of len(endpoints) calls
			// every 100ms costs the nodes nothing.
			backoff = min(2*backoff, 100*time.Millisecond)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %v (last error: %v)", ErrUnavailable, ctx.Err(), fromStatus(last))
		}
	}
}

// conn returns the connection in use, for the session stream.
func (c *Client) conn() (*grpc.ClientConn, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns[c.cur], c.cur
}

// rotate moves off endpoint i after a failure there.
func (c *Client) rotate(i int) {
	c.mu.Lock()
	if c.cur == i {
		c.cur = (i + 1) % len(c.conns)
	}
	c.mu.Unlock()
}

var errClosed = errors.New("lockcluster: client closed")

// attemptTimeout bounds one call to one endpoint.
const attemptTimeout = 5 * time.Second

// splitEndpoints accepts endpoints one per element or comma-separated, as
// LOCKCLUSTER_ADDR has them.
func splitEndpoints(endpoints []string) []string {
	var out []string
	for _, e := range endpoints {
		for _, a := range strings.Split(e, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
	}
	return out
}
