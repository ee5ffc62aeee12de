package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// A call auth refused is counted per namespace too, reason credential
// (RefusalObserver), on the node the client called; a refused session
// secret is not (the gate counts it as session_secret where it decides),
// nor a refusal another node forwarded.
func TestCredentialRefusalsByNamespace(t *testing.T) {
	obs := &refusalLog{refusals: map[string]int{}, cuts: map[string]int{}}
	s := New(Config{Machine: fsm.New(), Observer: obs, Logger: hclog.NewNullLogger()})
	a := s.callAudit
	ctx := context.Background()
	a.refusal(ctx, "/lockcluster.v1.Locks/Query", &pb.QueryRequest{Namespace: "billing"}, authRefusal(t, "billing"))
	a.refusal(ctx, "/lockcluster.v1.Locks/Release", &pb.ReleaseRequest{Namespace: "billing", SessionId: 7}, rpcerr.PermissionDenied("the session secret was refused"))
	if got := obs.refused("billing", RefusedCredential); got != 1 {
		t.Errorf("billing's credential refusals: %d, want 1", got)
	}
	if got := obs.refused("billing", RefusedSessionSecret); got != 0 {
		t.Errorf("billing's session_secret refusals counted by the auditor: %d, want 0 (the gate's)", got)
	}
}

// backupLog is an Observer that also hears of the backups served.
type backupLog struct {
	nopObserver
	mu sync.Mutex
	at []time.Time
}

func (o *backupLog) BackupSaved(at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.at = append(o.at, at)
}

func (o *backupLog) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.at)
}

var _ BackupObserver = (*backupLog)(nil)

// A backup served to its end is told to the observer of the node the
// client called: the leader when called, the follower that relayed it
// (not the leader, which served the forwarded copy).
func TestBackupObserved(t *testing.T) {
	logs := map[string]*backupLog{}
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) {
		o := &backupLog{}
		logs[c.Self.ID], c.Observer = o, o
	}})
	saveSnapshot(t, fc.node("n1"))
	if n1, n2 := logs["n1"].count(), logs["n2"].count(); n1 != 1 || n2 != 0 {
		t.Fatalf("a backup from the leader: told n1 %d times, n2 %d, want 1 and 0", n1, n2)
	}
	saveSnapshot(t, fc.node("n2"))
	if n1, n2 := logs["n1"].count(), logs["n2"].count(); n1 != 1 || n2 != 1 {
		t.Fatalf("a backup relayed by n2: told n1 %d times, n2 %d, want 1 and 1", n1, n2)
	}
	if at := logs["n2"].at[0]; at.IsZero() {
		t.Error("told of a backup at the zero time")
	}
}
