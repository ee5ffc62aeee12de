package fsm

// Serialization: snapshots (Snapshot, Restore, Digest) and the entry codec.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"pgregory.net/rapid"
)

// TestSnapshotRoundTrip builds a random history; at random points it
// restores m.Snapshot() into another machine (empty, or holding some other
// state) and then applies the rest of the history to both: every Result,
// every Event and the Digest must be the same after every entry.
func TestSnapshotRoundTrip(t *testing.T) {
	rapidDefaults(1000, 50)
	rapid.Check(t, func(t *rapid.T) {
		m, mdl, g := New(), newModel(), newGen()
		var restored *Machine
		var index uint64
		var now int64
		t.Repeat(map[string]func(*rapid.T){"step": func(t *rapid.T) {
			if rapid.IntRange(0, 7).Draw(t, "snapshot") == 0 {
				restored = New()
				if rapid.Bool().Draw(t, "intoUsed") {
					restored, _ = richMachine(t, rapid.Bool().Draw(t, "generous"))
				}
				if err := restored.Restore(bytes.NewReader(m.Snapshot())); err != nil {
					t.Fatalf("restore at %d: %v", index, err)
				}
				t.Logf("snapshot at %d", index)
				if err := sameMachines(m, restored); err != nil {
					t.Fatal(err)
				}
			}
			cmd := g.draw(t, mdl)
			index, now = index+1, now+1
			t.Logf("#%d %s", index, fmtCmd(cmd))
			e := Entry{Time: now, Cmd: cmd}
			ap := m.Apply(index, e)
			want, _ := mdl.apply(index, now, cmd)
			g.note(cmd, want)
			if restored == nil {
				return
			}
			if ap2 := restored.Apply(index, e); !reflect.DeepEqual(ap, ap2) {
				t.Fatalf("restored machine differs:\n%+v\n%+v", ap, ap2)
			}
			if m.Digest() != restored.Digest() {
				t.Fatalf("digests differ after %d", index)
			}
		}})
	})
}

// sameMachines compares every read view of two machines.
func sameMachines(a, b *Machine) error {
	if a.Digest() != b.Digest() {
		return errors.New("digests differ")
	}
	if !reflect.DeepEqual(a.Stats(), b.Stats()) || !reflect.DeepEqual(a.Sessions(), b.Sessions()) || a.Limits() != b.Limits() {
		return fmt.Errorf("stats, sessions or limits differ:\n%+v %+v\n%+v %+v", a.Stats(), a.Sessions(), b.Stats(), b.Sessions())
	}
	for _, ns := range []string{"n1", "n2", "n3"} {
		if qa, qb := a.Query(ns), b.Query(ns); !reflect.DeepEqual(qa, qb) {
			return fmt.Errorf("query %s differs:\n%+v\n%+v", ns, qa, qb)
		}
	}
	for _, s := range a.Sessions() {
		ra, sa, _ := a.SessionRequests(s.ID)
		rb, sb, _ := b.SessionRequests(s.ID)
		if sa != sb || !reflect.DeepEqual(ra, rb) {
			return fmt.Errorf("requests of session %d differ", s.ID)
		}
	}
	return checkState(b.st)
}

