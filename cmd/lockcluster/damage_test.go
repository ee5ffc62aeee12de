package main

import (
	"context"
	binenc "encoding/binary"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/proccluster"
	"github.com/lockcluster/lockcluster/internal/testutil"
)

// grantLog checks every acknowledged grant as it is told to its holder:
// for each name, the tokens of successive exclusive grants strictly grow
// (the next one is granted only after the previous holder's release was
// acknowledged, so it is a later log entry). A cluster that lost
// acknowledged entries grants from reused log indexes: the same token, or
// a lower one, is told to another holder.
type grantLog struct {
	mu       sync.Mutex
	last     map[string]uint64
	grants   int
	problems []string
}

func (g *grantLog) granted(name string, token uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grants++
	if prev := g.last[name]; token <= prev {
		g.problems = append(g.problems, fmt.Sprintf("%s granted with token %d after an acknowledged grant with token %d", name, token, prev))
	}
	g.last[name] = token
}

func (g *grantLog) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants
}

// runGrants runs workers that acquire and release names until ctx ends,
// recording each grant in g.
func runGrants(ctx context.Context, t *testing.T, addrs []string, names []string, workers int, g *grantLog) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		c := dialT(t, addrs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := names[(w+i)%len(names)]
				actx, cancel := context.WithTimeout(ctx, 3*time.Second)
				l, err := c.Acquire(actx, name, lockcluster.Options{})
				cancel()
				if err != nil {
					continue
				}
				g.granted(name, l.Token())
				rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
				l.Release(rctx)
				rcancel()
			}
		}()
	}
	return &wg
}

// walFrame is one entry frame of a raft-wal segment file: its offset and
// the raft index its payload starts with (raft-wal's BinaryCodec writes the
// index first, as a uvarint).
type walFrame struct {
	offset int64
	index  uint64
}

// tailFrames lists the entry frames of the newest segment in walDir, up to
// the first frame header that is zero or does not decode. The layout
// (raft-wal v0.4.2, segment/format.go): a 32-byte file header, then frames
// of an 8-byte header (type byte: 1 entry, 2 index, 3 commit; three zero
// bytes; uint32 little-endian length, or the CRC for a commit) and the
// payload padded to 8 bytes.
func tailFrames(t *testing.T, walDir string) (path string, frames []walFrame) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(walDir, "*.wal"))
	if len(segs) == 0 {
		t.Fatalf("no segment in %s", walDir)
	}
	sort.Strings(segs)
	path = segs[len(segs)-1]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(32); off+8 <= int64(len(b)); {
		typ, n := b[off], int64(binenc.LittleEndian.Uint32(b[off+4:]))
		if typ == 0 || typ > 3 || b[off+1]|b[off+2]|b[off+3] != 0 {
			break
		}
		size := int64(0)
		if typ != 3 {
			size = (n + 7) &^ 7
		}
		if typ == 1 {
			idx, _ := binenc.Uvarint(b[off+8:])
			frames = append(frames, walFrame{offset: off, index: idx})
		}
		off += 8 + size
	}
	return path, frames
}

