package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
)

// What raftnode's fences say (raftnode/damage.go, diskguard.go,
// checkpoint.go, behind.go), as a member's or an endpoint's unfit.
const (
	unfitDamagedLog  = "this node's raft log is damaged from index 882 (/data/raft/wal/00000000000000000001-0000000000000001.wal: bad frame header at offset 4096); it serves no clients, votes in no election and stands for none until it is repaired from the leader"
	unfitDamagedBolt = "this node's term and vote store is damaged (/data/raft/raft.db: meta page checksum); it serves no clients, votes in no election and stands for none until it is repaired from the leader"
	unfitDiskFull    = "the raft log in /data/raft/wal cannot be written (rotate: no space left on device; 256 KiB free of 8.0 MiB): this node serves no clients and stands for no election until the disk takes writes again; it retries by itself"
	unfitDiskBroken  = "the raft log in /data/raft/wal cannot be written (append: input/output error): this node serves no clients and stands for no election until the disk takes writes again; it retries by itself"
	unfitDiverged    = "this replica diverged from the cluster: the checkpoint at index 4000 says the applied-entry hash at index 3990 is 0123456789abcdef…, this node has fedcba9876543210…; it serves no clients and stands for no election until it is rebuilt from a healthy member"
	unfitBehind      = "this replica has applied the log up to index 10, short of commit index 52 that the leader announced 5.2s ago (it announces 60 now): it serves no clients until it catches up"
)

func TestFenceSummary(t *testing.T) {
	for _, tc := range []struct{ unfit, want string }{
		{unfitDamagedLog, "damaged log from index 882"},
		{unfitDamagedBolt, "damaged term and vote store"},
		{"this node's snapshot is damaged (/data/raft/snapshots/1-2-3: crc mismatch); it serves no clients", "damaged snapshot"},
		{unfitDiskFull, "disk full"},
		{unfitDiskBroken, "disk not writable"},
		{unfitDiverged, "diverged"},
		{unfitBehind, "behind"},
		{"something new: with details", "something new"},
	} {
		if got := fenceSummary(tc.unfit); got != tc.want {
			t.Errorf("fenceSummary(%q) = %q, want %q", tc.unfit, got, tc.want)
		}
	}
}

// members' HEALTH says why a member that answers the leader serves no
// clients, in a few words, rather than "ok" (or, before Status answered
// on a fenced node, "unreachable for 12s"); -o json keeps the whole text.
func TestMembersTableShowsFencedMembers(t *testing.T) {
	now := time.Now()
	ms := []lockcluster.Member{
		{ID: "n1", Leader: true, Suffrage: "Voter", Probed: true, Reachable: true, LastContact: now},
		{ID: "n2", Suffrage: "Voter", Probed: true, Reachable: true, LastContact: now, Unfit: unfitDamagedLog},
		{ID: "n3", Suffrage: "Voter", Probed: true, Reachable: true, LastContact: now, Unfit: unfitDiskFull, Lag: 40},
		{ID: "n4", Suffrage: "Voter", Probed: true, Reachable: false, LastContact: now.Add(-12 * time.Second), Unfit: unfitBehind},
	}
	var b bytes.Buffer
	if err := writeMembers(&b, ms); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"n1": "ok", "n2": "fenced: damaged log from index 882", "n3": "fenced: disk full", "n4": "unreachable for 12s"}
	for _, line := range strings.Split(b.String(), "\n")[1:] {
		id, _, _ := strings.Cut(line, " ")
		if w, ok := want[id]; ok {
			if !strings.HasSuffix(strings.TrimSpace(line), w) {
				t.Errorf("%s's row: %q, want HEALTH %q", id, line, w)
			}
			delete(want, id)
		}
	}
	if len(want) > 0 {
		t.Errorf("no rows for %v in:\n%s", want, b.String())
	}

	b.Reset()
	if err := printJSON(&b, ms); err != nil {
		t.Fatal(err)
	}
	var back []lockcluster.Member
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back) != 4 || back[0].Unfit != "" || back[1].Unfit != unfitDamagedLog || back[2].Unfit != unfitDiskFull {
		t.Fatalf("members -o json (%v): %s", err, b.String())
	}
	if strings.Contains(strings.SplitN(b.String(), "},", 2)[0], "unfit") {
		t.Errorf("a fit member's JSON has unfit: %s", b.String())
	}
}

// status fails (exit 1) naming an endpoint that answers but serves no
// clients, as it does for one that does not answer, and shows why in
// ERROR; and it fails naming a fenced member the leader probes.
func TestStatusFailsOnFencedNodes(t *testing.T) {
	sts := []lockcluster.Status{
		{NodeID: "n1", Addr: "10.0.0.1:7700", State: "Leader", LeaderID: "n1", Version: "v1"},
		{NodeID: "n2", Addr: "10.0.0.2:7700", State: "Follower", LeaderID: "n1", Version: "v1", Unfit: unfitDiskFull},
		{NodeID: "n3", Addr: "10.0.0.3:7700", State: "Follower", LeaderID: "n1", Version: "v1"},
	}
	var b bytes.Buffer
	if err := writeStatus(&b, sts); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "10.0.0.2:7700 ") && !strings.HasSuffix(strings.TrimSpace(line), "fenced: disk full") {
			t.Errorf("the fenced endpoint's row: %q, want ERROR fenced: disk full", line)
		}
		if strings.HasPrefix(line, "10.0.0.3:7700 ") && strings.Contains(line, "fenced") {
			t.Errorf("a fit endpoint's row: %q", line)
		}
	}
	if !strings.Contains(b.String(), "fenced: disk full") {
		t.Errorf("status table:\n%s", b.String())
	}
	var ee *exitError
	if err := endpointsVerdict(sts); !errors.As(err, &ee) || ee.code != exitFailure || !strings.Contains(ee.msg, "n2") || !strings.Contains(ee.msg, "disk full") {
		t.Errorf("status with a fenced endpoint: %v, want exit 1 naming n2 and its full disk", err)
	}
	sts = append(sts, lockcluster.Status{Addr: "127.0.0.1:1", Err: "unavailable: connection refused"})
	if err := endpointsVerdict(sts); !errors.As(err, &ee) || ee.code != exitFailure || !strings.Contains(ee.msg, "1 of 4 endpoints did not answer") || !strings.Contains(ee.msg, "n2") {
		t.Errorf("status with a fenced and a dead endpoint: %v", err)
	}
	if err := endpointsVerdict([]lockcluster.Status{sts[0], sts[2]}); err != nil {
		t.Errorf("status with fit endpoints: %v", err)
	}

	ms := []lockcluster.Member{
		{ID: "n1", Leader: true, Probed: true, Reachable: true},
		{ID: "n2", Probed: true, Reachable: true},
		{ID: "n4", Probed: true, Reachable: true, Unfit: unfitDamagedLog},
	}
	if err := membersVerdict(ms); !errors.As(err, &ee) || ee.code != exitFailure || !strings.Contains(ee.msg, "n4 fenced: damaged log from index 882") {
		t.Errorf("status with a fenced member: %v, want exit 1 naming n4 and its damage", err)
	}
	if err := membersVerdict(ms[:2]); err != nil {
		t.Errorf("status with fit members: %v", err)
	}
}
