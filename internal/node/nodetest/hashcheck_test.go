package nodetest

import (
	"crypto/sha256"
	"strings"
	"testing"
	"time"
)

// chainOf is a fake node's running hash: hash(i) = sha256(hash(i-1), i,
// entry(i)), where the entries are "e<i>" except those in other.
func chainOf(id string, applied uint64, other map[uint64]string) hashSource {
	hs := map[uint64][32]byte{}
	var h [32]byte
	for i := uint64(1); i <= applied; i++ {
		e := "e" + string(rune('0'+i%10))
		if o, ok := other[i]; ok {
			e = o
		}
		h = sha256.Sum256(append(append(h[:], byte(i)), e...))
		hs[i] = h
	}
	return hashSource{id: id, index: applied, at: func(i uint64) ([32]byte, bool, string) { h, ok := hs[i]; return h, ok, "not remembered" }}
}

func TestCompareAt(t *testing.T) {
	// Equal histories, one node behind: compared at its index.
	if diff, n, notes := compareAt([]hashSource{chainOf("a", 10, nil), chainOf("b", 7, nil), chainOf("c", 10, nil)}); diff != "" || n != 3 || len(notes) != 0 {
		t.Errorf("equal: %q %d %q", diff, n, notes)
	}
	// Node b applied another entry at 3, then the same as the others: its
	// hash differs at every later index.
	diff, _, _ := compareAt([]hashSource{chainOf("a", 10, nil), chainOf("b", 9, map[uint64]string{3: "stale"}), chainOf("c", 10, nil)})
	if !strings.HasPrefix(diff, "at index 9: a ") || !strings.Contains(diff, ", b ") {
		t.Errorf("diverged: %q", diff)
	}
	// A node that no longer remembers the index is left out, and noted.
	forgot := chainOf("c", 10, map[uint64]string{2: "stale"})
	forgot.at = func(uint64) ([32]byte, bool, string) { return [32]byte{}, false, "forgotten" }
	if diff, _, notes := compareAt([]hashSource{chainOf("a", 10, nil), chainOf("b", 10, nil), forgot}); diff != "" || len(notes) != 1 || !strings.Contains(notes[0], "c (applied 10) has no hash at index 10: forgotten") {
		t.Errorf("forgotten: %q %q", diff, notes)
	}
	// One node, or nothing applied: nothing to compare.
	if diff, _, _ := compareAt([]hashSource{chainOf("a", 10, nil)}); diff != "" {
		t.Errorf("one node: %q", diff)
	}
	if diff, _, _ := compareAt([]hashSource{chainOf("a", 0, nil), chainOf("b", 5, map[uint64]string{1: "x"})}); diff != "" {
		t.Errorf("nothing applied: %q", diff)
	}
}

// A real cluster's nodes agree, and the comparison is not vacuous: it
// covers all three nodes (checkAppliedHashes waits for the anchor entry
// that starts a young cluster's chains).
func TestClusterAppliedHashesAgree(t *testing.T) {
	c := Start(t, 3, Options{Quiet: true})
	leader := c.WaitLeader(10 * time.Second)
	c.Stop((leader + 1) % 3)
	c.Restart((leader + 1) % 3)
	c.checkAppliedHashes()
	c.mu.Lock()
	n, diverged := c.comparedAt, c.diverged
	c.mu.Unlock()
	if n != 3 || len(diverged) != 0 {
		t.Fatalf("compared %d nodes at most (want 3); diverged %q", n, diverged)
	}
}
