package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// A namespace's write quota (quota.go), on servers over the in-memory
// replica (fake_test.go). The servers' clock is fake and stands still
// unless a test moves it: a bucket refills only then, so the counts below
// are exact.

// isLocksCall reports whether a gRPC method is one of the Locks service's
// (fake_test.go counts those that arrive forwarded).
func isLocksCall(method string) bool { return strings.HasPrefix(method, "/lockcluster.v1.Locks/") }

// refusalLog is an Observer that also hears the gate's refusals and the
// stream cuts (RefusalObserver).
type refusalLog struct {
	nopObserver
	mu       sync.Mutex
	refusals map[string]int // "namespace/reason"
	cuts     map[string]int
}

func (o *refusalLog) LimitRefused(ns, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refusals[ns+"/"+reason]++
}

func (o *refusalLog) StreamCut(ns string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cuts[ns]++
}

func (o *refusalLog) refused(ns, reason string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refusals[ns+"/"+reason]
}

func (o *refusalLog) cut(ns string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cuts[ns]
}

var _ RefusalObserver = (*refusalLog)(nil)

// observed configures every node with a refusalLog of its own.
func observed(logs map[string]*refusalLog, more func(*Config)) func(*Config) {
	return func(c *Config) {
		o := &refusalLog{refusals: map[string]int{}, cuts: map[string]int{}}
		logs[c.Self.ID], c.Observer = o, o
		if more != nil {
			more(c)
		}
	}
}

// wantQuotaRefusal fails unless err is the quota's refusal: ResourceExhausted
// naming the namespace and what (say) it is over, with a RetryInfo.
func wantQuotaRefusal(t *testing.T, err error, ns, say string) {
	t.Helper()
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(msg, fmt.Sprintf("namespace %q", ns)) || !strings.Contains(msg, say) {
		t.Fatalf("%v: want ResourceExhausted naming namespace %q and its %s", err, ns, say)
	}
	if d, ok := retryInfoOf(err); !ok || d <= 0 {
		t.Fatalf("%v: no RetryInfo with a delay (%s, %v)", err, d, ok)
	}
}

// A flood over a namespace's write rate sent to a follower is refused by
// the follower itself: only the writes within the follower's own bucket
// (its burst) are forwarded, and the leader's gate decides those. The
// refusals are counted on the node that made them, by namespace and
// reason. Another namespace, through the same follower, is not affected.
func TestFollowerRefusesOverRateWithoutForwarding(t *testing.T) {
	const burst = 5
	logs := map[string]*refusalLog{}
	fc := newFakeCluster(t, 3, fakeOptions{configure: observed(logs, func(c *Config) { c.NamespaceRate, c.NamespaceBurst = 1, burst })})
	ctx := testCtx(t)
	s := fc.node("n3").open(t, "greedy") // a token of n3's bucket and one of the leader's
	before, entries := fc.forwarded["n1"].Load(), fc.entries()
	const flood = 40
	granted := 0
	for i := uint64(1); i <= flood; i++ {
		_, err := fc.node("n2").request(ctx, s, "greedy", i, fmt.Sprint("x", i))
		if err == nil {
			granted++
			continue
		}
		wantQuotaRefusal(t, err, "greedy", "write rate")
	}
	forwarded := fc.forwarded["n1"].Load() - before
	if forwarded != burst {
		t.Errorf("the follower forwarded %d of %d writes over the rate: want only its burst, %d", forwarded, flood, burst)
	}
	if got := logs["n2"].refused("greedy", RefusedRate); got != flood-burst {
		t.Errorf("the follower counted %d rate refusals, want %d", got, flood-burst)
	}
	// The leader had burst-1 tokens left after the open: it refused one of
	// the forwarded writes, and counted it.
	if got := logs["n1"].refused("greedy", RefusedRate); got != 1 {
		t.Errorf("the leader counted %d rate refusals, want 1 (of the forwarded writes)", got)
	}
	if granted != burst-1 || fc.entries()-entries != burst-1 {
		t.Errorf("%d granted, %d entries: want %d each", granted, fc.entries()-entries, burst-1)
	}
	calm := fc.node("n2").open(t, "calm")
	if r, err := fc.node("n2").request(ctx, calm, "calm", 1, "x"); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("another namespace through the same follower: %v, %v", r, err)
	}
}

