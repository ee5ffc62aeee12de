// stablecheck.go owns the integrity of the stable store: raft's term and
// vote, the keys CurrentTerm, LastVoteTerm and LastVoteCand that raft keeps
// in raft.db through raft.StableStore. bbolt checksums only its two meta
// pages, never its data pages, so a flipped byte in a stored term is read
// back as a valid term; and when the newest meta page is damaged, bbolt
// silently falls back to the previous transaction (bbolt db.go, DB.meta),
// which can roll a vote back and let the node vote twice in one term.
//
// Two defences, both checked before raft reads anything:
//
//   - checkBoltMeta reads raft.db's two meta pages before bbolt opens the
//     file (opening it commits a transaction, which overwrites the bad
//     page: raft-boltdb bolt_store.go, New → initialize) and reports a
//     page that fails its checksum.
//   - checkedStable keeps a shadow of the three values in
//     DataDir/stable.shadow, with a CRC, written (durably) before bbolt on
//     every change, and compares the two when it opens.
//
// Raft reads the three values from checkedStable's memory, never from
// bbolt again, so a corruption of raft.db after the open is not used
// either.
//
// # The shadow file
//
// stable.shadow is two fixed slots of stableSlotSize bytes, each on its
// own 4 KiB page, so that a write of one never touches the other's
// sectors. It is created once, complete (a temporary file fsynced, renamed,
// and the directory fsynced), and then kept open for the store's life and
// only ever overwritten in place: a change writes the record with the next
// sequence number into slot seq % 2 (WriteAt, then fsync). No write after
// the creation allocates a block, creates a file, renames or touches the
// directory, for two reasons:
//
//   - hashicorp/raft panics when it cannot save a term or a vote (raft.go
//     setCurrentTerm: "failed to save current term"). On a full disk,
//     which the node otherwise survives (diskguard.go: it is fenced and
//     recovers once space returns), a write that needed a new inode or new
//     blocks would crash the process at the next election. Overwriting
//     blocks the file already has needs no space, as bbolt's rewrite of
//     pages it already has (its freelist) needs none. (On a copy-on-write
//     file system, btrfs or ZFS, every overwrite allocates; so does bbolt's
//     there.)
//   - the open file works whatever becomes of the directory's entries.
//
// The slot (integers big-endian):
//
//	magic "LCSTBL02"                              8 bytes
//	seq                                           u64
//	3 × value: present u8 | len u32 | bytes
//	damaged:   len u32 | bytes
//	zeros up to the CRC
//	CRC-32C (Castagnoli) of every byte before it  u32, the slot's last 4 bytes
//
// The CRC covers the whole slot at a fixed place, so that any one flipped
// bit in the slot, a length included, fails it. A slot is valid when its
// CRC, its magic and its fields check and its seq % 2 is its index. The
// shadow is the valid slot with the higher seq; the other slot holds the
// record the last write replaced (seq one less), which is what a crash
// between the shadow write and bbolt's leaves in bbolt. What a check at
// open finds, with the reasons (the shadow is always written first, and
// bbolt only once the shadow write returned):
//
//   - Both slots valid, bbolt equal to the newer: fine.
//   - Both slots valid, bbolt holds, for each key where it differs from the
//     newer slot, the older slot's value: the node stopped after the shadow
//     write and before bbolt's. bbolt is repaired from the newer slot and
//     that is logged. Adopting the newer term or vote is always safe: raft
//     had not acted on it, and a recorded vote only restricts.
//   - One slot invalid, bbolt equal to the valid one. Either the invalid
//     slot is the older one, damaged (harmless: nothing in it is served),
//     or it is the newer one, torn by a crash during its write, or
//     damaged after a write that never reached bbolt; in every case raft
//     had not acted on what it held. Fine, logged as a warning; the next
//     change rewrites that slot, as it is the next one in turn.
//   - One slot invalid, bbolt different from the valid one: bbolt holds a
//     value newer than any valid slot. With the shadow written first that
//     is impossible unless the newer slot was damaged after it was written
//     (or the older one damaged and a crash came between the writes: two
//     faults, told apart from nothing). Damage; bbolt's values are served
//     (they were the newer slot's).
//   - Both slots invalid, or a file of another size: damage; bbolt's
//     values are served.
//   - Both slots valid, bbolt different from both: damage (bbolt's data
//     page or meta page was damaged); the newer slot is served.
//
// A shadow file found damaged is kept as stable.shadow.corrupt and a new
// one created. The damage is recorded in the shadow (damaged), so that it
// is reported again at every open until pinVote clears it.

package raftnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The stable keys raft uses (hashicorp/raft raft.go: keyCurrentTerm,
// keyLastVoteTerm, keyLastVoteCand). Raft writes the terms with SetUint64
// (setCurrentTerm, persistVote) and the candidate with Set (persistVote),
// and reads them back in NewRaft and HasExistingState (api.go) and in
// requestVote (raft.go), on every vote request.
var stableKeys = [stableKeyCount][]byte{
	[]byte("CurrentTerm"),
	[]byte("LastVoteTerm"),
	[]byte("LastVoteCand"),
}

const (
	stableCurrentTerm = iota
	stableLastVoteTerm
	stableLastVoteCand
	stableKeyCount
)

const (
	// stableShadowFile is the shadow, in the data directory.
	stableShadowFile = "stable.shadow"
	// stableShadowMarker is a key checkedStable sets in the inner store
	// once a shadow exists, so that a shadow file lost later is told apart
	// from a data directory written before shadows existed.
	stableShadowMarker = "LockclusterStableShadow"
	// stableSlotSize is the size of one slot of the shadow file; the file
	// is two slots.
	stableSlotSize   = 4096
	stableShadowSize = 2 * stableSlotSize
	// stableSlotHeader is the magic and the seq; the CRC is the slot's
	// last 4 bytes.
	stableSlotHeader = 16
	stableSlotCRC    = stableSlotSize - 4
)

// errStableNotFound is what Get returns for a key that was never set. Raft
// tests err.Error() == "not found" (api.go NewRaft and HasExistingState,
// raft.go requestVote), as raft-boltdb's ErrKeyNotFound reads.
var errStableNotFound = errors.New("not found")

// stableValue is one key's value; ok is false when the key was never set.
type stableValue struct {
	ok bool
	b  []byte
}

// equal reports whether v and w are both unset or hold the same bytes.
func (v stableValue) equal(w stableValue) bool {
	return v.ok == w.ok && bytes.Equal(v.b, w.b)
}

// String renders v for logs and damage reports: a term as a number.
func (v stableValue) String() string {
	switch {
	case !v.ok:
		return "unset"
	case len(v.b) == 8:
		return fmt.Sprint(binary.BigEndian.Uint64(v.b))
	default:
		return fmt.Sprintf("%q", v.b)
	}
}

// stableRecord is the content of one slot of the shadow file: its
// sequence number, the three values, and whether the stable store was
// found damaged and not yet repaired (pinVote clears it).
type stableRecord struct {
	seq     uint64
	vals    [stableKeyCount]stableValue
	damaged string
}

var stableShadowMagic = [8]byte{'L', 'C', 'S', 'T', 'B', 'L', '0', '2'}

var stableShadowTable = crc32.MakeTable(crc32.Castagnoli)

// encode renders r as a slot of the shadow file, stableSlotSize bytes. A
// damage reason too long for the slot is cut (it is only words); values
// too long for it are an error.
func (r *stableRecord) encode() ([]byte, error) {
	b := make([]byte, 0, stableSlotSize)
	b = append(b, stableShadowMagic[:]...)
	b = binary.BigEndian.AppendUint64(b, r.seq)
	for _, v := range r.vals {
		if !v.ok {
			b = append(b, 0)
			b = binary.BigEndian.AppendUint32(b, 0)
			continue
		}
		b = append(b, 1)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v.b)))
		b = append(b, v.b...)
	}
	room := stableSlotCRC - len(b) - 4
	if room < 0 {
		return nil, fmt.Errorf("raftnode: stable store: the term and vote take %d bytes, more than a shadow slot holds (%d)", len(b)+4, stableSlotCRC)
	}
	damaged := r.damaged
	if len(damaged) > room {
		const cut = " [cut]"
		damaged = damaged[:max(room-len(cut), 0)] + cut
		damaged = damaged[:min(len(damaged), room)]
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(damaged)))
	b = append(b, damaged...)
	b = b[:stableSlotSize] // the rest is zero
	binary.BigEndian.PutUint32(b[stableSlotCRC:], crc32.Checksum(b[:stableSlotCRC], stableShadowTable))
	return b, nil
}

