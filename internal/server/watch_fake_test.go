package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// Records, semaphores and watches (issue 26) on the fake cluster.

func metaOf(err error) map[string]string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Metadata
		}
	}
	return nil
}

// lock takes name exclusively for s (request id id) through n and returns
// the grant.
func (n *fakeNode) lock(t *testing.T, s *pb.OpenSessionResponse, ns string, id uint64, name string) *pb.LockResponse {
	t.Helper()
	r, err := n.request(testCtx(t), s, ns, id, name)
	if err != nil {
		t.Fatalf("request %d of %s via %s: %v", id, name, n.id, err)
	}
	return r
}

func (n *fakeNode) setRecord(ctx context.Context, s *pb.OpenSessionResponse, ns string, id, token uint64, name, value string, release bool) (*pb.SetRecordResponse, error) {
	return n.locks.SetRecord(ctx, &pb.SetRecordRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id,
		Token: token, Name: name, Value: []byte(value), Release: release})
}

// watched is what a watch received: its snapshot (merged from its pieces)
// and its changes.
type watched struct {
	snapshot *pb.WatchSnapshot
	changes  []*pb.WatchChanges
	last     uint64 // the highest index a change or a progress named
}

// watchUntil opens a watch on n and reads it until it has named the index
// until returns (by a change or a progress; 0: not known yet), or failed.
func (n *fakeNode) watchUntil(t *testing.T, req *pb.WatchRequest, until func() uint64) (*watched, error) {
	return n.watchNotify(t, req, until, nil)
}

// watchNotify is watchUntil that closes snapped once the snapshot is in.
func (n *fakeNode) watchNotify(t *testing.T, req *pb.WatchRequest, until func() uint64, snapped chan struct{}) (*watched, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	st, err := n.locks.Watch(ctx, req)
	if err != nil {
		return nil, err
	}
	w := &watched{}
	pieces := 0
	for {
		m, err := st.Recv()
		if err != nil {
			return w, err
		}
		switch k := m.Kind.(type) {
		case *pb.WatchResponse_Snapshot:
			if w.snapshot == nil {
				w.snapshot = &pb.WatchSnapshot{Index: k.Snapshot.Index}
			} else if k.Snapshot.Index != w.snapshot.Index || pieces == 0 {
				t.Fatalf("snapshot piece at index %d after %d pieces at %d", k.Snapshot.Index, pieces, w.snapshot.Index)
			}
			if len(w.changes) > 0 {
				t.Fatal("a snapshot piece after changes")
			}
			w.snapshot.Held = append(w.snapshot.Held, k.Snapshot.Held...)
			w.snapshot.Pending = append(w.snapshot.Pending, k.Snapshot.Pending...)
			w.snapshot.Records = append(w.snapshot.Records, k.Snapshot.Records...)
			if pieces++; !k.Snapshot.More {
				pieces = 0
				w.last = k.Snapshot.Index
				if snapped != nil {
					close(snapped)
				}
			}
		case *pb.WatchResponse_Changes:
			if pieces > 0 {
				t.Fatal("changes before the snapshot's last piece")
			}
			if k.Changes.Index <= w.last {
				t.Fatalf("changes at index %d after index %d: out of order or repeated", k.Changes.Index, w.last)
			}
			w.changes = append(w.changes, k.Changes)
			w.last = k.Changes.Index
		case *pb.WatchResponse_Progress:
			if k.Progress.Index < w.last {
				t.Fatalf("progress %d after index %d", k.Progress.Index, w.last)
			}
			w.last = k.Progress.Index
		}
		if u := until(); u > 0 && w.last >= u { // 0: not known yet
			return w, nil
		}
	}
}

