package fsm

import (
	"encoding/binary"
	"errors"
	"math"
)

// The wire format of entries and snapshots: unsigned varints, zig-zag
// varints, and length-prefixed bytes. The decoder never trusts a length: a
// length longer than what is left is an error, so garbage cannot make it
// allocate more than its input.

type encoder struct{ b []byte }

func (e *encoder) byte1(v byte)     { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) bool1(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}
func (e *encoder) bytes(b []byte) {
	e.b = binary.AppendUvarint(e.b, uint64(len(b)))
	e.b = append(e.b, b...)
}
func (e *encoder) str(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

var errTruncated = errors.New("truncated")

type decoder struct {
	b       []byte
	err     error
	version byte // of the envelope or snapshot being decoded, when it matters
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) byte1() byte {
	if len(d.b) < 1 {
		d.fail(errTruncated)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bool1() bool {
	switch d.byte1() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail(errors.New("a boolean is neither 0 nor 1"))
	return false
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errors.New("bad unsigned varint"))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errors.New("bad varint"))
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items each at least min bytes long, refusing one
// that the rest of the input cannot hold.
func (d *decoder) count(min int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > math.MaxInt32 || int(n)*min > len(d.b) {
		d.fail(errTruncated)
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.count(1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// bytes reads length-prefixed bytes into a copy of their own (nil when
// empty): what it returns outlives the input.
func (d *decoder) bytes() []byte {
	n := d.count(1)
	if d.err != nil || n == 0 {
		return nil
	}
	b := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return b
}
