package lockcluster_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

var (
	sharedOnce    sync.Once
	sharedCluster *nodetest.Cluster
	mainT         = &nodetest.Main{}
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(pausedHolderEnv); cfg != "" {
		os.Exit(pausedHolderMain(cfg)) // a child process of TestPausedHolderSeesLossFirst
	}
	code := m.Run()
	mainT.Close()
	os.Exit(code)
}

// shared is one 3-node cluster for the tests that do not stop nodes; each
// of them uses names of its own.
func shared(*testing.T) *nodetest.Cluster {
	sharedOnce.Do(func() { sharedCluster = nodetest.Start(mainT, 3, nodetest.Options{Quiet: true}) })
	return sharedCluster
}

func pendingOf(q lockcluster.Snapshot, name string) []lockcluster.LockInfo {
	var out []lockcluster.LockInfo
	for _, l := range q.Pending {
		if l.Name == name {
			out = append(out, l)
		}
	}
	return out
}

func heldOf(q lockcluster.Snapshot, name string) []lockcluster.LockInfo {
	var out []lockcluster.LockInfo
	for _, l := range q.Held {
		if l.Name == name {
			out = append(out, l)
		}
	}
	return out
}

func waitPending(t *testing.T, c *nodetest.Cluster, cl *lockcluster.Client, name string, n int) {
	t.Helper()
	c.WaitFor(10*time.Second, "requests to queue", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		q, err := cl.Query(ctx)
		return err == nil && len(pendingOf(q, name)) == n
	})
}
