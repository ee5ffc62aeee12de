package node_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// Bounds on what clients that do not play along cost a node (issue 24,
// finding 2): connections per address, streams per connection, idle
// connections, and streams that are never read.

// idleConn opens a TCP connection to addr that starts HTTP/2 (the
// client's preface and an empty SETTINGS frame) and then does nothing: an
// idle gRPC connection, at almost no cost to this side.
func idleConn(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// closedByPeer reports whether the node closed c within d (it reads and
// drops whatever the node sent first: its SETTINGS, a GOAWAY).
func closedByPeer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// scrape returns the value of an unlabelled metric on node i's /metrics.
func scrape(t *testing.T, c *nodetest.Cluster, i int, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + c.Nodes[i].HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no %s on /metrics", name)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// A node keeps at most MaxConnsPerIP connections from one address open:
// the ones past it are closed at once and counted; once some close, the
// address may open as many again.
func TestConnectionsPerAddressAreCapped(t *testing.T) {
	const max = 5
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) { cfg.MaxConnsPerIP = max }})
	addr := c.Addrs()[0]
	var conns []net.Conn
	for range max + 3 {
		cn, err := idleConn(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer cn.Close()
		conns = append(conns, cn)
	}
	c.WaitFor(10*time.Second, "the node to accept the connections", func() bool {
		return scrape(t, c, 0, "lockcluster_api_connections")+scrape(t, c, 0, "lockcluster_api_connections_refused_total") == max+3
	})
	if open, refused := scrape(t, c, 0, "lockcluster_api_connections"), scrape(t, c, 0, "lockcluster_api_connections_refused_total"); open != max || refused != 3 {
		t.Fatalf("%v connections open and %v refused: want the cap, %d, and the 3 past it", open, refused, max)
	}
	open := 0
	for _, cn := range conns {
		if !closedByPeer(cn, 300*time.Millisecond) {
			open++
		}
	}
	if open != max {
		t.Fatalf("%d of %d connections from one address stayed open: want the cap, %d", open, len(conns), max)
	}
	for _, cn := range conns {
		cn.Close()
	}
	c.WaitFor(5*time.Second, "the closed connections to be given back", func() bool {
		return scrape(t, c, 0, "lockcluster_api_connections") == 0
	})
	// The address may connect again, and a client works.
	cc := rawConn(t, addr)
	if _, err := pb.NewClusterClient(cc).Status(context.Background(), &pb.StatusRequest{}); err != nil {
		t.Fatalf("a client after the others closed: %v", err)
	}
}

// A connection with no call or stream open for ConnIdleTimeout is closed;
// its client connects again when it calls.
func TestIdleConnectionsAreClosed(t *testing.T) {
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) { cfg.ConnIdleTimeout = 500 * time.Millisecond }})
	raw, err := idleConn(c.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if !closedByPeer(raw, 10*time.Second) {
		t.Fatal("an idle connection was still open 10s after the idle timeout of 500ms")
	}
	cc := rawConn(t, c.Addrs()[0])
	cl := pb.NewClusterClient(cc)
	if _, err := cl.Status(context.Background(), &pb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(10*time.Second, "the node to close the client's idle connection", func() bool { return cc.GetState() != connectivity.Ready })
	if _, err := cl.Status(context.Background(), &pb.StatusRequest{}); err != nil {
		t.Fatalf("the client's next call: %v", err)
	}
}

// One connection has at most MaxConcurrentStreams calls and streams open:
// a client's next one waits until one ends.
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) { cfg.MaxConcurrentStreams = 2 }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc := pb.NewLocksClient(rawConn(t, c.Addrs()[0]))
	var streams []pb.Locks_SessionClient
	for range 2 {
		s, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "streams", Ttl: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		st, err := lc.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "streams", SessionId: s.SessionId, MinIndex: s.Index, SessionSecret: s.Secret}}}); err != nil {
			t.Fatal(err)
		}
		if m, err := st.Recv(); err != nil || m.GetSynced() == nil {
			t.Fatalf("%v, %v", m, err)
		}
		streams = append(streams, st)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := lc.OpenSession(short, &pb.OpenSessionRequest{Namespace: "streams"}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third call with two streams open: %v: want it to wait (DeadlineExceeded)", err)
	}
	if err := streams[0].CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "streams"}); err != nil {
		t.Fatalf("a call once a stream ended: %v", err)
	}
}

// stallerEnv, set to a node's address, makes TestStaller the attacker of
// TestNeverReadStreamsAndIdleConnectionsStayBounded, in a process of its
// own (so that what it holds does not count against the node's memory).
const stallerEnv = "LOCKCLUSTER_TEST_STALLER"

const (
	stallerStreams = 200
	stallerIdle    = 2000
	stallerRounds  = 80
)

