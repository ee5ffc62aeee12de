package main

import "testing"

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 256 * mib, 100},         // nothing measured yet
		{100 * mib, 256 * mib, 100}, // a small heap: Go's default
		{256 * mib, 256 * mib, 100}, // the edge
		{512 * mib, 256 * mib, 50},  // a million held locks: grows by 256 MiB, not 512
		{1024 * mib, 256 * mib, 25}, // the floor
		{8192 * mib, 256 * mib, 25}, // never below it
		{600 * mib, 300 * mib, 50},  // another headroom
	} {
		if got := gcPercentFor(c.live, c.headroom); got != c.want {
			t.Errorf("gcPercentFor(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.headroom/mib, got, c.want)
		}
	}
}
