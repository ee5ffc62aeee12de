package server

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Syncs and Query answers larger than a message go in pieces (pages.go),
// on servers over the in-memory replica (fake_test.go), with pages of 2
// KiB instead of 1 MiB.

// smallPages sets pageBytes to 2 KiB for the test.
func smallPages(t *testing.T) {
	old := pageBytes
	pageBytes = 2 << 10
	t.Cleanup(func() { pageBytes = old })
}

// requestBig makes request id of session s with a scope of 8 names of 200
// bytes: about 1.6 KB of sync, so each piece holds one or two.
func requestBig(t *testing.T, n *fakeNode, s *pb.OpenSessionResponse, ns string, id uint64) *pb.LockResponse {
	t.Helper()
	names := make([]string, 8)
	for j := range names {
		p := fmt.Sprintf("r%d-%d-", id, j)
		names[j] = p + strings.Repeat("x", 200-len(p))
	}
	r, err := n.locks.Request(testCtx(t), &pb.LockRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id,
		Names: names, Mode: pb.Mode_MODE_EXCLUSIVE})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// attachRaw attaches session s's stream on node n, announcing chunked sync
// or not, and returns the stream and the Synced messages up to the one
// without more.
func attachRaw(t *testing.T, n *fakeNode, s *pb.OpenSessionResponse, ns string, chunked bool) (*fakeStream, []*pb.Synced) {
	t.Helper()
	st, err := n.locks.Session(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret,
		ChunkedSync: chunked}}}); err != nil {
		t.Fatal(err)
	}
	var pieces []*pb.Synced
	for {
		m, err := st.Recv()
		if err != nil || m.GetSynced() == nil {
			t.Fatalf("attach on %s, after %d pieces: %v, %v: want a Synced", n.id, len(pieces), m, err)
		}
		pieces = append(pieces, m.GetSynced())
		if !m.GetSynced().More {
			return &fakeStream{t: t, st: st}, pieces
		}
	}
}

// A client that announces chunked sync gets its session's sync in pieces
// of about pageBytes, every one with the sync's index, event seq, TTL and
// calls, all but the last with more set, their requests together the
// whole sync; events follow the last piece. A client that does not
// announce it (one written before the pieces existed) gets the whole sync
// in one Synced, more unset, however large (issue 24, finding 6).
func TestSyncInPiecesOnlyToAClientThatAssemblesThem(t *testing.T) {
	smallPages(t)
	fc := newFakeCluster(t, 3, fakeOptions{})
	const ns = "pieces"
	s := fc.node("n1").open(t, ns)
	const n = 20
	for id := uint64(1); id <= n; id++ {
		requestBig(t, fc.node("n1"), s, ns, id)
	}
	for _, via := range []string{"n1", "n2"} {
		_, old := attachRaw(t, fc.node(via), s, ns, false)
		if len(old) != 1 || len(old[0].Requests) != n || proto.Size(old[0]) <= pageBytes {
			t.Fatalf("old-style attach via %s: %d Synced messages, the first with %d requests: want one with all %d (over %d bytes)",
				via, len(old), len(old[0].Requests), n, pageBytes)
		}
		whole := old[0]
		st, pieces := attachRaw(t, fc.node(via), s, ns, true)
		if len(pieces) < 5 {
			t.Fatalf("chunked attach via %s: %d pieces; want pieces of at most about %d bytes", via, len(pieces), pageBytes)
		}
		var got []*pb.RequestState
		for i, p := range pieces {
			if p.Index != whole.Index || p.EventSeq != whole.EventSeq || !proto.Equal(p.Ttl, whole.Ttl) || p.Calls != whole.Calls || p.More != (i < len(pieces)-1) {
				t.Fatalf("chunked attach via %s: piece %d is %v; the whole sync %v", via, i, p, whole)
			}
			if len(p.Requests) == 0 || proto.Size(p) > pageBytes+512 {
				t.Fatalf("chunked attach via %s: piece %d has %d requests, %d bytes", via, i, len(p.Requests), proto.Size(p))
			}
			got = append(got, p.Requests...)
		}
		if !proto.Equal(&pb.Synced{Requests: got}, &pb.Synced{Requests: whole.Requests}) {
			t.Fatalf("chunked attach via %s: the pieces' requests differ from the whole sync's", via)
		}
		// The stream goes on as usual after the last piece.
		st.acked()
	}
	// A small sync is one message either way.
	small := fc.node("n1").open(t, ns)
	if _, pieces := attachRaw(t, fc.node("n2"), small, ns, true); len(pieces) != 1 || len(pieces[0].Requests) != 0 {
		t.Fatalf("chunked attach of an empty session: %v", pieces)
	}
}

