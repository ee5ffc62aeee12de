package lockcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Watch (SPEC §13): a namespace's changes, streamed. A Watcher starts with
// a linearizable snapshot of the selection at some index I, then yields
// every change after I in log order, one WatchEvent per log entry. It
// remembers the last index it received (a change, or a node's word that
// nothing matched up to an index) and when its stream fails, or its node
// does, it resumes on another endpoint from that index: the consumer sees
// neither a gap nor a duplicate. When the node no longer keeps the history
// it would resume from (COMPACTED), the Watcher starts again from a fresh
// snapshot, which it yields marked Resync: never a silent gap.

// WatchOptions selects what a watch sees: every name of the namespace
// (neither set), the names starting with Prefix, or the names listed.
type WatchOptions struct {
	Prefix string
	Names  []string
}

// ChangeKind is the kind of a Change.
type ChangeKind int

// The kinds of change a watch sees.
const (
	ChangeGranted ChangeKind = iota + 1
	ChangeQueued
	// ChangeReleased: a held lock was released, by its holder or because
	// its session ended (Cause).
	ChangeReleased
	// ChangeAborted: a pending request ended without a lock (Cause,
	// Reason), or its abort raced its grant and the lock was released at
	// once (Token set).
	ChangeAborted
	ChangeStolen
	ChangeSessionEnded
	ChangeRecordSet
	ChangeRecordDeleted
)

var changeKindNames = [...]string{"", "granted", "queued", "released", "aborted", "stolen", "session-ended", "record-set", "record-deleted"}