// decodeStableSlot parses slot index i of a shadow file; the error says
// what is wrong with it.
func decodeStableSlot(b []byte, i int) (stableRecord, error) {
	var r stableRecord
	if len(b) != stableSlotSize {
		return r, fmt.Errorf("%d bytes, not %d", len(b), stableSlotSize)
	}
	sum := binary.BigEndian.Uint32(b[stableSlotCRC:])
	if got := crc32.Checksum(b[:stableSlotCRC], stableShadowTable); got != sum {
		return r, fmt.Errorf("CRC mismatch: stored %08x, computed %08x", sum, got)
	}
	if !bytes.Equal(b[:len(stableShadowMagic)], stableShadowMagic[:]) {
		return r, fmt.Errorf("bad magic %q", b[:len(stableShadowMagic)])
	}
	r.seq = binary.BigEndian.Uint64(b[len(stableShadowMagic):])
	if r.seq%2 != uint64(i) {
		return r, fmt.Errorf("seq %d in slot %d", r.seq, i)
	}
	p := b[stableSlotHeader:stableSlotCRC]
	short := errors.New("truncated record")
	bytesN := func() ([]byte, error) {
		if len(p) < 4 {
			return nil, short
		}
		n := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(n) > uint64(len(p)) {
			return nil, short
		}
		v := append([]byte{}, p[:n]...)
		p = p[n:]
		return v, nil
	}
	for k := range r.vals {
		if len(p) < 1 {
			return r, short
		}
		present := p[0]
		p = p[1:]
		v, err := bytesN()
		if err != nil || present > 1 || (present == 0 && len(v) > 0) {
			return r, errors.Join(err, fmt.Errorf("malformed %s", stableKeys[k]))
		}
		if present == 1 {
			r.vals[k] = stableValue{ok: true, b: v}
		}
	}
	d, err := bytesN()
	if err != nil {
		return r, err
	}
	r.damaged = string(d)
	return r, nil
}

// stableShadow is what a shadow file holds, as newCheckedStable reads it.
type stableShadow struct {
	slots   [2]stableRecord
	slotErr [2]error // why each slot is invalid; nil when valid
	err     error    // why the file as a whole is unusable; nil if one slot is valid
}

// readStableShadow reads and checks the slots of a shadow file of size
// bytes, open as f.
func readStableShadow(f *os.File, size int64) (s stableShadow, err error) {
	if size != stableShadowSize {
		s.err = fmt.Errorf("the file is %d bytes, not %d", size, stableShadowSize)
		return s, nil
	}
	b := make([]byte, stableShadowSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return s, err
	}
	for i := range s.slots {
		s.slots[i], s.slotErr[i] = decodeStableSlot(b[i*stableSlotSize:(i+1)*stableSlotSize], i)
	}
	if s.slotErr[0] != nil && s.slotErr[1] != nil {
		s.err = fmt.Errorf("neither slot is valid (slot 0: %v; slot 1: %v)", s.slotErr[0], s.slotErr[1])
	}
	return s, nil
}

// newest returns the index of the valid slot with the higher seq (s.err
// must be nil), and whether the other slot is valid and holds the record
// that newest replaced.
func (s *stableShadow) newest() (i int, prevOK bool) {
	switch {
	case s.slotErr[0] != nil:
		return 1, false
	case s.slotErr[1] != nil:
		return 0, false
	case s.slots[1].seq > s.slots[0].seq:
		i = 1
	}
	return i, s.slots[1-i].seq+1 == s.slots[i].seq
}

// checkedStable is a raft.StableStore around raft-boltdb's store whose
// term and vote are checked against the shadow file at open and served
// from memory afterwards. Every change is written to the shadow file (in
// place, in the next slot, fsynced), then to the inner store. Other keys
// go straight to the inner store. Safe for concurrent use.
type checkedStable struct {
	inner  raft.StableStore
	path   string // the shadow file
	logger hclog.Logger
	// sync makes a slot write durable: (*os.File).Sync. A variable for
	// the benchmark that compares fdatasync.
	sync func(*os.File) error

	mu  sync.Mutex
	f   *os.File     // the shadow file, open for the store's life; nil once closed
	rec stableRecord // the newest record in the shadow file: the values served
	// innerBehind is set when a write to the inner store failed after
	// the shadow file took it: the next write brings the inner store up
	// to date first, so that the shadow never runs more than one write
	// ahead of it (the older slot holds what the inner store has).
	innerBehind bool
}

