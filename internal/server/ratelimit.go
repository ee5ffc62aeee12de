package server

import (
	"sync"
	"time"
)

// rateLimiter bounds writes with a token bucket per key (a session, a
// namespace); buckets idle for a minute are dropped.
type rateLimiter[K comparable] struct {
	rate  float64
	burst float64
	mu    sync.Mutex
	b     map[K]*bucket
	swept time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter[K comparable](rate float64, burst int) *rateLimiter[K] {
	if rate <= 0 {
		return nil
	}
	if burst < 1 {
		burst = int(rate)
		if burst < 1 {
			burst = 1
		}
	}
	return &rateLimiter[K]{rate: rate, burst: float64(burst), b: map[K]*bucket{}}
}

// allow takes one token from key's bucket.
func (r *rateLimiter[K]) allow(key K, now time.Time) bool {
	ok, _ := r.take(key, now, 1)
	return ok
}

// take takes n tokens from key's bucket, or none when it holds fewer: then
// it also says how long until it holds n. A cost over the burst is charged
// as the burst (a full bucket): it passes once the bucket has refilled.
func (r *rateLimiter[K]) take(key K, now time.Time, n float64) (bool, time.Duration) {
	if r == nil {
		return true, 0
	}
	n = min(n, r.burst)
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.refill(key, now)
	if b.tokens < n {
		return false, time.Duration((n - b.tokens) / r.rate * float64(time.Second))
	}
	b.tokens -= n
	return true, 0
}

// refund gives back n tokens that take took for a call refused after all.
func (r *rateLimiter[K]) refund(key K, n float64) {
	if r == nil {
		return
	}
	n = min(n, r.burst)
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.b[key]; b != nil {
		b.tokens = min(r.burst, b.tokens+n)
	}
}

// delay takes one token from key's bucket, going into debt when it is
// empty, and returns how long the caller should wait for its token (0 when
// there was one). The debt is bounded by limit: a caller never waits longer.
func (r *rateLimiter[K]) delay(key K, now time.Time, limit time.Duration) time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.refill(key, now)
	b.tokens = max(b.tokens-1, -limit.Seconds()*r.rate)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / r.rate * float64(time.Second))
}

// refill returns key's bucket with the tokens earned since its last use,
// and drops the buckets idle for a minute; r.mu is held.
func (r *rateLimiter[K]) refill(key K, now time.Time) *bucket {
	if now.Sub(r.swept) > time.Minute {
		for id, b := range r.b {
			if now.Sub(b.last) > time.Minute {
				delete(r.b, id)
			}
		}
		r.swept = now
	}
	b := r.b[key]
	if b == nil {
		b = &bucket{tokens: r.burst, last: now}
		r.b[key] = b
	}
	b.tokens = min(r.burst, b.tokens+now.Sub(b.last).Seconds()*r.rate)
	b.last = now
	return b
}
