package lockcluster_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// The jeopardy deadline a client publishes (JeopardyDeadline and
// WithDeadlineFunc, what 'lockcluster lock' hands its guard process) moves
// forward with every acknowledged heartbeat, is never more than a TTL
// ahead of the moment it is heard, and is the instant a held lock's
// context ends once the cluster stops acknowledging: never before it.
func TestJeopardyDeadlineMovesWithAcks(t *testing.T) {
	c := nodetest.Start(t, 3, nodetest.Options{Quiet: true})
	const ttl = time.Second
	var mu sync.Mutex
	var deadlines, heard []time.Time
	opened := time.Now()
	cl := dial(t, c, lockcluster.WithTTL(ttl), lockcluster.WithDeadlineFunc(func(d time.Time) {
		mu.Lock()
		deadlines, heard = append(deadlines, d), append(heard, time.Now())
		mu.Unlock()
	}))
	last := func() (time.Time, int) {
		mu.Lock()
		defer mu.Unlock()
		return deadlines[len(deadlines)-1], len(deadlines)
	}
	// Heartbeats go every TTL/3: four deadlines take about a TTL.
	c.WaitFor(15*time.Second, "four deadlines", func() bool { _, n := last(); return n >= 4 })
	mu.Lock()
	if d := deadlines[0]; d.Before(opened.Add(ttl)) {
		t.Errorf("the first deadline is %s after Dial began, before a TTL (%s): the session opened after that", d.Sub(opened), ttl)
	}
	for i, d := range deadlines {
		if i > 0 && !d.After(deadlines[i-1]) {
			t.Errorf("deadline %d (%s after open) does not come after deadline %d (%s)", i, d.Sub(opened), i-1, deadlines[i-1].Sub(opened))
		}
		// A heartbeat's send time precedes its ack: the deadline it sets
		// is at most a TTL after the ack was heard.
		if d.After(heard[i].Add(ttl)) {
			t.Errorf("deadline %d is %s after it was heard, more than the TTL", i, d.Sub(heard[i]))
		}
	}
	mu.Unlock()
	if j, _ := last(); cl.JeopardyDeadline().Before(j) {
		t.Errorf("JeopardyDeadline %s is before the last deadline handed out, %s", cl.JeopardyDeadline(), j)
	}
	if left := time.Until(cl.JeopardyDeadline()); left <= 0 || left > ttl {
		t.Errorf("JeopardyDeadline is %s away, want within (0, %s]", left, ttl)
	}

	ctx := ctxT(t)
	l, err := cl.Acquire(ctx, "deadline", lockcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.StopAll()
	// ctx's deadline only stops a hung test.
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the lock's context did not end after a TTL without acknowledged heartbeats")
	}
	ended := time.Now()
	j, _ := last() // an ack in flight at StopAll may have moved it: the last one counts
	if ended.Before(j) {
		t.Fatalf("the lock's context ended %s before the jeopardy deadline", j.Sub(ended))
	}
	if !errors.Is(l.Err(), lockcluster.ErrSessionLost) {
		t.Fatalf("cause %v, want ErrSessionLost", l.Err())
	}
	if d := cl.JeopardyDeadline(); !d.IsZero() {
		t.Fatalf("JeopardyDeadline after the session was lost: %v, want the zero time", d)
	}
}