// richMachine is a machine with three sessions (1 and 2 in n1, 3 in n2),
// held locks both modes, a scoped and a plain queue, finished outcomes and
// an abort that overtook its request. generous raises the limits so that
// hostile sizes reach the scheduler, and makes maxFinished tiny.
func richMachine(t interface{ Fatalf(string, ...any) }, generous bool) (*Machine, uint64) {
	m := New()
	cmds := []Command{
		&OpenSession{Namespace: "n1", TTL: 10e9}, &OpenSession{Namespace: "n1", TTL: 10e9, Label: "l"},
		&OpenSession{Namespace: "n2", TTL: 10e9},
		&Request{Session: 1, Namespace: "n1", RequestID: 1, Names: []string{"a"}},
		&Request{Session: 2, Namespace: "n1", RequestID: 1, Names: []string{"a"}, Signal: true},
		&Request{Session: 1, Namespace: "n1", RequestID: 2, Names: []string{"b"}, Mode: Shared},
		&Request{Session: 2, Namespace: "n1", RequestID: 2, Names: []string{"b"}, Mode: Shared},
		&Request{Session: 2, Namespace: "n1", RequestID: 3, Names: []string{"c", "a"}},
		&Request{Session: 1, Namespace: "n1", RequestID: 3, Names: []string{"b", "d"}},
		&Request{Session: 3, Namespace: "n2", RequestID: 1, Names: []string{"a"}},
		&Request{Session: 3, Namespace: "n2", RequestID: 2, Names: []string{"x", "y", "z"}, Mode: Shared},
		&Request{Session: 1, Namespace: "n1", RequestID: 4, Names: []string{"e"}},
		&Release{Session: 1, Namespace: "n1", RequestID: 4},
		&Request{Session: 1, Namespace: "n1", RequestID: 5, Names: []string{"f"}},
		&Request{Session: 2, Namespace: "n1", RequestID: 4, Names: []string{"f"}, IfAvailable: true},
		&Abort{Session: 2, Namespace: "n1", RequestID: 9, Reason: "early"},
		&SetMember{Member: Member{ID: "node1", RaftAddr: "10.0.0.1:7000"}},
	}
	if generous {
		l := DefaultLimits()
		l.MaxScopeNames, l.MaxNameBytes, l.maxReasonBytes, l.maxLabelBytes = 2000, 200<<10, 200<<10, 200<<10
		l.MinTTL, l.MaxTTL, l.maxFinished = 1, math.MaxInt64, 2
		cmds = append(cmds, &SetLimits{Limits: l})
	}
	for i, c := range cmds {
		if ap := m.Apply(uint64(i+1), Entry{Time: int64(i), Cmd: c}); ap.Result.Err != nil {
			t.Fatalf("setup %d %T: %v", i+1, c, ap.Result.Err)
		}
	}
	return m, uint64(len(cmds) + 1)
}

// recordsMachine is richMachine with records (one in a namespace whose
// sessions ended) and a semaphore of two holders: a state of format 4.
func recordsMachine(t interface{ Fatalf(string, ...any) }) (*Machine, uint64) {
	m, idx := richMachine(t, false)
	for _, c := range []Command{
		&SetRecord{Session: 1, Namespace: "n1", RequestID: 1, Token: 4, Name: "a", Value: []byte("va")},
		&Request{Session: 2, Namespace: "n1", RequestID: 20, Names: []string{"s"}, Mode: Shared, MaxHolders: 2},
		&Request{Session: 1, Namespace: "n1", RequestID: 21, Names: []string{"s", "t"}, Mode: Shared, MaxHolders: 2},
		&Request{Session: 1, Namespace: "n1", RequestID: 22, Names: []string{"s"}, Mode: Shared, MaxHolders: 2},
		&SetRecord{Session: 3, Namespace: "n2", RequestID: 1, Token: 10, Name: "a", Value: []byte("vb")},
		&CloseSession{Session: 3, Namespace: "n2"},
	} {
		if ap := m.Apply(idx, Entry{Time: int64(idx), Cmd: c}); ap.Result.Err != nil {
			t.Fatalf("setup %d %T: %v", idx, c, ap.Result.Err)
		}
		idx++
	}
	return m, idx
}

