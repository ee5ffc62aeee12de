package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// A cluster builds the changes that watches stream only once it has been
// watched (fsm's startchanges.go): until then no node spends anything on
// them. The first watch, on any node, starts them with one entry; every
// node's history then holds the changes of every entry after it, so a
// watch can resume anywhere from there on.

// StartChanges makes the cluster build changes, unless this node's state
// says it does (then it returns at once): on the leader it proposes
// fsm.StartChanges; on a follower it opens a watch of req's selection on
// the leader, which does, and waits until this node has applied the index
// of that watch's snapshot, which follows the entry. The status page's
// live feed calls it with a nil req (a watch of the default namespace's
// names is then opened on the leader: its snapshot is all that is read).
func (s *Server) StartChanges(ctx context.Context, req *pb.WatchRequest) error {
	if s.m.ChangesFrom() != 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, rpcForwardTimeout)
	defer cancel()
	_, _, err := s.propose(pctx, &fsm.StartChanges{})
	if err == nil {
		return nil
	}
	if req == nil {
		req = &pb.WatchRequest{Namespace: "default", Names: []string{"lockcluster-start-changes"}}
	}
	fwd := &pb.WatchRequest{Namespace: req.Namespace, Prefix: req.Prefix, Names: req.Names}
	snap, err := forward(s, ctx, err, func(ctx context.Context, cc *grpc.ClientConn) (*pb.WatchSnapshot, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // ends the leader's watch: its snapshot's index is all this needs
		st, err := pb.NewLocksClient(cc).Watch(ctx, fwd)
		if err != nil {
			return nil, err
		}
		r, err := st.Recv()
		if err != nil {
			return nil, err
		}
		if r.GetSnapshot() == nil {
			return nil, fmt.Errorf("the leader's watch began with %T, not its snapshot", r.GetKind())
		}
		return r.GetSnapshot(), nil
	})
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(ctx, attachWait)
	defer wcancel()
	if err := s.hub.waitLogical(wctx, snap.GetIndex()); err != nil {
		return toStatus(fmt.Errorf("%w: node %s has not yet applied index %d that the leader has", rpcerr.ErrNotReady, s.cfg.Self.ID, snap.GetIndex()))
	}
	return nil
}
