package node

import (
	"testing"
	"time"
)

// fakeState counts its digests; its index and the clock move only when
// the test says so.
type fakeState struct {
	index, digests uint64
	during         func() // runs inside Digest: entries applied meanwhile
}

func (f *fakeState) LastIndex() uint64 { return f.index }
func (f *fakeState) Digest() [32]byte {
	f.digests++
	if f.during != nil {
		f.during()
	}
	return [32]byte{byte(f.index)}
}

// GET /debug/digest does not rehash the whole state per request: once per
// applied index, and at most once per digestEvery while the index moves
// (issue 11). A digest older than the last applied entry is not stable.
func TestDigestCache(t *testing.T) {
	st := &fakeState{index: 5}
	now := time.Unix(1000, 0)
	c := newDigestCache(st, func() time.Time { return now })
	for i := 0; i < 100; i++ {
		if v := c.get(); v.index != 5 || !v.stable || v.last != 5 {
			t.Fatalf("get %d: %+v", i, v)
		}
	}
	if st.digests != 1 {
		t.Fatalf("%d digests for 100 requests at one index, want 1", st.digests)
	}
	// Entries applied: within digestEvery the cached digest is served, and
	// says which index it reflects and that it is not the latest.
	st.index = 9
	v := c.get()
	if st.digests != 1 || v.index != 5 || v.last != 9 || v.stable || v.digest[0] != 5 {
		t.Fatalf("within digestEvery of the last digest: %+v after %d digests", v, st.digests)
	}
	now = now.Add(digestEvery)
	if v = c.get(); st.digests != 2 || v.index != 9 || !v.stable || v.digest[0] != 9 {
		t.Fatalf("digestEvery later: %+v after %d digests", v, st.digests)
	}
	// Nothing applied since: no new digest however much later.
	now = now.Add(time.Hour)
	if v = c.get(); st.digests != 2 || !v.stable {
		t.Fatalf("an hour later at the same index: %+v after %d digests", v, st.digests)
	}
	// An entry applied during the digest: not stable, and recomputed once
	// digestEvery has passed.
	st.index, st.during = 10, func() { st.index = 11 }
	now = now.Add(digestEvery)
	if v = c.get(); v.stable || v.index != 11 {
		t.Fatalf("an entry applied during the digest: %+v", v)
	}
	st.during = nil
	if v = c.get(); st.digests != 3 || v.stable {
		t.Fatalf("right after an unstable digest: %+v after %d digests", v, st.digests)
	}
	now = now.Add(digestEvery)
	if v = c.get(); st.digests != 4 || !v.stable || v.index != 11 {
		t.Fatalf("digestEvery after an unstable digest: %+v after %d digests", v, st.digests)
	}
}