// TestRestoreRecordsState restores a state of format 4 and checks that
// the copy reads the same and goes on the same.
func TestRestoreRecordsState(t *testing.T) {
	m, idx := recordsMachine(t)
	b := m.Snapshot()
	if _, v, _ := SnapshotHeader(b); v != 4 {
		t.Fatalf("format %d", v)
	}
	c := New()
	if err := c.Restore(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if err := sameMachines(m, c); err != nil {
		t.Fatal(err)
	}
	if rec, _, ok := c.Record("n2", "a"); !ok || string(rec.Value) != "vb" {
		t.Fatalf("the record of a namespace without sessions: %+v %v", rec, ok)
	}
	if q := c.Query("n1"); len(q.Records) != 1 || q.Records[0].Name != "a" || q.Pending[len(q.Pending)-1].MaxHolders != 2 {
		t.Fatalf("query after restore: %+v", q)
	}
	for i, cmd := range []Command{
		&Release{Session: 2, Namespace: "n1", RequestID: 20}, // grants 1/22 on s
		&Request{Session: 2, Namespace: "n1", RequestID: 23, Names: []string{"s"}, Mode: Shared, MaxHolders: 3},
		&SetRecord{Session: 1, Namespace: "n1", RequestID: 1, Token: 4, Name: "a", Delete: true, Release: true},
		&OpenSession{Namespace: "n2", TTL: 10e9},
		&CloseSession{Session: 1, Namespace: "n1"},
	} {
		e := Entry{Time: 1000, Cmd: cmd}
		a1, a2 := m.Apply(idx+uint64(i), e), c.Apply(idx+uint64(i), e)
		if !reflect.DeepEqual(a1, a2) || m.Digest() != c.Digest() {
			t.Fatalf("after %s:\n%+v\n%+v", fmtCmd(cmd), a1, a2)
		}
	}
}

// TestRestoreRichState restores a state with scoped pending requests,
// shared holders, finished outcomes and two namespaces, and checks that
// the copy reads the same and goes on the same.
func TestRestoreRichState(t *testing.T) {
	for _, generous := range []bool{false, true} {
		m, idx := richMachine(t, generous)
		if q := m.Query("n1"); len(q.Pending) < 3 || len(q.Held) < 3 {
			t.Fatalf("the rich state is not rich: %+v", q)
		}
		c := New()
		if err := c.Restore(bytes.NewReader(m.Snapshot())); err != nil {
			t.Fatal(err)
		}
		if err := sameMachines(m, c); err != nil {
			t.Fatal(err)
		}
		rest := []Command{
			&Release{Session: 1, Namespace: "n1", RequestID: 1},                       // grants 2/1 on a
			&Release{Session: 2, Namespace: "n1", RequestID: 2},                       // b still shared by 1
			&Release{Session: 1, Namespace: "n1", RequestID: 2},                       // grants 1/3 on b, d
			&Request{Session: 2, Namespace: "n1", RequestID: 9, Names: []string{"x"}}, // aborted before
			&Request{Session: 2, Namespace: "n1", RequestID: 5, Names: []string{"c", "b"}, Steal: true},
			&CloseSession{Session: 1, Namespace: "n1"},
			&ExpireSession{Session: 3},
		}
		for i, cmd := range rest {
			e := Entry{Time: 1000, Cmd: cmd}
			a1, a2 := m.Apply(idx+uint64(i), e), c.Apply(idx+uint64(i), e)
			if !reflect.DeepEqual(a1, a2) || m.Digest() != c.Digest() {
				t.Fatalf("after %s:\n%+v\n%+v", fmtCmd(cmd), a1, a2)
			}
		}
	}
}

// withCRC returns b with its checksum made right again.
func withCRC(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crcTable))
	return b
}