// expectedChanges is what a watch of sel after index after must receive up
// to index upTo, by node n's history (every node's is the log's).
func expectedChanges(t *testing.T, n *fakeNode, req *pb.WatchRequest, after, upTo uint64) []*pb.WatchChanges {
	t.Helper()
	sel, err := n.srv.watchSelection(req)
	if err != nil {
		t.Fatal(err)
	}
	batches, _, _, oldest, compacted := n.srv.hist.Next(after, 1<<30)
	if compacted {
		t.Fatalf("%s's history starts after %d, not at %d", n.id, oldest, after)
	}
	var out []*pb.WatchChanges
	for _, m := range sel.changes(batches) {
		if c := m.GetChanges(); c.Index <= upTo {
			out = append(out, c)
		}
	}
	return out
}

func sameChanges(t *testing.T, what string, got, want []*pb.WatchChanges) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries' changes, want %d:\n got %v\nwant %v", what, len(got), len(want), indices(got), indices(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: entry %d differs:\n got %v\nwant %v", what, i, got[i], want[i])
		}
	}
}

func indices(cs []*pb.WatchChanges) []uint64 {
	var out []uint64
	for _, c := range cs {
		out = append(out, c.Index)
	}
	return out
}

func kinds(cs []*pb.WatchChanges) []string {
	var out []string
	for _, c := range cs {
		for _, ch := range c.Changes {
			out = append(out, ch.Kind.String()+":"+strings.Join(ch.Names, ","))
		}
	}
	return out
}

// A watch without from_index starts with a linearizable snapshot of the
// namespace (held, pending, records), on a follower too, then streams
// every change after its index, entry by entry, with no gap and no
// duplicate; a watch resumed from that index on another node receives the
// same changes. Records travel in grants (LockResponse, the queued
// holder's event) and GetRecord reads them through any node.
func TestWatchSnapshotThenChangesAndResume(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.WatchProgressInterval = 20 * time.Millisecond }})
	n1, n2, n3 := fc.node("n1"), fc.node("n2"), fc.node("n3")
	ctx := testCtx(t)
	const ns = "w"
	a, b := n1.open(t, ns), n1.open(t, ns)
	ga := n1.lock(t, a, ns, 1, "x")
	if ga.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("a's request: %v", ga)
	}
	sb, _ := n2.attach(t, b, ns, ga.Index)
	if qb := n1.lock(t, b, ns, 1, "x"); qb.Status != pb.Status_STATUS_QUEUED {
		t.Fatalf("b's request: %v", qb)
	}
	w1, err := n1.setRecord(ctx, a, ns, 1, ga.Token, "x", "v1", false)
	if err != nil || w1.Record == nil || string(w1.Record.Value) != "v1" || w1.Record.Token != ga.Token || w1.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("a's record write: %v, %v", w1, err)
	}
	if r, err := n3.locks.GetRecord(ctx, &pb.GetRecordRequest{Namespace: ns, Name: "x"}); err != nil || string(r.GetRecord().GetValue()) != "v1" ||
		r.Record.Token != ga.Token || r.Record.Index != w1.Index || r.Index < w1.Index {
		t.Fatalf("GetRecord via a follower: %v, %v", r, err)
	}
	if r, err := n2.locks.GetRecord(ctx, &pb.GetRecordRequest{Namespace: ns, Name: "none"}); err != nil || r.Record != nil {
		t.Fatalf("GetRecord of a name without one: %v, %v", r, err)
	}
	if q, err := n2.locks.Query(ctx, &pb.QueryRequest{Namespace: ns}); err != nil || len(q.Records) != 1 || string(q.Records[0].Value) != "v1" {
		t.Fatalf("Query's records: %v, %v", q, err)
	}

	// The snapshot, on a follower: a's lock, b's wait, the record.
	var last atomic.Uint64
	req := &pb.WatchRequest{Namespace: ns}
	done, snapped := make(chan *watched, 1), make(chan struct{})
	go func() {
		w, err := n2.watchNotify(t, req, func() uint64 { return last.Load() }, snapped)
		if err != nil {
			t.Errorf("watch: %v", err)
		}
		done <- w
	}()
	select {
	case <-snapped:
	case w := <-done:
		t.Fatalf("the watch ended before its snapshot: %v", w)
	}
	// Changes after the snapshot: a's release grants b (with a's record),
	// b writes and releases in one entry, a locks y.
	rel, err := n1.locks.Release(ctx, &pb.ReleaseRequest{Namespace: ns, SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 1})
	if err != nil {
		t.Fatal(err)
	}
	ev := sb.event()
	if ev.Kind != pb.Event_GRANTED || len(ev.Records) != 1 || string(ev.Records[0].Value) != "v1" {
		t.Fatalf("b's grant event: %v; want it to carry a's record", ev)
	}
	w2, err := n2.setRecord(ctx, b, ns, 1, ev.Token, "x", "v2", true)
	if err != nil || w2.Status != pb.Status_STATUS_RELEASED {
		t.Fatalf("b's write and release: %v, %v", w2, err)
	}
	gy := n3.lock(t, a, ns, 2, "y")
	last.Store(gy.Index)
	w := <-done
	if w == nil || w.snapshot == nil {
		t.Fatal("no snapshot")
	}
	s := w.snapshot
	if s.Index < w1.Index || s.Index >= rel.Index || len(s.Held) != 1 || s.Held[0].SessionId != a.SessionId || len(s.Pending) != 1 ||
		s.Pending[0].SessionId != b.SessionId || len(s.Records) != 1 || string(s.Records[0].Value) != "v1" {
		t.Fatalf("snapshot: %v (a's write at %d, the release at %d)", s, w1.Index, rel.Index)
	}
	want := expectedChanges(t, n1, req, s.Index, gy.Index)
	sameChanges(t, "the watch after its snapshot", w.changes, want)
	if len(want) < 3 || want[0].Index != rel.Index {
		t.Fatalf("expected changes %v (%v): want the release at %d first", indices(want), kinds(want), rel.Index)
	}
	// Resumed from the snapshot's index on another node: the same changes.
	r, err := n3.watchUntil(t, &pb.WatchRequest{Namespace: ns, FromIndex: s.Index}, func() uint64 { return gy.Index })
	if err != nil || r.snapshot != nil {
		t.Fatalf("resumed watch: %v (snapshot %v)", err, r.snapshot)
	}
	sameChanges(t, "the resumed watch", r.changes, want)
}

