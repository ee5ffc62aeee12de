package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Answers larger than one gRPC message. A session may hold 100,000
// requests of 64 names of 1 KiB, and a namespace as many sessions as it
// likes, while a client takes messages of 4 MiB by default: a session's
// sync on attach and a namespace's Query go in pieces of about pageBytes
// each, the sync to a client that says it assembles them
// (Attach.chunked_sync; to any other the sync goes whole, as before),
// Query's as QueryPages. A piece holds at least one request or lock, so a
// single one larger than pageBytes (limits raised far above the
// defaults) still goes, alone.

// pageBytes bounds the requests (or locks) of one piece; a variable for the
// tests.
var pageBytes = 1 << 20

// fieldSize is what m adds to a message as one element of a repeated field.
func fieldSize(m proto.Message) int {
	n := proto.Size(m)
	return 1 + protowire.SizeVarint(uint64(n)) + n // tag (field numbers < 16), length, bytes
}

// sendSynced sends a session's sync: in one Synced message, or, when the
// client said it assembles them (chunked), in pieces of about pageBytes of
// requests, each with the sync's index, event seq, TTL and calls, every
// one but the last with more set.
func sendSynced(stream sendStream[pb.SessionDown], synced *pb.Synced, chunked bool) error {
	send := func(m *pb.Synced) error {
		return stream.Send(&pb.SessionDown{Kind: &pb.SessionDown_Synced{Synced: m}})
	}
	if !chunked {
		return send(synced)
	}
	reqs := synced.Requests
	for {
		n, size := 0, 0
		for n < len(reqs) {
			sz := fieldSize(reqs[n])
			if n > 0 && size+sz > pageBytes {
				break
			}
			size += sz
			n++
		}
		piece := &pb.Synced{Index: synced.Index, EventSeq: synced.EventSeq, Ttl: synced.Ttl, Calls: synced.Calls,
			Requests: reqs[:n:n], More: n < len(reqs)}
		if err := send(piece); err != nil {
			return err
		}
		if reqs = reqs[n:]; len(reqs) == 0 {
			return nil
		}
	}
}

// query reads namespace ns's locks from this node's applied state, at the
// (logical) index it has applied.
func (s *Server) query(ns string) *pb.QueryResponse {
	idx := s.m.LastLogical()
	q := s.m.Query(ns)
	out := &pb.QueryResponse{Index: idx, Held: make([]*pb.LockInfo, len(q.Held)), Pending: make([]*pb.LockInfo, len(q.Pending))}
	for i, l := range q.Held {
		out.Held[i] = lockInfoToPB(l)
	}
	for i, l := range q.Pending {
		out.Pending[i] = lockInfoToPB(l)
	}
	out.Records = recordsToPB(q.Records)
	return out
}

// queryPages splits a Query answer into pages of about pageBytes of locks
// and records, held ones first, then pending ones, then the records, each
// page with the answer's index. There is always at least one page.
func queryPages(q *pb.QueryResponse) []*pb.QueryResponse {
	pages := []*pb.QueryResponse{{Index: q.Index}}
	size := 0
	page := func(sz int) *pb.QueryResponse {
		p := pages[len(pages)-1]
		if size > 0 && size+sz > pageBytes {
			p = &pb.QueryResponse{Index: q.Index}
			pages, size = append(pages, p), 0
		}
		size += sz
		return p
	}
	for _, l := range q.Held {
		p := page(fieldSize(l))
		p.Held = append(p.Held, l)
	}
	for _, l := range q.Pending {
		p := page(fieldSize(l))
		p.Pending = append(p.Pending, l)
	}
	for _, r := range q.Records {
		p := page(fieldSize(r))
		p.Records = append(p.Records, r)
	}
	return pages
}

// QueryPages is Query in pages: the leader confirms its leadership,
// applies everything committed before the call and reads the namespace
// once, then sends the answer page by page. A follower relays the
// leader's stream.
func (s *Server) QueryPages(req *pb.QueryRequest, stream grpc.ServerStreamingServer[pb.QueryResponse]) error {
	ctx := stream.Context()
	if err := s.m.Limits().Check(&fsm.CloseSession{Namespace: req.Namespace}); err != nil {
		return toStatus(err)
	}
	node := s.replica()
	if node == nil {
		return toStatus(fmt.Errorf("%w: node is starting", rpcerr.ErrNotReady))
	}
	if err := node.ReadBarrier(ctx); err != nil {
		if errors.Is(err, raftnode.ErrNotLeader) {
			return relayStream(s, ctx, err, "query", stream.Send, func(ctx context.Context, cc *grpc.ClientConn) (grpc.ServerStreamingClient[pb.QueryResponse], error) {
				return pb.NewLocksClient(cc).QueryPages(ctx, req)
			})
		}
		return toStatus(err)
	}
	if err := s.owns(req.Namespace, 0); err != nil { // "moving", not empty (groups.go)
		return toStatus(err)
	}
	for _, p := range queryPages(s.query(req.Namespace)) {
		if err := stream.Send(p); err != nil {
			return err
		}
	}
	return nil
}

// relayStream forwards a server-streaming call (named what in its error)
// to the leader and relays its messages with send. The leader must start
// answering within rpcForwardTimeout (else the caller retries elsewhere);
// the transfer itself has the caller's time.
func relayStream[T any](s *Server, ctx context.Context, notLeader error, what string, send func(*T) error,
	open func(context.Context, *grpc.ClientConn) (grpc.ServerStreamingClient[T], error)) error {
	cc, err := s.leaderConn(ctx, notLeader)
	if err != nil {
		return toStatus(err)
	}
	fctx, cancel := context.WithCancel(s.forwardContext(ctx))
	defer cancel()
	slow := time.AfterFunc(rpcForwardTimeout, cancel)
	slowLeader := func() error {
		return withInfo(codes.Unavailable, pb.ErrorReason_NOT_LEADER, "NotLeader",
			"the leader did not start the "+what+" in time (retry)", nil)
	}
	up, err := open(fctx, cc)
	started := false
	for err == nil {
		var m *T
		if m, err = up.Recv(); err != nil {
			break
		}
		if !started {
			if !slow.Stop() {
				return slowLeader() // the timer fired: fctx is cancelled
			}
			started = true
		}
		err = send(m)
	}
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case !started && ctx.Err() == nil && !slow.Stop():
		return slowLeader()
	}
	return err
}
