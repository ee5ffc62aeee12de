package server

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// The gate reads the fsm's admission table (fsm/admission.go), on servers
// over the in-memory replica (fake_test.go).

// unclassified is a command the admission table does not know.
type unclassified struct{ Session uint64 }

func (unclassified) Type() fsm.EntryType { return 250 }

// testAdminKey marks a call as made with an admin credential.
const testAdminKey = "test-admin"

func adminCtx(ctx context.Context) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs(testAdminKey, "1"))
}

// Default deny: a command type without an admission class, a command
// value instead of a pointer, and a command only a node proposes are
// refused by the gate with an internal error, even from an admin, and
// nothing reaches the log.
func TestGateRefusesWhatTheTableDoesNotAdmit(t *testing.T) {
	fc := newFakeCluster(t, 1, fakeOptions{configure: func(c *Config) {
		c.IsAdmin = func(ctx context.Context) bool {
			md, _ := metadata.FromIncomingContext(ctx)
			return len(md.Get(testAdminKey)) > 0
		}
	}})
	n := fc.node("n1")
	s := n.open(t, "gate")
	before := fc.entries()
	for _, cmd := range []fsm.Command{
		nil,
		&unclassified{Session: s.SessionId},
		unclassified{Session: s.SessionId},
		fsm.Release{Session: s.SessionId, Namespace: "gate", RequestID: 1},
		&fsm.ExpireSession{Session: s.SessionId},
		&fsm.SetLimits{Limits: fsm.DefaultLimits()},
		&fsm.SetMember{Member: fsm.Member{ID: "intruder", RaftAddr: "raft-x"}},
	} {
		for _, ctx := range []context.Context{testCtx(t), adminCtx(testCtx(t))} {
			err := n.srv.admit(ctx, cmd, s.Secret)
			if status.Code(err) != codes.Internal {
				t.Errorf("admit(%T): %v; want Internal", cmd, err)
			}
		}
	}
	if fc.entries() != before {
		t.Fatalf("%d entries reached the log", fc.entries()-before)
	}
}

// Every session-scoped command in the admission table, found by walking
// it, is refused by the gate without its session's secret (none, another
// session's, a forged one, the right one in another namespace), passes
// with it, and passes without it from an admin only when the table lets
// an admin act for the session.
func TestGateAsksEverySessionScopedCommandForItsSecret(t *testing.T) {
	fc := newFakeCluster(t, 1, fakeOptions{configure: func(c *Config) {
		c.IsAdmin = func(ctx context.Context) bool {
			md, _ := metadata.FromIncomingContext(ctx)
			return len(md.Get(testAdminKey)) > 0
		}
	}})
	n := fc.node("n1")
	// A valid command of each session-scoped type, acting for session id
	// in ns: one the gate's other checks (limits, certain refusals) let
	// through.
	var token uint64 // the grant a record write writes under (made below)
	examples := map[reflect.Type]func(id uint64, ns string) fsm.Command{
		reflect.TypeFor[*fsm.Request](): func(id uint64, ns string) fsm.Command {
			return &fsm.Request{Session: id, Namespace: ns, RequestID: 1, Names: []string{"x"}, Mode: fsm.Exclusive}
		},
		reflect.TypeFor[*fsm.Release](): func(id uint64, ns string) fsm.Command {
			return &fsm.Release{Session: id, Namespace: ns, RequestID: 1}
		},
		reflect.TypeFor[*fsm.Abort](): func(id uint64, ns string) fsm.Command {
			return &fsm.Abort{Session: id, Namespace: ns, RequestID: 1}
		},
		reflect.TypeFor[*fsm.CloseSession](): func(id uint64, ns string) fsm.Command {
			return &fsm.CloseSession{Session: id, Namespace: ns}
		},
		reflect.TypeFor[*fsm.SetRecord](): func(id uint64, ns string) fsm.Command {
			return &fsm.SetRecord{Session: id, Namespace: ns, RequestID: 1, Token: token, Name: "rec", Value: []byte("v")}
		},
	}
	forged := make([]byte, 32)
	scoped := 0
	for rt, adm := range fsm.Admissions() {
		if adm.Class != fsm.SessionSecret {
			continue
		}
		scoped++
		example := examples[rt]
		if example == nil {
			t.Errorf("%s is session-scoped but this test has no example of it: add one to examples", rt)
			continue
		}
		owner, other := n.open(t, "sec"), n.open(t, "sec")
		if rt == reflect.TypeFor[*fsm.Release]() || rt == reflect.TypeFor[*fsm.SetRecord]() {
			// The gate refuses a release (or a record write) of a
			// request id the session never made: make it.
			name := "x"
			if rt == reflect.TypeFor[*fsm.SetRecord]() {
				name = "rec" // its own name: the release's owner may hold x
			}
			r, err := n.request(testCtx(t), owner, "sec", 1, name)
			if err != nil {
				t.Fatal(err)
			}
			token = r.Token
		}
		cmd := example(owner.SessionId, "sec")
		if id, ns, ok := adm.Session(cmd); !ok || id != owner.SessionId || ns != "sec" {
			t.Fatalf("%s: the table says it acts for %d %q %v", rt, id, ns, ok)
		}
		before := fc.entries()
		for what, secret := range map[string][]byte{"no secret": nil, "another session's secret": other.Secret, "a forged secret": forged} {
			if err := n.srv.admit(testCtx(t), cmd, secret); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s with %s: %v; want PermissionDenied", rt, what, err)
			}
			if err := n.srv.admit(adminCtx(testCtx(t)), cmd, secret); len(secret) > 0 && status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s with %s from an admin: %v; want PermissionDenied (an admin acts only without a secret)", rt, what, err)
			}
		}
		if err := n.srv.admit(testCtx(t), example(owner.SessionId, "elsewhere"), owner.Secret); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s with the right secret in another namespace: %v; want PermissionDenied", rt, err)
		}
		if err := n.srv.admit(testCtx(t), cmd, owner.Secret); err != nil {
			t.Errorf("%s with its session's secret: %v", rt, err)
		}
		err := n.srv.admit(adminCtx(testCtx(t)), cmd, nil)
		switch {
		case adm.AdminMay && err != nil:
			t.Errorf("%s by an admin without the secret: %v; the table lets an admin act", rt, err)
		case !adm.AdminMay && status.Code(err) != codes.PermissionDenied:
			t.Errorf("%s by an admin without the secret: %v; want PermissionDenied", rt, err)
		}
		if fc.entries() != before {
			t.Fatalf("%s: the gate proposed %d entries", rt, fc.entries()-before)
		}
	}
	if scoped < len(examples) {
		t.Errorf("the table has %d session-scoped commands, fewer than the %d examples", scoped, len(examples))
	}
	// Through the API too: a request naming another session is refused
	// before the log (internal/node's capability test covers release,
	// abort and close through every node).
	owner, other := n.open(t, "api"), n.open(t, "api")
	before := fc.entries()
	_, err := n.locks.Request(testCtx(t), &pb.LockRequest{Namespace: "api", SessionId: owner.SessionId, SessionSecret: other.Secret, RequestId: 1, Names: []string{"x"}, Mode: pb.Mode_MODE_EXCLUSIVE})
	if status.Code(err) != codes.PermissionDenied || fc.entries() != before {
		t.Fatalf("a request with another session's secret: %v, %d entries; want PermissionDenied and none", err, fc.entries()-before)
	}
}
