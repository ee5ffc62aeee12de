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
	// stableShadowFile is the shadow record, in the data directory.
	stableShadowFile = "stable.shadow"
	// stableShadowMarker is a key checkedStable sets in the inner store
	// once a shadow exists, so that a shadow file lost later is told apart
	// from a data directory written before shadows existed.
	stableShadowMarker = "LockclusterStableShadow"
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

// stableRecord is the content of the shadow file: the three values, the
// values they replaced in the write that produced this record (so that a
// crash after the shadow was written and before bbolt was is recognised:
// bbolt then still holds exactly those), and whether the stable store was
// found damaged and not yet repaired (pinVote clears it).
type stableRecord struct {
	vals    [stableKeyCount]stableValue
	changed [stableKeyCount]bool
	prev    [stableKeyCount]stableValue
	damaged string
}

// The shadow file:
//
//	magic "LCSTBL01"
//	3 × value:           present u8 | len u32 | bytes
//	3 × change:          changed u8 [| present u8 | len u32 | bytes]
//	damaged:             len u32 | bytes
//	CRC-32C (Castagnoli) of all the above, u32
//
// Integers are big-endian.
var stableShadowMagic = [8]byte{'L', 'C', 'S', 'T', 'B', 'L', '0', '1'}

var stableShadowTable = crc32.MakeTable(crc32.Castagnoli)

// encode renders r as the shadow file holds it, CRC last.
func (r *stableRecord) encode() []byte {
	b := append([]byte(nil), stableShadowMagic[:]...)
	value := func(v stableValue) {
		if !v.ok {
			b = append(b, 0)
			b = binary.BigEndian.AppendUint32(b, 0)
			return
		}
		b = append(b, 1)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v.b)))
		b = append(b, v.b...)
	}
	for _, v := range r.vals {
		value(v)
	}
	for k := range r.vals {
		if !r.changed[k] {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		value(r.prev[k])
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.damaged)))
	b = append(b, r.damaged...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, stableShadowTable))
}

