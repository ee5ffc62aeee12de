package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockcluster/lockcluster"
)

// Lockcluster drives a lockcluster cluster through the Go client: every
// session is a lockcluster.Client (its own connection and session stream).
type Lockcluster struct {
	Endpoints []string
	Namespace string
	// Namespaces, when set, replaces Namespace: session i opens in
	// Namespaces[i mod len] (bench --namespaces).
	Namespaces []string
	// EndpointsFor, when it has a namespace, replaces Endpoints for that
	// namespace's sessions (bench --prefer-leader with several groups:
	// the namespace's group leader first).
	EndpointsFor map[string][]string
	TTL          time.Duration // 0: the client's default (10s)
	// Rotate spreads sessions over the endpoints: session i lists the
	// endpoints starting at i mod len. Without it every client starts on
	// the first endpoint, as clients given one LOCKCLUSTER_ADDR do.
	Rotate bool
	// UnaryWrites sends requests and releases as unary calls instead of on
	// the session stream (lockcluster.WithUnaryWrites), to compare.
	UnaryWrites bool
	n           atomic.Int64
}

// Name implements Driver.
func (d *Lockcluster) Name() string { return "lockcluster" }

// Close implements Driver.
func (d *Lockcluster) Close() error { return nil }

// Open implements Driver.
func (d *Lockcluster) Open(ctx context.Context) (Session, error) {
	eps := d.Endpoints
	n := int(d.n.Add(1) - 1)
	if len(d.Namespaces) > 0 {
		if e, ok := d.EndpointsFor[d.Namespaces[n%len(d.Namespaces)]]; ok {
			eps = e
		}
	}
	if d.Rotate && len(eps) > 1 {
		i := n % len(eps)
		eps = append(append([]string(nil), eps[i:]...), eps[:i]...)
	}
	opts := []lockcluster.Option{lockcluster.WithLabel("bench")}
	if ns := d.Namespace; ns != "" || len(d.Namespaces) > 0 {
		if len(d.Namespaces) > 0 {
			ns = d.Namespaces[n%len(d.Namespaces)]
		}
		opts = append(opts, lockcluster.WithNamespace(ns))
	}
	if d.TTL > 0 {
		opts = append(opts, lockcluster.WithTTL(d.TTL))
	}
	if d.UnaryWrites {
		opts = append(opts, lockcluster.WithUnaryWrites())
	}
	c, err := lockcluster.Dial(ctx, eps, opts...)
	if err != nil {
		return nil, err
	}
	return &lcSession{c: c, id: c.SessionID()}, nil
}

type lcSession struct {
	c  *lockcluster.Client
	id uint64
}

func (s *lcSession) Lock(ctx context.Context, name string, shared, ifAvailable bool) (Held, error) {
	opts := lockcluster.Options{IfAvailable: ifAvailable}
	if shared {
		opts.Mode = lockcluster.Shared
	}
	l, err := s.c.Acquire(ctx, name, opts)
	if errors.Is(err, lockcluster.ErrNotAvailable) {
		return nil, ErrNotAvailable
	}
	if err != nil {
		return nil, err
	}
	return lcHeld{l}, nil
}

func (s *lcSession) Close(ctx context.Context) error { return s.c.Close(ctx) }

// Lost reports whether the client is no longer on the session it opened
// (the cluster expired or closed it, or the client gave it up).
func (s *lcSession) Lost() bool { return s.c.SessionID() != s.id }

type lcHeld struct{ l *lockcluster.Lock }

func (h lcHeld) Release(ctx context.Context) error {
	if err := h.l.Err(); err != nil && !errors.Is(err, lockcluster.ErrReleased) {
		return fmt.Errorf("lock lost before release: %w", err)
	}
	return h.l.Release(ctx)
}
