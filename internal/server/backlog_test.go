package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lockcluster/lockcluster/fsm"
)

// scopeNames is a scope of 64 names of 1,000 bytes: the largest request the
// default limits allow, about 64 KiB as an event.
func scopeNames() []string {
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("%04d", i) + strings.Repeat("x", 996)
	}
	return names
}

// A stream that never reads is cut once its backlog would pass the byte
// cap, long before the event cap, and its backlog never holds more than the
// cap; a stream that keeps reading, fed the same events, is not cut (issue
// 11: the count cap alone let one stalled client pin ~420 MiB).
func TestHubCutsStreamOverByteCap(t *testing.T) {
	const limit = 256 << 10
	h := newHub(func() uint64 { return 0 }, limit)
	none := func() (uint64, error) { return 0, nil }
	stalled, err := h.subscribe(7, none)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := h.subscribe(8, none)
	if err != nil {
		t.Fatal(err)
	}
	names := scopeNames()
	cut := 0
	for i := uint64(1); i <= 100; i++ {
		h.publish(i, fsm.Applied{Events: []fsm.Event{
			{Session: 7, Seq: i, Kind: fsm.EventGranted, Names: names},
			{Session: 8, Seq: i, Kind: fsm.EventGranted, Names: names},
		}})
		stalled.mu.Lock()
		backlog, queued := stalled.bytes, len(stalled.q)
		stalled.mu.Unlock()
		if backlog > limit {
			t.Fatalf("after %d events the stalled stream's backlog is %d bytes, over its cap of %d", i, backlog, limit)
		}
		select {
		case <-stalled.gone:
			if cut == 0 {
				cut = int(i)
				if queued == 0 || queued >= subBuffer {
					t.Fatalf("cut with %d events queued: want the byte cap, not the event cap, to cut it", queued)
				}
			}
		default:
		}
		if got := reader.take(); len(got) != 1 || got[0].Seq != i || len(got[0].Names) != 64 {
			t.Fatalf("the reading stream got %d events at %d, want event %d with 64 names", len(got), i, i)
		}
		select {
		case <-reader.gone:
			t.Fatalf("the reading stream was cut at event %d", i)
		default:
		}
	}
	if cut == 0 {
		t.Fatal("a stream that never reads was not cut by its byte cap")
	}
	t.Logf("stalled stream cut at event %d (each about %d bytes)", cut, limit/(cut-1))
}
