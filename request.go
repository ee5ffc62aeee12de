package lockcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Request is navigator.locks.request: it waits for the lock on name (and
// opts.Scope), runs fn while holding it, and releases it when fn returns,
// fails or panics. It returns fn's error.
//
// With IfAvailable, if the lock cannot be granted at once fn runs with a
// nil *Lock (that is not an error; Acquire returns ErrNotAvailable
// instead).
//
// ctx is the request's AbortSignal. Cancelling it before the grant aborts
// the request: Request returns an error matching ErrAborted and ctx's cause
// (context.Cause), and fn does not run. If ctx is done by the time the
// grant reaches Request, the abort wins: fn does not run, the lock is
// released at once, and Request returns the same AbortError.
//
// The ctx given to fn is the lock's context (Lock.Context): it is
// cancelled when ctx is, or when the lock is lost, with cause ErrStolen or
// ErrSessionLost. A lock lost while fn ran is the spec's rejected released
// promise: Request returns an error matching ErrAborted and the cause,
// even when fn returned nil (joined with fn's error when it did not).
//
// A nil fn or an unknown Mode is ErrInvalid, and nothing is sent.
func (c *Client) Request(ctx context.Context, name string, opts Options, fn func(ctx context.Context, l *Lock) error) (err error) {
	if fn == nil {
		return &Error{Name: "TypeError", Code: codes.InvalidArgument, Reason: pb.ErrorReason_INVALID, Message: fmt.Sprintf("request for %q has a nil callback", name)}
	}
	l, err := c.acquire(ctx, ctx, name, opts)
	if errors.Is(err, errNotAvailable) {
		return fn(ctx, nil)
	}
	if err != nil {
		return err
	}
	defer func() {
		lost := l.lostCause() // before the release, which ends the lock
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		rerr := l.Release(rctx)
		if lost == nil {
			lost = l.lostCause() // stolen, as the release found out
		}
		if p := recover(); p != nil {
			panic(p)
		}
		switch {
		case lost != nil && err == nil:
			err = lost
		case lost != nil && !errors.Is(err, lost):
			err = errors.Join(err, lost)
		case err == nil && rerr != nil:
			err = fmt.Errorf("releasing lock %q: %w", name, rerr)
		}
	}()
	return fn(l.Context(), l)
}

// Acquire waits for the lock and returns it; the caller must Release it.
// With IfAvailable it returns ErrNotAvailable if the lock cannot be granted
// at once. The Lock's context is independent of ctx, which only bounds the
// wait: cancelling it before the grant aborts the request, and if ctx is
// done by the time the grant arrives the lock is released at once and
// Acquire returns an error matching ErrAborted, never a lock.
func (c *Client) Acquire(ctx context.Context, name string, opts Options) (*Lock, error) {
	return c.acquire(ctx, context.Background(), name, opts)
}

func aborted(cause error) error {
	if errors.Is(cause, ErrAborted) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrAborted, cause)
}

