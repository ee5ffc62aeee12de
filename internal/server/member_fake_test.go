package server

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/auth"
)

// The first leader draws the cluster secret, once, and every member
// applies it; a new leader keeps it.
func TestMemberSecretDrawnOnceAndReplicated(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	secret := fc.node("n1").m.ClusterSecret()
	if len(secret) != clusterSecretBytes {
		t.Fatalf("the leader's secret has %d bytes", len(secret))
	}
	for _, n := range fc.nodes {
		if n.m.ClusterSecret() != secret {
			t.Fatalf("%s has another secret", n.id)
		}
	}
	before := fc.entries()
	fc.elect("n2")
	eventually(t, "n2's record and reconcile after its election", func() bool { return fc.node("n2").srv.members.registered() })
	for _, cmd := range fc.commands(before + 1) {
		if _, ok := cmd.(*fsm.SetClusterSecret); ok {
			t.Fatal("a new leader drew a secret while the state had one")
		}
	}
	if fc.node("n2").m.ClusterSecret() != secret {
		t.Fatal("the secret changed with the leader")
	}
}

// Touch answers only a member: a stranger without the secret, or with a
// wrong one, is refused; a follower's forwarded heartbeats renew.
func TestTouchOnlyFromMembers(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := openTTL(t, fc.node("n1"), "lc", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lead := fc.node("n1").clus
	for name, md := range map[string]metadata.MD{
		"no secret":    nil,
		"wrong secret": metadata.Pairs(auth.MemberSecretKey, auth.MemberSecretValue(strings.Repeat("x", clusterSecretBytes))),
		"two secrets": metadata.Pairs(auth.MemberSecretKey, auth.MemberSecretValue(fc.node("n1").m.ClusterSecret()),
			auth.MemberSecretKey, "00"),
		"forwarding marks only": metadata.Pairs(forwardedKey, "n2", adminKey, "1"),
	} {
		_, err := lead.Touch(metadata.NewOutgoingContext(ctx, md), &pb.TouchRequest{SessionIds: []uint64{s.SessionId}})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "cluster's own nodes") {
			t.Errorf("a stranger's Touch, %s: %v; want PermissionDenied", name, err)
		}
	}
	// The follower's forwarder: forwardContext carries the secret.
	unknown, moved, err := forwarder{fc.node("n2").srv}.Touch(ctx, []uint64{s.SessionId, 1 << 40})
	if err != nil || len(unknown) != 1 || unknown[0] != 1<<40 || len(moved) != 0 {
		t.Fatalf("a follower's Touch: %v, %v, %v", unknown, moved, err)
	}
	md := metadata.Pairs(auth.MemberSecretKey, auth.MemberSecretValue(fc.node("n1").m.ClusterSecret()))
	if _, err := lead.Touch(metadata.NewOutgoingContext(ctx, md), &pb.TouchRequest{SessionIds: []uint64{s.SessionId}}); err != nil {
		t.Fatalf("Touch with the secret: %v", err)
	}
}

// A member whose state lacks the secret (one upgraded from a version
// that skipped its entry and compacted it away) is refused, and the
// leader proposes the secret again; then the member has it and renews.
func TestTouchHealsAMemberWithoutTheSecret(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := openTTL(t, fc.node("n1"), "lc", time.Minute)
	n2 := fc.node("n2")
	secret := n2.m.ClusterSecret()
	// n2's state as a backup has it: the same, without the secret.
	fc.log.mu.Lock()
	backup, err := n2.m.BeginSnapshot().EncodeBackup()
	if err == nil {
		err = n2.m.Restore(bytes.NewReader(backup))
	}
	fc.log.mu.Unlock()
	if err != nil || n2.m.ClusterSecret() != "" {
		t.Fatalf("dropping n2's secret: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := fc.entries()
	if _, _, err := (forwarder{n2.srv}).Touch(ctx, []uint64{s.SessionId}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Touch from a member without the secret: %v, want PermissionDenied", err)
	}
	eventually(t, "the secret proposed again and applied by n2", func() bool { return n2.m.ClusterSecret() == secret })
	if _, _, err := (forwarder{n2.srv}).Touch(ctx, []uint64{s.SessionId}); err != nil {
		t.Fatalf("Touch once n2 has the secret again: %v", err)
	}
	for _, n := range fc.nodes {
		if n.m.ClusterSecret() != secret {
			t.Fatalf("%s's secret changed", n.id)
		}
	}
	// Once per interval at most, however many refusals.
	for range 5 {
		_, _ = fc.node("n1").clus.Touch(ctx, &pb.TouchRequest{})
	}
	n := 0
	for _, cmd := range fc.commands(before + 1) {
		if _, ok := cmd.(*fsm.SetClusterSecret); ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d SetClusterSecret entries after the refusals, want 1", n)
	}
}

// A call marked forwarded by a caller that is not a member loses the
// marks, and its caller's admin credential acts for nobody else; a
// member's marks stay.
func TestUnmarkStrangersForwardingMarks(t *testing.T) {
	fc := newFakeCluster(t, 1, fakeOptions{configure: func(c *Config) {
		c.IsAdmin = func(context.Context) bool { return true }
	}})
	s := fc.node("n1").srv
	marked := func(extra ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(append([]string{forwardedKey, "n9", adminKey, "1"}, extra...)...))
	}
	stranger := s.unmark(marked())
	if isForwarded(stranger) || !unprovenRelay(stranger) || s.adminCaller(stranger) {
		t.Fatalf("a stranger's marks: forwarded %v, unproven %v, admin %v", isForwarded(stranger), unprovenRelay(stranger), s.adminCaller(stranger))
	}
	if md, _ := metadata.FromIncomingContext(stranger); len(md.Get(adminKey)) != 0 {
		t.Fatal("the admin mark is still there")
	}
	member := s.unmark(marked(auth.MemberSecretKey, auth.MemberSecretValue(s.m.ClusterSecret())))
	if !isForwarded(member) || unprovenRelay(member) || !s.adminCaller(member) {
		t.Fatalf("a member's marks: forwarded %v, unproven %v, admin %v", isForwarded(member), unprovenRelay(member), s.adminCaller(member))
	}
	plain := context.Background()
	if s.unmark(plain) != plain || !s.adminCaller(plain) {
		t.Fatal("an unmarked call changed")
	}
}
