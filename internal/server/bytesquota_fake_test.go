package server

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// Issue 24, finding 5: one tenant's big entries slowed the others far below
// the quota, which counted entries, not bytes (about 440 entries a second
// of 64 KiB each). Here a namespace floods requests of 64 KiB at that pace
// (9 every 20 ms of the servers' clock, through the leader and a follower)
// while another namespace makes its writes. The flood is refused for its
// bytes (ResourceExhausted, RetryInfo); the other namespace's writes all
// complete while it runs; and the flooder's entries in the log stay within
// the byte quota: in any second of the leader's clock, at most the burst
// plus one second's rate, and over the whole run at most the burst plus
// the rate times its length.
func TestLargeEntryFloodHeldToTheByteQuota(t *testing.T) {
	const (
		rate    = 1 << 20 // bytes a second
		burst   = 2 << 20
		steps   = 50                    // of the servers' clock
		step    = 20 * time.Millisecond // 9 requests of 64 KiB a step: 450 a second, 28 MiB/s
		perStep = 9
	)
	fc := newFakeCluster(t, 3, fakeOptions{configure: func(c *Config) {
		c.NamespaceRate, c.NamespaceBurst = 50000, 100000 // lockcluster serve's defaults: no help here
		c.NamespaceBytesRate, c.NamespaceBytesBurst = rate, burst
	}})
	ctx := testCtx(t)
	flood, calm := fc.node("n1").open(t, "flood"), fc.node("n1").open(t, "calm")
	from := fc.entries() + 1
	start := fc.clock.Now()

	var refused, admitted atomic.Int64
	var other sync.Map // unexpected flood errors
	var next atomic.Uint64
	floodStep := func(wg *sync.WaitGroup) {
		for w := range perStep {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := next.Add(1)
				n := fc.nodes[w%2] // the leader and a follower
				_, err := n.locks.Request(ctx, &pb.LockRequest{Namespace: "flood", SessionId: flood.SessionId, SessionSecret: flood.Secret,
					RequestId: id, Names: floodScope(id)})
				switch {
				case err == nil:
					admitted.Add(1)
				case status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), "byte rate"):
					if d, ok := retryInfoOf(err); !ok || d <= 0 {
						other.Store(id, fmt.Errorf("a byte-rate refusal without a RetryInfo: %v", err))
					}
					refused.Add(1)
				default:
					other.Store(id, err)
				}
			}()
		}
	}
	for i := uint64(1); i <= steps; i++ {
		var wg sync.WaitGroup
		floodStep(&wg)
		// The other namespace's write, while the step's flood is in flight,
		// through the other follower and the leader by turns.
		n := fc.nodes[2-int(i%2)*2]
		r, err := n.request(ctx, calm, "calm", i, fmt.Sprint("calm", i))
		if err != nil || r.Status != pb.Status_STATUS_GRANTED {
			t.Fatalf("the other namespace's write %d of %d, during the flood: %v, %v", i, steps, r, err)
		}
		if _, err := n.locks.Release(ctx, &pb.ReleaseRequest{Namespace: "calm", SessionId: calm.SessionId, SessionSecret: calm.Secret, RequestId: i}); err != nil {
			t.Fatalf("the other namespace's release %d: %v", i, err)
		}
		wg.Wait()
		fc.clock.Advance(step)
	}
	other.Range(func(k, v any) bool {
		t.Errorf("flood request %v: %v", k, v)
		return true
	})
	offered := int64(steps * perStep)
	t.Logf("flood: %d requests of 64 KiB offered, %d admitted, %d refused for bytes", offered, admitted.Load(), refused.Load())
	if refused.Load() == 0 {
		t.Fatalf("a flood of %d requests of 64 KiB in %s against a quota of %d bytes/s (burst %d) was never refused for its bytes",
			offered, time.Duration(steps)*step, rate, burst)
	}

	// The log: the flooder's bytes per second of the leader's clock.
	type entry struct {
		at    int64
		bytes int
	}
	var floods []entry
	fc.log.mu.Lock()
	for _, data := range fc.log.entries[from-1:] {
		e, err := fsm.DecodeEntry(data)
		if err != nil {
			fc.log.mu.Unlock()
			t.Fatal(err)
		}
		if r, ok := e.Cmd.(*fsm.Request); ok && r.Namespace == "flood" {
			floods = append(floods, entry{e.Time, fsm.EntryBytes(r)})
		}
	}
	fc.log.mu.Unlock()
	total := 0
	for i, e := range floods {
		total += e.bytes
		inSecond := 0
		for _, o := range floods[i:] {
			if o.at < e.at+int64(time.Second) {
				inSecond += o.bytes
			}
		}
		if inSecond > burst+rate {
			t.Fatalf("the flooder put %d bytes in the log in the second from %s: over the quota's %d (burst %d + rate %d)",
				inSecond, time.Unix(0, e.at).Sub(start), burst+rate, burst, rate)
		}
	}
	elapsed := fc.clock.Now().Sub(start)
	if limit := burst + int(elapsed.Seconds()*rate); total > limit {
		t.Fatalf("the flooder put %d bytes in the log in %s: over the quota's %d", total, elapsed, limit)
	}
	if int64(len(floods)) != admitted.Load() {
		t.Errorf("%d flood entries in the log, %d requests admitted", len(floods), admitted.Load())
	}
}
