package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// A session's stream attached on a follower right after the session was
// opened on the leader, by a client that does not send min_index (any
// client but the Go one may not), is let in: the follower, which may not
// have applied the session yet, decides the attach as the leader would
// (issue 24, finding 4: it refused it as a bad secret, 20 times in 20, and
// wrote 20 false refused-credential lines to the audit log). Spoken from
// the proto alone.
func TestAttachOnAFollowerRightAfterOpenWithoutMinIndex(t *testing.T) {
	logs := &testutil.Buffer{}
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "lockcluster", Output: logs, Level: hclog.Info, JSONFormat: true})
	}})
	leader := c.WaitLeader(10 * time.Second)
	follower := (leader + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	onLeader := pb.NewLocksClient(rawConn(t, c.Addrs()[leader]))
	onFollower := pb.NewLocksClient(rawConn(t, c.Addrs()[follower]))
	for i := range 20 {
		s, err := onLeader.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "fresh", Ttl: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		st, err := onFollower.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "fresh", SessionId: s.SessionId, SessionSecret: s.Secret}}}); err != nil {
			t.Fatal(err)
		}
		m, err := st.Recv()
		if err != nil || m.GetSynced() == nil {
			t.Fatalf("attach %d of 20, session %d, on follower %d: %v, %v: want a Synced", i+1, s.SessionId, follower, m, err)
		}
		if _, err := onLeader.CloseSession(ctx, &pb.CloseSessionRequest{Namespace: "fresh", SessionId: s.SessionId, SessionSecret: s.Secret}); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), `"refused-credential"`); n > 0 {
		t.Fatalf("%d refused-credential audit lines for attaches with the right secret:\n%s", n, logs.String())
	}
}
