package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// write passes cmd through the gate (admit.go: limits, the session's
// secret, certain refusals, rates), proposes it once however many copies
// arrive together, and, when this node is not the leader or cannot decide,
// forwards the call instead. Bad input never reaches the log.
func write[T any](s *Server, ctx context.Context, cmd fsm.Command, secret []byte, fwd func(context.Context, pb.LocksClient) (T, error)) (fsm.Applied, uint64, *T, error) {
	err := s.admit(ctx, cmd, secret)
	var ap fsm.Applied
	var idx uint64
	if err == nil {
		ap, idx, err = s.proposeOnce(ctx, cmd)
	}
	if status.Code(err) == codes.ResourceExhausted {
		s.pace(ctx, namespaceOf(cmd))
	}
	if err != nil {
		r, ferr := forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (T, error) {
			return fwd(ctx, pb.NewLocksClient(cc))
		})
		if ferr != nil {
			return fsm.Applied{}, 0, nil, ferr
		}
		return fsm.Applied{}, 0, &r, nil
	}
	if ap.Result.Err != nil {
		return fsm.Applied{}, 0, nil, toStatus(ap.Result.Err)
	}
	return ap, idx, nil, nil
}

func (s *Server) OpenSession(ctx context.Context, req *pb.OpenSessionRequest) (*pb.OpenSessionResponse, error) {
	ttl := s.cfg.DefaultTTL
	if req.Ttl != nil {
		if err := req.Ttl.CheckValid(); err != nil {
			return nil, invalid("ttl: " + err.Error())
		}
		ttl = req.Ttl.AsDuration()
	}
	// The spec's clientId is a UUID; the leader stamps it into the entry.
	// The secret goes back to the caller only; the log keeps its hash.
	secret := newSecret()
	cmd := &fsm.OpenSession{Namespace: req.Namespace, Label: req.Label, TTL: int64(ttl), ClientID: newClientID(), SecretHash: fsm.HashSecret(secret)}
	ap, idx, fwd, err := write(s, ctx, cmd, nil, func(ctx context.Context, c pb.LocksClient) (*pb.OpenSessionResponse, error) {
		return c.OpenSession(ctx, req)
	})
	if err != nil || fwd != nil {
		return deref(fwd), err
	}
	return &pb.OpenSessionResponse{SessionId: ap.Result.Session, ClientId: ap.Result.ClientID, Ttl: durationpb.New(ttl), Index: idx, Secret: secret}, nil
}

func (s *Server) CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	start := s.cfg.Now()
	cmd := &fsm.CloseSession{Session: req.SessionId, Namespace: req.Namespace}
	ap, idx, fwd, err := write(s, ctx, cmd, req.SessionSecret, func(ctx context.Context, c pb.LocksClient) (*pb.CloseSessionResponse, error) {
		return c.CloseSession(ctx, req)
	})
	if err != nil || fwd != nil {
		return deref(fwd), err
	}
	s.cfg.Observer.Freed(start, ap)
	return &pb.CloseSessionResponse{Index: idx}, nil
}

func (s *Server) Request(ctx context.Context, req *pb.LockRequest) (*pb.LockResponse, error) {
	start := s.cfg.Now()
	mode, err := modeFromPB(req.Mode)
	if err != nil {
		return nil, err
	}
	if resp, ok := s.brokenGrant(req); ok { // only in the jepsenbroken test build (broken_on.go)
		return resp, nil
	}
	cmd := &fsm.Request{Session: req.SessionId, Namespace: req.Namespace, RequestID: req.RequestId, Names: req.Names, Mode: mode,
		IfAvailable: req.IfAvailable, Steal: req.Steal, Signal: req.Signal, AckBelow: req.AckBelow, MaxHolders: req.MaxHolders}
	ap, idx, fwd, err := write(s, ctx, cmd, req.SessionSecret, func(ctx context.Context, c pb.LocksClient) (*pb.LockResponse, error) {
		return c.Request(ctx, req)
	})
	if err != nil || fwd != nil {
		return deref(fwd), err
	}
	r := ap.Result
	s.cfg.Observer.Requested(req.Namespace, req.SessionId, req.RequestId, start, r)
	return &pb.LockResponse{Status: statusToPB[r.Status], Token: r.Token, AcquiredAt: ts(r.AcquiredAt), Duplicate: r.Duplicate,
		Index: idx, Cause: causeToPB[r.Cause], Reason: r.Reason, Records: recordsToPB(r.Records)}, nil
}

func (s *Server) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	start := s.cfg.Now()
	cmd := &fsm.Release{Session: req.SessionId, Namespace: req.Namespace, RequestID: req.RequestId, Token: req.Token, AckBelow: req.AckBelow}
	ap, idx, fwd, err := write(s, ctx, cmd, req.SessionSecret, func(ctx context.Context, c pb.LocksClient) (*pb.ReleaseResponse, error) {
		return c.Release(ctx, req)
	})
	if err != nil || fwd != nil {
		return deref(fwd), err
	}
	s.cfg.Observer.Freed(start, ap)
	r := ap.Result
	return &pb.ReleaseResponse{Status: statusToPB[r.Status], Token: r.Token, Duplicate: r.Duplicate, Index: idx}, nil
}

func (s *Server) Abort(ctx context.Context, req *pb.AbortRequest) (*pb.AbortResponse, error) {
	start := s.cfg.Now()
	cmd := &fsm.Abort{Session: req.SessionId, Namespace: req.Namespace, RequestID: req.RequestId, Reason: req.Reason, AckBelow: req.AckBelow}
	ap, idx, fwd, err := write(s, ctx, cmd, req.SessionSecret, func(ctx context.Context, c pb.LocksClient) (*pb.AbortResponse, error) {
		return c.Abort(ctx, req)
	})
	if err != nil || fwd != nil {
		return deref(fwd), err
	}
	s.cfg.Observer.Freed(start, ap)
	r := ap.Result
	return &pb.AbortResponse{Status: statusToPB[r.Status], Token: r.Token, Cause: causeToPB[r.Cause], Reason: r.Reason, Duplicate: r.Duplicate, Index: idx}, nil
}

// Query is linearizable: the leader confirms its leadership and applies
// everything committed before the call, then reads. The answer is one
// message however large (QueryPages sends it in pages: pages.go); a
// follower takes the leader's answer whatever its size, so that a client
// that raised its own receive limit gets it through any node.
func (s *Server) Query(ctx context.Context, req *pb.QueryRequest) (*pb.QueryResponse, error) {
	if err := s.m.Limits().Check(&fsm.CloseSession{Namespace: req.Namespace}); err != nil {
		return nil, toStatus(err)
	}
	node := s.replica()
	if node == nil {
		return nil, toStatus(s.notLeader())
	}
	if err := node.ReadBarrier(ctx); err != nil {
		return forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.QueryResponse, error) {
			return pb.NewLocksClient(cc).Query(ctx, req, grpc.MaxCallRecvMsgSize(math.MaxInt32))
		})
	}
	if err := s.owns(req.Namespace, 0); err != nil { // "moving", not empty (groups.go)
		return nil, toStatus(err)
	}
	return s.query(req.Namespace), nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// newSecret returns a session secret: 256 random bits.
func newSecret() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// newClientID returns a random (version 4) UUID.
func newClientID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