// A resume below the oldest index a node keeps fails at once, OutOfRange
// COMPACTED, naming the oldest index; a resume at it works.
func TestWatchResumeBelowTheHistoryIsCompacted(t *testing.T) {
	fc := newFakeCluster(t, 2, fakeOptions{configure: func(c *Config) { c.WatchHistory = 4 }})
	n1, n2 := fc.node("n1"), fc.node("n2")
	const ns = "c"
	s := n1.open(t, ns)
	var last *pb.LockResponse
	for i := uint64(1); i <= 10; i++ {
		last = n1.lock(t, s, ns, i, "n"+strconv.FormatUint(i, 10))
	}
	oldest := n2.srv.hist.Oldest()
	if oldest == 0 {
		t.Fatal("the history dropped nothing")
	}
	_, err := n2.watchUntil(t, &pb.WatchRequest{Namespace: ns, FromIndex: 1}, func() uint64 { return last.Index })
	if status.Code(err) != codes.OutOfRange || reasonOf(err) != pb.ErrorReason_COMPACTED || metaOf(err)["oldest_index"] != strconv.FormatUint(oldest, 10) ||
		!strings.Contains(err.Error(), "from index 1") {
		t.Fatalf("resume from 1: %v (%v); want OutOfRange COMPACTED naming oldest_index %d", err, metaOf(err), oldest)
	}
	w, err := n2.watchUntil(t, &pb.WatchRequest{Namespace: ns, FromIndex: oldest}, func() uint64 { return last.Index })
	if err != nil {
		t.Fatal(err)
	}
	sameChanges(t, "resume at the oldest index", w.changes, expectedChanges(t, n2, &pb.WatchRequest{Namespace: ns}, oldest, last.Index))
}

