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
	"syscall"
	"time"

	"github.com/lockcluster/lockcluster/test/ports"
)

// localCluster runs each node as a `lockcluster serve` process on
// loopback, every raft link through a fault proxy (proxy.go).
type localCluster struct {
	bin   string
	dir   string // data directories and node logs
	nodes []*localNode
	links *Links

	mu      sync.Mutex
	crashes []string
}

type localNode struct {
	id, grpc, raft, http string
	args                 []string
	cmd                  *exec.Cmd
	done                 chan struct{}
	expectExit           bool // set before the harness kills or stops it
}

func newLocalCluster(bin, dir string, n int) (*localCluster, error) {
	lc := &localCluster{bin: bin, dir: dir}
	var raftAddrs, peers []string
	for i := range n {
		nd := &localNode{id: fmt.Sprintf("node%d", i), grpc: freePort(), raft: freePort(), http: freePort()}
		lc.nodes = append(lc.nodes, nd)
		raftAddrs = append(raftAddrs, nd.raft)
		peers = append(peers, nd.id+"="+nd.raft)
	}
	links, err := NewLinks(raftAddrs)
	if err != nil {
		return nil, err
	}
	lc.links = links
	for i, nd := range lc.nodes {
		dial := []string{nd.id + "=" + nd.raft} // raft asks for its own address too
		for j, other := range lc.nodes {
			if j != i {
				dial = append(dial, other.id+"="+links.Proxy(i, j))
			}
		}
		nd.args = []string{"serve", "--id", nd.id, "--data-dir", filepath.Join(dir, nd.id), "--grpc-addr", nd.grpc,
			"--raft-addr", nd.raft, "--http-addr", nd.http, "--bootstrap", strings.Join(peers, ","),
			"--raft-dial", strings.Join(dial, ",")}
	}
	return lc, nil
}

// freePort picks a free port for a node; the harness takes them from
// 26000-29999 (the CLI's tests use 20000-25999; see ports.Free).
func freePort() string {
	addr, err := ports.Free(26000, 30000)
	if err != nil {
		panic(err)
	}
	return addr
}

func (lc *localCluster) Start(ctx context.Context) error {
	for i := range lc.nodes {
		if err := lc.start(i); err != nil {
			return err
		}
	}
	_, err := waitLeader(ctx, lc, 30*time.Second)
	return err
}

func (lc *localCluster) start(i int) error {
	nd := lc.nodes[i]
	f, err := os.OpenFile(filepath.Join(lc.dir, nd.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== jepsen-lite: starting %s at %s\n", nd.id, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(lc.bin, nd.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", nd.id, err)
	}
	done := make(chan struct{})
	lc.mu.Lock()
	nd.cmd, nd.done, nd.expectExit = cmd, done, false
	lc.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		lc.mu.Lock()
		if !nd.expectExit {
			lc.crashes = append(lc.crashes, fmt.Sprintf("%s exited by itself: %v (see %s.log)", nd.id, err, nd.id))
		}
		lc.mu.Unlock()
		close(done)
	}()
	return nil
}

func (lc *localCluster) Size() int { return len(lc.nodes) }

func (lc *localCluster) Endpoints() []string {
	out := make([]string, len(lc.nodes))
	for i, nd := range lc.nodes {
		out[i] = nd.grpc
	}
	return out
}

func (lc *localCluster) HTTPAddr(i int) string { return lc.nodes[i].http }

func (lc *localCluster) signal(i int, s syscall.Signal) error {
	lc.mu.Lock()
	nd := lc.nodes[i]
	cmd := nd.cmd
	if s == syscall.SIGKILL || s == syscall.SIGTERM {
		nd.expectExit = true
	}
	lc.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("%s is not running", nd.id)
	}
	return cmd.Process.Signal(s)
}

func (lc *localCluster) Kill(i int) error {
	if err := lc.signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-lc.nodes[i].done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not die of SIGKILL", lc.nodes[i].id)
	}
}

func (lc *localCluster) Restart(i int) error {
	select {
	case <-lc.nodes[i].done:
	default:
		return fmt.Errorf("%s is still running", lc.nodes[i].id)
	}
	return lc.start(i)
}

func (lc *localCluster) Pause(i int) error  { return lc.signal(i, syscall.SIGSTOP) }
func (lc *localCluster) Resume(i int) error { return lc.signal(i, syscall.SIGCONT) }
func (lc *localCluster) Net() Network       { return lc.links }

func (lc *localCluster) HealAll() error {
	var errs []error
	for i, nd := range lc.nodes {
		select {
		case <-nd.done:
			errs = append(errs, lc.start(i))
		default:
			errs = append(errs, lc.signal(i, syscall.SIGCONT))
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
	for i, nd := range lc.nodes {
		if nd.done == nil {
			continue
		}
		select {
		case <-nd.done:
			continue
		default:
		}
		_ = lc.signal(i, syscall.SIGCONT)
		_ = lc.signal(i, syscall.SIGTERM)
	}
	for i, nd := range lc.nodes {
		if nd.done == nil {
			continue
		}
		select {
		case <-nd.done:
		case <-time.After(20 * time.Second):
			_ = lc.signal(i, syscall.SIGKILL)
			<-nd.done
		}
	}
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
