package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/lockcluster/lockcluster/internal/watchhist"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/logsafe"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
	"github.com/lockcluster/lockcluster/raftnode"
)

// Watch (SPEC §13) streams a namespace's changes, as this node applies
// them, from its watch history (watchhist.go). Any node serves a watch:
//
//   - Without from_index, the watch starts with a linearizable snapshot
//     of the selection: on the leader after a read barrier, as Query; on
//     a follower once it has applied the index a read on the leader
//     (GetRecord, forwarded) was made at. The snapshot is read at one
//     applied index I (fsm.Machine.QueryMatching), sent in pieces of about
//     pageBytes, and followed by every change after I.
//   - With from_index F, every change after F, none before; F older than
//     the history's oldest index fails at once, COMPACTED.
//
// The changes of one entry go in one WatchChanges. When nothing was sent
// for Config.WatchProgressInterval, a WatchProgress says how far the watch
// has got, so that a client that moves resumes from there. A watch whose
// cursor the history overwrote (its client took too little, too slowly)
// is cut with COMPACTED; one whose client takes nothing for
// Config.StreamSendTimeout is cut as a session stream is (streamsend.go).

// DefaultWatchProgressInterval is how long a watch sends nothing before it
// sends a WatchProgress, unless Config.WatchProgressInterval says otherwise.
const DefaultWatchProgressInterval = time.Second

// DefaultWatchCoalesce is how long a watch woken by an applied entry
// waits before it reads the history, unless Config.WatchCoalesce says
// otherwise: the entries applied meanwhile are read, filtered and sent in
// one round. Every entry wakes every watch on the node; without the wait
// a thousand watches of a namespace doing 12,000 entries a second woke
// twelve million times a second, and the raft work of the node starved
// (docs/benchmarks.md, "Records, watch and semaphores"). It adds at most
// this much to a change's delivery.
const DefaultWatchCoalesce = 2 * time.Millisecond

// maxWatchNames bounds the names a watch may list.
const maxWatchNames = 1024

// watchRound bounds the changes a watch takes from the history at once:
// a batch of messages in flight to its client.
const watchRound = 4096

// selection is which changes of a namespace a watch streams.
type selection struct {
	ns     string
	all    bool
	prefix string
	names  map[string]struct{}
	// logical maps a history batch's raw index to the logical index the
	// watch sends (fsm.Machine.Logical; watchIndexes).
	logical func(raw uint64) uint64
}

// matchName reports whether the selection covers name (QueryMatching's
// match: nil for every name).
func (sel *selection) matchName() func(string) bool {
	switch {
	case sel.all:
		return nil
	case sel.names != nil:
		return func(n string) bool { _, ok := sel.names[n]; return ok }
	}
	return func(n string) bool { return strings.HasPrefix(n, sel.prefix) }
}

// matches reports whether a change goes to the watch: of its namespace,
// with a name the selection covers; a change without names (a session's
// end) only to a watch of every name.
func (sel *selection) matches(c *fsm.Change) bool {
	if c.Namespace != sel.ns {
		return false
	}
	if sel.all {
		return true
	}
	for _, n := range c.Names {
		if sel.names != nil {
			if _, ok := sel.names[n]; ok {
				return true
			}
		} else if strings.HasPrefix(n, sel.prefix) {
			return true
		}
	}
	if c.Record != nil && len(c.Names) == 0 {
		n := c.Record.Name
		if sel.names != nil {
			_, ok := sel.names[n]
			return ok
		}
		return strings.HasPrefix(n, sel.prefix)
	}
	return false
}

// watchSelection checks a WatchRequest's selection.
func (s *Server) watchSelection(req *pb.WatchRequest) (*selection, error) {
	if err := s.m.Limits().Check(&fsm.CloseSession{Namespace: req.Namespace}); err != nil {
		return nil, toStatus(err)
	}
	sel := &selection{ns: req.Namespace, logical: s.m.Logical}
	switch {
	case req.Prefix != "" && len(req.Names) > 0:
		return nil, invalidField("prefix", fmt.Sprintf("a watch selects by prefix or by names, not both (prefix %s and %d names)", strconv.Quote(logsafe.String(req.Prefix)), len(req.Names)))
	case len(req.Names) > maxWatchNames:
		return nil, invalidField("names", fmt.Sprintf("a watch lists %d names, over the limit of %d", len(req.Names), maxWatchNames))
	case req.Prefix != "":
		if err := s.checkReadName("prefix", req.Prefix); err != nil {
			return nil, err
		}
		sel.prefix = req.Prefix
	case len(req.Names) > 0:
		sel.names = make(map[string]struct{}, len(req.Names))
		for i, n := range req.Names {
			if err := s.checkReadName("names["+strconv.Itoa(i)+"]", n); err != nil {
				return nil, err
			}
			sel.names[n] = struct{}{}
		}
	default:
		sel.all = true
	}
	return sel, nil
}

