package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The groups groundwork (DESIGN.md, "Groups groundwork") must leave a
// group-0 machine exactly as it was (groups.md I4): the same results,
// events, changes, entry bytes, reads, Digest and snapshot bytes. This
// test applies long seeded random histories and compares a hash chain of
// all of it, taken at checkpoints, with testdata/golden/history.txt,
// which was written by the code before that change (commit "fsm: pin a
// golden history"). Never regenerate the file to make a change pass:
// -update-golden is for a deliberate format change, reviewed as one.

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden/history.txt")

const goldenFile = "testdata/golden/history.txt"

// splitmix64: a generator whose sequence no Go release can change.
type goldenRand struct{ s uint64 }

func (r *goldenRand) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *goldenRand) n(k int) int { return int(r.next() % uint64(k)) }

// goldenHistory draws one command from what the history has seen: the
// sessions it opened, their namespaces, request ids and tokens.
type goldenHistory struct {
	r        goldenRand
	sessions []uint64
	nsOf     map[uint64]string
	nextReq  map[uint64]uint64
	tokens   map[reqKey]uint64
	held     []reqKey // granted and not known to be lost (may be stale)
}

// heldOne picks a request that was granted, with its namespace, or ok false.
func (h *goldenHistory) heldOne() (k reqKey, ns string, ok bool) {
	if len(h.held) == 0 || h.r.n(3) == 0 {
		return reqKey{}, "", false
	}
	i := len(h.held) - 1 - h.r.n(min(len(h.held), 20))
	k = h.held[i]
	return k, h.nsOf[k.session], true
}

var goldenNamespaces = []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
var goldenNames = []string{"a", "b", "c", "d", "e", "f", "g", "h", ""}

func (h *goldenHistory) session() (uint64, string) {
	if len(h.sessions) == 0 || h.r.n(40) == 0 {
		id := uint64(h.r.n(5000) + 1) // mostly unknown
		return id, goldenNamespaces[h.r.n(len(goldenNamespaces))]
	}
	// Recent sessions mostly: they are the live ones.
	k := len(h.sessions)
	i := k - 1 - h.r.n(min(k, 12))
	if h.r.n(10) == 0 {
		i = h.r.n(k)
	}
	id := h.sessions[i]
	ns := h.nsOf[id]
	if h.r.n(50) == 0 {
		ns = goldenNamespaces[h.r.n(len(goldenNamespaces))]
	}
	return id, ns
}

func (h *goldenHistory) names() []string {
	n := 1
	if h.r.n(5) == 0 {
		n = 2 + h.r.n(2)
	}
	out := make([]string, 0, n)
	for len(out) < n {
		x := goldenNames[h.r.n(len(goldenNames))]
		dup := false
		for _, y := range out {
			dup = dup || y == x
		}
		if !dup {
			out = append(out, x)
		}
	}
	return out
}

func (h *goldenHistory) reqID(s uint64) uint64 {
	if h.nextReq[s] == 0 {
		h.nextReq[s] = 1
	}
	if h.nextReq[s] > 1 && h.r.n(3) == 0 {
		return uint64(h.r.n(int(h.nextReq[s]-1))) + 1
	}
	id := h.nextReq[s]
	h.nextReq[s]++
	return id
}

func (h *goldenHistory) draw() Command {
	switch k := h.r.n(100); {
	case k < 12:
		c := &OpenSession{Namespace: goldenNamespaces[h.r.n(len(goldenNamespaces))], Label: "l" + itoa(uint64(h.r.n(3))), TTL: int64(h.r.n(3)+1) * 1e9}
		if h.r.n(2) == 0 {
			c.ClientID = "client-" + itoa(uint64(h.r.n(1000)))
		}
		if h.r.n(2) == 0 {
			c.SecretHash = HashSecret([]byte(itoa(uint64(h.r.n(100)))))
		}
		return c
	case k < 50:
		s, ns := h.session()
		c := &Request{Session: s, Namespace: ns, RequestID: h.reqID(s), Names: h.names(), Mode: Mode(h.r.n(2))}
		switch h.r.n(10) {
		case 0:
			c.IfAvailable = true
		case 1:
			c.Steal = true
		case 2, 3:
			c.Signal = true
		}
		if c.Mode == Shared && h.r.n(4) == 0 {
			c.MaxHolders = uint32(h.r.n(3) + 1)
		}
		if h.r.n(4) == 0 {
			c.AckBelow = uint64(h.r.n(int(h.nextReq[s]) + 1))
		}
		return c
	case k < 70:
		s, ns := h.session()
		id := h.reqID(s)
		if k, kns, ok := h.heldOne(); ok {
			s, ns, id = k.session, kns, k.id
		}
		c := &Release{Session: s, Namespace: ns, RequestID: id}
		if h.r.n(3) == 0 {
			c.Token = h.tokens[reqKey{s, id}]
			if h.r.n(4) == 0 {
				c.Token++
			}
		}
		return c
	case k < 78:
		s, ns := h.session()
		return &Abort{Session: s, Namespace: ns, RequestID: h.reqID(s), Reason: "r" + itoa(uint64(h.r.n(3)))}
	case k < 88:
		s, ns := h.session()
		id := h.reqID(s)
		if k, kns, ok := h.heldOne(); ok {
			s, ns, id = k.session, kns, k.id
		}
		c := &SetRecord{Session: s, Namespace: ns, RequestID: id, Token: h.tokens[reqKey{s, id}], Name: goldenNames[h.r.n(len(goldenNames))], Value: []byte("v" + itoa(uint64(h.r.n(100))))}
		switch h.r.n(6) {
		case 0:
			c.Delete = true
		case 1:
			c.Release = true
		case 2:
			c.Token = uint64(h.r.n(3000))
		}
		return c
	case k < 93:
		s, ns := h.session()
		return &CloseSession{Session: s, Namespace: ns}
	case k < 97:
		s, _ := h.session()
		return &ExpireSession{Session: s}
	case k < 98:
		return &SetMember{Member: Member{ID: "m" + itoa(uint64(h.r.n(3))), RaftAddr: "r", GRPCAddr: "g"}, Remove: h.r.n(3) == 0}
	case k < 99:
		lim := DefaultLimits()
		lim.MaxHeldPerSession = int64(h.r.n(16) + 4)
		lim.MaxPendingPerSession = int64(h.r.n(16) + 2)
		lim.maxFinished = int64(h.r.n(64) + 2)
		return &SetLimits{Limits: lim}
	default:
		return &SetClusterSecret{Secret: strings.Repeat("s", 32+h.r.n(3))}
	}
}

