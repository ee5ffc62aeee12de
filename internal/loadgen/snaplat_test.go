package loadgen

import (
	"testing"
	"time"
)

// A pair counts as during a snapshot when the two intervals overlap at all.
func TestSnapLatClassify(t *testing.T) {
	r := &SnapLatResult{Snapshots: []Span{{Start: 5, End: 6}, {Start: 1, End: 2}}}
	s := func(a, b float64) pairSpan {
		return pairSpan{time.Duration(a * float64(time.Second)), time.Duration(b * float64(time.Second))}
	}
	r.classify([][]pairSpan{
		{s(0, 0.5), s(0.9, 1.1), s(1.2, 1.3), s(1.9, 2.5)}, // outside, then three overlapping the first span
		{s(2.1, 4.9), s(4.95, 6.5), s(6.1, 7)},             // outside, during, outside
		{s(0.5, 8)},                                        // spans both
	})
	if r.DuringPairs != 5 || r.OutsidePairs != 3 {
		t.Fatalf("during %d, outside %d; want 5 and 3", r.DuringPairs, r.OutsidePairs)
	}
	if r.During.MaxMS != 7500 {
		t.Fatalf("the longest pair during a snapshot took %.0f ms, want 7500", r.During.MaxMS)
	}
}
