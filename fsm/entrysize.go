package fsm

import "encoding/binary"

// EntryBytes is the size of cmd's entry as EncodeEntry writes it (with a
// leader time of 0: a real one adds up to 9 bytes), counted without
// encoding it: the API charges a namespace's byte quota with it before the
// entry exists, and a call refused over that quota must cost next to
// nothing. A command type it does not know counts as encoded.
func EntryBytes(cmd Command) int {
	str := func(s string) int { return uvarintLen(uint64(len(s))) + len(s) }
	const envelope = 4 // version, type, flags, varint time 0
	switch c := cmd.(type) {
	case *OpenSession:
		return envelope + str(c.Namespace) + str(c.Label) + varintLen(c.TTL) + str(c.ClientID) + str(c.SecretHash)
	case *CloseSession:
		return envelope + uvarintLen(c.Session) + str(c.Namespace)
	case *Request:
		n := envelope + uvarintLen(c.Session) + str(c.Namespace) + uvarintLen(c.RequestID) + uvarintLen(c.AckBelow) + uvarintLen(uint64(len(c.Names)))
		for _, name := range c.Names {
			n += str(name)
		}
		return n + 2 // mode, flags
	case *Release:
		return envelope + uvarintLen(c.Session) + str(c.Namespace) + uvarintLen(c.RequestID) + uvarintLen(c.Token) + uvarintLen(c.AckBelow)
	case *Abort:
		return envelope + uvarintLen(c.Session) + str(c.Namespace) + uvarintLen(c.RequestID) + str(c.Reason) + uvarintLen(c.AckBelow)
	}
	b, _ := EncodeEntry(Entry{Cmd: cmd})
	return len(b)
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}

func varintLen(v int64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], v)
}
