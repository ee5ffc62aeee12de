package server

import (
	"sync"
	"time"
)

// rateLimiter bounds the writes of each session on this node with a token
// bucket per session; buckets idle for a minute are dropped.
type rateLimiter struct {
	rate  float64
	burst float64
	mu    sync.Mutex
	b     map[uint64]*bucket
	swept time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(rate float64, burst int) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	if burst < 1 {
		burst = int(rate)
		if burst < 1 {
			burst = 1
		}
	}
	return &rateLimiter{rate: rate, burst: float64(burst), b: map[uint64]*bucket{}}
}

// allow takes one token from the session's bucket.
func (r *rateLimiter) allow(session uint64, now time.Time) bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.swept) > time.Minute {
		for id, b := range r.b {
			if now.Sub(b.last) > time.Minute {
				delete(r.b, id)
			}
		}
		r.swept = now
	}
	b := r.b[session]
	if b == nil {
		b = &bucket{tokens: r.burst, last: now}
		r.b[session] = b
	}
	b.tokens = min(r.burst, b.tokens+now.Sub(b.last).Seconds()*r.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