// heldWatchStream is a watch's server stream whose Send waits for the
// test: a client that stopped reading.
type heldWatchStream struct {
	grpc.ServerStream
	ctx     context.Context
	sent    chan *pb.WatchResponse
	release chan struct{}
}

func (s *heldWatchStream) Context() context.Context { return s.ctx }
func (s *heldWatchStream) Send(m *pb.WatchResponse) error {
	s.sent <- m
	<-s.release
	return nil
}

// A watcher that falls behind the history (its client took nothing while
// more changes than the history keeps were applied) is cut with
// COMPACTED, saying it fell behind: never a silent gap.
func TestWatchFallingBehindIsCompacted(t *testing.T) {
	fc := newFakeCluster(t, 1, fakeOptions{configure: func(c *Config) { c.WatchHistory = 4 }})
	n1 := fc.node("n1")
	const ns = "fb"
	s := n1.open(t, ns)
	st := &heldWatchStream{ctx: testCtx(t), sent: make(chan *pb.WatchResponse, 100), release: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- n1.srv.Watch(&pb.WatchRequest{Namespace: ns, FromIndex: n1.m.LastIndex()}, st) }()
	eventually(t, "the watch to start", func() bool { return n1.srv.Watches() == 1 })
	first := n1.lock(t, s, ns, 1, "a")
	if m := <-st.sent; m.GetChanges().GetIndex() != first.Index {
		t.Fatalf("first message %v, want the changes at %d", m, first.Index)
	}
	// The client takes nothing more while 10 entries pass.
	for i := uint64(2); i <= 11; i++ {
		n1.lock(t, s, ns, i, "n"+strconv.FormatUint(i, 10))
	}
	close(st.release)
	err := <-errc
	if status.Code(err) != codes.OutOfRange || reasonOf(err) != pb.ErrorReason_COMPACTED || !strings.Contains(err.Error(), "fell behind") ||
		metaOf(err)["oldest_index"] != strconv.FormatUint(n1.srv.hist.Oldest(), 10) {
		t.Fatalf("the watch ended with %v (%v); want COMPACTED: it fell behind", err, metaOf(err))
	}
}

