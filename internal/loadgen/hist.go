package loadgen

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram records durations in log-linear buckets: 128 buckets per power
// of two, so a percentile is off by less than 0.8 %. It is safe for
// concurrent use (atomic counters) and has a fixed size (~40 KiB).
type Histogram struct {
	counts [histBuckets]atomic.Int64
	n      atomic.Int64
	sum    atomic.Int64 // nanoseconds
	max    atomic.Int64
}

const (
	subBits     = 7
	subCount    = 1 << subBits // buckets per power of two
	histBuckets = (64 - subBits + 1) * subCount
)

// bucketOf maps a value in nanoseconds to its bucket.
func bucketOf(v int64) int {
	if v < subCount {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1
	return (shift+1)*subCount + int(uint64(v)>>uint(shift)) - subCount
}

// bucketLow is the smallest value of bucket b.
func bucketLow(b int) int64 {
	if b < subCount {
		return int64(b)
	}
	shift := b/subCount - 1
	return int64(b%subCount+subCount) << uint(shift)
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) { h.RecordN(d, 1) }

// RecordN adds the duration d n times (n things that took as long: the
// changes of one watch event).
func (h *Histogram) RecordN(d time.Duration, n int64) {
	if n <= 0 {
		return
	}
	v := int64(d)
	h.counts[bucketOf(v)].Add(n)
	h.n.Add(n)
	h.sum.Add(v * n)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	h.sum.Add(o.sum.Load())
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
}

// Count is the number of recorded durations.
func (h *Histogram) Count() int64 { return h.n.Load() }

// Quantile returns the duration below which a fraction q (0..1) of the
// recorded durations fall: the middle of the bucket holding the q-th
// value, never above the maximum recorded. 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen int64
	for b := range h.counts {
		seen += h.counts[b].Load()
		if seen >= rank {
			lo, hi := bucketLow(b), bucketLow(b+1)
			mid := lo + (hi-lo)/2
			return time.Duration(min(mid, h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// Mean is the average recorded duration.
func (h *Histogram) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Max is the largest recorded duration.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Latency is a histogram's summary, in milliseconds, as reports show it.
type Latency struct {
	Count  int64   `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P90MS  float64 `json:"p90_ms"`
	P99MS  float64 `json:"p99_ms"`
	P999MS float64 `json:"p999_ms"`
	MaxMS  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// Summary summarises h.
func (h *Histogram) Summary() Latency {
	return Latency{Count: h.Count(), MeanMS: ms(h.Mean()), P50MS: ms(h.Quantile(0.5)), P90MS: ms(h.Quantile(0.9)),
		P99MS: ms(h.Quantile(0.99)), P999MS: ms(h.Quantile(0.999)), MaxMS: ms(h.Max())}
}
