package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/raftnode"
)

// statusServer answers Status with a fixed last index.
type statusServer struct {
	pb.UnimplementedClusterServer
	lastIndex uint64
}

func (s statusServer) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{LastIndex: s.lastIndex}, nil
}

// fakeVoter serves Status on a loopback port; lastIndex < 0: a port that
// does not answer.
func fakeVoter(t *testing.T, lastIndex int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if lastIndex < 0 {
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	s := grpc.NewServer()
	pb.RegisterClusterServer(s, statusServer{lastIndex: uint64(lastIndex)})
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func TestBootstrapCheck(t *testing.T) {
	peers := []raftnode.Peer{{ID: "n0", Addr: "h0:7701"}, {ID: "n1", Addr: "h1:7701"}, {ID: "n2", Addr: "h2:7701"}}
	list := "n0=h0:7701,n1=h1:7701,n2=h2:7701"
	decide := func(t *testing.T, id, dataDir, check string, wait time.Duration) ([]raftnode.Peer, string, string, error) {
		t.Helper()
		var log bytes.Buffer
		c := &serveConfig{id: id, dataDir: dataDir, bootstrap: list, bootstrapCheck: check}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		boot, join, err := c.checkBootstrap(ctx, hclog.New(&hclog.LoggerOptions{Output: &log}), peers)
		return boot, join, log.String(), err
	}

	t.Run("usage", func(t *testing.T) {
		for _, tc := range []struct{ check, bootstrap, join, want string }{
			{"n0=a:1,n1=b:1,n2=c:1", "", "", "needs --bootstrap"},
			{"n0=a:1,n1=b:1,n2=c:1", list, "x:1", "no --join"},
			{"n0=a:1,n1=b:1", list, "", "no client API address for the voter n2"},
			{"n0=a:1,n1=b:1,n2=c:1,n9=d:1", list, "", "n9, which is not a --bootstrap voter"},
			{"n0=a:1,broken", list, "", `--bootstrap-check entry "broken"`},
		} {
			c := &serveConfig{id: "n0", dataDir: t.TempDir(), bootstrap: tc.bootstrap, join: tc.join, bootstrapCheck: tc.check}
			_, _, err := c.checkBootstrap(context.Background(), hclog.NewNullLogger(), peers)
			var ex *exitError
			if !errors.As(err, &ex) || ex.code != exitUsage || !strings.Contains(ex.msg, tc.want) {
				t.Errorf("check %q bootstrap %q join %q: %v, want a usage error naming %q", tc.check, tc.bootstrap, tc.join, err, tc.want)
			}
		}
	})

	t.Run("used data directory", func(t *testing.T) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "raft", "wal"), 0o700)
		boot, join, _, err := decide(t, "n0", dir, "n0=a:1,n1=b:1,n2=c:1", time.Second)
		if err != nil || boot != nil || join != "" {
			t.Fatalf("got %v %q %v: want to resume, neither bootstrap nor join", boot, join, err)
		}
	})

	t.Run("not the first voter", func(t *testing.T) {
		boot, join, _, err := decide(t, "n2", t.TempDir(), "n0=a:1,n1=b:1,n2=c:1", time.Second)
		if err != nil || boot != nil || join != "a:1" {
			t.Fatalf("got %v %q %v: want to join through the first voter, a:1", boot, join, err)
		}
	})

	t.Run("new cluster", func(t *testing.T) {
		check := "n0=unused:1,n1=" + fakeVoter(t, 0) + ",n2=" + fakeVoter(t, 0)
		boot, join, log, err := decide(t, "n0", t.TempDir(), check, 10*time.Second)
		if err != nil || len(boot) != 3 || join != "" || !strings.Contains(log, "bootstrapping a new cluster") {
			t.Fatalf("got %v %q %v: want to bootstrap the three voters\n%s", boot, join, err, log)
		}
	})

	t.Run("a voter has state", func(t *testing.T) {
		withState := fakeVoter(t, 42)
		check := "n0=unused:1,n1=" + fakeVoter(t, -1) + ",n2=" + withState
		boot, join, log, err := decide(t, "n0", t.TempDir(), check, 10*time.Second)
		if err != nil || boot != nil || join != withState || !strings.Contains(log, "holds raft state") {
			t.Fatalf("got %v %q %v: want to join through %s\n%s", boot, join, err, withState, log)
		}
	})

	t.Run("a voter does not answer", func(t *testing.T) {
		check := "n0=unused:1,n1=" + fakeVoter(t, 0) + ",n2=" + fakeVoter(t, -1)
		boot, join, log, err := decide(t, "n0", t.TempDir(), check, 1500*time.Millisecond)
		if !errors.Is(err, errStopped) || boot != nil || join != "" || !strings.Contains(log, "waiting for every other voter") {
			t.Fatalf("got %v %q %v: want to wait, neither bootstrap nor join\n%s", boot, join, err, log)
		}
	})
}