// TestRestoreRejectsBadSnapshots: each bad snapshot is refused with an error
// that says what is wrong, and the old state stays as it was, usable.
func TestRestoreRejectsBadSnapshots(t *testing.T) {
	src, _ := richMachine(t, false)
	good := src.Snapshot()
	flipped := slices.Clone(good)
	flipped[len(good)/2] ^= 0x10
	version := slices.Clone(good)
	version[len(snapMagic)] = snapVersion + 1
	for _, c := range []struct {
		name, want string
		r          io.Reader
	}{
		{"empty", "magic", bytes.NewReader(nil)},
		{"truncated by one", "checksum", bytes.NewReader(good[:len(good)-1])},
		{"truncated by half", "checksum", bytes.NewReader(good[:len(good)/2])},
		{"flipped byte", "checksum", bytes.NewReader(flipped)},
		{"garbage", "magic", strings.NewReader("this is not a snapshot, not at all")},
		{"wrong version", fmt.Sprintf("version %d", snapVersion+1), bytes.NewReader(withCRC(version))},
		{"read error", "disk on fire", iotest.ErrReader(errors.New("disk on fire"))},
		{"half read", "unexpected EOF", io.MultiReader(bytes.NewReader(good[:20]), iotest.ErrReader(io.ErrUnexpectedEOF))},
	} {
		old, idx := richMachine(t, true)
		twin, _ := richMachine(t, true)
		err := old.Restore(c.r)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Restore = %v, want an error about %q", c.name, err, c.want)
		}
		if err := sameMachines(twin, old); err != nil {
			t.Errorf("%s: the failed restore changed the state: %v", c.name, err)
		}
		e := Entry{Cmd: &Release{Session: 1, Namespace: "n1", RequestID: 1}}
		if a1, a2 := old.Apply(idx, e), twin.Apply(idx, e); a1.Result.Status != StatusReleased || !reflect.DeepEqual(a1, a2) {
			t.Errorf("%s: the old state is not usable: %+v", c.name, a1)
		}
	}
}

// TestRestoreTamperedSnapshot flips a few bit patterns in every byte of a
// snapshot and fixes the checksum, as a bug elsewhere or a hostile peer
// could. Restore may refuse or accept it; what it accepts must carry limits
// that SetLimits would accept, and must not make Apply or Query panic.
func TestRestoreTamperedSnapshot(t *testing.T) {
	fails := 0
	for _, kind := range []string{"plain", "generous", "records"} {
		src, _ := richMachine(t, kind == "generous")
		if kind == "records" {
			src, _ = recordsMachine(t)
		}
		good := src.Snapshot()
		for i := len(snapMagic); i < len(good)-4 && fails < 3; i++ {
			for _, x := range []byte{0x01, 0x02, 0x04, 0x40, 0x80, 0xff} {
				b := slices.Clone(good)
				b[i] ^= x
				if err := exerciseRestored(withCRC(b)); err != nil {
					t.Errorf("snapshot byte %d ^ %#x: %v", i, x, err)
					fails++
					break
				}
			}
		}
	}
}

func exerciseRestored(b []byte) (err error) {
	m := New()
	if m.Restore(bytes.NewReader(b)) != nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic after restore: %v (restored limits %+v)", r, m.Limits())
		}
	}()
	if lerr := m.Limits().Validate(); lerr != nil {
		err = fmt.Errorf("restored limits that SetLimits refuses: %v", lerr)
	}
	for sid := uint64(0); sid < 5; sid++ {
		for _, ns := range []string{"n1", "n2"} {
			for id := uint64(1); id < 7; id++ {
				m.Apply(m.LastIndex()+1, Entry{Cmd: &Release{Session: sid, Namespace: ns, RequestID: id}})
				m.Apply(m.LastIndex()+1, Entry{Cmd: &Request{Session: sid, Namespace: ns, RequestID: id + 10, Names: []string{"a", "b", "c", "d"}, Steal: id%2 == 0}})
				m.Apply(m.LastIndex()+1, Entry{Cmd: &Abort{Session: sid, Namespace: ns, RequestID: id}})
				m.Apply(m.LastIndex()+1, Entry{Cmd: &Request{Session: sid, Namespace: ns, RequestID: id + 20, Names: []string{"s"}, Mode: Shared, MaxHolders: uint32(id % 3)}})
				for _, tok := range []uint64{m.LastIndex() - 1, id} {
					m.Apply(m.LastIndex()+1, Entry{Cmd: &SetRecord{Session: sid, Namespace: ns, RequestID: id + 10, Token: tok, Name: "a", Value: []byte("v"), Release: id%2 == 1}})
				}
			}
			m.Query(ns)
		}
		m.Apply(m.LastIndex()+1, Entry{Cmd: &ExpireSession{Session: sid}})
	}
	m.Snapshot()
	return err
}

