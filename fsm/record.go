package fsm

// Records (SPEC §12), semaphores (§14) and the changes a watch streams
// (§13): the types other packages build on. The apply rules are in
// apply_record.go, the changes in change.go.

// Record is the data a name carries: written under an exclusive grant, it
// outlives the grant, the session and the queue until a holder deletes it.
type Record struct {
	Name  string
	Value []byte // read only: shared with the state
	Token uint64 // the token of the grant that wrote it
	Time  int64  // the leader's time in the writing entry, Unix nanoseconds
	Index uint64 // the log index of the writing entry
}

// SetRecord writes (or, with Delete, deletes) the record of Name, which
// the session holds exclusively by its request RequestID, whose grant's
// token is Token: checked at apply, so a holder that lost its lock is
// refused (CodeNotHolder, naming the name's current token) and nothing
// changes. With Release, the lock is released in the same entry, as
// Release would: both happen or neither; a retried release with record
// that was already applied is a duplicate and changes nothing.
type SetRecord struct {
	Session   uint64
	Namespace string
	RequestID uint64
	Token     uint64
	Name      string
	Value     []byte
	Delete    bool
	Release   bool
	AckBelow  uint64
}

func (SetRecord) Type() EntryType { return typeSetRecord }

// ChangeKind is the kind of a Change.
type ChangeKind uint8

const (
	ChangeGranted ChangeKind = iota + 1
	ChangeQueued
	// ChangeReleased: a held lock was released, by its holder or because
	// its session ended (Cause).
	ChangeReleased
	// ChangeAborted: a pending request ended without a lock (Cause,
	// Reason), or its abort raced its grant and the lock was released at
	// once (Token set).
	ChangeAborted
	ChangeStolen
	ChangeSessionEnded
	ChangeRecordSet
	ChangeRecordDeleted
)

var changeNames = [...]string{"", "granted", "queued", "released", "aborted", "stolen", "session-ended", "record-set", "record-deleted"}

func (k ChangeKind) String() string {
	if int(k) < len(changeNames) && k != 0 {
		return changeNames[k]
	}
	return "change(" + itoa(uint64(k)) + ")"
}

// Change is one change an entry made to a namespace, for watches: in the
// order the entry made them, the same on every replica. Names is the
// request's whole scope (read only); a ChangeSessionEnded has none.
type Change struct {
	Kind       ChangeKind
	Namespace  string
	Names      []string
	Mode       Mode
	MaxHolders uint32
	Session    uint64
	RequestID  uint64
	ClientID   string
	Label      string
	Token      uint64
	Cause      Cause
	Reason     string
	// ChangeRecordSet: the record written. ChangeRecordDeleted: its Name
	// and the deleting grant's Token.
	Record *Record
}

// KeepChanges turns the collection of Applied.Changes on or off (off by
// default: nothing is spent on changes nobody streams). A node that
// serves watches keeps them from its start, so that its history covers
// every entry it applies.
func (m *Machine) KeepChanges(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keepChanges = on
}
