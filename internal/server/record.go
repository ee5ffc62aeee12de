package server

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/logsafe"
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
		return forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.GetRecordResponse, error) {
			return pb.NewLocksClient(cc).GetRecord(ctx, req)
		})
	}
	rec, idx, ok := s.m.Record(req.Namespace, req.Name)
	resp := &pb.GetRecordResponse{Index: idx}
	if ok {
		resp.Record = recordToPB(rec)
	}
	return resp, nil
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