var _ raft.StableStore = (*checkedStable)(nil)

// stableKeyIndex returns the index of k in stableKeys, or -1.
func stableKeyIndex(k []byte) int {
	for i, s := range stableKeys {
		if bytes.Equal(k, s) {
			return i
		}
	}
	return -1
}

// newCheckedStable opens the shadow of inner's term and vote in dir
// (the data directory) and checks the two against each other, as the file
// comment reasons out case by case:
//
//   - the newer valid slot and inner equal: fine (a warning if the other
//     slot is invalid).
//   - inner holds, for each key where it differs from the newer slot, the
//     older slot's value (a crash between the shadow write and inner's):
//     inner is repaired from the shadow, and that is logged.
//   - no shadow file, and inner does not carry the marker of one: a data
//     directory written before shadows existed (or a new one). The shadow
//     is created from inner's values, once, and that is logged.
//   - anything else (another mismatch, no valid slot, a shadow lost while
//     inner carries the marker, inner unreadable), or boltMeta, the result
//     of checkBoltMeta on inner's file, is not nil: damage. The values
//     served are written to the shadow marked damaged, so that the damage
//     is reported at every open until pinVote; a shadow file with an
//     invalid slot is first kept as stable.shadow.corrupt.
//
// It must be called before raft reads the stable store. It returns an
// error only when the files cannot be read or written at all. The shadow
// file stays open until close.
func newCheckedStable(inner raft.StableStore, dir string, boltMeta *storageDamage, logger hclog.Logger) (cs *checkedStable, sd *storageDamage, err error) {
	c := &checkedStable{inner: inner, path: filepath.Join(dir, stableShadowFile), logger: logger, sync: (*os.File).Sync}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if err := os.Remove(c.path + ".tmp"); err != nil && !os.IsNotExist(err) {
		return nil, nil, fmt.Errorf("raftnode: %w", err)
	}
	innerVals, innerErr := readStableValues(inner)
	marked := func() (ok bool) {
		defer func() { recover() }() // as in readStableValues; that error is reported there
		_, err := inner.Get([]byte(stableShadowMarker))
		return err == nil
	}()

	var shadow stableShadow
	exists := false
	if f, err := os.OpenFile(c.path, os.O_RDWR, 0); err == nil {
		c.f, exists = f, true
		st, err := f.Stat()
		if err == nil {
			shadow, err = readStableShadow(f, st.Size())
		}
		if err != nil {
			return nil, nil, fmt.Errorf("raftnode: reading %s: %w", c.path, err)
		}
	} else if !os.IsNotExist(err) {
		return nil, nil, fmt.Errorf("raftnode: %w", err)
	}
	shadowOK := exists && shadow.err == nil
	var cur, prev stableRecord // the newer slot, and the older one if it holds what cur replaced
	var prevOK bool
	var badSlot error // the other slot's error, if only one is valid
	if shadowOK {
		i, ok := shadow.newest()
		cur, prevOK, badSlot = shadow.slots[i], ok, shadow.slotErr[1-i]
		if prevOK {
			prev = shadow.slots[1-i]
		}
		c.rec = cur
	}

	// damage, once reason is known: serve vals, record the damage in the
	// shadow, report it. A shadow file that is itself the damage found
	// (keepShadow) is kept and replaced; otherwise the record is written in
	// place.
	keepShadow := exists && !shadowOK
	boltPath := filepath.Join(dir, "raft.db")
	const earlier = "found damaged by an earlier start and not repaired since: "
	damage := func(path, reason string, vals [stableKeyCount]stableValue) (*checkedStable, *storageDamage, error) {
		d := &storageDamage{Store: "stable", Path: path, Reason: reason}
		reason = strings.TrimPrefix(reason, earlier) // what the shadow records: the first finding
		rec := stableRecord{vals: vals, damaged: reason}
		switch {
		case keepShadow:
			c.f.Close()
			c.f = nil
			if err := os.Rename(c.path, c.path+".corrupt"); err != nil {
				return nil, nil, fmt.Errorf("raftnode: keeping the damaged %s: %w", c.path, err)
			}
			if err := c.create(rec); err != nil {
				return nil, nil, err
			}
		case !exists:
			if err := c.create(rec); err != nil {
				return nil, nil, err
			}
		case !sameRecord(c.rec, rec):
			if err := c.writeLocked(rec); err != nil {
				return nil, nil, err
			}
		}
		if !marked {
			if err := inner.Set([]byte(stableShadowMarker), []byte{1}); err != nil {
				return nil, nil, fmt.Errorf("raftnode: stable store: %w", err)
			}
		}
		logger.Error("the stable store (term and vote) is damaged", "path", path, "reason", reason, "serving", c.describe())
		return c, d, nil
	}

	switch {
	case shadowOK && cur.damaged != "":
		return damage(c.path, earlier+cur.damaged, cur.vals)
	case shadowOK && boltMeta != nil:
		return damage(boltMeta.Path, boltMeta.Reason, cur.vals)
	case shadowOK && innerErr != nil:
		return damage(boltPath, innerErr.Error(), cur.vals)
	case shadowOK:
		var repair []int
		for k := range cur.vals {
			switch {
			case innerVals[k].equal(cur.vals[k]):
			case prevOK && innerVals[k].equal(prev.vals[k]):
				repair = append(repair, k)
			case badSlot != nil:
				// The newer slot was damaged after bbolt took its values.
				keepShadow = true
				return damage(c.path, fmt.Sprintf("%s is %s in raft.db, newer than the only valid slot of %s (seq %d: %s), whose other slot fails its check (%v): the newer record was damaged",
					stableKeys[k], innerVals[k], stableShadowFile, cur.seq, cur.vals[k], badSlot), innerVals)
			default:
				before := "no record before it"
				if prevOK {
					before = "the record before it holds " + prev.vals[k].String()
				}
				return damage(boltPath, fmt.Sprintf("%s is %s in raft.db but %s in %s (seq %d; %s)",
					stableKeys[k], innerVals[k], cur.vals[k], stableShadowFile, cur.seq, before), cur.vals)
			}
		}
		if badSlot != nil {
			logger.Warn("one slot of the stable store's shadow fails its check: the older record, damaged, or a write torn by a crash; the other slot and raft.db agree, nothing is lost; the next change rewrites it",
				"path", c.path, "valid_seq", cur.seq, "error", badSlot)
		}
		for _, k := range repair {
			if err := inner.Set(stableKeys[k], cur.vals[k].b); err != nil {
				return nil, nil, fmt.Errorf("raftnode: repairing the stable store: %w", err)
			}
			logger.Warn("repaired the stable store from its shadow: the node stopped between writing the two",
				"key", string(stableKeys[k]), "raft.db", innerVals[k], "shadow", cur.vals[k])
		}
		if !marked {
			if err := inner.Set([]byte(stableShadowMarker), []byte{1}); err != nil {
				return nil, nil, fmt.Errorf("raftnode: stable store: %w", err)
			}
		}
		return c, nil, nil
	case exists: // the shadow file is unusable
		if innerErr != nil {
			innerVals = [stableKeyCount]stableValue{}
		}
		return damage(c.path, shadow.err.Error(), innerVals)
	case marked: // no shadow file
		return damage(c.path, "the shadow file is missing, though raft.db says it was created", innerVals)
	case boltMeta != nil:
		return damage(boltMeta.Path, boltMeta.Reason, innerVals)
	case innerErr != nil:
		return damage(boltPath, innerErr.Error(), [stableKeyCount]stableValue{})
	}
	// A data directory from before shadows existed, or a new one.
	if err := c.create(stableRecord{vals: innerVals}); err != nil {
		return nil, nil, err
	}
	if err := inner.Set([]byte(stableShadowMarker), []byte{1}); err != nil {
		return nil, nil, fmt.Errorf("raftnode: stable store: %w", err)
	}
	logger.Info("created the shadow of the stable store's term and vote (once)", "path", c.path, "values", c.describe())
	return c, nil, nil
}

