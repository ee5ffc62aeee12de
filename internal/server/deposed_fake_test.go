package server

import (
	"testing"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// A leader deposed without noticing it acknowledges no heartbeat
// (session/DESIGN.md, "A change of leader"): it renews the session in its
// own table, but its confirmation of leadership fails, so its ack cannot
// move the client's jeopardy deadline past the new leader's expiry.

// depose makes id the log's leader in a new term without telling old: old
// still believes it leads (a leader paused while id was elected), but no
// quorum confirms it any more.
func (fc *fakeCluster) depose(old, id string) {
	l := fc.log
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term++
	l.leader = id
	for _, r := range l.reps {
		switch r.id {
		case old:
			r.deposed = true
		case id:
			r.held = false
			r.catchUpLocked()
			r.publishLocked(true)
		default:
			r.publishLocked(false)
		}
	}
}

// notice tells a deposed node that it no longer leads.
func (fc *fakeCluster) notice(old string) {
	l := fc.log
	l.mu.Lock()
	defer l.mu.Unlock()
	r := fc.node(old).rep
	r.deposed = false
	r.publishLocked(false)
}

func TestDeposedLeaderAcksNoHeartbeat(t *testing.T) {
	fc := newFakeCluster(t, 3, fakeOptions{})
	s := openTTL(t, fc.node("n1"), "dep", time.Minute)
	st, _ := fc.node("n1").attach(t, s, "dep", s.Index)
	st.acked() // n1 leads and acknowledges

	fc.depose("n1", "n2")
	if !fc.node("n1").rep.IsLeader() {
		t.Fatal("the deposed node does not believe it leads")
	}
	msgs := make(chan *pb.SessionDown, 100)
	go func() {
		defer close(msgs)
		for {
			m, err := st.st.Recv()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	var last uint64
	for range 5 {
		last = st.heartbeat()
		time.Sleep(20 * time.Millisecond)
	}
	// Each heartbeat costs n1 one failed confirmation (the fake's is
	// immediate), so this is ample time for n1 to have answered all five.
	window := time.After(500 * time.Millisecond)
	for waiting := true; waiting; {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("the deposed node ended the stream, though it believes it leads")
			}
			t.Fatalf("the deposed node sent %v: want no ack while it is deposed", m)
		case <-window:
			waiting = false
		}
	}

	// Once n1 notices, it forwards heartbeats to n2, which renews them.
	fc.notice("n1")
	deadline := time.After(20 * time.Second)
	for {
		id := st.heartbeat()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("stream ended")
			}
			a := m.GetHeartbeatAck()
			if a == nil {
				t.Fatalf("after n1 noticed: %v, want acks", m)
			}
			if a.Id <= last {
				t.Fatalf("heartbeat %d, sent while n1 was deposed, was acknowledged", a.Id)
			}
			if a.Id == id {
				return
			}
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no heartbeat acknowledged through the new leader")
		}
	}
}
