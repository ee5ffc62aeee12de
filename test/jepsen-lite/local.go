package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockcluster/lockcluster/internal/proccluster"
)

// localCluster runs each node as a `lockcluster serve` process on
// loopback (proccluster), every raft link through a fault proxy
// (proxy.go).
type localCluster struct {
	*proccluster.Cluster
	links *Links

	mu      sync.Mutex
	crashes []string
}

func newLocalCluster(bin, dir string, n int, serveArgs ...string) (*localCluster, error) {
	lc := &localCluster{}
	var linksErr error
	c, err := proccluster.New(proccluster.Config{Bin: bin, Nodes: n, Dir: dir, Keep: true, StartMarker: "jepsen-lite",
		Extra: func(c *proccluster.Cluster, i int) []string {
			// The first call, once every node's addresses are known,
			// starts the proxies.
			if lc.links == nil && linksErr == nil {
				var raftAddrs []string
				for _, nd := range c.Nodes {
					raftAddrs = append(raftAddrs, nd.Raft)
				}
				lc.links, linksErr = NewLinks(raftAddrs)
			}
			if lc.links == nil {
				return nil
			}
			dial := []string{c.Nodes[i].ID + "=" + c.Nodes[i].Raft} // raft asks for its own address too
			for j, other := range c.Nodes {
				if j != i {
					dial = append(dial, other.ID+"="+lc.links.Proxy(i, j))
				}
			}
			return append([]string{"--raft-dial", strings.Join(dial, ",")}, serveArgs...)
		},
		OnExit: func(n *proccluster.Node, err error, expected bool) {
			if !expected {
				lc.mu.Lock()
				lc.crashes = append(lc.crashes, fmt.Sprintf("%s exited by itself: %v (see %s.log)", n.ID, err, n.ID))
				lc.mu.Unlock()
			}
		}})
	if err = errors.Join(err, linksErr); err != nil {
		if c != nil {
			c.Stop()
		}
		return nil, err
	}
	lc.Cluster = c
	return lc, nil
}

func (lc *localCluster) Start(ctx context.Context) error {
	if err := lc.StartAll(); err != nil {
		return err
	}
	_, err := waitLeader(ctx, lc, 30*time.Second)
	return err
}

func (lc *localCluster) Size() int             { return len(lc.Nodes) }
func (lc *localCluster) Endpoints() []string   { return lc.Addrs() }
func (lc *localCluster) HTTPAddr(i int) string { return lc.Nodes[i].HTTP }
func (lc *localCluster) Net() Network          { return lc.links }
func (lc *localCluster) Restart(i int) error   { return lc.Cluster.Start(i) }

func (lc *localCluster) HealAll() error {
	var errs []error
	for i := range lc.Nodes {
		if lc.Running(i) {
			errs = append(errs, lc.Resume(i))
		} else {
			errs = append(errs, lc.Cluster.Start(i))
		}
	}
	errs = append(errs, lc.links.Heal())
	return errors.Join(errs...)
}

func (lc *localCluster) Crashes() []string {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return append([]string(nil), lc.crashes...)
}

// Close stops the nodes gracefully (SIGTERM), then by force.
func (lc *localCluster) Close() error {
	lc.Stop()
	lc.links.Close()
	return nil
}

// buildBinary builds the lockcluster binary into dir, with extra build
// tags (jepsenbroken for the broken-node run).
func buildBinary(dir string, tags ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "lockcluster")
	cmd := exec.Command("go", "build", "-tags", strings.Join(append([]string{"hashicorpmetrics"}, tags...), ","), "-o", bin, "./cmd/lockcluster")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// moduleRoot finds the lockcluster module's directory from the working
// directory (go run and go test both run inside the module).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the lockcluster module: run from the repository or pass --bin")
	}
	return filepath.Dir(mod), nil
}
