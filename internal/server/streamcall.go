package server

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// Requests, releases, aborts and record writes may travel on the session's stream
// instead of as unary calls (StreamCall, answered by a CallReply): a lock
// and its release then cost no unary round trip each. A stream call runs
// the same handler as the unary call, through the same interceptors
// (the audit log, and Config.CallInterceptor: metrics, auth, fence), with the stream's
// context, so its credentials, forwarding and answers are the unary
// call's.

// maxStreamCalls bounds the calls one stream may have in flight: past it a
// call is refused (LIMIT) at once, as a flood of unary calls would be.
const maxStreamCalls = 1024

type streamCalls struct{ inFlight atomic.Int64 }

// start runs call in its own goroutine and sends its reply to out.
func (c *streamCalls) start(ctx context.Context, s *Server, at *pb.Attach, call *pb.StreamCall, out chan<- *pb.SessionDown) {
	if c.inFlight.Add(1) > maxStreamCalls {
		c.inFlight.Add(-1)
		s.reply(ctx, out, callReply(call.Id, nil, toStatus(&fsm.Error{Code: fsm.CodeLimit,
			Msg: fmt.Sprintf("session %d has %d calls in flight on its stream: wait for their answers", at.SessionId, maxStreamCalls)})))
		return
	}
	go func() {
		defer c.inFlight.Add(-1)
		resp, err := s.streamCall(ctx, at, call)
		s.reply(ctx, out, callReply(call.Id, resp, err))
	}()
}

func (s *Server) reply(ctx context.Context, out chan<- *pb.SessionDown, r *pb.CallReply) {
	select {
	case out <- &pb.SessionDown{Kind: &pb.SessionDown_Reply{Reply: r}}:
	case <-ctx.Done():
	}
}

// streamCall runs one call of the stream's session through the unary
// interceptors and handler.
func (s *Server) streamCall(ctx context.Context, at *pb.Attach, call *pb.StreamCall) (any, error) {
	var (
		req    any
		ns     string
		id     uint64
		method string
		h      grpc.UnaryHandler
	)
	switch c := call.Call.(type) {
	case *pb.StreamCall_Request:
		req, ns, id, method = c.Request, c.Request.GetNamespace(), c.Request.GetSessionId(), pb.Locks_Request_FullMethodName
		h = func(ctx context.Context, req any) (any, error) { return s.Request(ctx, req.(*pb.LockRequest)) }
	case *pb.StreamCall_Release:
		req, ns, id, method = c.Release, c.Release.GetNamespace(), c.Release.GetSessionId(), pb.Locks_Release_FullMethodName
		h = func(ctx context.Context, req any) (any, error) { return s.Release(ctx, req.(*pb.ReleaseRequest)) }
	case *pb.StreamCall_Abort:
		req, ns, id, method = c.Abort, c.Abort.GetNamespace(), c.Abort.GetSessionId(), pb.Locks_Abort_FullMethodName
		h = func(ctx context.Context, req any) (any, error) { return s.Abort(ctx, req.(*pb.AbortRequest)) }
	case *pb.StreamCall_SetRecord:
		req, ns, id, method = c.SetRecord, c.SetRecord.GetNamespace(), c.SetRecord.GetSessionId(), pb.Locks_SetRecord_FullMethodName
		h = func(ctx context.Context, req any) (any, error) { return s.SetRecord(ctx, req.(*pb.SetRecordRequest)) }
	default:
		return nil, invalidField("call", "a stream call carries a request, a release, an abort or a record write")
	}
	if ns != at.Namespace || id != at.SessionId {
		// The stream's credentials were checked for the attach's
		// namespace: a call may act only for the stream's own session.
		return nil, invalidField("call", fmt.Sprintf("a stream call must be of the stream's session %d in namespace %q, not session %d in %q", at.SessionId, at.Namespace, id, ns))
	}
	info := &grpc.UnaryServerInfo{Server: s, FullMethod: method}
	// The audit log sees the call as it would the unary one (a steal on a
	// stream is audited); auth cannot refuse it there, having let the
	// attach in for the same namespace.
	audited := func(ctx context.Context, req any) (any, error) { return s.callAudit.unary(ctx, req, info, h) }
	if ic := s.cfg.CallInterceptor; ic != nil {
		return ic(ctx, req, info, audited)
	}
	return audited(ctx, req)
}

// callReply is the CallReply of call id: resp, or err as a CallError.
func callReply(id uint64, resp any, err error) *pb.CallReply {
	r := &pb.CallReply{Id: id}
	switch v := resp.(type) {
	case *pb.LockResponse:
		r.Reply = &pb.CallReply_Request{Request: v}
	case *pb.ReleaseResponse:
		r.Reply = &pb.CallReply_Release{Release: v}
	case *pb.AbortResponse:
		r.Reply = &pb.CallReply_Abort{Abort: v}
	case *pb.SetRecordResponse:
		r.Reply = &pb.CallReply_SetRecord{SetRecord: v}
	}
	if err != nil || r.Reply == nil {
		if err == nil {
			err = status.Errorf(codes.Internal, "call %d: no response", id)
		}
		r.Reply = &pb.CallReply_Error{Error: callError(err)}
	}
	return r
}

// callError carries a status error as the unary call would have had it.
func callError(err error) *pb.CallError {
	st := status.Convert(toStatus(err))
	e := &pb.CallError{Code: int32(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			e.Reason = pb.ErrorReason(pb.ErrorReason_value[info.Reason])
			e.Metadata = info.Metadata
		}
	}
	return e
}