// floodScope is a scope of 64 names of 1,000 bytes, unique to id: a
// request of about 64 KiB, the largest the default limits allow.
func floodScope(id uint64) []string {
	names := make([]string, 64)
	for i := range names {
		p := fmt.Sprintf("%d-%02d-", id, i)
		names[i] = p + strings.Repeat("x", 1000-len(p))
	}
	return names
}

// The byte rate refuses large entries that the entry rate lets through,
// on the node the client called, with ResourceExhausted, a RetryInfo and
// its own reason; a write it refuses is not charged to the entry rate (the
// small writes after it still fit); the bucket refills with time; another
// namespace is not affected.
func TestNamespaceBytesRate(t *testing.T) {
	big := fsm.EntryBytes(&fsm.Request{Session: 1 << 20, Namespace: "big", RequestID: 1 << 20, Names: floodScope(1 << 20)})
	bytesBurst := 3*big + big/2 // three large requests, then refusals
	logs := map[string]*refusalLog{}
	fc := newFakeCluster(t, 3, fakeOptions{configure: observed(logs, func(c *Config) {
		c.NamespaceBytesRate, c.NamespaceBytesBurst = float64(big), bytesBurst // one large request a second
		c.NamespaceRate, c.NamespaceBurst = 1, 1+3+3                           // the open, 3 large and 3 small
	})})
	ctx := testCtx(t)
	for _, via := range []string{"n1", "n2"} { // on the leader and on a follower alike
		t.Run(via, func(t *testing.T) {
			n := fc.node(via)
			ns := "big-" + via
			s := n.open(t, ns)
			call := func(id uint64, names []string) error {
				_, err := n.locks.Request(ctx, &pb.LockRequest{Namespace: ns, SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: id, Names: names})
				return err
			}
			admitted := 0
			for i := uint64(1); i <= 10; i++ {
				if err := call(i, floodScope(i)); err == nil {
					admitted++
				} else {
					wantQuotaRefusal(t, err, ns, "byte rate")
				}
			}
			if admitted != 3 {
				t.Fatalf("%d large requests admitted with a burst of %d bytes: want 3", admitted, bytesBurst)
			}
			if got := logs[via].refused(ns, RefusedBytesRate); got != 7 {
				t.Errorf("%d byte-rate refusals counted on %s, want 7", got, via)
			}
			// The 7 refused were not charged to the entry rate: 3 small
			// writes fit, the next is over the entry rate.
			for i := uint64(11); i <= 13; i++ {
				if err := call(i, []string{fmt.Sprint("small", i)}); err != nil {
					t.Fatalf("small write %d after the byte refusals: %v", i, err)
				}
			}
			wantQuotaRefusal(t, call(14, []string{"small14"}), ns, "write rate")
			if via == "n2" && logs["n1"].refused(ns, RefusedBytesRate)+logs["n1"].refused(ns, RefusedRate) != 0 {
				t.Error("the leader refused writes the follower should have")
			}
		})
	}
	// Time refills both buckets: a large request passes again.
	fc.clock.Advance(2e9)
	n := fc.node("n1")
	s := n.open(t, "big-n1") // a second session: the first's held names stay
	if _, err := n.locks.Request(ctx, &pb.LockRequest{Namespace: "big-n1", SessionId: s.SessionId, SessionSecret: s.Secret, RequestId: 1, Names: floodScope(99)}); err != nil {
		t.Fatalf("a large request 2s later: %v", err)
	}
	// Another namespace was never limited.
	calm := n.open(t, "calm")
	if _, err := n.locks.Request(ctx, &pb.LockRequest{Namespace: "calm", SessionId: calm.SessionId, SessionSecret: calm.Secret, RequestId: 1, Names: floodScope(100)}); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
}

