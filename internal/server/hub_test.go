package server

import (
	"context"
	"testing"

	"github.com/lockcluster/lockcluster/fsm"
)

func TestHubCutsOffSlowStreamsAndSkipsSyncedEvents(t *testing.T) {
	h := newHub(func() uint64 { return 0 }, 0)
	s, err := h.subscribe(7, func() (uint64, error) { return 2, nil })
	if err != nil {
		t.Fatal(err)
	}
	ev := func(seq uint64) fsm.Event { return fsm.Event{Session: 7, Seq: seq, Kind: fsm.EventGranted} }
	h.publish(10, fsm.Applied{Events: []fsm.Event{ev(1), ev(2), ev(3), {Session: 8, Seq: 1}}})
	<-s.ready
	if got := s.take()[0]; got.Seq != 3 || got.Index != 10 {
		t.Fatalf("first event %v: want seq 3 (1 and 2 are covered by the sync)", got)
	}
	for i := uint64(0); i <= subBuffer; i++ {
		h.publish(11+i, fsm.Applied{Events: []fsm.Event{ev(4 + i)}})
	}
	select {
	case <-s.gone:
	default:
		t.Fatal("a stream that does not read was not cut off")
	}
	// publish never blocked, and later events do not reach it.
	h.publish(100000, fsm.Applied{Events: []fsm.Event{ev(100000)}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.waitApplied(ctx, 100000); err != nil {
		t.Fatalf("applied index not recorded: %v", err)
	}
	if err := h.waitApplied(ctx, 100001); err == nil {
		t.Fatal("waitApplied returned for an index not yet applied")
	}
}
