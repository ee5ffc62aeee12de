package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/testutil"
	"github.com/lockcluster/lockcluster/raftnode"
)

// recordedOn lists the nodes whose applied member directory has a record
// for id.
func (fc *fakeCluster) recordedOn(id string) []string {
	var on []string
	for _, n := range fc.nodes {
		if slices.ContainsFunc(n.m.Members(), func(m fsm.Member) bool { return m.ID == id }) {
			on = append(on, n.id)
		}
	}
	return on
}

// failSetMember makes the log refuse, once, the SetMember of id (its
// removal, with remove) with err; appended says whether the entry goes
// into the log anyway (its outcome lost, not the entry).
func (fc *fakeCluster) failSetMember(id string, remove, appended bool, err error) {
	fc.log.mu.Lock()
	defer fc.log.mu.Unlock()
	done := false
	fc.log.fail = func(data []byte) (bool, error) {
		e, derr := fsm.DecodeEntry(data)
		if sm, ok := e.Cmd.(*fsm.SetMember); derr == nil && ok && !done && sm.Member.ID == id && sm.Remove == remove {
			done = true // fail runs under the log's lock
			return appended, err
		}
		return true, nil
	}
}

// configured says whether the Members call (via node via) lists id.
func configured(t *testing.T, fc *fakeCluster, via, id string) bool {
	t.Helper()
	r, err := fc.node(via).clus.Members(testCtx(t), &pb.MembersRequest{})
	if err != nil {
		t.Fatalf("members via %s: %v", via, err)
	}
	return slices.ContainsFunc(r.Members, func(m *pb.Member) bool { return m.Id == id })
}

// A leave is two steps: raft's RemoveServer, then the removal of the
// member's directory record. When the second fails after the first
// committed (the leader lost, its outcome unknown, the caller's deadline),
// the leave fails; retried, through any node, it removes the record and
// succeeds. Before, the retry answered NOT_MEMBER (the id is no longer in
// the configuration) and the stale record stayed in the directory for
// good, where forwarding, probes and removed nodes read it.
func TestLeaveRetriedAfterItsRecordRemovalFailed(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"outcome unknown", fmt.Errorf("%w: the leader lost its quorum", raftnode.ErrOutcomeUnknown)},
		{"deadline between the steps", fmt.Errorf("%w: %v", raftnode.ErrNotApplied, context.DeadlineExceeded)},
		{"leader lost", &raftnode.NotLeaderError{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFakeCluster(t, 3, fakeOptions{})
			ctx := testCtx(t)
			n2 := fc.node("n2")
			if _, err := n2.clus.Join(ctx, &pb.JoinRequest{Id: "n9", RaftAddr: "raft-n9", GrpcAddr: "api-n9"}); err != nil {
				t.Fatalf("join: %v", err)
			}
			eventually(t, "n9's record on every node", func() bool { return len(fc.recordedOn("n9")) == 3 })

			fc.failSetMember("n9", true, false, tc.err)
			if _, err := n2.clus.Leave(ctx, &pb.LeaveRequest{Id: "n9"}); err == nil {
				t.Fatal("the leave whose record removal failed succeeded")
			}
			if configured(t, fc, "n2", "n9") {
				t.Fatal("n9 is still in the configuration: the test does not test what it says")
			}
			if on := fc.recordedOn("n9"); len(on) != 3 {
				t.Fatalf("n9's record is on %v after the failed removal: want every node (the stale record)", on)
			}

			if _, err := n2.clus.Leave(ctx, &pb.LeaveRequest{Id: "n9"}); err != nil {
				t.Fatalf("the retried leave: %v: want it to remove the stale record and succeed", err)
			}
			eventually(t, "n9's record gone from every node", func() bool { return len(fc.recordedOn("n9")) == 0 })
			for _, via := range []string{"n1", "n2", "n3"} {
				if configured(t, fc, via, "n9") {
					t.Fatalf("members via %s lists n9 after the leave", via)
				}
			}
			// Now in neither: a leave of it is an error again, as of a typo.
			if _, err := n2.clus.Leave(ctx, &pb.LeaveRequest{Id: "n9"}); status.Code(err) != codes.NotFound || reasonOf(err) != pb.ErrorReason_NOT_MEMBER {
				t.Fatalf("a third leave: %v: want NotFound NOT_MEMBER", err)
			}
			if _, err := n2.clus.Leave(ctx, &pb.LeaveRequest{Id: "n99"}); status.Code(err) != codes.NotFound || reasonOf(err) != pb.ErrorReason_NOT_MEMBER {
				t.Fatalf("a leave of an unknown id: %v: want NotFound NOT_MEMBER", err)
			}
			if n := len(fc.recordedOn("n1")) + len(fc.recordedOn("n2")) + len(fc.recordedOn("n3")); n != 9 {
				t.Fatalf("%d records of n1..n3 in the three directories, want 9: a leave removed a member's record", n)
			}
		})
	}
}

// A directory record whose id is not in the configuration is stale (a
// join records an id only once the configuration holds it): one left by a
// leave that was never retried, or by a record-only join that raced a
// leave on an earlier leader. A new leader removes such records, once,
// and logs each; it keeps the records of every id in the configuration,
// whatever its suffrage.
func TestNewLeaderRemovesStaleDirectoryRecords(t *testing.T) {
	var logs testutil.Buffer
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: c.Self.ID, Level: hclog.Info, Output: &logs})
	}})
	ctx := testCtx(t)
	fc.log.mu.Lock()
	fc.log.extra = append(fc.log.extra, raftnode.Member{ID: "n8", Addr: "raft-n8", Suffrage: "Nonvoter"})
	fc.log.mu.Unlock()
	for _, m := range []fsm.Member{{ID: "ghost", RaftAddr: "raft-ghost", GRPCAddr: "api-ghost"}, {ID: "n8", RaftAddr: "raft-n8"}} {
		ap, _, err := fc.node("n1").srv.propose(ctx, &fsm.SetMember{Member: m})
		if err == nil {
			err = ap.Result.Err
		}
		if err != nil {
			t.Fatalf("recording %s: %v", m.ID, err)
		}
	}
	if on := fc.recordedOn("ghost"); len(on) != 3 {
		t.Fatalf("the stale record is on %v: want every node", on)
	}
	before := fc.entries()

	fc.elect("n2")
	eventually(t, "the stale record gone from every node", func() bool { return len(fc.recordedOn("ghost")) == 0 })
	for _, id := range []string{"n1", "n2", "n3", "n8"} {
		if on := fc.recordedOn(id); len(on) != 3 {
			t.Fatalf("%s's record is on %v after the reconcile: want every node (it is in the configuration)", id, on)
		}
	}
	if !strings.Contains(logs.String(), "member directory: removed stale record: id=ghost") {
		t.Fatalf("the reconcile did not log the removal:\n%s", logs.String())
	}
	removals := 0
	for _, c := range fc.commands(before + 1) {
		if sm, ok := c.(*fsm.SetMember); ok {
			if !sm.Remove || sm.Member.ID != "ghost" {
				t.Fatalf("the reconcile proposed %+v: want only the removal of ghost", sm)
			}
			removals++
		}
	}
	if removals != 1 {
		t.Fatalf("%d removals of the stale record, want 1", removals)
	}
}