// Finding 1 of issue 20: one flipped byte in a raft-wal frame header of a
// follower's newest segment. raft-wal takes the frame for a torn write and
// silently drops it and everything after it. Before this was caught, the
// damaged follower and the other follower (down for a while, so with a
// shorter log) elected the damaged one when the leader crashed: acknowledged
// grants were gone, and their tokens granted again to other holders.
//
// Now the damaged node finds the committed batches past the bad header at
// start and fences itself: it neither votes nor stands for election, so
// with the leader down there is no leader (unavailable, never wrong). The
// leader returns, the damaged node is repaired from it, and every grant
// before and after keeps growing tokens.
func TestFlippedFrameHeaderLosesNoGrant(t *testing.T) {
	pc := startProcs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader := pc.leader(15 * time.Second)
	damaged, other := (leader+1)%3, (leader+2)%3
	g := &grantLog{last: map[string]uint64{}}
	names := []string{"a", "b", "c", "d"}

	load, stopLoad := context.WithCancel(ctx)
	wg := runGrants(load, t, pc.addrs(), names, 6, g)
	testutil.Eventually(t, time.Minute, "grants with all three nodes", func() bool { return g.count() >= 200 })
	pc.kill(other)
	_, otherFrames := tailFrames(t, filepath.Join(pc.Nodes[other].Dir, "raft", "wal"))
	otherLast := otherFrames[len(otherFrames)-1].index
	before := g.count()
	testutil.Eventually(t, time.Minute, "grants without "+pc.Nodes[other].ID, func() bool { return g.count() >= before+400 })
	pc.kill(damaged)
	pc.kill(leader) // before the damaged node could be repaired from it
	stopLoad()
	wg.Wait()

	// Flip the type byte of an entry frame half-way between the other
	// follower's last entry and the damaged node's last one.
	seg, frames := tailFrames(t, filepath.Join(pc.Nodes[damaged].Dir, "raft", "wal"))
	last := frames[len(frames)-1].index
	if last < otherLast+100 {
		t.Fatalf("the damaged node's log (to %d) is not far enough ahead of the other's (to %d)", last, otherLast)
	}
	var flip walFrame
	for _, f := range frames {
		if f.index >= otherLast+(last-otherLast)/2 {
			flip = f
			break
		}
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x41}, flip.offset); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Logf("flipped the frame header of entry %d in %s (its log ran to %d, %s's to %d)", flip.index, seg, last, pc.Nodes[other].ID, otherLast)

	pc.start(damaged)
	pc.start(other)
	// The other follower campaigns after a heartbeat timeout and needs the
	// damaged node's vote; the damaged node must not campaign. Wait for a
	// leader, or for the other follower to have lost two elections.
	var lead int
	testutil.Eventually(t, 30*time.Second, "a leader, or "+pc.Nodes[other].ID+" to lose two elections", func() bool {
		if lead = proccluster.Leader(ctx, pc.addrs()); lead >= 0 {
			return true
		}
		b, _ := os.ReadFile(pc.Nodes[other].Log)
		return strings.Count(string(b), "entering candidate state") >= 2
	})
	if lead >= 0 {
		// What it cost: grants from reused log indexes.
		load, stopLoad := context.WithCancel(ctx)
		before := g.count()
		wg := runGrants(load, t, pc.addrs(), names, 6, g)
		testutil.Eventually(t, time.Minute, "grants", func() bool { return g.count() >= before+100 })
		stopLoad()
		wg.Wait()
		t.Fatalf("%s leads with the leader down: the damaged node voted or stood for election; %d acknowledged grants contradicted, first: %v",
			pc.Nodes[lead].ID, len(g.problems), g.problems[:min(len(g.problems), 3)])
	}
	code, body := readyzOf(pc.Nodes[damaged].HTTP)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "damaged") {
		t.Fatalf("the damaged node's /readyz: %d %q, want 503 naming the damage", code, body)
	}
	t.Logf("the damaged node says: %s", strings.TrimSpace(body))

	pc.start(leader)
	pc.leader(30 * time.Second)
	testutil.Eventually(t, 30*time.Second, "the damaged node to be repaired", func() bool {
		code, _ := readyzOf(pc.Nodes[damaged].HTTP)
		return code == http.StatusOK
	})
	load2, stopLoad2 := context.WithCancel(ctx)
	before = g.count()
	wg = runGrants(load2, t, pc.addrs(), names, 6, g)
	testutil.Eventually(t, time.Minute, "grants after the repair", func() bool { return g.count() >= before+200 })
	stopLoad2()
	wg.Wait()
	for _, p := range g.problems {
		t.Error(p)
	}
	t.Logf("%d grants checked", g.count())
}