// A watch with nothing to send says how far it has got; selections by
// prefix and by list receive only the changes of their names, and only a
// watch of every name receives a session's end.
func TestWatchProgressAndSelections(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) { c.WatchProgressInterval = 20 * time.Millisecond }})
	n1, n2, n3 := fc.node("n1"), fc.node("n2"), fc.node("n3")
	const ns = "sel"
	from := n1.m.LastIndex()
	// Progress alone: nothing happens in the namespace.
	w, err := n2.watchUntil(t, &pb.WatchRequest{Namespace: ns, FromIndex: from}, func() uint64 { return from })
	if err != nil || len(w.changes) != 0 || w.last < from {
		t.Fatalf("an idle watch: %v, %v", w, err)
	}
	a := n1.open(t, ns)
	other := n1.open(t, "elsewhere")
	start := n1.m.LastIndex()
	var last atomic.Uint64
	type result struct {
		w   *watched
		err error
	}
	reqs := map[string]*pb.WatchRequest{
		"prefix": {Namespace: ns, Prefix: "p/", FromIndex: start},
		"names":  {Namespace: ns, Names: []string{"q/1", "z"}, FromIndex: start},
		"all":    {Namespace: ns, FromIndex: start},
	}
	results := map[string]chan result{}
	for k, req := range reqs {
		results[k] = make(chan result, 1)
		node := n2
		if k == "names" {
			node = n3
		}
		go func() {
			w, err := node.watchUntil(t, req, func() uint64 { return last.Load() })
			results[k] <- result{w, err}
		}()
	}
	eventually(t, "the watches to start", func() bool { return n2.srv.Watches()+n3.srv.Watches() == 3 })
	n1.lock(t, a, ns, 1, "p/1")
	n1.lock(t, a, ns, 2, "q/1")
	n1.lock(t, other, "elsewhere", 1, "p/1") // another namespace: never seen
	n1.lock(t, a, ns, 3, "p/2")
	closed, err := n1.locks.CloseSession(testCtx(t), &pb.CloseSessionRequest{Namespace: ns, SessionId: a.SessionId, SessionSecret: a.Secret})
	if err != nil {
		t.Fatal(err)
	}
	last.Store(closed.Index)
	got := map[string]*watched{}
	for k, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("%s watch: %v", k, r.err)
		}
		got[k] = r.w
		sameChanges(t, k+" watch", r.w.changes, expectedChanges(t, n1, reqs[k], start, closed.Index))
	}
	for k, w := range got {
		ended := false
		for _, c := range w.changes {
			for _, ch := range c.Changes {
				if ch.Kind == pb.Change_SESSION_ENDED {
					ended = true
					continue
				}
				match := true
				switch k {
				case "prefix":
					match = strings.HasPrefix(ch.Names[0], "p/")
				case "names":
					match = ch.Names[0] == "q/1"
				}
				if !match {
					t.Errorf("%s watch got %v", k, ch)
				}
			}
		}
		if ended != (k == "all") {
			t.Errorf("%s watch: session end seen %v", k, ended)
		}
	}
	if ks := kinds(got["prefix"].changes); len(ks) != 4 { // p/1, p/2 granted, then released
		t.Errorf("prefix watch: %v, want p/1 and p/2 granted and released", ks)
	}
	if ks := kinds(got["names"].changes); len(ks) != 2 {
		t.Errorf("names watch: %v, want q/1 granted and released", ks)
	}
}

// A watch's selection is checked, with errors naming the bad value.
func TestWatchSelectionErrors(t *testing.T) {
	fc := newFakeCluster(t, 1, fakeOptions{})
	n1 := fc.node("n1")
	many := make([]string, maxWatchNames+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		req  *pb.WatchRequest
		want string
	}{
		{&pb.WatchRequest{Namespace: "s", Prefix: "a", Names: []string{"b"}}, "not both"},
		{&pb.WatchRequest{Namespace: "s", Names: many}, "over the limit"},
		{&pb.WatchRequest{Namespace: "s", Prefix: strings.Repeat("x", 2000)}, "over the name limit"},
		{&pb.WatchRequest{Namespace: ""}, "namespace"},
	} {
		_, err := n1.watchUntil(t, tc.req, func() uint64 { return 1 })
		if c := status.Code(err); (c != codes.InvalidArgument && c != codes.ResourceExhausted) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("watch %v: %v; want an error saying %q", tc.req, err, tc.want)
		}
	}
}

