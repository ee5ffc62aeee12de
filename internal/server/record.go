package server

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/logsafe"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// Records (SPEC §12): a name's data, written by the session that holds it
// exclusively, fenced by the grant's token. A write goes the way of a
// release (locks.go's write: the gate with the session's secret, the
// leader, forwarding); whether the writer still holds the name is decided
// when the entry is applied, so a holder that lost its lock meanwhile is
// refused NOT_HOLDER with the name's current token, and nothing changes.
// A read is linearizable as Query is.

// SetRecord writes or deletes a record, releasing the lock in the same
// entry when asked.
func (s *Server) SetRecord(ctx context.Context, req *pb.SetRecordRequest) (*pb.SetRecordResponse, error) {
	start := s.cfg.Now()
	cmd := &fsm.SetRecord{Session: req.SessionId, Namespace: req.Namespace, RequestID: req.RequestId, Token: req.Token,
		Name: req.Name, Value: req.Value, Delete: req.Delete, Release: req.Release, AckBelow: req.AckBelow}
	ap, idx, fwd, err := write(s, ctx, cmd, req.SessionSecret, func(ctx context.Context, c pb.LocksClient) (*pb.SetRecordResponse, error) {
		return c.SetRecord(ctx, req)
	})
	if err != nil || fwd != nil {
		return deref(fwd), err
	}
	if req.Release {
		s.cfg.Observer.Freed(start, ap)
	}
	r := ap.Result
	st := statusToPB[r.Status]
	if st == pb.Status_STATUS_UNSPECIFIED {
		st = pb.Status_STATUS_GRANTED
		if req.Release {
			st = pb.Status_STATUS_RELEASED
		}
	}
	resp := &pb.SetRecordResponse{Status: st, Duplicate: r.Duplicate, Index: idx}
	if r.Record != nil {
		resp.Record = recordToPB(*r.Record)
	}
	return resp, nil
}

// GetRecord reads a name's record linearizably: the leader confirms its
// leadership and applies everything committed before the call, then
// reads; a follower forwards the call to it, as Query.
func (s *Server) GetRecord(ctx context.Context, req *pb.GetRecordRequest) (*pb.GetRecordResponse, error) {
	if err := s.m.Limits().Check(&fsm.CloseSession{Namespace: req.Namespace}); err != nil {
		return nil, toStatus(err)
	}
	if err := s.checkReadName("name", req.Name); err != nil {
		return nil, err
	}
	node := s.replica()
	if node == nil {
		return nil, toStatus(s.notLeader())
	}
	if err := node.ReadBarrier(ctx); err != nil {
		r, ferr := forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.GetRecordResponse, error) {
			return pb.NewLocksClient(cc).GetRecord(ctx, req)
		})
		if status.Code(ferr) != codes.Unimplemented {
			return r, ferr
		}
		// A leader of the release before records (a rolling upgrade):
		// read here at the index of a linearizable read there.
		if ferr = s.readAtLeaderIndex(ctx, err, req.Namespace, true); ferr != nil {
			return nil, ferr
		}
	}
	if err := s.owns(req.Namespace, 0); err != nil { // "moving", not empty (groups.go)
		return nil, toStatus(err)
	}
	rec, idx, ok := s.m.Record(req.Namespace, req.Name)
	resp := &pb.GetRecordResponse{Index: idx}
	if ok {
		resp.Record = recordToPB(rec)
	}
	return resp, nil
}

// readAtLeaderIndex makes a read on this follower linearizable: it asks
// the leader that notLeader names for the index of a linearizable read of
// namespace ns there (GetRecord's answer; a leader of the release before
// records answers Query instead, unless queryOnly says it already failed
// GetRecord), and waits until this node has applied it.
func (s *Server) readAtLeaderIndex(ctx context.Context, notLeader error, ns string, queryOnly bool) error {
	var index uint64
	var err error = status.Error(codes.Unimplemented, "")
	if !queryOnly {
		var r *pb.GetRecordResponse
		r, err = forward(s, ctx, notLeader, func(ctx context.Context, cc *grpc.ClientConn) (*pb.GetRecordResponse, error) {
			return pb.NewLocksClient(cc).GetRecord(ctx, &pb.GetRecordRequest{Namespace: ns})
		})
		index = r.GetIndex()
	}
	if status.Code(err) == codes.Unimplemented {
		var q *pb.QueryResponse
		q, err = forward(s, ctx, notLeader, func(ctx context.Context, cc *grpc.ClientConn) (*pb.QueryResponse, error) {
			return pb.NewLocksClient(cc).Query(ctx, &pb.QueryRequest{Namespace: ns}, grpc.MaxCallRecvMsgSize(math.MaxInt32))
		})
		index = q.GetIndex()
	}
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, attachWait)
	defer cancel()
	if err := s.hub.waitLogical(wctx, index); err != nil { // a response's index: logical
		return toStatus(fmt.Errorf("%w: node %s has not yet applied index %d that the leader has", rpcerr.ErrNotReady, s.cfg.Self.ID, index))
	}
	return nil
}

// checkReadName checks a name a read names (GetRecord's, a watch's
// prefix or list): valid UTF-8 within the name limit. field names the
// message field in the error.
func (s *Server) checkReadName(field, name string) error {
	if !utf8.ValidString(name) {
		return invalidField(field, fmt.Sprintf("%s %s is not valid UTF-8", field, strconv.Quote(logsafe.String(name))))
	}
	if max := s.m.Limits().MaxNameBytes; max > 0 && int64(len(name)) > max {
		return toStatus(&fsm.Error{Code: fsm.CodeLimit, Msg: fmt.Sprintf("%s %s is %d bytes, over the name limit of %d", field, strconv.Quote(logsafe.String(name)), len(name), max)})
	}
	return nil
}
