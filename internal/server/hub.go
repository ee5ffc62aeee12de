package server

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// hub fans the events of applied entries out to the session streams
// attached to this node, and lets callers wait until an index is applied.
// publish runs on raft's FSM goroutine and never blocks: a stream that
// does not keep up (a backlog of subBuffer events, or of maxBytes bytes) is
// cut off (its client reconnects and resynchronises).
type hub struct {
	mu      sync.Mutex
	applied uint64
	wake    chan struct{} // closed when applied moves, if anyone waits
	subs    map[uint64]map[*sub]struct{}
	// last reports the machine's own last index, which a restored snapshot
	// moves without any entry being published.
	last func() uint64
	// logical maps a raw index to the logical one a client sees
	// (fsm.Machine.Logical, groups.md §6.4; nil: the same, as with one
	// group, whose offset is 0). The hub keeps raw indexes; events carry
	// the logical index of their entry, and waitLogical compares a
	// client's index with the logical applied index.
	logical func(raw uint64) uint64
	// maxBytes caps the encoded size of the events a stream has not taken
	// yet (its backlog), whatever their number.
	maxBytes int
	// maxStreams caps the streams of one session attached here (0: no
	// cap): an attach past it replaces the session's oldest stream
	// (subscribe). serial numbers the streams in attach order.
	maxStreams int
	serial     uint64
}

type sub struct {
	session uint64
	after   uint64 // events up to this seq are covered by the sync
	serial  uint64 // attach order among the hub's streams
	// q holds the events not yet taken by the stream; ready has a token
	// while q is not empty. A queue that grows on demand, rather than a
	// channel of subBuffer slots, keeps an idle stream at a few bytes
	// instead of 32 KiB (100,000 idle sessions: 3 GiB less).
	mu    sync.Mutex
	q     []*pb.Event
	bytes int // encoded size of the events in q
	ready chan struct{}
	gone  chan struct{} // closed when the hub cut the stream off
	// replaced is closed when a newer attach of the session took this
	// stream's place (hub.maxStreams).
	replaced chan struct{}
	// moving is closed when the session's slot froze here (a Freeze
	// applied: moving): this group serves the session no more, and its
	// stream ends MOVING (groups.md §8.2).
	moving chan struct{}
}

// DefaultMaxStreamsPerSession is how many streams one session may have
// attached to a node, unless Config.MaxStreamsPerSession says otherwise.
// A client has one; a few more cover the streams of a client that
// reattached before the node saw its old connection die.
const DefaultMaxStreamsPerSession = 4

// subBuffer is how many events a stream may fall behind before it is cut.
const subBuffer = 4096

// DefaultStreamBacklogBytes is how many bytes of events a stream may fall
// behind before it is cut, unless Config.StreamBacklogBytes says otherwise.
// The event count alone does not bound memory: 4096 events naming 64 names
// of 1 KiB each are 256 MiB.
const DefaultStreamBacklogBytes = 4 << 20

// push queues ev; false if the stream is subBuffer events or, with ev,
// more than maxBytes bytes behind. The backlog never holds more than
// maxBytes: an event that would take it past is not queued, and the stream
// is cut instead.
func (s *sub) push(ev *pb.Event, maxBytes int) bool {
	n := proto.Size(ev)
	s.mu.Lock()
	if len(s.q) >= subBuffer || s.bytes+n > maxBytes {
		s.mu.Unlock()
		return false
	}
	s.q = append(s.q, ev)
	s.bytes += n
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	return true
}

// take returns the queued events, oldest first, and empties the queue.
func (s *sub) take() []*pb.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.q
	s.q, s.bytes = nil, 0
	return q
}

// newHub returns a hub; maxBytes <= 0 means DefaultStreamBacklogBytes.
func newHub(last func() uint64, maxBytes int) *hub {
	if maxBytes <= 0 {
		maxBytes = DefaultStreamBacklogBytes
	}
	return &hub{wake: make(chan struct{}), subs: make(map[uint64]map[*sub]struct{}), last: last, maxBytes: maxBytes}
}

