package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/api/rpcerr"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
	"github.com/lockcluster/lockcluster/session"
)

// Session serves a session stream. The client attaches; the node waits
// until it has applied the highest index the client has seen, then sends a
// Synced with where every request of the session stands, and from then on
// every event of the session in log order (events with seq up to the
// Synced's are already reflected in it). Heartbeats are acknowledged once
// the leader has renewed the session; a node that knows no leader ends the
// stream with Unavailable at the first heartbeat it cannot have renewed,
// so that the client moves to another node. A client that reconnects, to this
// node or another, attaches again and resynchronises: together with the
// per-session event seq this delivers every outcome exactly once.
func (s *Server) Session(stream pb.Locks_SessionServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	at := first.GetAttach()
	if at == nil {
		return invalid("the first message of a session stream must be an attach")
	}
	if err := s.m.Limits().Check(&fsm.CloseSession{Namespace: at.Namespace}); err != nil {
		return toStatus(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = s.hub.waitApplied(wctx, at.MinIndex)
	cancel()
	if err != nil {
		return toStatus(fmt.Errorf("%w: it has not yet applied index %d that the client has seen", rpcerr.ErrNotReady, at.MinIndex))
	}
	// The node's state is as new as the caller's: the secret check is final.
	if err := s.m.CheckSession(at.SessionId, at.Namespace, at.SessionSecret); err != nil {
		return toStatus(err)
	}
	var synced *pb.Synced
	sub, err := s.hub.subscribe(at.SessionId, func() (uint64, error) {
		info, ok := s.m.Session(at.SessionId)
		reqs, seq, ok2 := s.m.SessionRequests(at.SessionId)
		if !ok || !ok2 || info.Namespace != at.Namespace {
			return 0, toStatus(&fsm.Error{Code: fsm.CodeSessionClosed, Msg: "session " + strconv.FormatUint(at.SessionId, 10) + " is not open in namespace " + strconv.Quote(at.Namespace) + " (closed, expired or never opened)"})
		}
		synced = &pb.Synced{Index: s.m.LastIndex(), EventSeq: seq, Ttl: durationpb.New(time.Duration(info.TTL))}
		for _, r := range reqs {
			synced.Requests = append(synced.Requests, requestStateToPB(r))
		}
		return seq, nil
	})
	if err != nil {
		return err
	}
	defer s.hub.unsubscribe(sub)
	synced.Calls = true
	if err := stream.Send(&pb.SessionDown{Kind: &pb.SessionDown_Synced{Synced: synced}}); err != nil {
		return err
	}

	acks := make(chan *pb.SessionDown, 16) // heartbeat acks and call replies
	recvErr := make(chan error, 1)
	go s.receive(ctx, stream, at, acks, recvErr)
	for {
		select {
		case <-sub.ready:
			for _, ev := range sub.take() {
				if err := stream.Send(&pb.SessionDown{Kind: &pb.SessionDown_Event{Event: ev}}); err != nil {
					return err
				}
				if ev.Kind == pb.Event_SESSION_ENDED {
					return nil
				}
			}
		case <-sub.gone:
			return rpcerr.StreamBehind("the session's event stream fell too far behind: reconnect to resynchronise")
		case m := <-acks:
			if m == nil {
				return toStatus(&fsm.Error{Code: fsm.CodeSessionClosed, Msg: "session " + strconv.FormatUint(at.SessionId, 10) + " has ended"})
			}
			if err := stream.Send(m); err != nil {
				return err
			}
		case err := <-recvErr:
			return err
		case <-s.done:
			return toStatus(fmt.Errorf("%w: reconnect to another node", raftnode.ErrShutdown))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// receive reads the client's messages after the attach: heartbeats go, in
// order, to the heartbeat loop; each call runs at once (streamcall.go), so
// that a heartbeat waiting for the leader never delays a call.
func (s *Server) receive(ctx context.Context, stream pb.Locks_SessionServer, at *pb.Attach, out chan<- *pb.SessionDown, recvErr chan<- error) {
	fail := func(err error) {
		select {
		case recvErr <- err:
		default: // the stream is ending already
		}
	}
	hbs := make(chan uint64, 16)
	defer close(hbs)
	go s.heartbeats(ctx, at.SessionId, hbs, out, fail)
	calls := &streamCalls{}
	for {
		m, err := stream.Recv()
		if err != nil {
			fail(err)
			return
		}
		switch k := m.Kind.(type) {
		case *pb.SessionUp_Heartbeat:
			select {
			case hbs <- k.Heartbeat.Id:
			case <-ctx.Done():
				return
			}
		case *pb.SessionUp_Call:
			calls.start(ctx, s, at, k.Call, out)
		default:
			fail(invalid("after its attach a session stream carries only heartbeats and calls"))
			return
		}
	}
}

// heartbeats renews the session for each heartbeat id it receives, sending
// an ack (or nil when the session has ended) to the stream.
func (s *Server) heartbeats(ctx context.Context, id uint64, hbs <-chan uint64, acks chan<- *pb.SessionDown, fail func(error)) {
	for hb := range hbs {
		known, err := s.live.Heartbeat(ctx, id)
		var out *pb.SessionDown
		switch {
		case (errors.Is(err, session.ErrNotLeading) || err != nil && ctx.Err() == nil) && !s.knowsLeader():
			// Nobody here can renew the session (an election, or this
			// node is cut off): say so at once, so that the client moves
			// its stream to a node that can, instead of losing the session
			// after a TTL of silence (docs/chaos.md, finding 2).
			fail(rpcerr.NoLeader(fmt.Sprintf("node %s knows no leader to renew session %d: reconnect to another node", s.cfg.Self.ID, id)))
			return
		case errors.Is(err, session.ErrNotLeading), err != nil && ctx.Err() == nil:
			continue // no leader renewed it: no ack; the client sends again
		case err != nil:
			return
		case known:
			out = &pb.SessionDown{Kind: &pb.SessionDown_HeartbeatAck{HeartbeatAck: &pb.HeartbeatAck{Id: hb}}}
		}
		select {
		case acks <- out:
		case <-ctx.Done():
			return
		}
	}
}
