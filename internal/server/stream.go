package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/raftnode"
	"github.com/lockcluster/lockcluster/session"
)

// Session serves a session stream. The client attaches; the node waits
// until it has applied the highest index the client has seen, then sends a
// Synced with where every request of the session stands, and from then on
// every event of the session in log order (events with seq up to the
// Synced's are already reflected in it). Heartbeats are acknowledged once
// the leader has renewed the session; a node that has known no leader for
// longer than an election takes (noLeaderGrace) ends the stream with
// Unavailable at the next heartbeat it cannot have renewed, so that the
// client moves to another node. A client that reconnects, to this
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
	release, err := s.attaches.enter(ctx, s.cfg.Self.ID)
	if err != nil {
		return err
	}
	attached := false
	defer func() {
		if !attached {
			release()
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, attachWait)
	defer cancel()
	if err := s.hub.waitLogical(wctx, at.MinIndex); err != nil {
		return toStatus(fmt.Errorf("%w: it has not yet applied index %d that the client has seen", rpcerr.ErrNotReady, at.MinIndex))
	}
	// The node's state is as new as the caller's; a session it does not
	// know yet is looked for as a unary call's would be (attach.go).
	if err := s.checkAttach(wctx, at); err != nil {
		return err
	}
	var synced *pb.Synced
	sub, err := s.hub.subscribe(at.SessionId, func() (uint64, error) {
		info, ok := s.m.Session(at.SessionId)
		reqs, seq, ok2 := s.m.SessionRequests(at.SessionId)
		if !ok || !ok2 || info.Namespace != at.Namespace {
			return 0, s.sessionEnded(at.Namespace, at.SessionId, "is not open in namespace "+strconv.Quote(at.Namespace)+" (closed, expired or never opened)")
		}
		synced = &pb.Synced{Index: s.m.LastLogical(), EventSeq: seq, Ttl: durationpb.New(time.Duration(info.TTL))}
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
	// Attached: the node's work for the attach is done. Sending the Synced
	// waits on the client, not on the node: it is not gated, so a client
	// that never reads cannot hold an attach slot.
	attached = true
	release()
	s.streams.Add(1)
	defer s.streams.Add(-1)

	acks := make(chan *pb.SessionDown, 64) // heartbeat acks and call replies
	recvErr := make(chan error, 1)
	go s.receive(ctx, stream, at, acks, recvErr)
	// Messages go out from a goroutine of their own, a batch at a time,
	// while this one waits (sender): a Send blocks while the client does
	// not read (flow control), and only the handler's return ends it. So
	// a stream the hub cuts, a stream replaced by a newer attach, or one
	// whose client has not taken a message for streamSendTimeout ends at
	// once, and what it held is freed, even if its client never reads.
	out := newSender[pb.SessionDown](stream, s.cfg.StreamSendTimeout)
	defer out.stop()
	out.start(func(stream sendStream[pb.SessionDown]) error {
		return sendSynced(stream, synced, at.ChunkedSync) // in pieces if the client assembles them (pages.go)
	})
	// How the stream ends once the batch in flight is sent, if it does:
	// with the session's end event (sent: no error), or because liveness
	// found the session ended.
	const (
		goOn = iota
		endSent
		ended
	)
	ending := goOn
	endedErr := func() error {
		return s.sessionEnded(at.Namespace, at.SessionId, "has ended") // "moving" where this group does not serve it (groups.go)
	}
	for {
		events, replies := sub.ready, (<-chan *pb.SessionDown)(acks)
		if out.busy {
			events, replies = nil, nil // one batch in flight at a time
		}
		select {
		case <-events:
			batch := sub.take()
			msgs := make([]*pb.SessionDown, 0, len(batch))
			for _, ev := range batch {
				msgs = append(msgs, &pb.SessionDown{Kind: &pb.SessionDown_Event{Event: ev}})
				if ev.Kind == pb.Event_SESSION_ENDED {
					ending = endSent
					break
				}
			}
			out.send(msgs)
		case m := <-replies:
			// With every other ack and reply waiting: one batch.
			var msgs []*pb.SessionDown
		drain:
			for m != nil {
				if msgs = append(msgs, m); len(msgs) == cap(acks) {
					break
				}
				select {
				case m = <-acks:
				default:
					break drain
				}
			}
			if m == nil { // the session has ended: after what came before
				ending = ended
			}
			if len(msgs) == 0 {
				return endedErr()
			}
			out.send(msgs)
		case err := <-out.done:
			out.finished()
			if err != nil {
				return err
			}
			switch ending {
			case endSent:
				return nil
			case ended:
				return endedErr()
			}
		case <-out.timeout():
			if err := out.expired(); err != nil {
				return err
			}
		case <-sub.gone:
			s.streamCut(at.Namespace) // counted per namespace (quota.go)
			return rpcerr.StreamBehind("the session's event stream fell too far behind: reconnect to resynchronise")
		case <-sub.replaced:
			return streamReplaced(at.SessionId, s.hub.maxStreams, s.cfg.Self.ID)
		case <-sub.moving:
			// Its slot froze here: this group serves it no more (groups.md
			// §8.2). MOVING, never "closed": the client re-attaches to the
			// group that will serve it.
			return s.movingErr(at.Namespace, at.SessionId)
		case err := <-recvErr:
			return err
		case <-s.done:
			return toStatus(fmt.Errorf("%w: reconnect to another node", raftnode.ErrShutdown))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxHeartbeatsWaiting bounds the heartbeats of one stream that wait for
// their answer (the follower's batch, the leader's confirmation): a client
// that sends more meanwhile gets no ack for the excess, as a node that
// cannot renew answers none; it sends again after TTL/10. A well-behaved
// client has one or two waiting.
const maxHeartbeatsWaiting = 16

// receive reads the client's messages after the attach. A heartbeat is
// handed to session liveness, which renews the session and answers later
// (heartbeat); each call runs at once (streamcall.go). Neither waits here,
// so that a heartbeat waiting for the leader never delays a call, and no
// goroutine per stream waits for heartbeats' answers.
func (s *Server) receive(ctx context.Context, stream pb.Locks_SessionServer, at *pb.Attach, out chan<- *pb.SessionDown, recvErr chan<- error) {
	fail := func(err error) {
		select {
		case recvErr <- err:
		default: // the stream is ending already
		}
	}
	hb := &heartbeater{s: s, ctx: ctx, id: at.SessionId, ns: at.Namespace, out: out, fail: fail}
	calls := &streamCalls{}
	for {
		m, err := stream.Recv()
		if err != nil {
			fail(err)
			return
		}
		switch k := m.Kind.(type) {
		case *pb.SessionUp_Heartbeat:
			hb.heartbeat(k.Heartbeat.Id)
		case *pb.SessionUp_Call:
			calls.start(ctx, s, at, k.Call, out)
		default:
			fail(invalid("after its attach a session stream carries only heartbeats and calls"))
			return
		}
	}
}

// heartbeater renews one stream's session for each heartbeat and sends
// the ack (or nil when the session has ended) to the stream's out.
type heartbeater struct {
	s       *Server
	ctx     context.Context // the stream's
	id      uint64
	ns      string // the session's namespace (the attach's)
	out     chan<- *pb.SessionDown
	fail    func(error)
	waiting atomic.Int32
}

// heartbeat renews the session for heartbeat hb; the answer comes later,
// from session liveness (done).
func (h *heartbeater) heartbeat(hb uint64) {
	lost := h.s.m.SlotsLost() // before the check: done asks again only if a slot left since
	if err := h.s.owns(h.ns, h.id); err != nil {
		// Ownership first (groups.go): a session of a slot this group
		// does not serve is neither renewed nor acknowledged here, and
		// its stream ends "moving", never "closed". Never with one group.
		h.fail(toStatus(err))
		return
	}
	if h.waiting.Add(1) > maxHeartbeatsWaiting {
		h.waiting.Add(-1)
		return // no ack: too many waiting already
	}
	h.s.live.HeartbeatAsync(h.id, func(known bool, err error) {
		h.waiting.Add(-1)
		h.done(hb, lost, known, err)
	})
}

// done sends heartbeat hb's answer. It runs on session liveness's
// goroutine, so it never blocks: an ack that finds out full is dropped,
// and the client sends again, as for any heartbeat not acknowledged.
//
// A renewal is acknowledged only if this group still serves the session's
// slot once the answer is in (groups.md I3, §8.2 rule 1): on the leader
// the answer comes after the confirmation of leadership that covers the
// renewal, and a Freeze applied before it ends the stream MOVING instead
// (the leader's Touch answers a follower's batch alike: ErrMoved). lost
// is the machine's SlotsLost read before heartbeat's ownership check: if
// no slot left the group since, that check still holds, and the answer
// takes no lock (always, with one group).
func (h *heartbeater) done(hb, lost uint64, known bool, err error) {
	ctx := h.ctx
	var out *pb.SessionDown
	switch {
	case errors.Is(err, session.ErrMoved):
		// The leader refused the session: its slot moves. Not "closed",
		// which would end the client's session: MOVING, and the client
		// re-attaches to the group that serves it.
		h.fail(h.s.movingErr(h.ns, h.id))
		return
	case (errors.Is(err, session.ErrNotLeading) || err != nil && ctx.Err() == nil) && h.s.leaderlessFor() >= noLeaderGrace:
		// Nobody here has been able to renew the session for longer
		// than an election takes (this node is cut off): say so, so
		// that the client moves its stream to a node that can, instead
		// of losing the session after a TTL of silence (docs/chaos.md,
		// finding 2). Not sooner: see noLeaderGrace.
		h.fail(rpcerr.WithRetryDelay(rpcerr.NoLeader(fmt.Sprintf("node %s knows no leader to renew session %d: reconnect to another node", h.s.cfg.Self.ID, h.id)),
			rand.N(attachRetryWindow))) // every stream of the node ends now: spread their return
		return
	case errors.Is(err, session.ErrNotLeading), err != nil && ctx.Err() == nil:
		return // no leader renewed it: no ack; the client sends again
	case err != nil, ctx.Err() != nil:
		return // the stream has ended
	case known:
		if h.s.m.SlotsLost() != lost { // a slot left the group since heartbeat's check
			if err := h.s.owns(h.ns, h.id); err != nil {
				// The slot froze between the renewal and its
				// confirmation: no ack (groups.md I3).
				h.fail(toStatus(err))
				return
			}
		}
		out = &pb.SessionDown{Kind: &pb.SessionDown_HeartbeatAck{HeartbeatAck: &pb.HeartbeatAck{Id: hb}}}
	}
	select {
	case h.out <- out:
	default:
		if out == nil { // the session has ended: worth a wait, once
			go func() {
				select {
				case h.out <- nil:
				case <-ctx.Done():
				}
			}()
		}
	}
}
