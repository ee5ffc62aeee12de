package fsm

import "fmt"

// Mode is a lock mode (spec §2.3). The zero value is Exclusive, the spec's
// default.
type Mode uint8

const (
	Exclusive Mode = 0
	Shared    Mode = 1
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// parseMode parses "exclusive" or "shared"; the empty string is Exclusive.
func parseMode(s string) (Mode, error) {
	switch s {
	case "", "exclusive":
		return Exclusive, nil
	case "shared":
		return Shared, nil
	}
	return 0, errorf(CodeInvalid, "mode %q is not \"exclusive\" or \"shared\"", s)
}

// Status is where a request stands, as told to its session.
type Status uint8

const (
	statusNone Status = iota
	// StatusGranted: the request holds its lock.
	StatusGranted
	// StatusQueued: the request waits in the queue of every name it names.
	StatusQueued
	// StatusNotAvailable: an ifAvailable request that could not be granted
	// at once; it was never queued.
	StatusNotAvailable
	// StatusReleased: the lock was held and has been released.
	StatusReleased
	// StatusAborted: the request was aborted before it was granted, or its
	// abort raced its grant and the lock was released at once.
	StatusAborted
	// StatusStolen: the lock was taken by a request with steal.
	StatusStolen
	// StatusOpened: a session was opened.
	StatusOpened
	// StatusClosed: a session was closed or expired (or was already gone).
	StatusClosed
	// statusIgnored: an entry of an unknown type flagged ignore-if-unknown.
	statusIgnored
	// statusOK: an entry that has no more specific status (SetLimits).
	statusOK
)

var statusNames = [...]string{"none", "granted", "queued", "not-available", "released", "aborted", "stolen", "opened", "closed", "ignored", "ok"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Cause says why a lock was lost or a request ended without the holder
// asking for it.
type Cause uint8

const (
	causeNone Cause = iota
	// CauseAborted: the session aborted the request (the Go client's ctx).
	CauseAborted
	// CauseStolen: another request took the lock with steal.
	CauseStolen
	// CauseSessionClosed: the session's client closed it.
	CauseSessionClosed
	// CauseSessionExpired: the leader expired the session (missed heartbeats).
	CauseSessionExpired
)

var causeNames = [...]string{"none", "aborted", "stolen", "session-closed", "session-expired"}

func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// EventKind is the kind of an Event.
type EventKind uint8

const (
	// EventGranted: a request of the session was granted its lock.
	EventGranted EventKind = iota + 1
	// EventNotAvailable: an ifAvailable request found its lock taken.
	EventNotAvailable
	// EventAborted: a request of the session ended without a lock, or with
	// one released at once because its abort raced the grant.
	EventAborted
	// EventLockLost: a lock the session held was stolen or its session ended.
	EventLockLost
	// EventSessionEnded: the session was closed or expired.
	EventSessionEnded
)

var eventNames = [...]string{"", "granted", "not-available", "aborted", "lock-lost", "session-ended"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is something an entry did to a session, in log order. Seq numbers the
// session's events from 1 without gaps, so a stream consumer can resume after
// the last Seq it delivered.
type Event struct {
	Session    uint64
	Seq        uint64
	Kind       EventKind
	RequestID  uint64
	Names      []string // shared with the state: read only
	Mode       Mode
	Token      uint64
	AcquiredAt int64 // leader time, Unix nanoseconds
	Cause      Cause
	Reason     string // the abort's reason, as the client gave it
	// Records: on EventGranted, the records of the request's names as they
	// stood at the grant, by name (names without one left out).
	Records []Record
	// Reply marks the entry's own outcome: the grant or not-available of
	// the request the entry carries, decided at once. The entry's Result
	// says the same to whoever proposed it, so a stream whose client reads
	// that reply may leave the event out (its Seq is still used).
	Reply bool
}

// Result is an entry's answer to whoever proposed it. Err is nil or an
// *Error; a rejected entry changed nothing.
type Result struct {
	Err        error
	Status     Status
	Session    uint64 // the session opened (OpenSession)
	ClientID   string // its client id (OpenSession)
	Token      uint64 // the lock's fencing token (granted or finished after a grant)
	AcquiredAt int64
	Cause      Cause  // why the request ended, when it has
	Reason     string // the abort's reason, when it has one
	// Record is the record a SetRecord wrote (nil after a delete). Records
	// are the records a grant carries (as Event.Records).
	Record  *Record
	Records []Record
	// Duplicate is true when the entry repeated a (session, request id) or a
	// release already applied: it changed nothing and Status tells where the
	// original request stands now.
	Duplicate bool
}

// Applied is what Apply returns: the entry's Result and the Events it caused.
type Applied struct {
	Result Result
	Events []Event
	// Changes are what the entry changed, for watches (record.go); only
	// collected when the machine keeps them (Machine.KeepChanges).
	Changes []Change
	// Kept: the machine collected this entry's changes (Changes holds all
	// of them); false when it builds none (KeepChanges, startchanges.go).
	Kept bool `json:"-"`
	// Move says what a move entry did to the group's slots (Freeze,
	// Import, Unfreeze, Drop), for the server's liveness and streams
	// (groups.md §8.2); nil for every other entry, and for a move entry
	// that was refused or repeated (it changed nothing). Never set in
	// group 0 of a cluster of one group, which sees no move entry
	// (groups.md I4; omitted from JSON when nil, so that the applied
	// history such a group prints is byte-identical).
	Move *MoveApplied `json:",omitempty"`
}

// MoveKind is which move entry an applied MoveApplied reports.
type MoveKind uint8

const (
	// MoveFreeze: the slots went from owned to frozen (source): this group
	// no longer serves their sessions.
	MoveFreeze MoveKind = iota + 1
	// MoveImport: the slots became owned, with their objects (target):
	// this group serves the imported sessions from this entry on.
	MoveImport
	// MoveUnfreeze: an aborted move's slots are owned again (source).
	MoveUnfreeze
	// MoveDrop: the frozen slots' objects are gone (source, the move
	// finished forward).
	MoveDrop
)

var moveKindNames = [...]string{"", "freeze", "import", "unfreeze", "drop"}

func (k MoveKind) String() string {
	if int(k) < len(moveKindNames) && k != 0 {
		return moveKindNames[k]
	}
	return fmt.Sprintf("move(%d)", uint8(k))
}

// MoveApplied is what a move entry changed (Applied.Move): its kind, its
// slots (ascending) and its epoch; To is the target group of a Freeze.
type MoveApplied struct {
	Kind  MoveKind
	Slots []uint16
	Epoch uint32
	To    uint16
}

// LockInfo is one line of a Query: the spec's LockInfo (name, mode,
// clientId) and the extras of SPEC §8.
type LockInfo struct {
	Name        string
	Mode        Mode
	ClientID    string
	Label       string
	Session     uint64
	RequestID   uint64
	Token       uint64 // held locks only
	AcquiredAt  int64  // held locks only
	RequestedAt int64  // leader time of the request entry
	MaxHolders  uint32 // a shared request's semaphore size (0: unlimited)
}

// QueryResult is the spec's LockManagerSnapshot for one namespace.
type QueryResult struct {
	Held    []LockInfo
	Pending []LockInfo
	// Records of the names above, by name.
	Records []Record
}

// SessionInfo describes one live session.
type SessionInfo struct {
	ID        uint64
	Namespace string
	ClientID  string
	Label     string
	TTL       int64 // nanoseconds
	openedAt  int64
	eventSeq  uint64 // Seq of the last event addressed to the session
	held      int
	pending   int
}

// RequestState is where one request of a session stands: what a reconnecting
// client needs to resynchronise.
type RequestState struct {
	RequestID  uint64
	Names      []string
	Mode       Mode
	Status     Status
	Token      uint64
	AcquiredAt int64
	Cause      Cause
	Reason     string
}