// The fuzz corpus's entries of LevelRecords decode to what they are named
// for, and a MaxHolders flag must carry a value in [1, 2³²).
func TestRecordEntriesDecode(t *testing.T) {
	for file, want := range map[string]Command{
		"setrecord-release":  &SetRecord{Session: 1, Namespace: "n1", RequestID: 1, Token: 4, Name: "a", Value: []byte("v"), Release: true},
		"request-maxholders": &Request{Session: 1, Namespace: "n1", RequestID: 7, Names: []string{"s"}, Mode: Shared, MaxHolders: 3},
	} {
		b, err := os.ReadFile("testdata/fuzz/FuzzDecodeEntry/" + file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		raw, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatal(err)
		}
		e, err := DecodeEntry([]byte(raw))
		if err != nil || !reflect.DeepEqual(e.Cmd, want) {
			t.Errorf("%s: %+v, %v; want %+v", file, e.Cmd, err, want)
		}
	}
	for _, n := range []uint64{0, math.MaxUint32 + 1} {
		b := []byte{2, 4, 0, 0, 1, 1, 'n', 7, 0, 1, 1, 's', 1, reqMaxHolders}
		b = binary.AppendUvarint(b, n)
		if _, err := DecodeEntry(b); err == nil {
			t.Errorf("maxHolders %d decoded", n)
		}
	}
}

// TestEntryCodecRoundTrip: every command type survives EncodeEntry and
// DecodeEntry unchanged.
func TestEntryCodecRoundTrip(t *testing.T) {
	const max = math.MaxUint64
	l := DefaultLimits()
	l.maxFinished = 7
	for _, e := range []Entry{
		{Time: 1, Cmd: &OpenSession{Namespace: "n1", Label: "host:1", TTL: 10e9, ClientID: "c"}},
		{Time: -1, ignoreIfUnknown: true, Cmd: &OpenSession{Namespace: "n1", TTL: math.MinInt64}},
		{Time: math.MaxInt64, Cmd: &CloseSession{Session: max, Namespace: "ns"}},
		{Cmd: &ExpireSession{Session: 3}},
		{Cmd: &Request{Session: 1, Namespace: "n1", RequestID: max, Names: []string{"a", "", "\xff"}, Mode: Shared, AckBelow: 5}},
		{Cmd: &Request{Session: 1, Namespace: "n1", RequestID: 2, Names: []string{"b"}, IfAvailable: true, Steal: true, Signal: true}},
		{Cmd: &Request{Session: 1, Namespace: "n1", RequestID: 2, Mode: 9}},
		{Cmd: &Release{Session: 1, Namespace: "n1", RequestID: 2, Token: max, AckBelow: 1}},
		{Cmd: &Abort{Session: 1, Namespace: "n1", RequestID: 2, Reason: "because", AckBelow: max}},
		{Cmd: &SetLimits{Limits: l}},
		{Cmd: &SetLimits{Limits: Limits{MinTTL: -1, MaxTTL: math.MinInt64}}},
		{Cmd: &SetMember{Member: Member{ID: "n", RaftAddr: "r", GRPCAddr: "g", HTTPAddr: "h"}, Remove: true}},
		{Cmd: &Request{Session: 1, Namespace: "n1", RequestID: 3, Names: []string{"s"}, Mode: Shared, MaxHolders: math.MaxUint32}},
		{Time: 5, Cmd: &SetRecord{Session: 1, Namespace: "n1", RequestID: 2, Token: max, Name: "a", Value: []byte{0, 0xff}, Release: true, AckBelow: 2}},
		{Cmd: &SetRecord{Session: 1, Namespace: "n1", RequestID: 2, Token: 4, Name: "", Delete: true}},
		{Cmd: &SetLimits{Limits: func() Limits { l := DefaultLimits(); l.MaxNamespaceRecordBytes = 1; return l }()}},
	} {
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatalf("%s: %v", fmtCmd(e.Cmd), err)
		}
		if got, err := DecodeEntry(b); err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("round trip of %+v %s: got %+v %v (%v)", e, fmtCmd(e.Cmd), got, fmtCmd(got.Cmd), err)
		}
	}
}