func (c *Client) acquire(ctx, parent context.Context, name string, opts Options) (*Lock, error) {
	if opts.Mode != Exclusive && opts.Mode != Shared { // a TypeError at the IDL boundary
		return nil, &Error{Name: "TypeError", Code: codes.InvalidArgument, Reason: pb.ErrorReason_INVALID, Message: fmt.Sprintf("mode %s of request for %q is neither Exclusive nor Shared", opts.Mode, name)}
	}
	if err := checkMaxHolders(name, opts); err != nil {
		return nil, err
	}
	if ctx.Err() != nil { // spec §3.2.1 step 9: nothing is sent
		return nil, aborted(context.Cause(ctx))
	}
	names := append([]string{name}, opts.Scope...)
	for _, n := range names {
		if !utf8.ValidString(n) {
			// Protobuf strings must be UTF-8: say so before gRPC does.
			return nil, &Error{Name: "TypeError", Code: codes.InvalidArgument, Reason: pb.ErrorReason_INVALID, Message: fmt.Sprintf("name %q is not valid UTF-8", n)}
		}
	}
	mode := pb.Mode_MODE_EXCLUSIVE
	if opts.Mode == Shared {
		mode = pb.Mode_MODE_SHARED
	}
	s, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	r := s.newRequest(parent, names, opts.Mode)
	req := &pb.LockRequest{Namespace: c.cfg.namespace, SessionId: s.id, SessionSecret: s.secret, RequestId: r.id, Names: names, Mode: mode,
		IfAvailable: opts.IfAvailable, Steal: opts.Steal,
		// A Go request always has a context, its AbortSignal; requests that
		// never wait (ifAvailable, steal) have nothing to abort.
		Signal: !opts.IfAvailable && !opts.Steal, MaxHolders: uint32(opts.MaxHolders)}
	var resp *pb.LockResponse
	err = c.call(ctx, func(ctx context.Context, lc pb.LocksClient) error {
		req.AckBelow = s.ackBelow()
		var err error
		resp, err = lc.Request(ctx, req)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			// The request may have reached the cluster: abort it.
			return nil, s.abort(ctx, r)
		}
		if !final(err) && !errors.Is(err, ErrLimit) {
			// An error that says nothing of the request (a node's own
			// timeout, an internal error): the cluster may have applied
			// it, and a grant nobody waits for would stay held as long as
			// the session lives. Abort it in the background, as a request
			// whose caller gave up; if it was granted, that releases it.
			s.mu.Lock()
			r.abandoned = true
			s.mu.Unlock()
			go s.abortAbandoned(r, "the request failed: "+err.Error())
			return nil, err
		}
		s.forget(r)
		s.endIfNotOpen(err)
		return nil, err
	}
	c.seen(resp.Index)
	s.mu.Lock()
	r.known = max(r.known, resp.Index)
	if resp.Status == pb.Status_STATUS_GRANTED {
		r.grantRecords, r.recordsKnown = recordsOf(resp.Records), true
	}
	s.apply(r, resp.Status, resp.Token, resp.AcquiredAt.AsTime(), resp.Cause, resp.Reason)
	s.mu.Unlock()
	if resp.Status == pb.Status_STATUS_QUEUED && opts.OnQueued != nil {
		opts.OnQueued()
	}
	select {
	case o := <-r.done:
		// The grant runs the caller's code only if ctx is still live now:
		// an abort that raced the grant wins, whichever select case Go
		// picked (spec: the abort steps; SPEC §6).
		if ctx.Err() != nil {
			switch {
			case o.err == nil: // granted: released at once by the abort
				return nil, s.abort(ctx, r)
			case errors.Is(o.err, errNotAvailable): // nothing to undo
				return nil, aborted(context.Cause(ctx))
			}
		}
		l, err := s.result(r, o)
		if err == nil {
			if err := c.grantRecords(ctx, l); err != nil {
				return nil, err
			}
		}
		return l, err
	case <-ctx.Done():
		return nil, s.abort(ctx, r)
	}
}

func (s *clientSession) result(r *request, o outcome) (*Lock, error) {
	if o.err == nil {
		return r.lock, nil
	}
	if errors.Is(o.err, errNotAvailable) {
		return nil, o.err
	}
	return nil, aborted(o.err)
}

