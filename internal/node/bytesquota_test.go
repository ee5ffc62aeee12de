package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// bigScope is 64 names of 1,000 bytes unique to id: a request of about
// 64 KiB.
func bigScope(id uint64) []string {
	names := make([]string, 64)
	for i := range names {
		p := fmt.Sprintf("%d-%02d-", id, i)
		names[i] = p + strings.Repeat("x", 1000-len(p))
	}
	return names
}

// refusalsMetric reads lockcluster_namespace_refusals_total for a namespace
// and reason from a node's /metrics (0 when absent).
func refusalsMetric(t *testing.T, nd *node.Node, ns, reason string) float64 {
	t.Helper()
	r, err := http.Get("http://" + nd.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := string(b)
	re := regexp.MustCompile(`(?m)^lockcluster_namespace_refusals_total\{namespace="` + regexp.QuoteMeta(ns) + `",reason="` + reason + `"\} (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// On a real three-node cluster: a namespace flooding 64 KiB requests at a
// follower, far over its byte quota, is refused for its bytes by that
// follower (counted in its /metrics, by namespace and reason), while
// another namespace's writes, through the leader, all complete; the
// flooder's locks in the applied state add up to no more bytes than the
// quota allowed in the time the flood ran.
func TestByteQuotaThroughAFollower(t *testing.T) {
	const rate, burst = 256 << 10, 512 << 10
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true, Node: func(cfg *node.Config) {
		cfg.Server.NamespaceBytesRate, cfg.Server.NamespaceBytesBurst = rate, burst
		cfg.Server.NamespaceRate, cfg.Server.NamespaceBurst = 50000, 100000
		cfg.Server.SessionRate = 0
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	follower := (leader + 1) % 3
	fl := pb.NewLocksClient(rawConn(t, c.Addrs()[follower]))
	ll := pb.NewLocksClient(rawConn(t, c.Addrs()[leader]))
	open := func(lc pb.LocksClient, ns string) *pb.OpenSessionResponse {
		s, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: ns, Ttl: durationpb.New(10 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	flood, calm := open(fl, "flood"), open(ll, "calm")

	start := time.Now()
	stop := make(chan struct{})
	var refused, admitted atomic.Int64
	var next atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := next.Add(1)
				_, err := fl.Request(ctx, &pb.LockRequest{Namespace: "flood", SessionId: flood.SessionId, SessionSecret: flood.Secret, RequestId: id, Names: bigScope(id)})
				switch {
				case err == nil:
					admitted.Add(1)
				case status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), "byte rate"):
					refused.Add(1)
				default:
					select {
					case errs <- fmt.Errorf("flood request %d: %w", id, err):
					default:
					}
					return
				}
			}
		}()
	}
	c.WaitFor(20*time.Second, "the flood's first byte refusal", func() bool { return refused.Load() > 0 })
	const writes = 30
	for i := uint64(1); i <= writes; i++ {
		r, err := ll.Request(ctx, &pb.LockRequest{Namespace: "calm", SessionId: calm.SessionId, SessionSecret: calm.Secret, RequestId: i, Names: []string{fmt.Sprint("c", i)}})
		if err != nil || r.Status != pb.Status_STATUS_GRANTED {
			t.Fatalf("the other namespace's write %d during the flood: %v, %v", i, r, err)
		}
	}
	during := refused.Load()
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("flood: %d admitted, %d refused for bytes in %s", admitted.Load(), refused.Load(), elapsed.Round(time.Millisecond))

	// Every node applied the same flood: count it on the leader's state.
	held := len(c.Nodes[leader].Machine().Query("flood").Held)
	entry := fsm.EntryBytes(&fsm.Request{Session: flood.SessionId, Namespace: "flood", RequestID: 1 << 32, Names: bigScope(1 << 32)})
	if held != 64*int(admitted.Load()) {
		t.Errorf("the flooder holds %d names, want 64 for each of its %d admitted requests", held, admitted.Load())
	}
	if got, limit := held/64*entry, burst+int(elapsed.Seconds()*rate); got > limit {
		t.Fatalf("the flooder put %d bytes in the log in %s: over the quota's %d", got, elapsed, limit)
	}
	// Decided where the flood arrived: the follower counted the refusals
	// it made; any the leader made of forwarded writes, it counted.
	onFollower := refusalsMetric(t, c.Nodes[follower], "flood", "bytes_rate")
	onLeader := refusalsMetric(t, c.Nodes[leader], "flood", "bytes_rate")
	if onFollower == 0 || int64(onFollower+onLeader) != refused.Load() {
		t.Errorf("byte refusals counted: %v on the follower, %v on the leader: want all %d, each once, the follower's on the follower", onFollower, onLeader, refused.Load())
	}
	if during == 0 {
		t.Error("no refusal while the other namespace wrote")
	}
}