func (k ChangeKind) String() string {
	if k > 0 && int(k) < len(changeKindNames) {
		return changeKindNames[k]
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// MarshalText makes a ChangeKind its name in JSON.
func (k ChangeKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Change is one change a log entry made to the watched names.
type Change struct {
	Kind ChangeKind `json:"kind"`
	// Names is the request's whole scope (a change is seen when one of its
	// names is selected); a ChangeSessionEnded has none.
	Names      []string `json:"names,omitempty"`
	Mode       string   `json:"mode,omitempty"`
	MaxHolders int      `json:"maxHolders,omitempty"`
	SessionID  uint64   `json:"sessionId,omitempty"`
	RequestID  uint64   `json:"requestId,omitempty"`
	ClientID   string   `json:"clientId,omitempty"`
	Label      string   `json:"label,omitempty"`
	Token      uint64   `json:"token,omitempty"`
	// Cause says why a lock or a request ended otherwise than by its
	// holder's release ("aborted", "stolen", "session-closed",
	// "session-expired"); "" when it did not.
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Record is the record written (ChangeRecordSet), or the name and
	// token of the one deleted (ChangeRecordDeleted).
	Record *Record `json:"record,omitempty"`
}

// WatchSnapshot is the selection's state at Index, as Query has it, with
// every record of the selection.
type WatchSnapshot struct {
	Index   uint64     `json:"index"`
	Held    []LockInfo `json:"held"`
	Pending []LockInfo `json:"pending"`
	Records []Record   `json:"records,omitempty"`
}

// WatchEvent is what Watcher.Next yields: a snapshot (the first event, and
// after a resynchronisation), or the changes one log entry made.
type WatchEvent struct {
	// Index is the snapshot's index, or the log index of the entry.
	Index uint64 `json:"index"`
	// Snapshot is set on a snapshot event; Changes is then empty.
	Snapshot *WatchSnapshot `json:"snapshot,omitempty"`
	// Resync marks a snapshot that replaces the state built so far: the
	// history the watch would have resumed from was gone (COMPACTED), so
	// changes between the last event and Index were not seen one by one.
	Resync bool `json:"resync,omitempty"`
	// Time is the leader's time in the entry (changes only).
	Time    time.Time `json:"time,omitzero"`
	Changes []Change  `json:"changes,omitempty"`
}

// Watcher is a running watch. Next yields its events; Close stops it.
type Watcher struct {
	c      *Client
	req    *pb.WatchRequest
	ctx    context.Context
	cancel context.CancelFunc
	events chan WatchEvent
	done   chan struct{} // closed when run returns
	err    error         // why run returned, once done is closed

	// open opens a watch stream (a test replaces it): on endpoint i with
	// from as from_index.
	open func(ctx context.Context, i int, req *pb.WatchRequest) (watchStream, error)
	// endpoints, current and rotate pick the endpoint as the session does.
	current func() int
	rotate  func(i int)
	backoff time.Duration // the first wait after a failure

	closed atomic.Bool // Close was called
	// resync: the next snapshot replaces a state the consumer built (the
	// history was compacted); only run's goroutine touches it.
	resync bool

	mu   sync.Mutex
	last uint64 // the last index received: resume after it (0: none yet)
}

type watchStream interface {
	Recv() (*pb.WatchResponse, error)
}

// Watch starts watching the client's namespace. The first event Next
// yields is the snapshot; after it, changes in log order. The watch runs
// until Close is called or ctx ends; it survives node failures (it moves to
// another endpoint and resumes where it was), and stops with an error only
// when the cluster refuses it (permission, a bad selection, a cluster of a
// release without watch).
func (c *Client) Watch(ctx context.Context, opts WatchOptions) (*Watcher, error) {
	if err := c.closedErr(); err != nil {
		return nil, err
	}
	if opts.Prefix != "" && len(opts.Names) > 0 {
		return nil, &Error{Name: "TypeError", Code: codes.InvalidArgument, Reason: pb.ErrorReason_INVALID,
			Message: fmt.Sprintf("a watch selects a prefix (%q) or names (%q), not both", opts.Prefix, opts.Names)}
	}
	w := newWatcher(ctx, &pb.WatchRequest{Namespace: c.cfg.namespace, Prefix: opts.Prefix, Names: opts.Names})
	w.c = c
	w.open = func(ctx context.Context, i int, req *pb.WatchRequest) (watchStream, error) {
		return pb.NewLocksClient(c.conns[i]).Watch(ctx, req)
	}
	w.current = func() int { _, i := c.conn(); return i }
	w.rotate = c.rotate
	go w.run()
	return w, nil
}

func newWatcher(ctx context.Context, req *pb.WatchRequest) *Watcher {
	w := &Watcher{req: req, events: make(chan WatchEvent), done: make(chan struct{}), backoff: 20 * time.Millisecond}
	w.ctx, w.cancel = context.WithCancel(ctx)
	return w
}

// Next returns the next event, waiting for it until ctx ends (then ctx's
// error; the watch goes on). Once the watch has stopped it returns why:
// ErrWatchClosed after Close, the watch's context's error, or the
// cluster's refusal (ErrPermission; ErrNotSupported from a node of a
// release without watch).
func (w *Watcher) Next(ctx context.Context) (WatchEvent, error) {
	select {
	case ev := <-w.events:
		return ev, nil
	case <-w.done:
		return WatchEvent{}, w.err
	case <-ctx.Done():
		return WatchEvent{}, ctx.Err()
	}
}

// LastIndex is the last index the watch received: every change of the
// selection up to it has been yielded, or is the next to be.
func (w *Watcher) LastIndex() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Close stops the watch; Next then returns ErrWatchClosed.
func (w *Watcher) Close() {
	w.closed.Store(true)
	w.cancel()
	<-w.done
}

// ErrWatchClosed is Next's error after Close.
var ErrWatchClosed = errors.New("lockcluster: watch closed")

// run keeps a watch stream open, one endpoint after another, until the
// watch is closed or refused.
func (w *Watcher) run() {
	defer close(w.done)
	const maxBackoff = 500 * time.Millisecond
	backoff := w.backoff
	for {
		i := w.current()
		w.mu.Lock()
		w.req.FromIndex = w.last
		w.mu.Unlock()
		if w.c != nil {
			w.c.mu.Lock()
			w.req.MinIndex = max(w.c.maxIndex, w.req.FromIndex)
			w.c.mu.Unlock()
		} else {
			w.req.MinIndex = w.req.FromIndex
		}
		progressed, err := w.stream(i)
		if w.ctx.Err() != nil {
			w.err = w.ctx.Err()
			if w.closed.Load() {
				w.err = ErrWatchClosed
			}
			return
		}
		if progressed {
			backoff = w.backoff
		}
		if errors.Is(fromStatus(err), ErrCompacted) && w.req.FromIndex != 0 {
			// The history this watch resumes from is gone: start again from
			// a snapshot, at once, on the same node.
			w.mu.Lock()
			w.last = 0
			w.mu.Unlock()
			w.resync = true
			continue
		}
		if w.c != nil {
			if cerr := w.c.closedErr(); cerr != nil {
				w.err = cerr // the Client was closed under the watch
				return
			}
		}
		if fatalWatchError(err) {
			w.err = fromStatus(err)
			if status.Code(err) == codes.Unimplemented {
				w.err = &Error{Name: "NotSupportedError", Code: codes.Unimplemented, Reason: pb.ErrorReason_NOT_SUPPORTED,
					Message: "the node does not serve Watch (a release before watch): " + status.Convert(err).Message()}
			}
			return
		}
		w.rotate(i)
		t := time.NewTimer(reattachDelay(backoff, 0))
		select {
		case <-w.ctx.Done():
			t.Stop()
			continue // reported at the top of the loop
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// fatalWatchError says whether a watch stream's error is the cluster's
// refusal, which another endpoint would repeat: the watch stops with it.
// Anything else (a node down or not ready, a stream cut) moves the watch
// to another endpoint.
func fatalWatchError(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.FailedPrecondition, codes.NotFound:
		return true
	}
	return false
}

// stream runs one watch stream on endpoint i until it fails, yielding
// what it receives. progressed says whether it received anything.
func (w *Watcher) stream(i int) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	st, err := w.open(ctx, i, w.req)
	if err != nil {
		return false, err
	}
	var snap *WatchSnapshot // a snapshot being put together from its pieces
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return progressed, status.Error(codes.Unavailable, "the watch stream ended")
		}
		if err != nil {
			return progressed, err
		}
		progressed = true
		w.mu.Lock()
		last := w.last
		w.mu.Unlock()
		switch k := m.Kind.(type) {
		case *pb.WatchResponse_Snapshot:
			p := k.Snapshot
			if last != 0 {
				return progressed, status.Errorf(codes.Internal, "the node sent a snapshot (index %d) to a watch resuming from index %d", p.Index, last)
			}
			if snap == nil {
				snap = &WatchSnapshot{Index: p.Index}
			} else if p.Index != snap.Index {
				return progressed, status.Errorf(codes.Internal, "the pieces of a watch snapshot disagree on their index (%d, then %d)", snap.Index, p.Index)
			}
			snap.Held = append(snap.Held, lockInfos(p.Held)...)
			snap.Pending = append(snap.Pending, lockInfos(p.Pending)...)
			snap.Records = append(snap.Records, recordsOf(p.Records)...)
			if p.More {
				continue
			}
			if !w.yield(WatchEvent{Index: snap.Index, Snapshot: snap, Resync: w.resync}, snap.Index) {
				return progressed, nil
			}
			snap, w.resync = nil, false
		case *pb.WatchResponse_Changes:
			c := k.Changes
			if snap != nil || last == 0 {
				return progressed, status.Errorf(codes.Internal, "the node sent changes (index %d) before the watch's snapshot was complete", c.Index)
			}
			if c.Index <= last {
				continue // already yielded (a node that resumed from further back)
			}
			ev := WatchEvent{Index: c.Index, Changes: changesOf(c.Changes)}
			if c.Time != nil {
				ev.Time = c.Time.AsTime()
			}
			if !w.yield(ev, c.Index) {
				return progressed, nil
			}
		case *pb.WatchResponse_Progress:
			if last != 0 && k.Progress.Index > last {
				w.mu.Lock()
				w.last = k.Progress.Index
				w.mu.Unlock()
			}
		}
	}
}

// yield hands ev to Next and records index as received; false when the
// watch was closed first.
func (w *Watcher) yield(ev WatchEvent, index uint64) bool {
	select {
	case w.events <- ev:
		w.mu.Lock()
		w.last = index
		w.mu.Unlock()
		return true
	case <-w.ctx.Done():
		return false
	}
}

var causeNames = map[pb.Cause]string{
	pb.Cause_CAUSE_ABORTED: "aborted", pb.Cause_CAUSE_STOLEN: "stolen",
	pb.Cause_CAUSE_SESSION_CLOSED: "session-closed", pb.Cause_CAUSE_SESSION_EXPIRED: "session-expired",
}

func changesOf(in []*pb.Change) []Change {
	out := make([]Change, 0, len(in))
	for _, c := range in {
		ch := Change{Kind: ChangeKind(c.Kind), Names: c.Names, SessionID: c.SessionId, RequestID: c.RequestId,
			ClientID: c.ClientId, Label: c.Label, Token: c.Token, Cause: causeNames[c.Cause], Reason: c.Reason,
			Record: recordOf(c.Record), MaxHolders: int(c.MaxHolders)}
		switch c.Kind {
		case pb.Change_SESSION_ENDED, pb.Change_RECORD_SET, pb.Change_RECORD_DELETED:
		default:
			ch.Mode = Mode(c.Mode).String()
		}
		out = append(out, ch)
	}
	return out
}