func (h *goldenHistory) note(cmd Command, ap Applied) {
	switch c := cmd.(type) {
	case *OpenSession:
		if ap.Result.Err == nil {
			h.sessions = append(h.sessions, ap.Result.Session)
			h.nsOf[ap.Result.Session] = c.Namespace
		}
	}
	for _, e := range ap.Events {
		if e.Kind == EventGranted {
			h.tokens[reqKey{e.Session, e.RequestID}] = e.Token
			h.held = append(h.held, reqKey{e.Session, e.RequestID})
			if len(h.held) > 200 {
				h.held = append(h.held[:0:0], h.held[100:]...)
			}
		}
	}
}

// goldenRun applies a seeded history of n entries and returns one line per
// checkpoint: the hash chain of everything seen so far, and the Digest.
func goldenRun(t *testing.T, seed uint64, n, every int) []string {
	m := New()
	m.KeepChanges(true)
	h := &goldenHistory{r: goldenRand{s: seed}, nsOf: map[uint64]string{}, nextReq: map[uint64]uint64{}, tokens: map[reqKey]uint64{}}
	chain := sha256.New()
	put := func(what string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		fmt.Fprintf(chain, "%s %d %s\n", what, len(b), b)
	}
	var out []string
	idx := uint64(0)
	for i := 1; i <= n; i++ {
		idx += uint64(1 + h.r.n(3)) // raft leaves gaps (its own entries)
		cmd := h.draw()
		e := Entry{Time: int64(idx) * 1e6, Cmd: cmd}
		b, err := EncodeEntry(e)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		chain.Write(b)
		ap, err := m.ApplyBytes(idx, b)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		h.note(cmd, ap)
		put("applied", ap)
		if i%50 == 0 {
			ns := goldenNamespaces[h.r.n(len(goldenNamespaces))]
			put("query", m.Query(ns))
			q, recs, at := m.QueryMatching(ns, func(n string) bool { return n != "b" })
			put("match", []any{q, recs, at})
			rec, at, ok := m.Record(ns, goldenNames[h.r.n(len(goldenNames))])
			put("record", []any{rec, at, ok})
			put("sessions", m.Sessions())
			put("stats", m.Stats())
			put("nsstats", m.NamespaceStats())
			if s, _ := h.session(); true {
				reqs, seq, ok := m.SessionRequests(s)
				put("sessreq", []any{reqs, seq, ok})
				info, ok := m.Session(s)
				put("session", []any{info, ok})
				put("check", m.CheckSession(s, h.nsOf[s], []byte(itoa(uint64(h.r.n(100))))))
				put("precheck", m.Precheck(h.draw()))
			}
			put("used", m.UsedLevel())
		}
		if i%every == 0 {
			snap := m.Snapshot()
			m2 := New()
			if err := m2.Restore(strings.NewReader(string(snap))); err != nil {
				t.Fatalf("entry %d: restore: %v", i, err)
			}
			if m2.Digest() != m.Digest() {
				t.Fatalf("entry %d: the restored state differs", i)
			}
			d := sha256.Sum256(snap)
			out = append(out, fmt.Sprintf("%d %d %d %s %s", seed, i, idx, hex.EncodeToString(chain.Sum(nil)), hex.EncodeToString(d[:])))
		}
	}
	return out
}

func goldenAll(t *testing.T) []string {
	var out []string
	for _, seed := range []uint64{1, 2, 3, 0xdecafbad} {
		out = append(out, goldenRun(t, seed, 6000, 1000)...)
	}
	return out
}

// TestGroupZeroIsByteIdentical is groups.md's test 17.2 for the fsm: a
// group-0 machine gives what the release before gave, byte for byte.
func TestGroupZeroIsByteIdentical(t *testing.T) {
	got := goldenAll(t)
	if *updateGolden {
		var b strings.Builder
		b.WriteString("# seed entries last-index chain(results,events,changes,entries,reads) sha256(snapshot)\n")
		for _, l := range got {
			b.WriteString(l + "\n")
		}
		if err := os.WriteFile(goldenFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d checkpoints, the golden file has %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("checkpoint %d differs from the release before:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
