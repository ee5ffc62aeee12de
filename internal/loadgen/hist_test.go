package loadgen

import (
	"math"
	"sync"
	"testing"
	"time"
)

func TestBucketsCoverEveryValueInOrder(t *testing.T) {
	prev := -1
	for _, v := range []int64{0, 1, 127, 128, 129, 255, 256, 257, 1000, 1 << 20, 1<<20 + 1, 1 << 40, math.MaxInt64} {
		b := bucketOf(v)
		if b < prev {
			t.Fatalf("bucketOf(%d) = %d, below the previous value's %d", v, b, prev)
		}
		if lo := bucketLow(b); lo > v || (bucketLow(b+1) > 0 && bucketLow(b+1) <= v) {
			t.Fatalf("value %d in bucket %d whose range starts at %d (next at %d)", v, b, lo, bucketLow(b+1))
		}
		prev = b
	}
}

func TestQuantilesWithinOnePercent(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100_000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * 100_000 * float64(time.Microsecond)
		got := float64(h.Quantile(q))
		if math.Abs(got-want)/want > 0.01 {
			t.Errorf("p%g = %v, want %v ± 1%%", q*100, time.Duration(got), time.Duration(want))
		}
	}
	if h.Max() != 100*time.Millisecond || h.Count() != 100_000 {
		t.Errorf("max %v count %d", h.Max(), h.Count())
	}
	if m := h.Mean(); m < 49*time.Millisecond || m > 51*time.Millisecond {
		t.Errorf("mean %v, want about 50ms", m)
	}
	s := h.Summary()
	if s.P50MS < 49.5 || s.P50MS > 50.5 || s.MaxMS != 100 {
		t.Errorf("summary %+v", s)
	}
}

func TestEmptyHistogramAndMerge(t *testing.T) {
	var a, b Histogram
	if a.Quantile(0.5) != 0 || a.Mean() != 0 || a.Summary().Count != 0 {
		t.Fatal("an empty histogram is not all zero")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				a.Record(time.Millisecond)
				b.Record(3 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	a.Merge(&b)
	if a.Count() != 16000 || a.Max() != 3*time.Millisecond {
		t.Fatalf("merged count %d max %v", a.Count(), a.Max())
	}
	if p := a.Quantile(0.25); p < 990*time.Microsecond || p > 1010*time.Microsecond {
		t.Errorf("p25 %v, want 1ms", p)
	}
	if p := a.Quantile(0.75); p < 2970*time.Microsecond || p > 3*time.Millisecond {
		t.Errorf("p75 %v, want 3ms", p)
	}
}
