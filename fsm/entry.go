package fsm

// EntryType numbers the log entry types. Numbers are explicit and never
// reused: a retired type keeps its number, and a new type takes a new one.
type EntryType uint8

const (
	typeInvalid       EntryType = 0 // never written
	typeOpenSession   EntryType = 1
	typeCloseSession  EntryType = 2
	typeExpireSession EntryType = 3
	typeRequest       EntryType = 4
	typeRelease       EntryType = 5
	typeAbort         EntryType = 6
	typeSetLimits     EntryType = 7
	typeSetMember     EntryType = 8
	typeClusterSecret EntryType = 9
	typeSetRecord     EntryType = 10 // record.go

	// The groups' entries (issue 27, groups.md §6.2, where they are
	// numbered 9 to 15: 9 and 10 were taken since; move_cmd.go, DESIGN.md
	// "Moves (phase 2)"). None of them is ever ignore-if-unknown: an old
	// node that skipped a Freeze would go on serving a frozen slot. Their
	// protocol level is LevelGroups, above this build's ProtocolLevel: the
	// server does not propose them until phase 3/4 raises it.
	typeSetGroup    EntryType = 11 // SetGroup{g}: records the group's id
	typeFreeze      EntryType = 12 // Freeze{slots, epoch, to}: owned → frozen (source)
	typeImportChunk EntryType = 13 // ImportChunk{slots, epoch, seq, bytes}: staged (target)
	typeImport      EntryType = 14 // Import{slots, epoch, n, floorL, sha256}: offset raised, owned (target)
	typeReject      EntryType = 15 // Reject{slots, epoch}: the staged chunks dropped (target, abort)
	typeUnfreeze    EntryType = 16 // Unfreeze{slots, epoch}: frozen → owned (source, abort, after Reject)
	typeDrop        EntryType = 17 // Drop{slots, epoch}: frozen → gone, objects removed (source)

	typeStartChanges EntryType = 18 // startchanges.go
)

var typeNames = map[EntryType]string{
	typeOpenSession: "OpenSession", typeCloseSession: "CloseSession",
	typeExpireSession: "ExpireSession", typeRequest: "Request", typeRelease: "Release",
	typeAbort: "Abort", typeSetLimits: "SetLimits", typeSetMember: "SetMember",
	typeClusterSecret: "SetClusterSecret", typeSetRecord: "SetRecord",
	typeSetGroup: "SetGroup", typeFreeze: "Freeze", typeImportChunk: "ImportChunk",
	typeImport: "Import", typeReject: "Reject", typeUnfreeze: "Unfreeze", typeDrop: "Drop",
	typeStartChanges: "StartChanges",
}

func (t EntryType) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return "EntryType(" + itoa(uint64(t)) + ")"
}

// Entry is one log entry: a command, the leader's clock when it proposed it,
// and envelope flags.
type Entry struct {
	// Time is the proposing leader's clock, Unix nanoseconds. It becomes the
	// acquired-at time of every lock the entry grants and the open time of a
	// session it opens. Apply never reads a clock of its own.
	Time int64
	// ignoreIfUnknown lets a node that does not know the entry's type skip
	// it instead of stopping. Set it only on entries whose effect a replica
	// may safely miss.
	ignoreIfUnknown bool
	Cmd             Command
}

// Command is the payload of an Entry: one of the types below.
type Command interface{ Type() EntryType }

// OpenSession opens a session (the spec's agent). Its id is the Raft index
// of this entry, with the group's id in its top 16 bits (0 for group 0:
// the Raft index; groups.go).
type OpenSession struct {
	Namespace string
	Label     string // shown by query; the client's host name and pid by default
	TTL       int64  // nanoseconds
	// ClientID is the spec's clientId, stamped by the leader (random); when
	// empty the session's id, in decimal, is used.
	ClientID string
	// SecretHash is the SHA-256 of the session's secret, which only the
	// opening client learns (the secret itself never enters the log). Empty
	// for sessions opened before secrets existed (entry envelope version 1):
	// those accept any secret.
	SecretHash string
}

// CloseSession ends a session at its client's request (spec §2.6).
type CloseSession struct {
	Session   uint64
	Namespace string
}

// ExpireSession ends a session whose heartbeat deadline passed on the
// leader (spec §2.6).
type ExpireSession struct {
	Session uint64
}

// Request is a lock request (spec §4.1) for one or more names (a scope).
type Request struct {
	Session   uint64
	Namespace string
	// RequestID is chosen by the client, unique within the session, not 0.
	RequestID uint64
	Names     []string
	Mode      Mode
	// IfAvailable grants at once or not at all (spec §3.2.1 ifAvailable).
	IfAvailable bool
	// Steal releases every held lock on the names and grants at once.
	Steal bool
	// Signal says the request can be aborted (the spec's AbortSignal is
	// present); it is incompatible with IfAvailable and Steal.
	Signal bool
	// AckBelow tells that the client has every outcome of its request ids
	// below it: their outcomes may be forgotten (Raft dissertation §6.3).
	AckBelow uint64
	// MaxHolders, on a shared request, makes the name a semaphore of that
	// many holders (SPEC §14); 0 is unlimited. Every held or queued
	// shared request of a name must agree on it.
	MaxHolders uint32
}

// Release releases the lock granted to a request (spec §4.2).
type Release struct {
	Session   uint64
	Namespace string
	RequestID uint64
	// Token, when not 0, must be the lock's token: a guard against
	// releasing something else than the caller believes it holds.
	Token    uint64
	AckBelow uint64
}

// Abort aborts a pending request (spec §4.3). When the grant won the race,
// the lock is released at once and the abort still reported (SPEC §6).
type Abort struct {
	Session   uint64
	Namespace string
	RequestID uint64
	Reason    string
	AckBelow  uint64
}

// SetLimits replaces the replicated limits (SPEC §10). Limits live in the
// state, not in each node's configuration, so every replica validates alike.
type SetLimits struct {
	Limits Limits
}

func (OpenSession) Type() EntryType   { return typeOpenSession }
func (CloseSession) Type() EntryType  { return typeCloseSession }
func (ExpireSession) Type() EntryType { return typeExpireSession }
func (Request) Type() EntryType       { return typeRequest }
func (Release) Type() EntryType       { return typeRelease }
func (Abort) Type() EntryType         { return typeAbort }
func (SetLimits) Type() EntryType     { return typeSetLimits }
func (SetMember) Type() EntryType     { return typeSetMember }

// SetMember records where a cluster member serves clients, so that every
// node can forward writes to the leader's API; Remove deletes the record.
// The member directory is replicated beside the locks but never touches them.
type SetMember struct {
	Member Member
	Remove bool
}

// Member is one record of the member directory.
type Member struct {
	ID       string // the Raft server id
	RaftAddr string
	GRPCAddr string
	HTTPAddr string
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
