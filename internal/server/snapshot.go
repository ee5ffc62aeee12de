package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/raftnode"
)

// SaveSnapshot (an online backup) streams the leader's state machine
// snapshot: after a read barrier, so that it holds every write committed
// before the call, the machine encodes its state under its own lock (one
// consistent state, at one index). The header goes first, with the index
// and the SHA-256 of the bytes, then the bytes in chunks. A follower relays
// the leader's stream; lockcluster's 'snapshot restore' seeds a new
// cluster from the bytes (raftnode.Seed).

// snapshotChunkSize is the data in one message (well under gRPC's 4 MiB);
// a variable for the tests.
var snapshotChunkSize = 1 << 20

func (s *Server) SaveSnapshot(req *pb.SaveSnapshotRequest, stream grpc.ServerStreamingServer[pb.SnapshotChunk]) error {
	ctx := stream.Context()
	node := s.replica()
	if node == nil {
		return toStatus(fmt.Errorf("%w: node is starting", rpcerr.ErrNotReady))
	}
	if err := node.ReadBarrier(ctx); err != nil {
		if errors.Is(err, raftnode.ErrNotLeader) {
			return s.relaySnapshot(ctx, err, req, stream)
		}
		return toStatus(err)
	}
	// Encode returns, rather than panics with, a state that does not add up:
	// a backup must not bring the node down. A backup leaves the cluster
	// secret out (fsm/clustersecret.go): reading it does not make a member.
	data, err := s.m.BeginSnapshot().EncodeBackup()
	if err != nil {
		return toStatus(fmt.Errorf("internal error: %w", err))
	}
	raw, format, err := fsm.SnapshotHeader(data)
	if err != nil {
		return toStatus(fmt.Errorf("internal error: %w", err))
	}
	// The header's index is logical (groups.md §6.4): it promises that a
	// fencing token in the state is at most it. With one group it is the
	// Raft index of the state, which 'snapshot restore' checks the state
	// against. Phase 2 must revisit both: the offset read here is the
	// machine's now, not the snapshot point's (an Import meanwhile makes
	// the index larger, which keeps the promise), and restore must then
	// compare with the state's logical index.
	index := s.m.Logical(raw)
	sum := sha256.Sum256(data)
	term, _ := strconv.ParseUint(node.Stats()["term"], 10, 64)
	h := &pb.SnapshotHeader{Index: index, Term: term, Size: uint64(len(data)), Sha256: sum[:], LeaderId: s.cfg.Self.ID, Format: format}
	if ms, err := s.Members(ctx, &pb.MembersRequest{}); err == nil {
		h.Members = ms.Members
	}
	if err := stream.Send(&pb.SnapshotChunk{Header: h}); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), snapshotChunkSize)
		if err := stream.Send(&pb.SnapshotChunk{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	s.backupSaved(ctx)
	s.log.Info("snapshot saved by a client", "index", index, "bytes", h.Size, "sha256", fmt.Sprintf("%x", sum))
	return nil
}

// relaySnapshot forwards the call to the leader and relays its stream.
// The leader must start answering within rpcForwardTimeout (else the caller
// retries elsewhere); the transfer itself has the caller's time.
func (s *Server) relaySnapshot(ctx context.Context, notLeader error, req *pb.SaveSnapshotRequest, stream grpc.ServerStreamingServer[pb.SnapshotChunk]) error {
	cc, err := s.leaderConn(ctx, notLeader)
	if err != nil {
		return toStatus(err)
	}
	fctx, cancel := context.WithCancel(s.forwardContext(ctx))
	defer cancel()
	slow := time.AfterFunc(rpcForwardTimeout, cancel)
	slowLeader := func() error {
		return withInfo(codes.Unavailable, pb.ErrorReason_NOT_LEADER, "NotLeader",
			"the leader did not start the snapshot in time (retry)", nil)
	}
	up, err := pb.NewClusterClient(cc).SaveSnapshot(fctx, req)
	started := false
	for err == nil {
		var m *pb.SnapshotChunk
		if m, err = up.Recv(); err != nil {
			break
		}
		if !started {
			if !slow.Stop() {
				return slowLeader() // the timer fired: fctx is cancelled
			}
			started = true
		}
		err = stream.Send(m)
	}
	switch {
	case errors.Is(err, io.EOF):
		s.backupSaved(ctx)
		return nil
	case !started && ctx.Err() == nil && !slow.Stop():
		return slowLeader()
	}
	return err
}
