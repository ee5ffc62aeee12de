package server

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// saveSnapshot reads a whole SaveSnapshot stream through node n.
func saveSnapshot(t *testing.T, n *fakeNode) (*pb.SnapshotHeader, []byte, int) {
	t.Helper()
	st, err := n.clus.SaveSnapshot(testCtx(t), &pb.SaveSnapshotRequest{})
	if err != nil {
		t.Fatalf("SaveSnapshot via %s: %v", n.id, err)
	}
	var h *pb.SnapshotHeader
	var data []byte
	msgs := 0
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SaveSnapshot via %s: %v", n.id, err)
		}
		msgs++
		if msgs == 1 {
			if h = m.Header; h == nil || len(m.Data) != 0 {
				t.Fatalf("first message via %s: %v, want the header alone", n.id, m)
			}
			continue
		}
		if m.Header != nil {
			t.Fatalf("a second header via %s", n.id)
		}
		data = append(data, m.Data...)
	}
	if h == nil {
		t.Fatalf("SaveSnapshot via %s: no header", n.id)
	}
	return h, data, msgs - 1
}

// The leader's snapshot, saved through it or through a follower, is its
// state: it restores into a machine with the leader's digest, at the
// index and with the checksum the header gives.
func TestSaveSnapshotFromLeaderAndFollower(t *testing.T) {
	defer func(n int) { snapshotChunkSize = n }(snapshotChunkSize)
	snapshotChunkSize = 100 // several chunks
	fc := newFakeCluster(t, 3, fakeOptions{})
	ctx := testCtx(t)
	leader := fc.node("n1")
	a, b := leader.open(t, "snap"), fc.node("n2").open(t, "snap")
	if r, err := leader.request(ctx, a, "snap", 1, "x"); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("a's lock: %v %v", r, err)
	}
	if r, err := leader.request(ctx, b, "snap", 1, "x"); err != nil || r.Status != pb.Status_STATUS_QUEUED {
		t.Fatalf("b's request: %v %v", r, err)
	}
	for _, s := range []*pb.OpenSessionResponse{a, b} {
		r, err := leader.locks.Request(ctx, &pb.LockRequest{Namespace: "snap", SessionId: s.SessionId, SessionSecret: s.Secret,
			RequestId: 2, Names: []string{"shared"}, Mode: pb.Mode_MODE_SHARED})
		if err != nil || r.Status != pb.Status_STATUS_GRANTED {
			t.Fatalf("shared lock: %v %v", r, err)
		}
	}
	fc.hold("n3", true) // a follower that lags: its own state is older
	if _, err := leader.request(ctx, a, "snap", 3, "late"); err != nil {
		t.Fatal(err)
	}

	for _, via := range []string{"n1", "n2", "n3"} {
		h, data, chunks := saveSnapshot(t, fc.node(via))
		if chunks < 2 || int(h.Size) != len(data) {
			t.Fatalf("via %s: %d bytes in %d chunks, header says %d", via, len(data), chunks, h.Size)
		}
		if sum := sha256.Sum256(data); !bytes.Equal(sum[:], h.Sha256) {
			t.Fatalf("via %s: the data's SHA-256 is not the header's", via)
		}
		m := fsm.New()
		if err := m.Restore(bytes.NewReader(data)); err != nil {
			t.Fatalf("via %s: %v", via, err)
		}
		// A backup is the leader's state without the cluster secret.
		backup, err := leader.m.BeginSnapshot().EncodeBackup()
		if err != nil || m.ClusterSecret() != "" || leader.m.ClusterSecret() == "" {
			t.Fatalf("via %s: the backup holds the cluster secret (%v)", via, err)
		}
		if m.Digest() != sha256.Sum256(backup) || m.LastIndex() != h.Index || h.Index != leader.m.LastIndex() {
			t.Fatalf("via %s: restored index %d, header %d; the leader's state is at %d (or the digests differ)",
				via, m.LastIndex(), h.Index, leader.m.LastIndex())
		}
		if q := m.Query("snap"); len(q.Held) != 4 || len(q.Pending) != 1 {
			t.Fatalf("via %s: restored %d held, %d pending; want 4 and 1", via, len(q.Held), len(q.Pending))
		}
		if h.LeaderId != "n1" || len(h.Members) != 3 || h.Term != 1 || h.Format != 2 {
			t.Fatalf("via %s: header %v", via, h)
		}
	}
}

// A snapshot call that another node already forwarded is not forwarded
// again: NOT_LEADER, and the client moves on.
func TestSaveSnapshotForwardedOnce(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	ctx := metadata.AppendToOutgoingContext(testCtx(t), forwardedKey, "n3")
	st, err := fc.node("n2").clus.SaveSnapshot(ctx, &pb.SaveSnapshotRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unavailable || reasonOf(err) != pb.ErrorReason_NOT_LEADER {
		t.Fatalf("a forwarded snapshot call on a follower: %v, want Unavailable NOT_LEADER", err)
	}
}