// One client attaches 200 streams of one session and never reads them,
// while its session is granted scope after scope of 64 names of 1 KiB
// (events of 64 KiB for each of its streams), and holds 2,000 idle
// connections open: the node's heap grows by at most 64 MiB, and another
// client locks and releases throughout, every call answered. (Issue 24:
// 200 such streams cost 316 MiB, and every one of them stayed until the
// client left.) The session keeps DefaultMaxStreamsPerSession (4)
// streams; each is cut once its backlog passes 4 MiB, and its handler
// returns though its Send is blocked; the address keeps DefaultMaxConnsPerIP
// (512) connections and the rest are closed.
func TestNeverReadStreamsAndIdleConnectionsStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a client process with 2,000 connections")
	}
	const bound = 64 << 20
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true})
	addr := c.Addrs()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The well-behaved client: lock, release, again, until the end.
	lc := pb.NewLocksClient(rawConn(t, addr))
	good, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "stall", Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var pairs atomic.Int64
	stop := make(chan struct{})
	failed := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			r, err := lc.Request(ctx, &pb.LockRequest{Namespace: "stall", SessionId: good.SessionId, SessionSecret: good.Secret, RequestId: id, Names: []string{"good"}})
			if err == nil && r.Status != pb.Status_STATUS_GRANTED {
				err = fmt.Errorf("request %d: %v", id, r.Status)
			}
			if err == nil {
				_, err = lc.Release(ctx, &pb.ReleaseRequest{Namespace: "stall", SessionId: good.SessionId, SessionSecret: good.Secret, RequestId: id})
			}
			if err != nil {
				failed <- err
				return
			}
			pairs.Add(1)
		}
	}()
	c.WaitFor(10*time.Second, "the well-behaved client's first pair", func() bool { return pairs.Load() > 0 })

	before := heapInUse()
	g0 := runtime.NumGoroutine()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStaller$", "-test.v")
	cmd.Env = append(os.Environ(), stallerEnv+"="+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	expect := func(what string) {
		t.Helper()
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "staller: ") {
				t.Log(lines.Text())
			}
			if lines.Text() == "staller: "+what {
				return
			}
			if strings.HasPrefix(lines.Text(), "staller: failed") || strings.HasPrefix(lines.Text(), "--- FAIL") {
				t.Fatalf("the stalling client failed: %s", lines.Text())
			}
		}
		t.Fatalf("the stalling client ended before %q", what)
	}
	expect("churned")
	after := heapInUse()
	grew := int64(after) - int64(before)
	t.Logf("heap in use %d MiB before the stalling client, %d MiB with its %d never-read streams and %d idle connections: %+d MiB (bound %d MiB); goroutines %d -> %d; %d lock/release pairs meanwhile",
		before>>20, after>>20, stallerStreams, stallerIdle, grew>>20, bound>>20, g0, runtime.NumGoroutine(), pairs.Load())
	if grew > bound {
		t.Errorf("the node's heap grew by %d MiB: over the bound of %d MiB", grew>>20, bound>>20)
	}
	if refused := scrape(t, c, 0, "lockcluster_api_connections_refused_total"); refused < stallerIdle+1-node.DefaultMaxConnsPerIP {
		t.Errorf("%v connections refused: want at least the %d past the cap", refused, stallerIdle+1-node.DefaultMaxConnsPerIP)
	}
	n := pairs.Load()
	c.WaitFor(10*time.Second, "more lock/release pairs of the well-behaved client", func() bool { return pairs.Load() > n })
	close(stop)
	wg.Wait()
	select {
	case err := <-failed:
		t.Fatalf("the well-behaved client failed: %v", err)
	default:
	}
}

// heapInUse is the process's heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestStaller is the stalling client of
// TestNeverReadStreamsAndIdleConnectionsStayBounded; it runs only in the
// process that test starts. It reports on stdout and holds everything
// open until its stdin closes.
func TestStaller(t *testing.T) {
	addr := os.Getenv(stallerEnv)
	if addr == "" {
		t.Skip("run by TestNeverReadStreamsAndIdleConnectionsStayBounded")
	}
	fail := func(format string, a ...any) {
		fmt.Printf("staller: failed: "+format+"\n", a...)
		t.FailNow()
	}
	ctx := context.Background()
	// Fixed small windows: the node, not this process, holds what the
	// streams do not take.
	cc := rawConn(t, addr, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	lc := pb.NewLocksClient(cc)
	open := func() *pb.OpenSessionResponse {
		s, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "stall", Ttl: durationpb.New(10 * time.Minute)})
		if err != nil {
			fail("open: %v", err)
		}
		return s
	}
	holder, stalled := open(), open()
	var streams []pb.Locks_SessionClient
	for range stallerStreams {
		st, err := lc.Session(ctx)
		if err == nil {
			err = st.Send(&pb.SessionUp{Kind: &pb.SessionUp_Attach{Attach: &pb.Attach{Namespace: "stall", SessionId: stalled.SessionId, MinIndex: stalled.Index, SessionSecret: stalled.Secret}}})
		}
		if err != nil {
			fail("attach: %v", err)
		}
		streams = append(streams, st)
	}
	var idle []net.Conn
	for range stallerIdle {
		cn, err := idleConn(addr)
		if err != nil {
			fail("idle connection %d: %v", len(idle), err)
		}
		idle = append(idle, cn)
	}
	fmt.Printf("staller: %d streams attached, never read; %d idle connections\n", len(streams), len(idle))
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("%04d", i) + strings.Repeat("x", 996)
	}
	for i := uint64(1); i <= stallerRounds; i++ {
		r, err := lc.Request(ctx, &pb.LockRequest{Namespace: "stall", SessionId: holder.SessionId, SessionSecret: holder.Secret, RequestId: i, Names: names})
		if err != nil || r.Status != pb.Status_STATUS_GRANTED {
			fail("round %d: holder: %v, %v", i, r, err)
		}
		r, err = lc.Request(ctx, &pb.LockRequest{Namespace: "stall", SessionId: stalled.SessionId, SessionSecret: stalled.Secret, RequestId: i, Names: names})
		if err != nil || r.Status != pb.Status_STATUS_QUEUED {
			fail("round %d: stalled session: %v, %v", i, r, err)
		}
		for _, s := range []*pb.OpenSessionResponse{holder, stalled} {
			if _, err := lc.Release(ctx, &pb.ReleaseRequest{Namespace: "stall", SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: i}); err != nil {
				fail("round %d: release: %v", i, err)
			}
		}
	}
	fmt.Printf("staller: %d rounds: %d events of 64 KiB for the stalled session\n", stallerRounds, stallerRounds)
	fmt.Println("staller: churned")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it
	runtime.KeepAlive(idle)
	runtime.KeepAlive(streams)
}