// sameRecord reports whether r and s hold the same values and damage.
func sameRecord(r, s stableRecord) bool {
	for k := range r.vals {
		if !r.vals[k].equal(s.vals[k]) {
			return false
		}
	}
	return r.damaged == s.damaged
}

// create writes a new shadow file holding rec in both slots (seq 0 and
// 1), durably (writeFileDurably: the file appears complete or not at all),
// and opens it. This is the only time the shadow allocates space or
// touches the directory.
func (c *checkedStable) create(rec stableRecord) error {
	var b []byte
	for seq := range uint64(2) {
		rec.seq = seq
		slot, err := rec.encode()
		if err != nil {
			return err
		}
		b = append(b, slot...)
	}
	if err := writeFileDurably(c.path, b); err != nil {
		return fmt.Errorf("raftnode: creating %s: %w", c.path, err)
	}
	f, err := os.OpenFile(c.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("raftnode: %w", err)
	}
	c.f, c.rec = f, rec
	return nil
}

// writeLocked writes next (its values and damage; the seq is c.rec's plus
// one) into its slot of the shadow file, in place, and makes it durable;
// it is then the record served. A write that fails leaves c.rec as it
// was, and its slot is written again by the next write. c.mu is held
// (or c not yet shared).
func (c *checkedStable) writeLocked(next stableRecord) error {
	if c.f == nil {
		return fmt.Errorf("raftnode: stable store shadow %s: %w", c.path, os.ErrClosed)
	}
	next.seq = c.rec.seq + 1
	b, err := next.encode()
	if err != nil {
		return err
	}
	if _, err := c.f.WriteAt(b, int64(next.seq%2)*stableSlotSize); err != nil {
		return fmt.Errorf("raftnode: stable store shadow: %w", err)
	}
	if err := c.sync(c.f); err != nil {
		return fmt.Errorf("raftnode: stable store shadow: %w", err)
	}
	c.rec = next
	return nil
}