func (h *hub) publish(index uint64, ap fsm.Applied) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var logical uint64 // the entry's logical index, once an event needs it
	for _, e := range ap.Events {
		if e.Reply {
			// The entry's own immediate outcome: the Request's reply
			// carries it, and a client whose reply was lost asks again
			// (same request id) or resyncs. Not sending it saves a write
			// per uncontended acquire.
			continue
		}
		subs := h.subs[e.Session]
		if len(subs) == 0 {
			continue
		}
		if logical == 0 {
			// On raft's FSM goroutine, right after the machine applied
			// the entry: the offset read is the one in force at it.
			logical = h.toLogical(index)
		}
		// One message for all the session's streams: they only read it.
		ev := eventToPB(logical, e)
		for s := range subs {
			if e.Seq <= s.after {
				continue
			}
			if !s.push(ev, h.maxBytes) {
				h.dropLocked(s)
				close(s.gone)
			}
		}
	}
	if index > h.applied {
		h.applied = index
		close(h.wake)
		h.wake = make(chan struct{})
	}
}

// subscribe attaches a stream to a session. sync runs under the hub's lock,
// so that no event falls between the state it reads and the first event
// the stream receives; it returns the session's event seq at that state.
//
// A session has at most maxStreams streams here: the one past it takes
// the place of the session's oldest, which is dropped and told so (its
// replaced is closed). The newest attach always wins, so a client that
// attaches again while its old stream lingers (a connection not yet known
// dead) is never locked out; a client that attaches a stream after stream
// and never reads them pins at most maxStreams backlogs.
func (h *hub) subscribe(session uint64, sync func() (seq uint64, err error)) (*sub, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seq, err := sync()
	if err != nil {
		return nil, err
	}
	h.serial++
	s := &sub{session: session, after: seq, serial: h.serial, ready: make(chan struct{}, 1), gone: make(chan struct{}), replaced: make(chan struct{}), moving: make(chan struct{})}
	subs := h.subs[session]
	if subs == nil {
		subs = make(map[*sub]struct{})
		h.subs[session] = subs
	}
	for h.maxStreams > 0 && len(subs) >= h.maxStreams {
		var oldest *sub
		for o := range subs {
			if oldest == nil || o.serial < oldest.serial {
				oldest = o
			}
		}
		delete(subs, oldest)
		close(oldest.replaced)
	}
	subs[s] = struct{}{}
	return s, nil
}

// moving ends the streams of sessions whose slot froze (a Freeze
// applied): each is dropped and told so (its moving is closed). It runs
// on raft's FSM goroutine after the machine applied the Freeze, under the
// hub's lock, as subscribe's sync does: a stream is either subscribed
// already, and ended here, or its sync reads the frozen slot and refuses
// the attach. It returns how many streams it ended.
func (h *hub) moving(sessions []uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, id := range sessions {
		for s := range h.subs[id] {
			close(s.moving)
			n++
		}
		delete(h.subs, id)
	}
	return n
}

func (h *hub) unsubscribe(s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked(s)
}

func (h *hub) dropLocked(s *sub) {
	if m := h.subs[s.session]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(h.subs, s.session)
		}
	}
}

// toLogical is the logical index of raw index raw (h.logical).
func (h *hub) toLogical(raw uint64) uint64 {
	if h.logical == nil {
		return raw
	}
	return h.logical(raw)
}

// waitApplied returns once an entry at raw index or later has been applied
// here: for an index raft or the operator's status gave (a leader's
// applied index).
func (h *hub) waitApplied(ctx context.Context, index uint64) error {
	return h.wait(ctx, func() bool { return h.applied >= index || h.last() >= index })
}

// waitLogical returns once the logical index of what this node has
// applied is at least index: for an index a client has seen (min_index,
// from_index, a response's index; groups.md §6.4). The condition is read
// again at every wake, so an offset raised meanwhile (Import, phase 2)
// counts at once.
func (h *hub) waitLogical(ctx context.Context, index uint64) error {
	return h.wait(ctx, func() bool { return h.toLogical(h.applied) >= index || h.toLogical(h.last()) >= index })
}

// wait returns once reached, read under the hub's lock, holds.
func (h *hub) wait(ctx context.Context, reached func() bool) error {
	for {
		h.mu.Lock()
		done, wake := reached(), h.wake
		h.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
