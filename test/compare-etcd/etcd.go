package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/lockcluster/lockcluster/internal/loadgen"
)

// etcdCluster is three etcd member processes on loopback.
type etcdCluster struct {
	dir     string
	clients []string
	procs   []*exec.Cmd
	done    []chan struct{}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startEtcd starts a 3-member cluster (this binary's 'member' command).
func startEtcd(ctx context.Context) (*etcdCluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "compare-etcd-")
	if err != nil {
		return nil, err
	}
	c := &etcdCluster{dir: dir}
	var peers, initial []string
	for i := range 3 {
		cp, err1 := freePort()
		pp, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		c.clients = append(c.clients, "http://"+cp)
		peers = append(peers, "http://"+pp)
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, pp))
	}
	for i := range 3 {
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("m%d.log", i)))
		if err != nil {
			c.stop()
			return nil, err
		}
		cmd := exec.Command(self, "member", fmt.Sprintf("m%d", i), filepath.Join(dir, fmt.Sprintf("m%d", i)), c.clients[i], peers[i], strings.Join(initial, ","))
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, err
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); log.Close(); close(done) }()
		c.procs, c.done = append(c.procs, cmd), append(c.done, done)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.clients, DialTimeout: 5 * time.Second})
	if err != nil {
		c.stop()
		return nil, err
	}
	defer cli.Close()
	for deadline := time.Now().Add(60 * time.Second); ; {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Put(pctx, "/compare-etcd/ready", "1")
		cancel()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("etcd cluster not ready after 60s (logs in %s): %w", dir, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *etcdCluster) pids() []int {
	var out []int
	for _, p := range c.procs {
		out = append(out, p.Process.Pid)
	}
	return out
}

func (c *etcdCluster) stop() {
	for _, p := range c.procs {
		p.Process.Signal(syscall.SIGTERM)
	}
	for i, d := range c.done {
		select {
		case <-d:
		case <-time.After(15 * time.Second):
			c.procs[i].Process.Kill()
			<-d
		}
	}
	os.RemoveAll(c.dir)
}

// etcdDriver locks with go.etcd.io/etcd/client/v3/concurrency: a session
// is a concurrency.Session (a lease kept alive) on a client of its own,
// as each lockcluster session has its own client; exclusive locks are a
// Mutex, and with rw set every lock is the experimental RWMutex recipe.
type etcdDriver struct {
	endpoints []string
	ttl       int // seconds
	rw        bool
}

func (d *etcdDriver) Name() string { return "etcd" }
func (d *etcdDriver) Close() error { return nil }

func (d *etcdDriver) Open(ctx context.Context) (loadgen.Session, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: d.endpoints, DialTimeout: 5 * time.Second, Context: context.Background()})
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(d.ttl), concurrency.WithContext(context.Background()))
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdSession{cli: cli, s: s, rw: d.rw}, nil
}

type etcdSession struct {
	cli *clientv3.Client
	s   *concurrency.Session
	rw  bool
}

func (s *etcdSession) Close(ctx context.Context) error {
	err := s.s.Close()
	return errors.Join(err, s.cli.Close())
}

// Lost reports whether the session's lease ended.
func (s *etcdSession) Lost() bool {
	select {
	case <-s.s.Done():
		return true
	default:
		return false
	}
}

func (s *etcdSession) Lock(ctx context.Context, name string, shared, ifAvailable bool) (loadgen.Held, error) {
	if s.rw {
		m := recipe.NewRWMutex(s.s, "/rw/"+name)
		lock, unlock := m.Lock, m.Unlock
		if shared {
			lock, unlock = m.RLock, m.RUnlock
		}
		// The recipe takes no context: wait for it here, bounded by ctx.
		done := make(chan error, 1)
		go func() { done <- lock() }()
		select {
		case err := <-done:
			if err != nil {
				return nil, err
			}
			return releaser(func(context.Context) error { return unlock() }), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m := concurrency.NewMutex(s.s, "/locks/"+name)
	if ifAvailable {
		if err := m.TryLock(ctx); err != nil {
			if errors.Is(err, concurrency.ErrLocked) {
				return nil, loadgen.ErrNotAvailable
			}
			return nil, err
		}
	} else if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return releaser(m.Unlock), nil
}

type releaser func(context.Context) error

func (r releaser) Release(ctx context.Context) error { return r(ctx) }
