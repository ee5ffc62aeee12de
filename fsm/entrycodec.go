package fsm

import (
	"errors"
	"fmt"
	"math"
)

// The entry envelope, version 2 (version 1 is still decoded):
//
//	byte    envelope version (2; 1 has no OpenSession secret hash)
//	byte    entry type (EntryType)
//	byte    flags: bit 0 ignore-if-unknown; other bits must be 0
//	varint  leader time, Unix nanoseconds
//	...     the command's fields, in the order of encodeCmd
//
// An entry must be consumed exactly: trailing bytes are an error. A new
// field means a new envelope version, decoded into the same types here, so
// the core only ever sees one shape.

const (
	envelopeVersion    = 2
	minEnvelopeVersion = 1
	flagIgnore         = 1 << 0
)

// unknownEntry is an entry of a type this version does not know, flagged
// ignore-if-unknown: it is applied as a no-op.
type unknownEntry struct{ entryType EntryType }

func (u unknownEntry) Type() EntryType { return u.entryType }

// EncodeEntry returns the bytes of e. It fails only on a command type it
// does not know.
func EncodeEntry(e Entry) ([]byte, error) {
	return appendEntry(nil, e)
}

// appendEntry appends the encoding of e to b.
func appendEntry(b []byte, e Entry) ([]byte, error) {
	if e.Cmd == nil {
		return nil, errors.New("fsm: entry has no command")
	}
	en := encoder{b: b}
	var flags byte
	if ignorable(e.Cmd) || e.ignoreIfUnknown { // clustersecret.go, startchanges.go
		flags |= flagIgnore
	}
	en.byte1(envelopeVersion)
	en.byte1(byte(e.Cmd.Type()))
	en.byte1(flags)
	en.varint(e.Time)
	if err := encodeCmd(&en, e.Cmd); err != nil {
		return nil, err
	}
	return en.b, nil
}

// ignorable reports whether entries of cmd's type are always flagged
// ignore-if-unknown: those a node of an earlier build may skip
// (clustersecret.go, startchanges.go).
func ignorable(cmd Command) bool {
	switch cmd.(type) {
	case *SetClusterSecret, *StartChanges:
		return true
	}
	return false
}

// DecodeEntry decodes an entry. Its error names what is wrong; a replica
// that cannot decode a committed entry must stop.
func DecodeEntry(b []byte) (Entry, error) {
	d := decoder{b: b}
	v := d.byte1()
	t := EntryType(d.byte1())
	flags := d.byte1()
	e := Entry{Time: d.varint(), ignoreIfUnknown: flags&flagIgnore != 0}
	if d.err != nil {
		return Entry{}, fmt.Errorf("fsm: cannot decode entry header (%d bytes): %w", len(b), d.err)
	}
	if v < minEnvelopeVersion || v > envelopeVersion {
		return Entry{}, fmt.Errorf("fsm: entry envelope version %d is not supported (this node knows versions %d to %d): upgrade this node", v, minEnvelopeVersion, envelopeVersion)
	}
	d.version = v
	if flags&^flagIgnore != 0 {
		return Entry{}, fmt.Errorf("fsm: entry of type %s has unknown flags %#x", t, flags)
	}
	cmd := newCmd(t)
	if cmd == nil {
		if e.ignoreIfUnknown {
			e.Cmd = &unknownEntry{entryType: t}
			return e, nil
		}
		return Entry{}, fmt.Errorf("fsm: entry type %d is unknown to this node and not flagged ignore-if-unknown: upgrade this node", t)
	}
	if ignorable(cmd) && !e.ignoreIfUnknown {
		// The encoder always flags these, so that a node of the previous
		// release skips them (clustersecret.go, startchanges.go): an
		// unflagged one was not written by a lockcluster node.
		return Entry{}, fmt.Errorf("fsm: %s entry is not flagged ignore-if-unknown", t)
	}
	decodeCmd(&d, cmd)
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Errorf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return Entry{}, fmt.Errorf("fsm: cannot decode %s entry: %w", t, d.err)
	}
	e.Cmd = cmd
	return e, nil
}

