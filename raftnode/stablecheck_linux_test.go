//go:build linux

package raftnode

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/lockcluster/lockcluster/internal/testutil"
)

// On a full disk a term and a vote are still saved: the shadow is
// overwritten in place, in blocks it already has, and bbolt rewrites
// pages it already has. The rename-based shadow of earlier commits needed
// a new file, and raft panics when it cannot save a term.
func TestStableFullDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, 1<<20)
	cs, b, d := openChecked(t, dir)
	if d != nil {
		t.Fatal(d)
	}
	// Terms as a running node writes them, so that bbolt has pages of
	// its own to reuse (its freelist), as it has in steady state.
	for term := range uint64(20) {
		writeTestVote(t, cs, term+1, "cand-a")
	}
	ballast := testutil.Ballast(t, dir, 0)
	if err := os.WriteFile(filepath.Join(dir, "probe"), make([]byte, 4096), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the disk is not full: writing a new file: %v", err)
	}
	t.Run("new-file", func(t *testing.T) {
		// What a temporary file and a rename meet.
		err := writeFileDurably(filepath.Join(dir, "shadow-by-rename"), make([]byte, stableShadowSize))
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("writing a new file on a full disk: %v, want ENOSPC", err)
		}
	})

	// raft's next election: setCurrentTerm, persistVote.
	writeTestVote(t, cs, 21, "cand-full")
	wantTestVote(t, cs, 21, 21, "cand-full")
	if err := cs.pinVote(22, []byte("leader")); err != nil {
		t.Fatal(err)
	}
	b.Close()
	cs.close()

	// Saved: the next open (space back) finds both records at term 22.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	cs, b, d = openChecked(t, dir)
	if d != nil {
		t.Fatalf("damage: %v", d)
	}
	wantTestVote(t, cs, 22, 22, "leader")
	wantTestVote(t, b, 22, 22, "leader")
}

// The cost of a term write with the shadow made durable by fdatasync
// instead of fsync (BenchmarkStableSet/checked): the file's size never
// changes, so fdatasync may skip its inode (the modification time).
//
//	go test -tags hashicorpmetrics -run '^$' -bench StableSet -benchtime 500x ./raftnode/
func BenchmarkStableSetFdatasync(b *testing.B) {
	fdatasync := func(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
	b.Run("checked", func(b *testing.B) {
		cs, s, _ := openChecked(b, b.TempDir())
		defer s.Close()
		cs.sync = fdatasync
		for i := range b.N {
			if err := cs.SetUint64(testKeyCT, uint64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The shadow alone, without bbolt's write: fsync and fdatasync.
	for _, c := range []struct {
		name string
		sync func(*os.File) error
	}{{"shadow-only-fsync", (*os.File).Sync}, {"shadow-only-fdatasync", fdatasync}} {
		b.Run(c.name, func(b *testing.B) {
			cs, s, _ := openChecked(b, b.TempDir())
			defer s.Close()
			cs.inner = nopStable{s}
			cs.sync = c.sync
			for i := range b.N {
				if err := cs.SetUint64(testKeyCT, uint64(i+1)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nopStable drops writes.
type nopStable struct{ raft.StableStore }

// Set drops the write.
func (nopStable) Set(k, v []byte) error { return nil }