// abort aborts r after its caller's ctx ended. If the grant won the race
// the cluster releases the lock; either way the caller gets an AbortError
// with ctx's cause.
func (s *clientSession) abort(ctx context.Context, r *request) error {
	cause := context.Cause(ctx)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.c.call(actx, func(actx context.Context, lc pb.LocksClient) error {
		resp, err := lc.Abort(actx, &pb.AbortRequest{Namespace: s.c.cfg.namespace, SessionId: s.id, RequestId: r.id, Reason: cause.Error(), AckBelow: s.ackBelow(), SessionSecret: s.secret})
		if err == nil {
			s.c.seen(resp.Index)
		}
		return err
	})
	s.endIfNotOpen(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && !errors.Is(err, ErrSessionClosed) {
		// Undelivered: if the lock is granted later, release it at once,
		// and keep delivering the abort in the background.
		r.abandoned = true
		if r.lock != nil && r.lock.lost == nil {
			go r.lock.Release(context.Background())
		}
		go s.abortAbandoned(r, cause.Error())
		return aborted(cause)
	}
	if r.lock != nil && r.lock.lost == nil {
		r.lock.lost = aborted(cause)
		r.lock.cancel(r.lock.lost)
	}
	r.resolved = true
	delete(s.reqs, r.id)
	return aborted(cause)
}

// abortAbandoned delivers the abort of a request whose caller gave up
// after the first attempt failed, retrying (persist.go) until the cluster
// answers it or the session ends. The request may have been granted at
// once by an entry whose reply was lost: no event repeats such a grant
// (the reply carries it), so without the abort the lock would stay held
// until the session ends.
func (s *clientSession) abortAbandoned(r *request, reason string) {
	err := s.persist(func(ctx context.Context, lc pb.LocksClient) error {
		resp, err := lc.Abort(ctx, &pb.AbortRequest{Namespace: s.c.cfg.namespace, SessionId: s.id, RequestId: r.id, Reason: reason, AckBelow: s.ackBelow(), SessionSecret: s.secret})
		if err == nil {
			s.c.seen(resp.Index)
		}
		return err
	})
	if err == nil {
		s.forget(r)
	}
	s.endIfNotOpen(err)
}

// endIfNotOpen ends the session here when the cluster answered that it is
// not open (expired or closed there): no request can succeed in it any
// more, and the next call opens a new session instead of failing in this
// one until the stream or jeopardy notices (docs/chaos.md, finding 4).
func (s *clientSession) endIfNotOpen(err error) {
	var e *Error
	if errors.As(err, &e) && e.Reason == pb.ErrorReason_SESSION_CLOSED {
		s.end(fmt.Errorf("%w: the cluster answered: %s", ErrSessionLost, e.Message))
	}
}

// LockInfo is one entry of a Query: the spec's LockInfo (name, mode,
// clientId) and the cluster's extras.
type LockInfo struct {
	Name        string    `json:"name"`
	Mode        string    `json:"mode"`
	ClientID    string    `json:"clientId"`
	Label       string    `json:"label,omitempty"`
	SessionID   uint64    `json:"sessionId"`
	RequestID   uint64    `json:"requestId"`
	Token       uint64    `json:"token,omitempty"`
	AcquiredAt  time.Time `json:"acquiredAt,omitzero"`
	RequestedAt time.Time `json:"requestedAt,omitzero"`
	// MaxHolders is a shared request's semaphore size (0: unlimited).
	MaxHolders int `json:"maxHolders,omitempty"`
}

// Snapshot is the spec's LockManagerSnapshot, with the records of the
// names it shows.
type Snapshot struct {
	Held    []LockInfo `json:"held"`
	Pending []LockInfo `json:"pending"`
	// Records are the records of the names held or pending, by name.
	Records []Record `json:"records,omitempty"`
}

// Query returns a linearizable snapshot of the namespace's held and pending
// locks: held in grant order, pending queue by queue. It reads the
// snapshot in pages (QueryPages), so that a namespace of any size gets
// through; from a node that does not have QueryPages (an older version)
// it reads it in one message.
//
// On a closed Client it fails with an error matching ErrSessionClosed, as
// Acquire and Request do.
func (c *Client) Query(ctx context.Context) (Snapshot, error) {
	if err := c.closedErr(); err != nil {
		return Snapshot{}, err
	}
	var resp *pb.QueryResponse
	err := c.call(ctx, func(ctx context.Context, lc pb.LocksClient) error {
		var err error
		resp, err = queryPages(ctx, lc, &pb.QueryRequest{Namespace: c.cfg.namespace})
		if status.Code(err) == codes.Unimplemented {
			resp, err = lc.Query(ctx, &pb.QueryRequest{Namespace: c.cfg.namespace})
		}
		return err
	})
	if err != nil {
		return Snapshot{}, err
	}
	c.seen(resp.Index)
	return Snapshot{Held: lockInfos(resp.Held), Pending: lockInfos(resp.Pending), Records: recordsOf(resp.Records)}, nil
}

func lockInfos(in []*pb.LockInfo) []LockInfo {
	out := make([]LockInfo, len(in))
	for i, l := range in {
		out[i] = LockInfo{Name: l.Name, Mode: Mode(l.Mode).String(), ClientID: l.ClientId, Label: l.Label, SessionID: l.SessionId,
			RequestID: l.RequestId, Token: l.Token, MaxHolders: int(l.MaxHolders)}
		if l.AcquiredAt != nil {
			out[i].AcquiredAt = l.AcquiredAt.AsTime()
		}
		if l.RequestedAt != nil {
			out[i].RequestedAt = l.RequestedAt.AsTime()
		}
	}
	return out
}

// queryPages reads a QueryPages stream to its end and puts the pages
// together: one QueryResponse, as Query would have answered.
func queryPages(ctx context.Context, lc pb.LocksClient, req *pb.QueryRequest) (*pb.QueryResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := lc.QueryPages(ctx, req)
	if err != nil {
		return nil, err
	}
	var whole *pb.QueryResponse
	for {
		p, err := st.Recv()
		switch {
		case errors.Is(err, io.EOF) && whole != nil:
			return whole, nil
		case errors.Is(err, io.EOF):
			return nil, status.Error(codes.Unavailable, "lockcluster: the query's stream ended without a page")
		case err != nil:
			return nil, err
		case whole == nil:
			whole = p
		case p.Index != whole.Index:
			return nil, status.Errorf(codes.Internal, "lockcluster: the query's pages disagree on their index (%d, then %d)", whole.Index, p.Index)
		default:
			whole.Held = append(whole.Held, p.Held...)
			whole.Pending = append(whole.Pending, p.Pending...)
			whole.Records = append(whole.Records, p.Records...)
		}
	}
}

// SessionID is the id of the client's current session (0 if it has none).
func (c *Client) SessionID() uint64 {
	s, _ := c.live()
	if s == nil {
		return 0
	}
	return s.id
}

// ClientID is the client id of the client's current session, as Query
// shows it in LockInfo.ClientID ("" if it has no session). A new session
// (after the last one was lost) has a new client id.
func (c *Client) ClientID() string {
	s, _ := c.live()
	if s == nil {
		return ""
	}
	return s.clientID
}
