package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// FuzzRPCValidation feeds arbitrary field values to every RPC of a node
// that has no Raft member (so nothing valid can be proposed): none may
// panic, invalid input must be refused with a client error before it
// reaches the log, and only input that passed validation may get as far as
// proposing (Unavailable here). Run longer with:
//
//	go test -run '^$' -fuzz FuzzRPCValidation -fuzztime 5m ./internal/server/
func FuzzRPCValidation(f *testing.F) {
	f.Add("default", uint64(1), uint64(1), "a", "b", uint8(0), uint8(0), int64(10e9), "reason")
	f.Add("", uint64(0), uint64(0), "-x", "", uint8(7), uint8(7), int64(-1), "")
	f.Add("ns", uint64(1<<63), uint64(1<<63), "\xff\xfe", "a", uint8(1), uint8(3), int64(1<<62), string(make([]byte, 300)))
	f.Add(string(make([]byte, 300)), uint64(5), uint64(9), string(make([]byte, 2000)), "x", uint8(1), uint8(1), int64(50e6), "r")
	s := New(Config{Machine: fsm.New(), Now: func() time.Time { return time.Unix(1, 0) }})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, ns string, session, id uint64, n1, n2 string, mode, flags uint8, ttl int64, reason string) {
		names := []string{n1}
		if n2 != "" {
			names = append(names, n2)
		}
		calls := []func() error{
			func() error {
				_, err := s.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: ns, Label: reason, Ttl: durationpb.New(time.Duration(ttl))})
				return err
			},
			func() error {
				_, err := s.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: session, RequestId: id, Names: names, Mode: pb.Mode(mode),
					IfAvailable: flags&1 != 0, Steal: flags&2 != 0, Signal: flags&4 != 0, AckBelow: id})
				return err
			},
			func() error {
				_, err := s.Release(ctx, &pb.ReleaseRequest{Namespace: ns, SessionId: session, RequestId: id, Token: uint64(ttl)})
				return err
			},
			func() error {
				_, err := s.Abort(ctx, &pb.AbortRequest{Namespace: ns, SessionId: session, RequestId: id, Reason: reason})
				return err
			},
			func() error {
				_, err := s.CloseSession(ctx, &pb.CloseSessionRequest{Namespace: ns, SessionId: session})
				return err
			},
			func() error {
				_, err := s.Query(ctx, &pb.QueryRequest{Namespace: ns})
				return err
			},
		}
		for i, call := range calls {
			err := call()
			switch status.Code(err) {
			case codes.InvalidArgument, codes.ResourceExhausted, codes.FailedPrecondition, codes.Unavailable:
			default:
				t.Fatalf("call %d: %v (code %s)", i, err, status.Code(err))
			}
		}
		if st := s.m.Stats(); st.LastIndex != 0 || st.Sessions != 0 {
			t.Fatalf("state changed without a log: %+v", st)
		}
	})
}