// A record write by a session that lost its lock (stolen) is refused
// FailedPrecondition NOT_HOLDER, naming the name's current token, unary
// and on the session stream; the holder's write on the stream works.
func TestSetRecordNotHolder(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	n1, n2 := fc.node("n1"), fc.node("n2")
	ctx := testCtx(t)
	const ns = "nh"
	a, b := n1.open(t, ns), n1.open(t, ns)
	ga := n1.lock(t, a, ns, 1, "x")
	gb, err := n1.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: b.SessionId, SessionSecret: b.Secret, RequestId: 1,
		Names: []string{"x"}, Mode: pb.Mode_MODE_EXCLUSIVE, Steal: true})
	if err != nil || gb.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("steal: %v, %v", gb, err)
	}
	_, err = n2.setRecord(ctx, a, ns, 1, ga.Token, "x", "late", false)
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != pb.ErrorReason_NOT_HOLDER || metaOf(err)["current_token"] != strconv.FormatUint(gb.Token, 10) {
		t.Fatalf("the old holder's write: %v (%v); want NOT_HOLDER naming token %d", err, metaOf(err), gb.Token)
	}
	if r, err := n1.locks.GetRecord(ctx, &pb.GetRecordRequest{Namespace: ns, Name: "x"}); err != nil || r.Record != nil {
		t.Fatalf("the refused write changed the record: %v, %v", r, err)
	}
	sb, _ := n2.attach(t, b, ns, gb.Index)
	sb.call(&pb.StreamCall{Id: 7, Call: &pb.StreamCall_SetRecord{SetRecord: &pb.SetRecordRequest{Namespace: ns, SessionId: b.SessionId,
		SessionSecret: b.Secret, RequestId: 1, Token: gb.Token, Name: "x", Value: []byte("b")}}})
	if r := sb.reply(); r.Id != 7 || string(r.GetSetRecord().GetRecord().GetValue()) != "b" {
		t.Fatalf("the holder's write on its stream: %v", r)
	}
	sa, _ := n2.attach(t, a, ns, gb.Index)
	sa.call(&pb.StreamCall{Id: 8, Call: &pb.StreamCall_SetRecord{SetRecord: &pb.SetRecordRequest{Namespace: ns, SessionId: a.SessionId,
		SessionSecret: a.Secret, RequestId: 1, Token: ga.Token, Name: "x", Value: []byte("a")}}})
	if r := sa.reply(); r.GetError().GetReason() != pb.ErrorReason_NOT_HOLDER || r.GetError().GetMetadata()["current_token"] != strconv.FormatUint(gb.Token, 10) {
		t.Fatalf("the old holder's write on its stream: %v", r)
	}
}

// While a member runs level 2, the gate refuses what needs level 3 (a
// record write, a request with max_holders) FailedPrecondition
// CLUSTER_LEVEL, naming the feature and the member, and changes nothing;
// a plain request passes.
func TestLevelGateRefusesRecordsAndSemaphores(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) {
		c.ProbeInterval = 5 * time.Millisecond
		if c.Self.ID == "n3" {
			c.ProtocolLevel = fsm.LevelClusterSecret
		}
	}})
	n1, n2 := fc.node("n1"), fc.node("n2")
	eventually(t, "the leader hears n3's level", func() bool { return levelsSeen(t, fc, "n1")["n3"] == fsm.LevelClusterSecret })
	ctx := testCtx(t)
	const ns = "lv"
	a := n1.open(t, ns)
	g := n2.lock(t, a, ns, 1, "x")
	before := fc.entries()
	_, err := n2.setRecord(ctx, a, ns, 1, g.Token, "x", "v", false)
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != pb.ErrorReason_CLUSTER_LEVEL || metaOf(err)["lowest_member"] != "n3" {
		t.Fatalf("a record write at cluster level 2: %v (%v)", err, metaOf(err))
	}
	_, err = n2.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 2,
		Names: []string{"s"}, Mode: pb.Mode_MODE_SHARED, MaxHolders: 2})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != pb.ErrorReason_CLUSTER_LEVEL || !strings.Contains(err.Error(), "semaphores") {
		t.Fatalf("a semaphore request at cluster level 2: %v", err)
	}
	if fc.entries() != before {
		t.Fatal("a refused command reached the log")
	}
	if r, err := n2.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 3,
		Names: []string{"s"}, Mode: pb.Mode_MODE_SHARED}); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("a shared request without max_holders: %v, %v", r, err)
	}
}

