package fsm

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
)

// Sessions are capabilities (SPEC §10): only the client that opened a
// session knows its secret, and every write and event stream of the session
// must present it. The log and the snapshots keep only its SHA-256. The
// check is the API's, before anything is proposed (CheckSession); secrets
// never change, so a node's applied state answers it for good.

// HashSecret is what the log keeps of a session secret.
func HashSecret(secret []byte) string {
	h := sha256.Sum256(secret)
	return string(h[:])
}

// maxTombstones is how many ended sessions keep their secret hash, so that
// their client learns the session ended (InvalidStateError) rather than
// that its secret is wrong. About 60 bytes each.
const maxTombstones = 65536

type tombstone struct {
	id     uint64
	ns     string
	secret string
}

// tombstones is a FIFO of the sessions that ended last, in the order they
// ended (deterministic: the log's order).
type tombstones struct {
	order []tombstone // oldest first, from head
	head  int
	byID  map[uint64]int // position in order
}

func (t *tombstones) add(ts tombstone) {
	if ts.secret == "" {
		return // a session from before secrets: nothing to check
	}
	if t.byID == nil {
		t.byID = make(map[uint64]int)
	}
	if len(t.order) < maxTombstones {
		t.byID[ts.id] = len(t.order)
		t.order = append(t.order, ts)
		return
	}
	delete(t.byID, t.order[t.head].id)
	t.order[t.head] = ts
	t.byID[ts.id] = t.head
	t.head = (t.head + 1) % maxTombstones
}

func (t *tombstones) get(id uint64) (tombstone, bool) {
	i, ok := t.byID[id]
	if !ok {
		return tombstone{}, false
	}
	return t.order[i], true
}

// each calls f on every tombstone, oldest first.
func (t *tombstones) each(f func(tombstone)) {
	for i := range t.order {
		f(t.order[(t.head+i)%len(t.order)])
	}
}

// secretRefused is the message of every refused session secret: the same
// whether the session exists, ended, lives in another namespace or never
// existed, so a refusal tells nothing but "no".
const secretRefused = "the session secret was refused (wrong or missing secret, or no such session in this namespace)"

// CheckSession decides, from the applied state, whether a caller presenting
// secret may act for session id in namespace ns:
//   - nil: the session is open there and the secret is its own (a session
//     from before secrets accepts any);
//   - CodeSessionClosed: the session ended, and the secret is its own;
//   - CodeMoving or CodeMoved: this group does not serve ns (groups.go),
//     whatever the session and the secret;
//   - CodePermission (secretRefused): anything else, including a session
//     this node has not heard of — the caller must make sure the state is
//     new enough for that to be final (a read barrier on the leader).
//
// The comparison takes the same time whether or not the session exists.
func (m *Machine) CheckSession(id uint64, ns string, secret []byte) *Error {
	given := sha256.Sum256(secret)
	m.mu.RLock()
	if err := m.st.owns(ns); err != nil { // first: "moving", never "closed" (groups.go)
		m.mu.RUnlock()
		return err
	}
	s := m.st.sessions[id]
	var want string
	var open, ended bool
	switch {
	case s != nil && s.ns.name == ns:
		want, open = s.secret, true
	default:
		if t, ok := m.st.closed.get(id); ok && t.ns == ns {
			want, ended = t.secret, true
		}
	}
	m.mu.RUnlock()
	if open && want == "" {
		return nil // opened before secrets existed
	}
	var wantHash [32]byte
	copy(wantHash[:], want)
	match := subtle.ConstantTimeCompare(given[:], wantHash[:]) == 1 && (open || ended)
	switch {
	case match && open:
		return nil
	case match && ended:
		return errorf(CodeSessionClosed, "session %d is not open in namespace %s (closed, expired or never opened)", id, quote(ns))
	}
	return errorf(CodePermission, "%s", secretRefused)
}

// SessionKnown reports whether this node's applied state has session id
// open or recently ended: if not, a refusal must wait until the state is
// known to be new enough.
func (m *Machine) SessionKnown(id uint64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if _, ok := m.st.sessions[id]; ok {
		return true
	}
	_, ok := m.st.closed.get(id)
	return ok
}

// SessionsIn is the number of open sessions of namespace ns.
func (m *Machine) SessionsIn(ns string) int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if n := m.st.namespaces[ns]; n != nil && m.st.owns(ns) == nil {
		return n.sessions
	}
	return 0
}