func newCmd(t EntryType) Command {
	switch t {
	case typeOpenSession:
		return &OpenSession{}
	case typeCloseSession:
		return &CloseSession{}
	case typeExpireSession:
		return &ExpireSession{}
	case typeRequest:
		return &Request{}
	case typeRelease:
		return &Release{}
	case typeAbort:
		return &Abort{}
	case typeSetLimits:
		return &SetLimits{}
	case typeSetMember:
		return &SetMember{}
	case typeClusterSecret:
		return &SetClusterSecret{}
	case typeSetRecord:
		return &SetRecord{}
	case typeStartChanges:
		return &StartChanges{}
	}
	return newMoveCmd(t) // move_cmd.go
}

const (
	reqIfAvailable = 1 << iota
	reqSteal
	reqSignal
	// reqMaxHolders: a uvarint MaxHolders (not 0) follows the flags
	// (LevelRecords); a request without one encodes as before.
	reqMaxHolders
)

// The flags of a SetRecord.
const (
	recDelete = 1 << iota
	recRelease
)

func encodeCmd(en *encoder, cmd Command) error {
	switch c := cmd.(type) {
	case *OpenSession:
		en.str(c.Namespace)
		en.str(c.Label)
		en.varint(c.TTL)
		en.str(c.ClientID)
		en.str(c.SecretHash)
	case *CloseSession:
		en.uvarint(c.Session)
		en.str(c.Namespace)
	case *ExpireSession:
		en.uvarint(c.Session)
	case *Request:
		en.uvarint(c.Session)
		en.str(c.Namespace)
		en.uvarint(c.RequestID)
		en.uvarint(c.AckBelow)
		en.uvarint(uint64(len(c.Names)))
		for _, n := range c.Names {
			en.str(n)
		}
		en.byte1(byte(c.Mode))
		var f byte
		if c.IfAvailable {
			f |= reqIfAvailable
		}
		if c.Steal {
			f |= reqSteal
		}
		if c.Signal {
			f |= reqSignal
		}
		if c.MaxHolders > 0 {
			f |= reqMaxHolders
		}
		en.byte1(f)
		if c.MaxHolders > 0 {
			en.uvarint(uint64(c.MaxHolders))
		}
	case *Release:
		en.uvarint(c.Session)
		en.str(c.Namespace)
		en.uvarint(c.RequestID)
		en.uvarint(c.Token)
		en.uvarint(c.AckBelow)
	case *Abort:
		en.uvarint(c.Session)
		en.str(c.Namespace)
		en.uvarint(c.RequestID)
		en.str(c.Reason)
		en.uvarint(c.AckBelow)
	case *SetLimits:
		encodeLimits(en, &c.Limits)
	case *SetMember:
		encodeMember(en, &c.Member)
		en.bool1(c.Remove)
	case *SetClusterSecret:
		en.str(c.Secret)
	case *StartChanges: // no fields
	case *SetRecord:
		en.uvarint(c.Session)
		en.str(c.Namespace)
		en.uvarint(c.RequestID)
		en.uvarint(c.Token)
		en.str(c.Name)
		en.bytes(c.Value)
		var f byte
		if c.Delete {
			f |= recDelete
		}
		if c.Release {
			f |= recRelease
		}
		en.byte1(f)
		en.uvarint(c.AckBelow)
	default:
		if encodeMoveCmd(en, cmd) { // move_cmd.go
			return nil
		}
		return fmt.Errorf("fsm: cannot encode command %T", cmd)
	}
	return nil
}