// Watch serves a watch.
func (s *Server) Watch(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	ctx := stream.Context()
	sel, err := s.watchSelection(req)
	if err != nil {
		return err
	}
	s.watches.Add(1)
	defer s.watches.Add(-1)
	// The node's state must be as new as what the client has seen.
	if need := max(req.MinIndex, req.FromIndex); need > 0 {
		wctx, cancel := context.WithTimeout(ctx, attachWait)
		err := s.hub.waitLogical(wctx, need)
		cancel()
		if err != nil {
			return toStatus(fmt.Errorf("%w: node %s has not yet applied index %d that the client has seen", rpcerr.ErrNotReady, s.cfg.Self.ID, need))
		}
	}
	// The cluster builds changes from its first watch on (watchstart.go):
	// a resume from before that is COMPACTED below.
	if err := s.StartChanges(ctx, req); err != nil {
		return toStatus(err)
	}
	out := newSender[pb.WatchResponse](stream, s.cfg.StreamSendTimeout)
	defer out.stop()
	// after is the watch's cursor in the history: a raw index, as the
	// history keeps them (watchIndexes).
	var after uint64
	if req.FromIndex > 0 {
		if err := s.owns(sel.ns, 0); err != nil { // "moving", not a silent watch (groups.go)
			return toStatus(err)
		}
		after = s.rawIndex(req.FromIndex)
		if oldest := s.hist.Oldest(); after < oldest {
			return rpcerr.Compacted(s.m.Logical(oldest), fmt.Sprintf("node %s keeps the changes after index %d, not from index %d: start again from a snapshot", s.cfg.Self.ID, s.m.Logical(oldest), req.FromIndex))
		}
	} else {
		if err := s.watchBarrier(ctx, req.Namespace); err != nil {
			return err
		}
		if err := s.owns(sel.ns, 0); err != nil { // "moving", not empty (groups.go)
			return toStatus(err)
		}
		q, recs, index := s.m.QueryMatching(sel.ns, sel.matchName()) // index: logical
		after = s.rawIndex(index)
		pieces := watchSnapshot(index, q, recs)
		out.start(func(stream sendStream[pb.WatchResponse]) error {
			for _, p := range pieces {
				if err := stream.Send(&pb.WatchResponse{Kind: &pb.WatchResponse_Snapshot{Snapshot: p}}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	every := s.cfg.WatchProgressInterval
	if every <= 0 {
		every = DefaultWatchProgressInterval
	}
	progress := time.NewTimer(every)
	defer progress.Stop()
	coalesce := s.cfg.WatchCoalesce
	if coalesce == 0 {
		coalesce = DefaultWatchCoalesce
	}
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	defer hold.Stop()
	// A slot that leaves this group (a Freeze) takes its changes to
	// another group's log: a progress from this one would then claim that
	// nothing changed. So the watch ends MOVING once its namespace's slot
	// left, checked before every send; the client resumes where the
	// namespace lives now (from a snapshot: node.go cuts the watch history
	// at an Import).
	lost := s.m.SlotsLost()
	movedAway := func() error {
		if l := s.m.SlotsLost(); l != lost {
			lost = l
			if err := s.owns(sel.ns, 0); err != nil {
				return toStatus(err)
			}
		}
		return nil
	}
	for {
		if err := movedAway(); err != nil {
			return err
		}
		var wake <-chan struct{}
		if !out.busy {
			batches, upTo, w, oldest, compacted := s.hist.Next(after, watchRound)
			if compacted {
				return rpcerr.Compacted(s.m.Logical(oldest), fmt.Sprintf("the watch fell behind: node %s no longer holds the changes after index %d (it keeps those after %d); start again from a snapshot", s.cfg.Self.ID, s.m.Logical(after), s.m.Logical(oldest)))
			}
			after = max(after, upTo)
			if msgs := sel.changes(batches); len(msgs) > 0 {
				out.send(msgs)
				progress.Reset(every)
				continue
			}
			wake = w
		}
		select {
		case <-wake:
			if coalesce > 0 { // more entries to read in the same round
				hold.Reset(coalesce)
				select {
				case <-hold.C:
				case <-s.done:
					return toStatus(fmt.Errorf("%w: resume the watch on another node", raftnode.ErrShutdown))
				case <-ctx.Done():
					return toStatus(ctx.Err())
				}
			}
		case err := <-out.done:
			out.finished()
			if err != nil {
				return err
			}
		case <-out.timeout():
			if err := out.expired(); err != nil {
				return err
			}
		case <-progress.C:
			if err := movedAway(); err != nil {
				return err
			}
			if !out.busy {
				out.send([]*pb.WatchResponse{{Kind: &pb.WatchResponse_Progress{Progress: &pb.WatchProgress{Index: s.m.Logical(after)}}}})
			}
			progress.Reset(every)
		case <-s.done:
			return toStatus(fmt.Errorf("%w: resume the watch on another node", raftnode.ErrShutdown))
		case <-ctx.Done():
			return toStatus(ctx.Err())
		}
	}
}

// changes turns the history's batches into the watch's messages: one per
// entry with a change the selection matches, at the entry's logical index
// (sel.logical maps the history's raw one: watchIndexes).
func (sel *selection) changes(batches []watchhist.Batch) []*pb.WatchResponse {
	var msgs []*pb.WatchResponse
	for _, b := range batches {
		var wc *pb.WatchChanges
		for i := range b.Changes {
			c := &b.Changes[i]
			if !sel.matches(c) {
				continue
			}
			if wc == nil {
				wc = &pb.WatchChanges{Index: sel.logical(b.Index), Time: ts(b.Time)}
			}
			wc.Changes = append(wc.Changes, changeToPB(c))
		}
		if wc != nil {
			msgs = append(msgs, &pb.WatchResponse{Kind: &pb.WatchResponse_Changes{Changes: wc}})
		}
	}
	return msgs
}

// watchBarrier makes the snapshot that follows linearizable: on the leader,
// a read barrier; on a follower, a wait until this node has applied the
// index of a linearizable read on the leader (readAtLeaderIndex).
func (s *Server) watchBarrier(ctx context.Context, ns string) error {
	node := s.replica()
	if node == nil {
		return toStatus(fmt.Errorf("%w: node is starting", rpcerr.ErrNotReady))
	}
	err := node.ReadBarrier(ctx)
	if err == nil || !errors.Is(err, raftnode.ErrNotLeader) {
		return toStatus(err)
	}
	return s.readAtLeaderIndex(ctx, err, ns, false)
}

// watchSnapshot splits a watch's snapshot into pieces of about pageBytes of
// locks and records, every one but the last with more set; there is
// always one.
func watchSnapshot(index uint64, q fsm.QueryResult, recs []fsm.Record) []*pb.WatchSnapshot {
	pieces := []*pb.WatchSnapshot{{Index: index}}
	size := 0
	piece := func(sz int) *pb.WatchSnapshot {
		p := pieces[len(pieces)-1]
		if size > 0 && size+sz > pageBytes {
			p.More = true
			p = &pb.WatchSnapshot{Index: index}
			pieces, size = append(pieces, p), 0
		}
		size += sz
		return p
	}
	for _, l := range q.Held {
		m := lockInfoToPB(l)
		p := piece(fieldSize(m))
		p.Held = append(p.Held, m)
	}
	for _, l := range q.Pending {
		m := lockInfoToPB(l)
		p := piece(fieldSize(m))
		p.Pending = append(p.Pending, m)
	}
	for _, r := range recs {
		m := recordToPB(r)
		p := piece(fieldSize(m))
		p.Records = append(p.Records, m)
	}
	return pieces
}

// watchIndexes: the watch history (watchhist.go) keeps the raw Raft index
// of each entry, as raft's sink gives it (internal/node, and the status
// page's /api/events read it too); a watch converts at its edge: the
// client's from_index and a snapshot's index into the raw cursor
// (rawIndex), the cursor and each batch's index into the logical indexes
// it sends (fsm.Machine.Logical, groups.md §6.4). That is exact while a
// group's offset is constant, which it is for ever with one group (0) and
// between two Imports with several. Phase 2, where Import raises the
// offset, must revisit it: a batch applied before an Import would be
// converted with the offset after it, so the history must then keep each
// batch's logical index (taken in the sink, right after its entry) and
// the cursor should become logical.

// rawIndex is the raw index of logical index l at the group's offset now
// (0 for an l below the offset): the inverse of fsm.Machine.Logical while
// the offset does not change (watchIndexes).
func (s *Server) rawIndex(l uint64) uint64 {
	off := s.m.Logical(0)
	if l < off {
		return 0
	}
	return l - off
}

// Watches is the number of watches this node serves now.
func (s *Server) Watches() int64 { return s.watches.Load() }
