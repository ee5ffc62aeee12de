package server

import (
	"sync"
	"time"
)

// rateLimiter bounds writes with a token bucket per key (a session, a
// namespace); buckets idle for a minute are dropped. A nil one, or one
// whose rate is 0, bounds nothing. Its rate and burst change with set (a
// reload) without losing the buckets.
type rateLimiter[K comparable] struct {
	mu    sync.Mutex
	rate  float64 // <= 0: no bound
	burst float64
	b     map[K]*bucket
	swept time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// newRateLimiter returns a limiter of rate a second with a burst of burst
// (default: rate, at least 1); rate <= 0 bounds nothing until set gives
// it a rate.
func newRateLimiter[K comparable](rate float64, burst int) *rateLimiter[K] {
	r := &rateLimiter[K]{b: map[K]*bucket{}}
	r.set(rate, burst)
	return r
}

// set changes the rate and the burst. The buckets stay: one holding more
// than the new burst is cut to it at its next use, one holding less
// refills at the new rate from what it holds.
func (r *rateLimiter[K]) set(rate float64, burst int) {
	if rate <= 0 {
		rate, burst = 0, 0
	} else if burst < 1 {
		burst = max(int(rate), 1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rate, r.burst = rate, float64(burst)
}

// limits returns the rate and the burst (0, 0: no bound).
func (r *rateLimiter[K]) limits() (rate, burst float64) {
	if r == nil {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate, r.burst
}

// on reports whether the limiter bounds anything.
func (r *rateLimiter[K]) on() bool {
	rate, _ := r.limits()
	return rate > 0
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rate <= 0 {
		return true, 0
	}
	n = min(n, r.burst)
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
	r.mu.Lock()
	defer r.mu.Unlock()
	n = min(n, r.burst)
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
	if r.rate <= 0 {
		return 0
	}
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