func decodeCmd(d *decoder, cmd Command) {
	switch c := cmd.(type) {
	case *OpenSession:
		c.Namespace, c.Label, c.TTL, c.ClientID = d.str(), d.str(), d.varint(), d.str()
		if d.version >= 2 {
			c.SecretHash = d.str()
		}
	case *CloseSession:
		c.Session, c.Namespace = d.uvarint(), d.str()
	case *ExpireSession:
		c.Session = d.uvarint()
	case *Request:
		c.Session, c.Namespace, c.RequestID, c.AckBelow = d.uvarint(), d.str(), d.uvarint(), d.uvarint()
		if n := d.count(1); n > 0 {
			c.Names = make([]string, n)
			for i := range c.Names {
				c.Names[i] = d.str()
			}
		}
		c.Mode = Mode(d.byte1())
		f := d.byte1()
		if f&^(reqIfAvailable|reqSteal|reqSignal|reqMaxHolders) != 0 {
			d.fail(fmt.Errorf("unknown request flags %#x", f))
		}
		c.IfAvailable, c.Steal, c.Signal = f&reqIfAvailable != 0, f&reqSteal != 0, f&reqSignal != 0
		if f&reqMaxHolders != 0 {
			n := d.uvarint()
			if d.err == nil && (n == 0 || n > math.MaxUint32) {
				d.fail(fmt.Errorf("maxHolders %d is not in [1, %d]", n, uint32(math.MaxUint32)))
			}
			c.MaxHolders = uint32(n)
		}
	case *Release:
		c.Session, c.Namespace, c.RequestID, c.Token, c.AckBelow = d.uvarint(), d.str(), d.uvarint(), d.uvarint(), d.uvarint()
	case *Abort:
		c.Session, c.Namespace, c.RequestID, c.Reason, c.AckBelow = d.uvarint(), d.str(), d.uvarint(), d.str(), d.uvarint()
	case *SetLimits:
		decodeLimits(d, &c.Limits)
	case *SetMember:
		decodeMember(d, &c.Member)
		c.Remove = d.bool1()
	case *SetClusterSecret:
		c.Secret = d.str()
	case *StartChanges: // no fields
	case *SetRecord:
		c.Session, c.Namespace, c.RequestID, c.Token, c.Name = d.uvarint(), d.str(), d.uvarint(), d.uvarint(), d.str()
		c.Value = d.bytes()
		f := d.byte1()
		if f&^(recDelete|recRelease) != 0 {
			d.fail(fmt.Errorf("unknown record flags %#x", f))
		}
		c.Delete, c.Release = f&recDelete != 0, f&recRelease != 0
		c.AckBelow = d.uvarint()
	default:
		decodeMoveCmd(d, cmd) // move_cmd.go
	}
}

// limitFields are the limits in their encoded order: the 11 of LevelBase,
// then the 2 record limits of LevelRecords, which are written only when
// either is not its default, so that limits that use nothing newer encode
// as the release before reads them.
func limitFields(l *Limits) []*int64 {
	return []*int64{&l.MaxNameBytes, &l.MaxScopeNames, &l.MaxPendingPerSession, &l.MaxHeldPerSession,
		&l.MaxSessionsPerNamespace, &l.maxNamespaceBytes, &l.maxLabelBytes, &l.maxReasonBytes,
		&l.MinTTL, &l.MaxTTL, &l.maxFinished, &l.MaxRecordBytes, &l.MaxNamespaceRecordBytes}
}

const baseLimitFields = 11

func encodeLimits(en *encoder, l *Limits) {
	f := limitFields(l)
	if l.defaultRecordLimits() {
		f = f[:baseLimitFields]
	}
	en.uvarint(uint64(len(f)))
	for _, p := range f {
		en.varint(*p)
	}
}

func decodeLimits(d *decoder, l *Limits) {
	f := limitFields(l)
	n := d.count(1)
	if n != len(f) && n != baseLimitFields && d.err == nil {
		d.fail(fmt.Errorf("limits have %d fields, want %d or %d", n, baseLimitFields, len(f)))
	}
	if n == baseLimitFields {
		l.MaxRecordBytes, l.MaxNamespaceRecordBytes = defaultMaxRecordBytes, defaultMaxNamespaceRecordBytes
		f = f[:baseLimitFields]
	}
	for _, p := range f {
		*p = d.varint()
	}
}

func encodeMember(en *encoder, m *Member) {
	en.str(m.ID)
	en.str(m.RaftAddr)
	en.str(m.GRPCAddr)
	en.str(m.HTTPAddr)
}

func decodeMember(d *decoder, m *Member) {
	m.ID, m.RaftAddr, m.GRPCAddr, m.HTTPAddr = d.str(), d.str(), d.str(), d.str()
}