// TestUnknownEntryIgnored: an entry of an unknown type flagged
// ignore-if-unknown applies as a no-op that only moves the last index.
func TestUnknownEntryIgnored(t *testing.T) {
	m, idx := richMachine(t, false)
	before, q := m.Digest(), m.Query("n1")
	ap, err := m.ApplyBytes(idx, []byte{envelopeVersion, 99, flagIgnore, 0x7e, 1, 2, 3})
	if err != nil || !reflect.DeepEqual(ap.Result, Result{Status: statusIgnored}) || len(ap.Events) != 0 {
		t.Fatalf("ApplyBytes = %+v, %v; want ignored", ap, err)
	}
	if m.LastIndex() != idx || !reflect.DeepEqual(m.Query("n1"), q) {
		t.Fatalf("last index %d, want %d; or the query changed", m.LastIndex(), idx)
	}
	m.st.lastIndex = idx - 1
	if m.Digest() != before {
		t.Fatal("the ignored entry changed the state")
	}
}

// TestDecodeEntryErrors: what cannot be decoded is an error that says why.
func TestDecodeEntryErrors(t *testing.T) {
	req := enc(t, &Request{Session: 1, Namespace: "n1", RequestID: 1, Names: []string{"a"}})
	badFlags := slices.Clone(req)
	badFlags[len(badFlags)-1] = 0x80
	member := enc(t, &SetMember{Member: Member{ID: "n"}})
	member[len(member)-1] = 2
	for _, c := range []struct {
		name string
		b    []byte
		want []string
	}{
		{"empty", nil, []string{"header", "truncated"}},
		{"unknown type", []byte{1, 99, 0, 0}, []string{"type 99", "unknown", "not flagged"}},
		{"invalid type", []byte{1, 0, 0, 0}, []string{"type 0", "unknown"}},
		{"unknown version", append([]byte{3}, req[1:]...), []string{"version 3"}},
		{"unknown flags", []byte{1, 4, 0x03, 0}, []string{"unknown flags 0x3"}},
		{"trailing bytes", append(slices.Clone(req), 0), []string{"Request", "1 trailing bytes"}},
		{"truncated", req[:len(req)-1], []string{"Request", "truncated"}},
		{"unknown request flags", badFlags, []string{"request flags 0x80"}},
		{"bad boolean", member, []string{"SetMember", "boolean"}},
		{"limits count", []byte{1, 7, 0, 0, 3, 2, 2, 2}, []string{"limits have 3 fields"}},
	} {
		_, err := DecodeEntry(c.b)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: DecodeEntry = %v, want an error saying %q", c.name, err, w)
			}
		}
	}
}

// SnapshotHeader reads the last index and the format without decoding.
func TestSnapshotHeader(t *testing.T) {
	m := New()
	if err := m.Apply(300, Entry{Cmd: &SetMember{Member: Member{ID: "x"}}}).Result.Err; err != nil {
		t.Fatal(err)
	}
	i, v, err := SnapshotHeader(m.Snapshot())
	if err != nil || i != 300 || v != 2 {
		t.Fatalf("index %d, format %d, %v: want 300, 2", i, v, err)
	}
	if _, _, err := SnapshotHeader([]byte("garbage")); err == nil {
		t.Fatal("garbage has an index")
	}
}
