// snapflip_test.go flips every bit of a real snapshot's files, one at a
// time, and checks that the snapshot is refused, naming the file
// (issue 24, finding 7: a flipped meta.json was accepted).

package raftnode

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// flipDescription says which bit of b was flipped, with the bytes around
// it, for a failure message.
func flipDescription(b []byte, i, bit int) string {
	lo, hi := max(0, i-12), min(len(b), i+12)
	flipped := bytes.Clone(b)
	flipped[i] ^= 1 << bit
	return fmt.Sprintf("byte %d bit %d: %q -> %q", i, bit, b[lo:hi], flipped[lo:hi])
}

// Every single-bit flip of meta.json and of state.bin of a snapshot written
// by a real node makes verifySnapshot refuse it, naming the file. Before
// meta.sum, the flips of meta.json that still decoded to values
// verifySnapshot checks no further were accepted: the case of any letter
// of a field name (encoding/json matches names case-insensitively:
// "Term" -> "term"), the version ("Version":1 -> 0: raft then rebuilds the
// configuration from the legacy Peers list), the configuration index, and
// the configuration's IDs, addresses and suffrage.
func TestSnapshotEveryBitFlipRefused(t *testing.T) {
	dir, ids := snapTestDataDir(t, 10240)
	snaps := snapshotsDir(dir)
	newest, _ := parseSnapshotName(ids[1])
	if reason, err := verifySnapshot(snaps, newest); reason != "" || err != nil {
		t.Fatalf("the intact snapshot: %q, %v", reason, err)
	}
	for _, file := range []string{"meta.json", "state.bin"} {
		path := filepath.Join(snaps, ids[1], file)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var accepted []string
		for i := range orig {
			for bit := range 8 {
				b := bytes.Clone(orig)
				b[i] ^= 1 << bit
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				reason, err := verifySnapshot(snaps, newest)
				switch {
				case err != nil:
					t.Fatal(err)
				case reason == "":
					accepted = append(accepted, flipDescription(orig, i, bit))
				case !strings.Contains(reason, file):
					t.Errorf("%s, %s: the reason %q does not name the file", file, flipDescription(orig, i, bit), reason)
				}
			}
		}
		if err := os.WriteFile(path, orig, 0o600); err != nil {
			t.Fatal(err)
		}
		if len(accepted) > 0 {
			t.Errorf("%s (%d bytes): %d of %d single-bit flips accepted, e.g.:\n  %s", file, len(orig), len(accepted), 8*len(orig),
				strings.Join(accepted[:min(len(accepted), 12)], "\n  "))
		} else {
			t.Logf("%s: all %d single-bit flips refused", file, 8*len(orig))
		}
	}
}

// The reported case end to end: the term's field name flipped in the
// newest snapshot's meta.json ("Term" -> "term", one bit). The start sets
// the snapshot aside as <id>.corrupt and raft restores the older one.
func TestSnapshotTermFlipSetAside(t *testing.T) {
	dir, ids := snapTestDataDir(t, 10240)
	editFile(t, filepath.Join(snapshotsDir(dir), ids[1], "meta.json"), `"Term":`, `"term":`)
	res := restartRaft(t, dir, true)
	if res.panicked != nil || res.err != nil || res.damage != nil {
		t.Fatalf("restart: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshots", ids[1]+snapshotCorruptSuffix, "meta.json")); err != nil {
		t.Fatalf("the snapshot with the flipped term was not set aside: %v", err)
	}
	if want := entriesThrough("a"); !slices.Equal(res.entries, want) {
		t.Fatalf("restored %v, want %v (the older snapshot)", res.entries, want)
	}
}
