package server

import (
	"testing"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// The removed-node rule (internal/node's watch runs it): a node that has
// been a member, in the configuration or only in the directory, asks; only
// a leader other than itself decides, and it was removed when that
// leader's configuration leaves it out.
func TestRemovedNodeRule(t *testing.T) {
	conf := []raftnode.Member{{ID: "n1"}, {ID: "n2", Suffrage: "Nonvoter"}}
	dir := []fsm.Member{{ID: "n1"}, {ID: "n3"}}
	for id, want := range map[string]bool{"n1": true, "n2": true, "n3": true, "n4": false} {
		if got := IsMember(id, conf, dir); got != want {
			t.Errorf("IsMember(%s) = %v, want %v", id, got, want)
		}
	}

	answer := func(leader string, ids ...string) *pb.MembersResponse {
		r := &pb.MembersResponse{}
		for _, id := range ids {
			r.Members = append(r.Members, &pb.Member{Id: id, Leader: id == leader})
		}
		return r
	}
	for _, tc := range []struct {
		name             string
		resp             *pb.MembersResponse
		leader           string
		removed, decided bool
	}{
		{"listed by the leader", answer("n1", "n1", "n3"), "n1", false, true},
		{"left out by the leader", answer("n1", "n1", "n2"), "n1", true, true},
		{"no leader", answer("", "n1", "n2"), "", false, false},
		{"itself the leader", answer("n3", "n1", "n3"), "", false, false},
		{"no answer", nil, "", false, false},
	} {
		leader, removed, decided := RemovedFrom(tc.resp, "n3")
		if leader != tc.leader || removed != tc.removed || decided != tc.decided {
			t.Errorf("%s: RemovedFrom = %q, %v, %v; want %q, %v, %v", tc.name, leader, removed, decided, tc.leader, tc.removed, tc.decided)
		}
	}
}