// Semaphores: LockRequest.max_holders reaches the fsm, and Query shows it.
func TestMaxHoldersInQuery(t *testing.T) {
	fc := newFakeCluster(t, 2, fakeOptions{})
	n1, n2 := fc.node("n1"), fc.node("n2")
	ctx := testCtx(t)
	const ns = "sem"
	var sessions []*pb.OpenSessionResponse
	for range 3 {
		sessions = append(sessions, n1.open(t, ns))
	}
	var statuses []pb.Status
	for _, s := range sessions {
		r, err := n2.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 1,
			Names: []string{"pool"}, Mode: pb.Mode_MODE_SHARED, MaxHolders: 2})
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, r.Status)
	}
	if statuses[0] != pb.Status_STATUS_GRANTED || statuses[1] != pb.Status_STATUS_GRANTED || statuses[2] != pb.Status_STATUS_QUEUED {
		t.Fatalf("three requests of a semaphore of 2: %v", statuses)
	}
	q, err := n2.locks.Query(ctx, &pb.QueryRequest{Namespace: ns})
	if err != nil || len(q.Held) != 2 || len(q.Pending) != 1 || q.Held[0].MaxHolders != 2 || q.Pending[0].MaxHolders != 2 {
		t.Fatalf("query: %v, %v", q, err)
	}
}

// During a rolling upgrade the leader may run the release before records,
// which has no GetRecord: a follower of this release still serves
// GetRecord and a watch's snapshot linearizably, at the index of the
// leader's Query. Records also travel in QueryPages, and a watch's large
// snapshot comes in pieces.
func TestReadsOnAFollowerOfAnOlderLeader(t *testing.T) {
	smallPages(t)
	fc := newFakeCluster(t, 2, fakeOptions{})
	n1, n2 := fc.node("n1"), fc.node("n2")
	ctx := testCtx(t)
	const ns = "old"
	a := n1.open(t, ns)
	var last *pb.SetRecordResponse
	for i := uint64(1); i <= 20; i++ {
		name := fmt.Sprintf("name-%02d", i)
		g := n1.lock(t, a, ns, i, name)
		var err error
		if last, err = n1.setRecord(ctx, a, ns, i, g.Token, name, strings.Repeat("v", 300), false); err != nil {
			t.Fatal(err)
		}
	}
	old := func(method string) error {
		if method == pb.Locks_GetRecord_FullMethodName {
			return status.Error(codes.Unimplemented, "unknown method GetRecord")
		}
		return nil
	}
	n1.refuse.Store(&old)
	// n2 lags: the read must wait until it has applied the leader's read
	// index, which the leader's Query gives once its GetRecord failed.
	fc.hold("n2", true)
	g := n1.lock(t, a, ns, 21, "name-21")
	if _, err := n1.setRecord(ctx, a, ns, 21, g.Token, "name-21", "new", false); err != nil {
		t.Fatal(err)
	}
	asked := fc.forwarded["n1"].Load()
	go func() {
		eventually(t, "n2 to ask the leader's GetRecord, then its Query", func() bool { return fc.forwarded["n1"].Load() >= asked+2 })
		fc.hold("n2", false)
	}()
	r, err := n2.locks.GetRecord(ctx, &pb.GetRecordRequest{Namespace: ns, Name: "name-21"})
	if err != nil || string(r.GetRecord().GetValue()) != "new" {
		t.Fatalf("GetRecord on a lagging n2 with an old leader: %v, %v", r, err)
	}
	last, _ = n1.setRecord(ctx, a, ns, 21, g.Token, "name-21", "newer", false)
	w, err := n2.watchUntil(t, &pb.WatchRequest{Namespace: ns, Prefix: "name-"}, func() uint64 { return last.Index })
	if err != nil || w.snapshot == nil || w.snapshot.Index < last.Index || len(w.snapshot.Held) != 21 || len(w.snapshot.Records) != 21 {
		t.Fatalf("a watch's snapshot on n2 with an old leader: %v, %v", w.snapshot, err)
	}
	st, err := n2.locks.QueryPages(ctx, &pb.QueryRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	pages, records := 0, 0
	for {
		p, err := st.Recv()
		if err != nil {
			break
		}
		pages++
		records += len(p.Records)
	}
	if pages < 2 || records != 21 {
		t.Fatalf("QueryPages: %d pages, %d records; want several pages and 21 records", pages, records)
	}
}
