package lockcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// fakeWatch is a cluster's history as watch streams serve it: a snapshot
// of the selection at snapIndex, then one WatchChanges per index above it.
// Each stream it opens is scripted by the test: how many messages it
// sends before it fails, and with what.
type fakeWatch struct {
	mu        sync.Mutex
	snapIndex uint64
	last      uint64 // the newest index of the history
	oldest    uint64 // resuming below it is COMPACTED (0: never)
	opened    []*pb.WatchRequest
	endpoints []int
	// scripts[n] is how the n-th stream ends: after sending k messages it
	// fails with err (nil: io.EOF).
	scripts []streamScript
}

type streamScript struct {
	k   int
	err error
}

type fakeStream struct {
	ctx  context.Context
	msgs []*pb.WatchResponse
	end  error
}

func (s *fakeStream) Recv() (*pb.WatchResponse, error) {
	if len(s.msgs) == 0 {
		if s.end == nil {
			<-s.ctx.Done() // a live stream with nothing to say
			return nil, status.FromContextError(s.ctx.Err()).Err()
		}
		return nil, s.end
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func changesAt(i uint64) *pb.WatchResponse {
	return &pb.WatchResponse{Kind: &pb.WatchResponse_Changes{Changes: &pb.WatchChanges{Index: i,
		Changes: []*pb.Change{{Kind: pb.Change_GRANTED, Names: []string{"x"}, Token: i}}}}}
}

func compacted(oldest uint64) error {
	st, _ := status.New(codes.OutOfRange, fmt.Sprintf("resume from before %d", oldest)).WithDetails(&errdetails.ErrorInfo{
		Reason: pb.ErrorReason_COMPACTED.String(), Metadata: map[string]string{"oldest_index": fmt.Sprint(oldest)}})
	return st.Err()
}

func (f *fakeWatch) open(ctx context.Context, i int, req *pb.WatchRequest) (watchStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.opened)
	f.opened = append(f.opened, &pb.WatchRequest{FromIndex: req.FromIndex, MinIndex: req.MinIndex})
	f.endpoints = append(f.endpoints, i)
	sc := streamScript{k: 1 << 30}
	if n < len(f.scripts) {
		sc = f.scripts[n]
	}
	var msgs []*pb.WatchResponse
	if req.FromIndex == 0 {
		// A snapshot in two pieces, then the changes after it.
		msgs = append(msgs,
			&pb.WatchResponse{Kind: &pb.WatchResponse_Snapshot{Snapshot: &pb.WatchSnapshot{Index: f.snapIndex, More: true,
				Held: []*pb.LockInfo{{Name: "x", Token: f.snapIndex}}}}},
			&pb.WatchResponse{Kind: &pb.WatchResponse_Snapshot{Snapshot: &pb.WatchSnapshot{Index: f.snapIndex,
				Records: []*pb.Record{{Name: "x", Value: []byte("v")}}}}})
		for i := f.snapIndex + 1; i <= f.last; i++ {
			msgs = append(msgs, changesAt(i))
		}
	} else {
		if req.FromIndex < f.oldest {
			return &fakeStream{ctx: ctx, end: compacted(f.oldest)}, nil
		}
		// Resume from a little further back than asked, as a node might:
		// the Watcher drops what it has seen.
		from := max(req.FromIndex, 2) - 1
		for i := from + 1; i <= f.last; i++ {
			msgs = append(msgs, changesAt(i))
			if i%3 == 0 {
				msgs = append(msgs, &pb.WatchResponse{Kind: &pb.WatchResponse_Progress{Progress: &pb.WatchProgress{Index: i}}})
			}
		}
	}
	if sc.k < len(msgs) {
		msgs = msgs[:sc.k]
		if sc.err == nil {
			sc.err = io.EOF
		}
	}
	return &fakeStream{ctx: ctx, msgs: msgs, end: sc.err}, nil
}

func startFake(t *testing.T, f *fakeWatch) *Watcher {
	t.Helper()
	w := newWatcher(context.Background(), &pb.WatchRequest{Namespace: "ns"})
	cur := 0
	var mu sync.Mutex
	w.open = f.open
	w.current = func() int { mu.Lock(); defer mu.Unlock(); return cur }
	w.rotate = func(i int) {
		mu.Lock()
		defer mu.Unlock()
		if cur == i {
			cur = (i + 1) % 3
		}
	}
	w.backoff = time.Millisecond
	go w.run()
	t.Cleanup(w.Close)
	return w
}

func next(t *testing.T, w *Watcher) WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

// Streams that fail part-way, on one endpoint after another, are resumed
// from the last index received: the consumer sees the snapshot once, then
// every index once, in order.
func TestWatcherResumesWithoutGapOrDuplicate(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "node down")
	f := &fakeWatch{snapIndex: 10, last: 40, scripts: []streamScript{
		{k: 1, err: unavailable}, // fails between the snapshot's pieces: no snapshot yielded
		{k: 5, err: unavailable}, // snapshot + 3 changes
		{k: 4},                   // EOF: a node shutting down
		{k: 0, err: unavailable}, // fails at once
		{k: 7, err: status.Error(codes.Internal, "stream reset")},
	}}
	w := startFake(t, f)
	ev := next(t, w)
	if ev.Snapshot == nil || ev.Index != 10 || ev.Resync || len(ev.Snapshot.Held) != 1 || len(ev.Snapshot.Records) != 1 {
		t.Fatalf("first event: %+v", ev)
	}
	for want := uint64(11); want <= 40; want++ {
		ev := next(t, w)
		if ev.Snapshot != nil || ev.Index != want || len(ev.Changes) != 1 || ev.Changes[0].Token != want || ev.Changes[0].Kind != ChangeGranted {
			t.Fatalf("event for index %d: %+v", want, ev)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.opened[0].FromIndex != 0 || f.opened[1].FromIndex != 0 || f.opened[2].FromIndex != 13 {
		t.Fatalf("from indexes: %v, %v, %v", f.opened[0], f.opened[1], f.opened[2])
	}
	if f.endpoints[1] == f.endpoints[2] {
		t.Fatalf("the watch did not move to another endpoint: %v", f.endpoints)
	}
	for _, r := range f.opened[1:] {
		if r.MinIndex < r.FromIndex {
			t.Fatalf("min_index %d below from_index %d", r.MinIndex, r.FromIndex)
		}
	}
}

// A resume below the node's history is COMPACTED: the Watcher starts over
// from a snapshot, marked Resync, and goes on from there.
func TestWatcherResyncsAfterCompacted(t *testing.T) {
	f := &fakeWatch{snapIndex: 10, last: 12, scripts: []streamScript{{k: 3, err: status.Error(codes.Unavailable, "down")}}}
	w := startFake(t, f)
	if ev := next(t, w); ev.Snapshot == nil || ev.Resync {
		t.Fatalf("first: %+v", ev)
	}
	if ev := next(t, w); ev.Index != 11 {
		t.Fatalf("second: %+v", ev)
	}
	// Meanwhile the history moved on and was compacted past 11.
	f.mu.Lock()
	f.snapIndex, f.last, f.oldest = 50, 52, 40
	f.mu.Unlock()
	ev := next(t, w)
	if ev.Snapshot == nil || !ev.Resync || ev.Index != 50 {
		t.Fatalf("after COMPACTED: %+v", ev)
	}
	for want := uint64(51); want <= 52; want++ {
		if ev := next(t, w); ev.Index != want || ev.Resync {
			t.Fatalf("event %d: %+v", want, ev)
		}
	}
}

// A refusal (permission, a cluster without watch) stops the watch with
// the error; Close makes Next return ErrWatchClosed.
func TestWatcherStops(t *testing.T) {
	st, _ := status.New(codes.PermissionDenied, "namespace ns").WithDetails(&errdetails.ErrorInfo{Reason: pb.ErrorReason_PERMISSION.String()})
	f := &fakeWatch{snapIndex: 1, last: 1, scripts: []streamScript{{k: 0, err: st.Err()}}}
	w := startFake(t, f)
	if _, err := w.Next(context.Background()); !errors.Is(err, ErrPermission) {
		t.Fatalf("Next after a refusal: %v", err)
	}

	// A node of a release without Watch: ErrNotSupported, which observe
	// takes as its cue to poll query instead.
	f = &fakeWatch{snapIndex: 1, last: 1, scripts: []streamScript{{k: 0, err: status.Error(codes.Unimplemented, "unknown method Watch")}}}
	w = startFake(t, f)
	if _, err := w.Next(context.Background()); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Next against a node without Watch: %v", err)
	}

	w = startFake(t, &fakeWatch{snapIndex: 1, last: 1})
	next(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := w.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing to say: %v", err)
	}
	w.Close()
	if _, err := w.Next(context.Background()); !errors.Is(err, ErrWatchClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestMaxHoldersChecked(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want error
	}{
		{Options{MaxHolders: 2}, ErrNotSupported},
		{Options{Mode: Shared, MaxHolders: -1}, ErrInvalid},
		{Options{Mode: Shared, MaxHolders: 1 << 33}, ErrInvalid},
		{Options{Mode: Shared, MaxHolders: 3}, nil},
		{Options{}, nil},
	} {
		err := checkMaxHolders("sem", tc.opts)
		if !errors.Is(err, tc.want) || (tc.want != nil && !containsAll(err.Error(), "sem", fmt.Sprint(tc.opts.MaxHolders))) {
			t.Errorf("%+v: %v, want %v naming the name and the value", tc.opts, err, tc.want)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// NOT_HOLDER and COMPACTED map to their sentinels, with their metadata.
func TestRecordErrorsMap(t *testing.T) {
	st, _ := status.New(codes.FailedPrecondition, `name "x" is held by another grant`).WithDetails(&errdetails.ErrorInfo{
		Reason: pb.ErrorReason_NOT_HOLDER.String(), Metadata: map[string]string{"current_token": "42"}})
	err := fromStatus(st.Err())
	var e *Error
	if !errors.Is(err, ErrNotHolder) || !errors.As(err, &e) || e.CurrentToken() != 42 || !strings.Contains(err.Error(), "42") {
		t.Fatalf("NOT_HOLDER: %v", err)
	}
	err = fromStatus(compacted(17))
	if !errors.Is(err, ErrCompacted) || !errors.As(err, &e) || e.OldestIndex() != 17 {
		t.Fatalf("COMPACTED: %v", err)
	}
	// The same through a stream call's reply.
	err = fromStatus(replyErr(&pb.CallError{Code: int32(codes.FailedPrecondition), Message: "m", Reason: pb.ErrorReason_NOT_HOLDER, Metadata: map[string]string{"current_token": "7"}}))
	if !errors.Is(err, ErrNotHolder) || !errors.As(err, &e) || e.CurrentToken() != 7 {
		t.Fatalf("NOT_HOLDER in a CallReply: %v", err)
	}
	if !final(err) {
		t.Fatal("NOT_HOLDER is not final: a release with record would be retried forever")
	}
	// A feature the cluster's level does not have yet is NotSupportedError.
	st, _ = status.New(codes.FailedPrecondition, "records need protocol level 3; the cluster runs at 2").WithDetails(&errdetails.ErrorInfo{
		Reason: pb.ErrorReason_CLUSTER_LEVEL.String(), Metadata: map[string]string{"cluster_level": "2", "needed_level": "3"}})
	err = fromStatus(st.Err())
	if !errors.Is(err, ErrNotSupported) || errors.Is(err, ErrSessionClosed) || !final(err) {
		t.Fatalf("CLUSTER_LEVEL: %v (ErrNotSupported %v)", err, errors.Is(err, ErrNotSupported))
	}
}

// A grant carries its names' records to the Lock; one learned from a sync
// has none yet (acquire reads them).
func TestGrantCarriesRecords(t *testing.T) {
	s := testSession()
	r := s.newRequest(context.Background(), []string{"x", "y"}, Exclusive)
	s.event(&pb.Event{Seq: 1, Index: 5, Kind: pb.Event_GRANTED, RequestId: r.id, Token: 5,
		Records: []*pb.Record{{Name: "y", Value: []byte("left"), Token: 3, Index: 4}}})
	<-r.done
	l := r.lock
	if rec, ok := l.Record("y"); !ok || string(rec.Value) != "left" || rec.Token != 3 || !l.recordsKnown {
		t.Fatalf("Record(y): %+v %v", rec, ok)
	}
	if _, ok := l.Record("x"); ok {
		t.Fatal("Record(x) found")
	}
	r2 := s.newRequest(context.Background(), []string{"z"}, Exclusive)
	s.sync(&pb.Synced{Index: 9, EventSeq: 1, Requests: []*pb.RequestState{{RequestId: r2.id, Status: pb.Status_STATUS_GRANTED, Token: 8}}})
	<-r2.done
	if r2.lock.recordsKnown {
		t.Fatal("a grant from a sync claims to know its records")
	}
	if err := r2.lock.recordCheck("x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("write of a name not held: %v", err)
	}
}