// close closes the shadow file; writes of the term or vote fail after it.
func (c *checkedStable) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}

// readStableValues reads the three keys from inner. bbolt may panic on a
// damaged page (it has no checksum on data pages): that is an error too.
func readStableValues(inner raft.StableStore) (vals [stableKeyCount]stableValue, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading raft.db panicked: %v", r)
		}
	}()
	for k, key := range stableKeys {
		v, err := inner.Get(key)
		switch {
		case err != nil && err.Error() == "not found":
		case err != nil:
			return vals, fmt.Errorf("reading %s: %w", key, err)
		default:
			vals[k] = stableValue{ok: true, b: append([]byte{}, v...)}
		}
	}
	return vals, nil
}

// describe renders the values served, for the log.
func (c *checkedStable) describe() string {
	var s []string
	for k, v := range c.rec.vals {
		s = append(s, fmt.Sprintf("%s=%s", stableKeys[k], v))
	}
	return strings.Join(s, " ")
}

// Set is part of raft.StableStore. A term or vote goes to the shadow
// file first, then to the inner store.
func (c *checkedStable) Set(key, val []byte) error {
	k := stableKeyIndex(key)
	if k < 0 {
		return c.inner.Set(key, val)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.catchUpLocked(); err != nil {
		return err
	}
	v := stableValue{ok: true, b: append([]byte{}, val...)}
	if c.rec.vals[k].equal(v) {
		// Unchanged (raft's NewRaft writes the current term back at
		// every start): the shadow holds it already.
		return c.inner.Set(key, val)
	}
	next := c.rec
	next.vals[k] = v
	if err := c.writeLocked(next); err != nil {
		return err
	}
	if err := c.inner.Set(key, val); err != nil {
		c.innerBehind = true
		return err
	}
	return nil
}

// catchUpLocked writes the values served into the inner store after a
// failed write to it.
func (c *checkedStable) catchUpLocked() error {
	if !c.innerBehind {
		return nil
	}
	for k, v := range c.rec.vals {
		if v.ok {
			if err := c.inner.Set(stableKeys[k], v.b); err != nil {
				return err
			}
		}
	}
	c.innerBehind = false
	return nil
}

// Get is part of raft.StableStore: a term or vote comes from memory.
func (c *checkedStable) Get(key []byte) ([]byte, error) {
	k := stableKeyIndex(key)
	if k < 0 {
		return c.inner.Get(key)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.rec.vals[k]
	if !v.ok {
		return nil, errStableNotFound
	}
	return append([]byte{}, v.b...), nil
}

// SetUint64 is part of raft.StableStore. Values are 8 bytes, big-endian,
// as raft-boltdb stores them (util.go, uint64ToBytes), so that the shadow
// and raft.db hold the same bytes.
func (c *checkedStable) SetUint64(key []byte, val uint64) error {
	if stableKeyIndex(key) < 0 {
		return c.inner.SetUint64(key, val)
	}
	return c.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 is part of raft.StableStore.
func (c *checkedStable) GetUint64(key []byte) (uint64, error) {
	if stableKeyIndex(key) < 0 {
		return c.inner.GetUint64(key)
	}
	b, err := c.Get(key)
	if err != nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("raftnode: stable store: %s holds %d bytes, not a uint64", key, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// pinVote is called once a damaged node has been repaired by following a
// leader of term T (repair.go). From then on the store answers
// CurrentTerm ≥ T and LastVoteTerm ≥ T: raft refuses every vote request
// of a term below its current term, and in term T grants only leader
// (raft.go requestVote: "Check if we've voted in this election before"),
// so the node cannot grant a second vote in any term up to T that it may
// have voted in and forgot. A later vote already recorded is kept. Raft
// compares leader with the candidate's address as its transport encodes
// it (RPCHeader.Addr); anything else non-empty is as safe, and only
// refuses the leader a repeated vote in T. Both records are rewritten
// consistently and the shadow's damage mark is cleared.
func (c *checkedStable) pinVote(term uint64, leader []byte) error {
	if len(leader) == 0 {
		return errors.New("raftnode: pinVote: no leader")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.catchUpLocked(); err != nil {
		return err
	}
	termBytes := binary.BigEndian.AppendUint64(nil, term)
	next := c.rec
	uint64Of := func(v stableValue) uint64 {
		if !v.ok || len(v.b) != 8 {
			return 0
		}
		return binary.BigEndian.Uint64(v.b)
	}
	if uint64Of(next.vals[stableCurrentTerm]) < term {
		next.vals[stableCurrentTerm] = stableValue{ok: true, b: termBytes}
	}
	lvt := uint64Of(next.vals[stableLastVoteTerm])
	if lvt < term || (lvt == term && !next.vals[stableLastVoteCand].ok) {
		next.vals[stableLastVoteTerm] = stableValue{ok: true, b: termBytes}
		next.vals[stableLastVoteCand] = stableValue{ok: true, b: append([]byte{}, leader...)}
	}
	// The shadow first (still marked damaged, if it was), then every key
	// into the inner store, then the shadow unmarked: a crash at any
	// point leaves the records consistent or the store still damaged.
	if !sameRecord(next, c.rec) {
		if err := c.writeLocked(next); err != nil {
			return err
		}
	}
	for k, v := range next.vals {
		if v.ok {
			if err := c.inner.Set(stableKeys[k], v.b); err != nil {
				c.innerBehind = true
				return err
			}
		}
	}
	if c.rec.damaged != "" {
		next.damaged = ""
		if err := c.writeLocked(next); err != nil {
			return err
		}
		c.logger.Info("the stable store's damage mark is cleared: term and vote pinned", "term", term, "values", c.describe())
	}
	return nil
}

// writeFileDurably replaces path with b: a temporary file, fsynced, renamed
// over path, and the directory fsynced, so that path holds either the old
// or the new content after a crash, never a mix.
func writeFileDurably(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return fsyncDir(filepath.Dir(path))
}

// fsyncDir makes the renames and removals in dir durable.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// bbolt's meta pages (go.etcd.io/bbolt v1.3.11): pages 0 and 1 of the file.
// A page starts with a 16-byte header (page.go: page{id u64, flags u16,
// count u16, overflow u32}); the meta follows (db.go: meta{magic u32,
// version u32, pageSize u32, flags u32, root bucket{root u64, sequence
// u64}, freelist u64, pgid u64, txid u64, checksum u64}), in the machine's
// byte order. checksum is FNV-64a of the meta's bytes before it
// (meta.sum64); meta.validate checks magic, version and checksum. A commit
// writes its meta to page txid % 2 (meta.write), and DB.meta uses the
// page with the higher txid if it validates, else the other one: the
// previous transaction.
const (
	boltPageHeaderSize = 16
	boltMetaMagic      = 0xED0CDAED
	boltMetaVersion    = 2
	boltMetaSumLen     = 56 // offset of checksum in meta
	boltMetaPageSize   = 8  // offset of pageSize in meta
	boltMetaTxid       = 48 // offset of txid in meta
	boltMetaLen        = 64
)

// boltMeta is one meta page as read from the file.
type boltMeta struct {
	txid     uint64
	pageSize uint32
	valid    bool
	why      string
}

// parseBoltMeta reads the meta at the start of page (a meta page from the
// file) and validates it as bbolt does (db.go, meta.validate).
func parseBoltMeta(page []byte) boltMeta {
	if len(page) < boltPageHeaderSize+boltMetaLen {
		return boltMeta{why: "short page"}
	}
	m := page[boltPageHeaderSize : boltPageHeaderSize+boltMetaLen]
	ne := binary.NativeEndian
	bm := boltMeta{txid: ne.Uint64(m[boltMetaTxid:]), pageSize: ne.Uint32(m[boltMetaPageSize:])}
	h := fnv.New64a()
	h.Write(m[:boltMetaSumLen])
	switch {
	case ne.Uint32(m[0:]) != boltMetaMagic:
		bm.why = "bad magic"
	case ne.Uint32(m[4:]) != boltMetaVersion:
		bm.why = fmt.Sprintf("version %d", ne.Uint32(m[4:]))
	case ne.Uint64(m[boltMetaSumLen:]) != h.Sum64():
		bm.why = "checksum mismatch"
	default:
		bm.valid = true
	}
	return bm
}

// checkBoltMeta checks both meta pages of the bbolt file at path. It must
// be called before bbolt opens the file: raft-boltdb's New commits a
// transaction at once (bolt_store.go, initialize), whose meta overwrites
// the damaged page. A page that fails its checksum is reported as damage
// whichever it is: if it held the newest transaction, bbolt has gone back
// to the previous one and lost the last write (a vote, or log entries
// with LogStoreBolt); if the older, nothing is lost, but the page cannot
// say which it was once damaged. A meta page torn by a power loss during
// its write reads the same, and is reported too: the node is then fenced
// and repaired from the leader, never wrong. A missing or empty file is
// not damage (bbolt creates it).
func checkBoltMeta(path string) (*storageDamage, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	if st.Size() == 0 {
		return nil, nil
	}
	readPage := func(off int64) []byte {
		b := make([]byte, boltPageHeaderSize+boltMetaLen)
		n, err := f.ReadAt(b, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil
		}
		return b[:n]
	}
	damage := func(reason string) (*storageDamage, error) {
		return &storageDamage{Store: "stable", Path: path, Reason: reason}, nil
	}
	m0 := parseBoltMeta(readPage(0))
	pageSize := int64(m0.pageSize)
	if !m0.valid {
		// Find page 1 as bbolt does when page 0 is unreadable
		// (db.go, getPageSizeFromSecondMeta): every power of two from 1 KiB.
		pageSize = 0
		for i := 0; i <= 14; i++ {
			pos := int64(1024) << i
			if pos >= st.Size()-1024 {
				break
			}
			if m := parseBoltMeta(readPage(pos)); m.valid && int64(m.pageSize) == pos {
				pageSize = pos
				break
			}
		}
		if pageSize == 0 {
			return damage("neither bbolt meta page is valid")
		}
	}
	if st.Size() < 2*pageSize {
		return damage(fmt.Sprintf("the file is %d bytes, shorter than its two meta pages", st.Size()))
	}
	m1 := parseBoltMeta(readPage(pageSize))
	switch {
	case m0.valid && m1.valid:
		return nil, nil
	case !m0.valid && !m1.valid:
		return damage("neither bbolt meta page is valid")
	}
	bad, good, badAt := m0, m1, 0
	if m0.valid {
		bad, good, badAt = m1, m0, 1
	}
	return damage(fmt.Sprintf("bbolt meta page %d fails validation (%s; it reads txid %d, the valid page has txid %d): bbolt falls back to the valid page, and if the damaged one was the newer, to the previous transaction, losing the last write",
		badAt, bad.why, bad.txid, good.txid))
}