// decodeStableRecord parses a shadow file; the error says what is wrong
// with it.
func decodeStableRecord(b []byte) (stableRecord, error) {
	var r stableRecord
	if len(b) < len(stableShadowMagic)+4 {
		return r, fmt.Errorf("%d bytes, too short", len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, stableShadowTable); got != sum {
		return r, fmt.Errorf("CRC mismatch: stored %08x, computed %08x", sum, got)
	}
	if !bytes.Equal(body[:len(stableShadowMagic)], stableShadowMagic[:]) {
		return r, fmt.Errorf("bad magic %q", body[:len(stableShadowMagic)])
	}
	p := body[len(stableShadowMagic):]
	short := errors.New("truncated record")
	u8 := func() (byte, error) {
		if len(p) < 1 {
			return 0, short
		}
		c := p[0]
		p = p[1:]
		return c, nil
	}
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
	value := func() (stableValue, error) {
		present, err := u8()
		if err != nil {
			return stableValue{}, err
		}
		v, err := bytesN()
		if err != nil || present > 1 || (present == 0 && len(v) > 0) {
			return stableValue{}, errors.Join(err, errors.New("malformed value"))
		}
		if present == 0 {
			return stableValue{}, nil
		}
		return stableValue{ok: true, b: v}, nil
	}
	var err error
	for k := range r.vals {
		if r.vals[k], err = value(); err != nil {
			return r, err
		}
	}
	for k := range r.vals {
		c, err := u8()
		if err != nil || c > 1 {
			return r, errors.Join(err, errors.New("malformed change"))
		}
		if c == 1 {
			r.changed[k] = true
			if r.prev[k], err = value(); err != nil {
				return r, err
			}
		}
	}
	d, err := bytesN()
	if err != nil {
		return r, err
	}
	r.damaged = string(d)
	if len(p) != 0 {
		return r, fmt.Errorf("%d bytes after the record", len(p))
	}
	return r, nil
}

// checkedStable is a raft.StableStore around raft-boltdb's store whose
// term and vote are checked against the shadow file at open and served
// from memory afterwards. Every change is written to the shadow file
// (temporary file, fsync, rename, fsync of the directory), then to the
// inner store. Other keys go straight to the inner store. Safe for
// concurrent use.
type checkedStable struct {
	inner  raft.StableStore
	path   string // the shadow file
	logger hclog.Logger

	mu  sync.Mutex
	rec stableRecord // vals and damaged as the shadow file holds them; changed and prev unused
	// innerBehind is set when a write to the inner store failed after
	// the shadow file took it: the next write brings the inner store up
	// to date first, so that the shadow never runs more than one write
	// ahead of it.
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
// (the data directory) and checks the two against each other:
//
//   - equal: fine.
//   - inner holds, for the keys the last write changed, the values that
//     write replaced (a crash between the shadow write and inner's): inner
//     is repaired from the shadow, and that is logged. Adopting the newer
//     term or vote is always safe.
//   - no shadow file, and inner does not carry the marker of one: a data
//     directory written before shadows existed (or a new one). The shadow
//     is created from inner's values, once, and that is logged.
//   - anything else (another mismatch, a shadow that fails its CRC, a
//     shadow lost while inner carries the marker, inner unreadable),
//     or boltMeta, the result of checkBoltMeta on inner's file, is not
//     nil: damage. The shadow is then rewritten with the values served
//     (the shadow's if it was intact, else inner's) and marked damaged,
//     so that the damage is reported at every open until pinVote; a
//     shadow that failed its CRC is kept as stable.shadow.corrupt.
//
// It must be called before raft reads the stable store. It returns an
// error only when the files cannot be read or written at all.
func newCheckedStable(inner raft.StableStore, dir string, boltMeta *storageDamage, logger hclog.Logger) (*checkedStable, *storageDamage, error) {
	c := &checkedStable{inner: inner, path: filepath.Join(dir, stableShadowFile), logger: logger}
	if err := os.Remove(c.path + ".tmp"); err != nil && !os.IsNotExist(err) {
		return nil, nil, fmt.Errorf("raftnode: %w", err)
	}
	innerVals, innerErr := readStableValues(inner)
	marked := func() (ok bool) {
		defer func() { recover() }() // as in readStableValues; that error is reported there
		_, err := inner.Get([]byte(stableShadowMarker))
		return err == nil
	}()

	var shadow stableRecord
	shadowOK := false
	var shadowErr error // what is wrong with the shadow file, if it exists
	b, err := os.ReadFile(c.path)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return nil, nil, fmt.Errorf("raftnode: reading %s: %w", c.path, err)
	default:
		if shadow, shadowErr = decodeStableRecord(b); shadowErr == nil {
			shadowOK = true
		}
	}

	// damage, once reason is known: serve vals, record the damage in the
	// shadow, report it.
	boltPath := filepath.Join(dir, "raft.db")
	const earlier = "found damaged by an earlier start and not repaired since: "
	damage := func(path, reason string, vals [stableKeyCount]stableValue) (*checkedStable, *storageDamage, error) {
		d := &storageDamage{Store: "stable", Path: path, Reason: reason}
		reason = strings.TrimPrefix(reason, earlier) // what the shadow records: the first finding
		if shadowErr != nil {
			if err := os.Rename(c.path, c.path+".corrupt"); err != nil {
				return nil, nil, fmt.Errorf("raftnode: keeping the damaged %s: %w", c.path, err)
			}
		}
		c.rec = stableRecord{vals: vals, damaged: reason}
		if err := writeFileDurably(c.path, c.rec.encode()); err != nil {
			return nil, nil, fmt.Errorf("raftnode: %w", err)
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
	case shadowOK && shadow.damaged != "":
		return damage(c.path, earlier+shadow.damaged, shadow.vals)
	case shadowOK && boltMeta != nil:
		return damage(boltMeta.Path, boltMeta.Reason, shadow.vals)
	case shadowOK && innerErr != nil:
		return damage(boltPath, innerErr.Error(), shadow.vals)
	case shadowOK:
		var repair []int
		for k := range shadow.vals {
			switch {
			case innerVals[k].equal(shadow.vals[k]):
			case shadow.changed[k] && innerVals[k].equal(shadow.prev[k]):
				repair = append(repair, k)
			default:
				return damage(boltPath, fmt.Sprintf("%s is %s in raft.db but %s in %s (which replaced %s)",
					stableKeys[k], innerVals[k], shadow.vals[k], stableShadowFile, shadow.prev[k]), shadow.vals)
			}
		}
		c.rec = stableRecord{vals: shadow.vals}
		for _, k := range repair {
			if err := inner.Set(stableKeys[k], shadow.vals[k].b); err != nil {
				return nil, nil, fmt.Errorf("raftnode: repairing the stable store: %w", err)
			}
			logger.Warn("repaired the stable store from its shadow: the node stopped between writing the two",
				"key", string(stableKeys[k]), "raft.db", innerVals[k], "shadow", shadow.vals[k])
		}
		if !marked {
			if err := inner.Set([]byte(stableShadowMarker), []byte{1}); err != nil {
				return nil, nil, fmt.Errorf("raftnode: stable store: %w", err)
			}
		}
		return c, nil, nil
	case shadowErr != nil:
		if innerErr != nil {
			innerVals = [stableKeyCount]stableValue{}
		}
		return damage(c.path, shadowErr.Error(), innerVals)
	case marked: // no shadow file
		return damage(c.path, "the shadow file is missing, though raft.db says it was created", innerVals)
	case boltMeta != nil:
		return damage(boltMeta.Path, boltMeta.Reason, innerVals)
	case innerErr != nil:
		return damage(boltPath, innerErr.Error(), [stableKeyCount]stableValue{})
	}
	// A data directory from before shadows existed, or a new one.
	c.rec = stableRecord{vals: innerVals}
	if err := writeFileDurably(c.path, c.rec.encode()); err != nil {
		return nil, nil, fmt.Errorf("raftnode: %w", err)
	}
	if err := inner.Set([]byte(stableShadowMarker), []byte{1}); err != nil {
		return nil, nil, fmt.Errorf("raftnode: stable store: %w", err)
	}
	logger.Info("created the shadow of the stable store's term and vote (once)", "path", c.path, "values", c.describe())
	return c, nil, nil
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
	next := stableRecord{vals: c.rec.vals, damaged: c.rec.damaged}
	next.changed[k], next.prev[k] = true, c.rec.vals[k]
	next.vals[k] = v
	if err := writeFileDurably(c.path, next.encode()); err != nil {
		return fmt.Errorf("raftnode: stable store shadow: %w", err)
	}
	c.rec.vals = next.vals
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
	next := stableRecord{vals: c.rec.vals, damaged: c.rec.damaged}
	set := func(k int, v stableValue) {
		if !next.vals[k].equal(v) {
			next.changed[k], next.prev[k] = true, next.vals[k]
			next.vals[k] = v
		}
	}
	uint64Of := func(v stableValue) uint64 {
		if !v.ok || len(v.b) != 8 {
			return 0
		}
		return binary.BigEndian.Uint64(v.b)
	}
	if uint64Of(next.vals[stableCurrentTerm]) < term {
		set(stableCurrentTerm, stableValue{ok: true, b: termBytes})
	}
	lvt := uint64Of(next.vals[stableLastVoteTerm])
	if lvt < term || (lvt == term && !next.vals[stableLastVoteCand].ok) {
		set(stableLastVoteTerm, stableValue{ok: true, b: termBytes})
		set(stableLastVoteCand, stableValue{ok: true, b: append([]byte{}, leader...)})
	}
	// The shadow first (still marked damaged, if it was), then every key
	// into the inner store, then the shadow unmarked: a crash at any
	// point leaves the records consistent or the store still damaged.
	if err := writeFileDurably(c.path, next.encode()); err != nil {
		return fmt.Errorf("raftnode: stable store shadow: %w", err)
	}
	c.rec.vals = next.vals
	for k, v := range next.vals {
		if v.ok {
			if err := c.inner.Set(stableKeys[k], v.b); err != nil {
				c.innerBehind = true
				return err
			}
		}
	}
	if c.rec.damaged != "" {
		if err := writeFileDurably(c.path, (&stableRecord{vals: next.vals}).encode()); err != nil {
			return fmt.Errorf("raftnode: stable store shadow: %w", err)
		}
		c.logger.Info("the stable store's damage mark is cleared: term and vote pinned", "term", term, "values", c.describe())
		c.rec.damaged = ""
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