// A follower stopped, one byte of its disk flipped, started again: it finds
// the damage before raft starts, says so, and is repaired from the leader;
// grants go on throughout and the replicas' applied hashes agree (the
// cleanup compares them). Findings 4 (bbolt's newest meta page: bbolt falls
// back to the older one and rolls the vote back) and 5 (a payload byte in
// the log: applied, before this, until the next checkpoint noticed).
func TestFlippedByteOnAFollowerIsRepaired(t *testing.T) {
	for _, tc := range []struct {
		name string
		flip func(t *testing.T, dir string) string // returns what it flipped
	}{
		{"bolt meta page", flipBoltMeta},
		{"log payload", flipLogPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := startProcs(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			leader := pc.leader(15 * time.Second)
			f := (leader + 1) % 3
			g := &grantLog{last: map[string]uint64{}}
			names := []string{"a", "b", "c"}
			load, stopLoad := context.WithCancel(ctx)
			wg := runGrants(load, t, pc.addrs(), names, 4, g)
			defer func() { stopLoad(); wg.Wait() }()
			testutil.Eventually(t, time.Minute, "grants", func() bool { return g.count() >= 300 })
			pc.terminate(f)
			t.Logf("%s: %s", pc.Nodes[f].ID, tc.flip(t, pc.Nodes[f].Dir))
			before := g.count()
			pc.start(f)
			code, body := 0, ""
			testutil.Eventually(t, 30*time.Second, "the follower to answer /readyz", func() bool {
				code, body = readyzOf(pc.Nodes[f].HTTP)
				return code != 0
			})
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "damaged") {
				t.Fatalf("/readyz of the damaged node: %d %q, want 503 naming the damage", code, body)
			}
			t.Logf("it says: %s", strings.TrimSpace(body))
			testutil.Eventually(t, 30*time.Second, "the follower to be repaired", func() bool {
				code, _ := readyzOf(pc.Nodes[f].HTTP)
				return code == http.StatusOK
			})
			testutil.Eventually(t, time.Minute, "grants after the repair", func() bool { return g.count() >= before+200 })
			stopLoad()
			wg.Wait()
			for _, p := range g.problems {
				t.Error(p)
			}
			b, _ := os.ReadFile(pc.Nodes[f].Log)
			if !strings.Contains(string(b), "STORAGE DAMAGED") || !strings.Contains(string(b), "STORAGE REPAIRED") {
				t.Errorf("the node's log does not say it was damaged and repaired")
			}
		})
	}
}

// flipBoltMeta flips a byte of the checksum of the newest of bbolt's two
// meta pages in raft.db (go.etcd.io/bbolt v1.3.11: pages 0 and 1; after a
// 16-byte page header, the meta's txid at +48 and its checksum at +56).
func flipBoltMeta(t *testing.T, dir string) string {
	path := filepath.Join(dir, "raft", "raft.db")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(binenc.LittleEndian.Uint32(b[16+8:]))
	txid := func(p int) uint64 { return binenc.LittleEndian.Uint64(b[p*pageSize+16+48:]) }
	newest := 0
	if txid(1) > txid(0) {
		newest = 1
	}
	off := int64(newest*pageSize + 16 + 56)
	flipByte(t, path, off)
	return fmt.Sprintf("flipped the checksum of bbolt's meta page %d (txid %d) in %s", newest, txid(newest), path)
}

// flipLogPayload flips the last byte of an entry's payload half-way
// through the newest raft-wal segment (inside the raft.Log's encoding:
// its AppendedAt time).
func flipLogPayload(t *testing.T, dir string) string {
	seg, frames := tailFrames(t, filepath.Join(dir, "raft", "wal"))
	fr := frames[len(frames)/2]
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(binenc.LittleEndian.Uint32(b[fr.offset+4:]))
	flipByte(t, seg, fr.offset+8+n-1)
	return fmt.Sprintf("flipped the payload of entry %d (of %d in the segment) in %s", fr.index, len(frames), seg)
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var one [1]byte
	if _, err := f.ReadAt(one[:], off); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x10
	if _, err := f.WriteAt(one[:], off); err != nil {
		t.Fatal(err)
	}
}
