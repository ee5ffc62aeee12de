package fsm

import (
	"fmt"
	"maps"
	"reflect"
)

// Admission: what a caller must show before the API proposes a command for
// it (SPEC §10: a session is a capability). The class is decided by the
// command's type, in the one table below, beside the commands; the API's
// gate (internal/server/admit.go) reads nothing else. A command type the
// table lacks is refused there with an internal error, never admitted: a
// new command cannot skip the secret check by being forgotten, and
// TestEveryCommandIsClassified, which type-checks this package's source
// for every type that implements Command, fails until it is classified.

// AdmissionClass is what the gate asks of the caller of a command.
type AdmissionClass uint8

const (
	// unclassified is the zero class: the gate refuses the command.
	unclassified AdmissionClass = iota
	// SessionSecret: the command acts for one session (Admission.Session
	// names it), and the caller must present that session's secret; with
	// Admission.AdminMay, a caller that holds an admin credential may act
	// without it (and is audited).
	SessionSecret
	// Exempt: a client may propose the command without a session secret;
	// Admission.Reason says why. The gate's other checks (limits, certain
	// refusals, rates) still apply.
	Exempt
	// NodeOnly: a node proposes the command itself, for its own duties,
	// without the gate; it is never proposed for a client, and the gate
	// refuses it. Admission.Reason says who proposes it and what guards
	// that.
	NodeOnly
)

var admissionClassNames = [...]string{"unclassified", "SessionSecret", "Exempt", "NodeOnly"}

func (c AdmissionClass) String() string {
	if int(c) < len(admissionClassNames) {
		return admissionClassNames[c]
	}
	return fmt.Sprintf("AdmissionClass(%d)", uint8(c))
}

// Admission is the admission of one command type.
type Admission struct {
	Class AdmissionClass
	// AdminMay: an admin may act for the session without its secret
	// (SessionSecret only).
	AdminMay bool
	// Reason says why an Exempt or NodeOnly command needs no secret.
	Reason string
	// session returns the session a SessionSecret command acts for.
	session func(Command) (id uint64, ns string, ok bool)
}

// Session returns the session cmd acts for and its namespace; ok is false
// unless a is SessionSecret and cmd is a command of a's type.
func (a Admission) Session(cmd Command) (id uint64, ns string, ok bool) {
	if a.Class != SessionSecret || a.session == nil {
		return 0, "", false
	}
	return a.session(cmd)
}

// admissions is the table, keyed by the command's dynamic type: a pointer,
// as the API builds commands and as EncodeEntry encodes them.
var admissions = map[reflect.Type]Admission{
	cmdType[OpenSession](): {Class: Exempt,
		Reason: "creates the session: there is no secret yet (the node draws it for this entry, and the log keeps only its hash)"},
	cmdType[CloseSession](): actsFor(true, func(c *CloseSession) (uint64, string) { return c.Session, c.Namespace }),
	cmdType[ExpireSession](): {Class: NodeOnly,
		Reason: "proposed by the leader's session liveness when a session's heartbeat deadline passes, by no RPC"},
	cmdType[Request](): actsFor(false, func(c *Request) (uint64, string) { return c.Session, c.Namespace }),
	cmdType[Release](): actsFor(true, func(c *Release) (uint64, string) { return c.Session, c.Namespace }),
	cmdType[Abort]():   actsFor(true, func(c *Abort) (uint64, string) { return c.Session, c.Namespace }),
	// A record write acts for the session that holds the name, like a
	// release (it may carry one).
	cmdType[SetRecord](): actsFor(true, func(c *SetRecord) (uint64, string) { return c.Session, c.Namespace }),
	cmdType[SetLimits](): {Class: NodeOnly,
		Reason: "proposed by a new leader from its own configuration, by no RPC"},
	cmdType[SetMember](): {Class: NodeOnly,
		Reason: "the member directory: proposed by the leader for itself and by the Cluster service's Join and Leave, which need an admin credential when auth is on"},
	cmdType[SetClusterSecret](): {Class: NodeOnly,
		Reason: "the cluster secret: proposed by a leader whose state has none (or for a member that lacks it), by no RPC; it is never a client's to set"},
	cmdType[StartChanges](): {Class: NodeOnly,
		Reason: "proposed by a node asked for a watch (or its status page's live feed) while the cluster builds no changes; starting them is the only effect, once (startchanges.go)"},
	// The move entries (move_cmd.go) are proposed by the mover and a new
	// group's first leader, never by a client.
	cmdType[SetGroup](): {Class: NodeOnly,
		Reason: "a new group's first leader records its id, by no RPC"},
	cmdType[Freeze]():      {Class: NodeOnly, Reason: moveReason},
	cmdType[ImportChunk](): {Class: NodeOnly, Reason: moveReason},
	cmdType[Import]():      {Class: NodeOnly, Reason: moveReason},
	cmdType[Reject]():      {Class: NodeOnly, Reason: moveReason},
	cmdType[Unfreeze]():    {Class: NodeOnly, Reason: moveReason},
	cmdType[Drop]():        {Class: NodeOnly, Reason: moveReason},
	cmdType[unknownEntry](): {Class: NodeOnly,
		Reason: "made only by decoding an ignorable entry of a type this node does not know; never proposed (EncodeEntry cannot encode it)"},
}

const moveReason = "a slot move's step, proposed by the mover on group 0's leader (groups.md §12), by no client RPC"

func cmdType[T any]() reflect.Type { return reflect.TypeFor[*T]() }

// actsFor is the admission of a command that acts for the session of
// (id, ns) that of returns.
func actsFor[T any, P interface {
	*T
	Command
}](adminMay bool, of func(P) (uint64, string)) Admission {
	return Admission{Class: SessionSecret, AdminMay: adminMay, session: func(cmd Command) (uint64, string, bool) {
		c, ok := cmd.(P)
		if !ok || c == nil {
			return 0, "", false
		}
		id, ns := of(c)
		return id, ns, true
	}}
}

// AdmissionOf returns the admission of cmd's type. A type the table lacks
// (a command value rather than a pointer, or no command) is an error: the
// gate must refuse it.
func AdmissionOf(cmd Command) (Admission, error) {
	a, ok := admissions[reflect.TypeOf(cmd)]
	if !ok {
		return Admission{}, fmt.Errorf("internal error: command type %T has no admission class (fsm/admission.go): refused", cmd)
	}
	return a, nil
}

// Admissions returns a copy of the table, for tests that walk every
// command type.
func Admissions() map[reflect.Type]Admission {
	return maps.Clone(admissions)
}