// Precheck returns the refusals of cmd that the applied state makes
// certain, with the message Apply would give, so that the API answers them
// without a log entry: a new session over the namespace's session limit
// (the API also counts the opens it has in flight), a request of a session
// over its held limit, or that would queue over its pending limit, and a
// release of a request id that the session has no record of. That last
// one is certain only once the state holds every entry the caller may have
// seen (the request may be one the leader applied and this node has not
// yet): the API confirms it after a read barrier. nil means: let Apply
// decide (it checks again: entries between now and then may change the
// answer).
func (m *Machine) Precheck(cmd Command) *Error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if _, ns, ok := namespaceOf(cmd); ok {
		if err := m.st.owns(ns); err != nil { // first, as in Apply (groups.go)
			return err
		}
	}
	lim := &m.st.limits
	switch c := cmd.(type) {
	case *OpenSession:
		if ns := m.st.namespaces[c.Namespace]; ns != nil && lim.MaxSessionsPerNamespace > 0 && ns.sessions >= lim.MaxSessionsPerNamespace {
			return errorf(CodeLimit, "namespace %s has %d sessions, the limit", quote(c.Namespace), ns.sessions)
		}
	case *Request:
		s := m.st.sessions[c.Session]
		if s == nil || s.ns.name != c.Namespace {
			return nil
		}
		if _, live := m.st.requests[reqKey{s.id, c.RequestID}]; live {
			return nil // a retry: Apply answers it as a duplicate
		}
		if _, done := s.find(c.RequestID); done {
			return nil
		}
		if s.nHeld+s.nPending >= lim.MaxHeldPerSession {
			return errorf(CodeLimit, "session %d holds %d locks and waits for %d: the limit on held locks is %d", s.id, s.nHeld, s.nPending, lim.MaxHeldPerSession)
		}
		a := applier{st: m.st, ns: s.ns}
		if !c.Steal && !c.IfAvailable && s.nPending >= lim.MaxPendingPerSession && !a.grantableNew(c.Names, c.Mode, c.MaxHolders) {
			return errorf(CodeLimit, "session %d has %d pending requests: the limit is %d", s.id, s.nPending, lim.MaxPendingPerSession)
		}
	case *Release:
		// In Apply's order (release): a live request, a remembered
		// outcome and an id below the floor are Apply's to answer;
		// anything else is refused.
		s := m.st.sessions[c.Session]
		if s == nil || s.ns.name != c.Namespace {
			return nil
		}
		if _, live := m.st.requests[reqKey{s.id, c.RequestID}]; live {
			return nil
		}
		if _, done := s.find(c.RequestID); done {
			return nil
		}
		if c.RequestID != 0 && c.RequestID < s.floor {
			return nil
		}
		return noLock(s.id, c.RequestID)
	case *SetRecord:
		// Release's checks, for a record write: what the state makes
		// certain. A live request's mode and names never change, nor a
		// held one's token, and a finished request never holds again;
		// an id the session has no record of is, as for Release, certain
		// only once the caller confirmed it after a read barrier.
		s := m.st.sessions[c.Session]
		if s == nil || s.ns.name != c.Namespace {
			return nil
		}
		a := applier{st: m.st, ns: s.ns}
		if r := m.st.requests[reqKey{s.id, c.RequestID}]; r != nil {
			if r.mode != Exclusive || !slices.Contains(r.names, c.Name) || (r.held && r.token != c.Token) {
				return a.notHolder(c)
			}
			return nil
		}
		if o, done := s.find(c.RequestID); done && c.Release && o.status == StatusReleased && o.token == c.Token {
			return nil // a retry: Apply answers it as a duplicate
		}
		return a.notHolder(c)
	}
	return nil
}

// noLock refuses a release of a request id that its session has no record
// of (never made, or not applied here yet): Precheck and Apply give the
// same.
func noLock(session, id uint64) *Error {
	return errorf(CodeInvalid, "session %d has no lock for request %d", session, id)
}

// Outcome returns what Apply would answer a retry of request id of session
// (a duplicate), if the applied state knows the request: the API answers a
// retry from it without a log entry.
func (m *Machine) Outcome(session uint64, ns string, id uint64) (Result, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.st.sessions[session]
	if s == nil || s.ns.name != ns || m.st.owns(ns) != nil { // Apply refuses it
		return Result{}, false
	}
	a := applier{st: m.st, ns: s.ns}
	return a.duplicate(s, id)
}