// QueryPages answers what Query answers, taken at one index, in pages of
// about pageBytes, through the leader and through a follower (which relays
// the leader's pages); an empty namespace is one empty page with the
// index.
func TestQueryPagesAnswerWhatQueryAnswers(t *testing.T) {
	smallPages(t)
	fc := newFakeCluster(t, 3, fakeOptions{})
	const ns = "paged"
	a, b := fc.node("n1").open(t, ns), fc.node("n2").open(t, ns)
	for id := uint64(1); id <= 10; id++ {
		requestBig(t, fc.node("n1"), a, ns, id)
		requestBig(t, fc.node("n2"), b, ns, id) // the same names: queued
	}
	for _, via := range []string{"n1", "n2", "n3"} {
		ctx := testCtx(t)
		whole, err := fc.node(via).locks.Query(ctx, &pb.QueryRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		st, err := fc.node(via).locks.QueryPages(ctx, &pb.QueryRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		got := &pb.QueryResponse{Index: whole.Index}
		pages := 0
		for {
			p, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("QueryPages via %s: %v", via, err)
			}
			pages++
			if p.Index != whole.Index || proto.Size(p) > pageBytes+512 {
				t.Fatalf("QueryPages via %s: page %d at index %d, %d bytes; Query at %d", via, pages, p.Index, proto.Size(p), whole.Index)
			}
			got.Held = append(got.Held, p.Held...)
			got.Pending = append(got.Pending, p.Pending...)
		}
		if len(whole.Held) != 80 || len(whole.Pending) != 80 || pages < 10 || !proto.Equal(got, whole) {
			t.Fatalf("QueryPages via %s: %d pages, %d held and %d pending; Query: %d held, %d pending (or they differ)",
				via, pages, len(got.Held), len(got.Pending), len(whole.Held), len(whole.Pending))
		}
	}
	st, err := fc.node("n3").locks.QueryPages(testCtx(t), &pb.QueryRequest{Namespace: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Recv()
	if err != nil || p.Index == 0 || len(p.Held)+len(p.Pending) != 0 {
		t.Fatalf("QueryPages of an empty namespace: %v, %v; want one empty page with the index", p, err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("QueryPages of an empty namespace: a second page, %v", err)
	}
	st, err = fc.node("n2").locks.QueryPages(testCtx(t), &pb.QueryRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("QueryPages without a namespace: %v; want InvalidArgument", err)
	}
}

// A release of a request id that the session never made is refused
// before the log, through the leader and through a follower, with the
// error Apply gives it; a release of a request the caller has just made,
// through a follower that has not applied it yet, still releases it: the
// follower does not refuse what its state may be behind on (issue 24,
// finding 6).
func TestReleaseOfAnUnknownRequestIsRefusedBeforeTheLog(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	const ns = "rel"
	s := fc.node("n1").open(t, ns)
	if r, err := fc.node("n1").request(testCtx(t), s, ns, 1, "x"); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("request: %v, %v", r, err)
	}
	before := fc.entries()
	for _, via := range []string{"n1", "n2"} {
		_, err := fc.node(via).locks.Release(testCtx(t), &pb.ReleaseRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 99})
		want := fmt.Sprintf("session %d has no lock for request 99", s.SessionId)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want || reasonOf(err) != pb.ErrorReason_INVALID {
			t.Fatalf("release of an unknown request via %s: %v; want InvalidArgument %q", via, err, want)
		}
	}
	if got := fc.entries(); got != before {
		t.Fatalf("the refused releases added %d log entries", got-before)
	}

	// A request the lagging follower has not applied: released through it.
	fc.hold("n3", true)
	r, err := fc.node("n1").request(testCtx(t), s, ns, 2, "y")
	if err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("request: %v, %v", r, err)
	}
	rel, err := fc.node("n3").locks.Release(testCtx(t), &pb.ReleaseRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 2})
	if err != nil || rel.Status != pb.Status_STATUS_RELEASED || rel.Token != r.Token || rel.Duplicate {
		t.Fatalf("release of a just-made request through a follower behind it: %v, %v; want released", rel, err)
	}
	fc.hold("n3", false)
}