// The gate's other refusals are counted by namespace and reason on the
// node that made them: a wrong secret, the per-session rate, a name over
// its size limit, the sessions limit.
func TestRefusalsCountedByReason(t *testing.T) {
	logs := map[string]*refusalLog{}
	fc := newFakeCluster(t, 3, fakeOptions{configure: observed(logs, func(c *Config) {
		c.SessionRate, c.SessionBurst = 1, 2
		c.Limits = &fsm.Limits{}
		*c.Limits = fsm.DefaultLimits()
		c.Limits.MaxSessionsPerNamespace = 1
	})})
	ctx := testCtx(t)
	eventually(t, "the limits applied", func() bool { return fc.node("n2").m.Limits().MaxSessionsPerNamespace == 1 })
	n2 := fc.node("n2")
	s := n2.open(t, "ns")
	if _, err := n2.locks.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "ns"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second session over the limit of 1: %v", err)
	}
	bad := &pb.OpenSessionResponse{SessionId: s.SessionId, Secret: make([]byte, 32)}
	if _, err := n2.request(ctx, bad, "ns", 1, "a"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a wrong secret: %v", err)
	}
	if _, err := n2.request(ctx, s, "ns", 1, strings.Repeat("n", 2000)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a name over its limit: %v", err)
	}
	for i := uint64(1); i <= 3; i++ { // a burst of 2 a session
		_, err := n2.request(ctx, s, "ns", i, "a")
		if i <= 2 && err != nil {
			t.Fatalf("write %d: %v", i, err)
		} else if i == 3 && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("write 3 over the session's rate: %v", err)
		}
	}
	for _, reason := range []string{RefusedSessions, RefusedSessionSecret, RefusedSize, RefusedSessionRate} {
		if got := logs["n2"].refused("ns", reason); got != 1 {
			t.Errorf("%s: counted %d on the follower, want 1", reason, got)
		}
		if got := logs["n1"].refused("ns", reason); got != 0 {
			t.Errorf("%s: counted %d on the leader, want 0 (the follower decided)", reason, got)
		}
	}
}

// A session stream cut for falling behind is counted, with its namespace,
// on the node that served it.
func TestStreamCutCounted(t *testing.T) {
	logs := map[string]*refusalLog{}
	fc := newFakeCluster(t, 3, fakeOptions{configure: observed(logs, func(c *Config) { c.StreamBacklogBytes = 1 })}) // every event cuts
	ctx := testCtx(t)
	a, b := fc.node("n1").open(t, "cut"), fc.node("n3").open(t, "cut")
	st, _ := fc.node("n3").attach(t, b, "cut", b.Index)
	if r, err := fc.node("n1").request(ctx, a, "cut", 1, "x"); err != nil || r.Status != pb.Status_STATUS_GRANTED {
		t.Fatalf("a: %v, %v", r, err)
	}
	if r, err := fc.node("n3").request(ctx, b, "cut", 1, "x"); err != nil || r.Status != pb.Status_STATUS_QUEUED {
		t.Fatalf("b: %v, %v", r, err)
	}
	if _, err := fc.node("n1").locks.Release(ctx, &pb.ReleaseRequest{Namespace: "cut", SessionId: a.SessionId, SessionSecret: a.Secret, RequestId: 1}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := st.st.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("the stream ended with %v, want the cut", err)
			}
			break
		}
		if m.GetEvent() != nil {
			t.Fatalf("an event over a backlog cap of 1 byte: %v", m)
		}
	}
	eventually(t, "the cut counted on n3", func() bool { return logs["n3"].cut("cut") == 1 })
	if logs["n1"].cut("cut")+logs["n2"].cut("cut") != 0 {
		t.Error("a cut counted on a node that did not serve the stream")
	}
}
