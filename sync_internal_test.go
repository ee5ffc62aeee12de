package lockcluster

import (
	"context"
	"testing"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

func testSession() *clientSession {
	s := &clientSession{c: &Client{}, id: 1, nextID: 1, reqs: map[uint64]*request{}}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	return s
}

// A sync from a node that lags behind the leader's response must not undo
// what the client already knows: the lock stays held.
func TestStaleSyncKeepsGrantedLock(t *testing.T) {
	s := testSession()
	r := s.newRequest(context.Background(), []string{"x"}, Exclusive)
	s.mu.Lock()
	r.known = 8
	s.apply(r, pb.Status_STATUS_GRANTED, 8, time.Time{}, 0, "")
	s.mu.Unlock()
	<-r.done
	s.sync(&pb.Synced{Index: 6}) // the node has not applied the grant yet
	if err := r.lock.Err(); err != nil {
		t.Fatalf("a stale sync ended the lock: %v", err)
	}
	// A current sync that no longer knows the lock ends it.
	s.sync(&pb.Synced{Index: 9})
	if r.lock.Err() == nil {
		t.Fatal("a current sync without the lock kept it")
	}
}

// Events already covered by a sync are not applied twice, and a sync older
// than the events seen does not rewind the event sequence.
func TestSyncAndEventsExactlyOnce(t *testing.T) {
	s := testSession()
	r := s.newRequest(context.Background(), []string{"x"}, Exclusive)
	s.sync(&pb.Synced{Index: 10, EventSeq: 3, Requests: []*pb.RequestState{{RequestId: r.id, Status: pb.Status_STATUS_QUEUED}}})
	s.event(&pb.Event{Seq: 3, Index: 10, Kind: pb.Event_ABORTED, RequestId: r.id}) // covered by the sync
	select {
	case o := <-r.done:
		t.Fatalf("an event covered by the sync was applied: %+v", o)
	default:
	}
	s.event(&pb.Event{Seq: 4, Index: 11, Kind: pb.Event_GRANTED, RequestId: r.id, Token: 11})
	if o := <-r.done; o.err != nil || o.token != 11 {
		t.Fatalf("grant: %+v", o)
	}
	s.sync(&pb.Synced{Index: 11, EventSeq: 2})
	if s.lastSeq != 4 {
		t.Fatalf("lastSeq %d after an older sync, want 4", s.lastSeq)
	}
}
