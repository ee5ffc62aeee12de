package lockcluster

import (
	"context"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// When the node a session stream is attached to takes calls (its Synced
// says so), the session's requests, releases, aborts and record writes travel on that
// stream (StreamCall, answered by a CallReply of the same id) instead of
// as unary calls: a lock and its release cost no round trip of their own.
// Everything else, and every call when the stream is down or on another
// endpoint, stays unary. A stream that ends with calls waiting fails them
// as Unavailable: Client.call retries them, and the request ids make the
// retry safe, as for a unary call whose answer was lost.

// caller is one session stream's side of its calls.
type caller struct {
	st       pb.Locks_SessionClient
	session  uint64
	endpoint int
	sendMu   sync.Mutex // a gRPC stream's Send is not safe for concurrent use

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan *pb.CallReply
	err     error         // why the stream ended
	done    chan struct{} // closed when it ended
}

func newCaller(st pb.Locks_SessionClient, session uint64, endpoint int) *caller {
	return &caller{st: st, session: session, endpoint: endpoint, waiting: map[uint64]chan *pb.CallReply{}, done: make(chan struct{})}
}

func (k *caller) send(m *pb.SessionUp) error {
	k.sendMu.Lock()
	defer k.sendMu.Unlock()
	return k.st.Send(m)
}

// do sends call on the stream and waits for its reply.
func (k *caller) do(ctx context.Context, call *pb.StreamCall) (*pb.CallReply, error) {
	ch := make(chan *pb.CallReply, 1)
	k.mu.Lock()
	if k.err != nil {
		k.mu.Unlock()
		return nil, k.err
	}
	k.next++
	call.Id = k.next
	k.waiting[call.Id] = ch
	k.mu.Unlock()
	forget := func() {
		k.mu.Lock()
		delete(k.waiting, call.Id)
		k.mu.Unlock()
	}
	if err := k.send(&pb.SessionUp{Kind: &pb.SessionUp_Call{Call: call}}); err != nil {
		forget()
		return nil, status.Errorf(codes.Unavailable, "the session stream failed to send the call: %v", err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		forget()
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-k.done:
		return nil, k.err
	}
}

// deliver hands a reply to its waiting call (none: it gave up).
func (k *caller) deliver(r *pb.CallReply) {
	k.mu.Lock()
	ch := k.waiting[r.Id]
	delete(k.waiting, r.Id)
	k.mu.Unlock()
	if ch != nil {
		ch <- r
	}
}

// end fails every call waiting on the stream, and every later one.
func (k *caller) end(cause error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		k.err = status.Errorf(codes.Unavailable, "the session stream ended before the call was answered (retried with the same request id): %v", cause)
		close(k.done)
	}
}

// replyErr is a CallReply's error as the unary call would have returned it.
func replyErr(e *pb.CallError) error {
	st := status.New(codes.Code(e.Code), e.Message)
	if e.Reason != pb.ErrorReason_ERROR_REASON_UNSPECIFIED {
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: e.Reason.String(), Domain: "lockcluster.v1", Metadata: e.Metadata}); err == nil {
			st = d
		}
	}
	return st.Err()
}

// streamLocks is a LocksClient whose Request, Release, Abort and SetRecord of the
// caller's session go on its stream; everything else is unary.
type streamLocks struct {
	pb.LocksClient
	k *caller
}

func (l streamLocks) Request(ctx context.Context, in *pb.LockRequest, opts ...grpc.CallOption) (*pb.LockResponse, error) {
	if in.SessionId != l.k.session {
		return l.LocksClient.Request(ctx, in, opts...)
	}
	r, err := l.k.do(ctx, &pb.StreamCall{Call: &pb.StreamCall_Request{Request: in}})
	return replyOf(r, err, (*pb.CallReply).GetRequest)
}

func (l streamLocks) Release(ctx context.Context, in *pb.ReleaseRequest, opts ...grpc.CallOption) (*pb.ReleaseResponse, error) {
	if in.SessionId != l.k.session {
		return l.LocksClient.Release(ctx, in, opts...)
	}
	r, err := l.k.do(ctx, &pb.StreamCall{Call: &pb.StreamCall_Release{Release: in}})
	return replyOf(r, err, (*pb.CallReply).GetRelease)
}

func (l streamLocks) Abort(ctx context.Context, in *pb.AbortRequest, opts ...grpc.CallOption) (*pb.AbortResponse, error) {
	if in.SessionId != l.k.session {
		return l.LocksClient.Abort(ctx, in, opts...)
	}
	r, err := l.k.do(ctx, &pb.StreamCall{Call: &pb.StreamCall_Abort{Abort: in}})
	return replyOf(r, err, (*pb.CallReply).GetAbort)
}

func (l streamLocks) SetRecord(ctx context.Context, in *pb.SetRecordRequest, opts ...grpc.CallOption) (*pb.SetRecordResponse, error) {
	if in.SessionId != l.k.session {
		return l.LocksClient.SetRecord(ctx, in, opts...)
	}
	r, err := l.k.do(ctx, &pb.StreamCall{Call: &pb.StreamCall_SetRecord{SetRecord: in}})
	return replyOf(r, err, (*pb.CallReply).GetSetRecord)
}

func replyOf[T any](r *pb.CallReply, err error, get func(*pb.CallReply) *T) (*T, error) {
	if err != nil {
		return nil, err
	}
	if e := r.GetError(); e != nil {
		return nil, replyErr(e)
	}
	if v := get(r); v != nil {
		return v, nil
	}
	return nil, status.Errorf(codes.Internal, "call %d: the node answered with a reply of another kind", r.Id)
}

// locks is the LocksClient for endpoint i: on the session's stream when
// one is attached there and takes calls.
func (c *Client) locks(i int) pb.LocksClient {
	lc := pb.NewLocksClient(c.conns[i])
	if k := c.caller.Load(); k != nil && k.endpoint == i && !c.cfg.unaryWrites {
		return streamLocks{LocksClient: lc, k: k}
	}
	return lc
}
