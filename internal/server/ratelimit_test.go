package server

import (
	"testing"
	"time"
)

// A namespace's refusals are paced: the first rate of them (the burst) are
// answered at once, each further one waits for its token, the waits never
// exceed the bound, and the bucket refills with time.
func TestRefusalPacing(t *testing.T) {
	r := newRateLimiter[string](10, 10) // 10 a second, a burst of 10
	t0 := time.Unix(100, 0)
	for i := range 10 {
		if d := r.delay("ns", t0, time.Second); d != 0 {
			t.Fatalf("refusal %d within the burst waits %s", i, d)
		}
	}
	var last time.Duration
	for i := range 20 {
		d := r.delay("ns", t0, time.Second)
		if d <= last && d < time.Second {
			t.Fatalf("refusal %d past the burst waits %s, not longer than the one before (%s)", i, d, last)
		}
		if d > time.Second {
			t.Fatalf("refusal %d waits %s, over the 1s bound", i, d)
		}
		last = d
	}
	if d := r.delay("other", t0, time.Second); d != 0 {
		t.Fatalf("another namespace waits %s", d)
	}
	if d := r.delay("ns", t0.Add(5*time.Second), time.Second); d != 0 {
		t.Fatalf("after 5s the bucket should have refilled; waits %s", d)
	}
	var off *rateLimiter[string] // RefusalRate 0
	if d := off.delay("ns", t0, time.Second); d != 0 {
		t.Fatalf("no pacing configured, yet a wait of %s", d)
	}
}
