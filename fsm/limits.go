package fsm

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits bound what one client may ask of the state machine. They are part
// of the replicated state (changed by a SetLimits entry, kept in snapshots),
// never read from a node's own configuration: every replica must reject the
// same entries.
type Limits struct {
	MaxNameBytes            int64 // bytes in one resource name
	MaxScopeNames           int64 // names in one request
	MaxPendingPerSession    int64 // queued requests of one session
	MaxHeldPerSession       int64 // locks held by one session
	MaxSessionsPerNamespace int64 // live sessions of one namespace; 0: no limit
	maxNamespaceBytes       int64 // bytes in a namespace name
	maxLabelBytes           int64 // bytes in a session label or client id
	maxReasonBytes          int64 // bytes in an abort reason
	MinTTL                  int64 // nanoseconds
	MaxTTL                  int64 // nanoseconds
	// maxFinished bounds the finished outcomes a session remembers for
	// retries; the oldest is forgotten past it.
	maxFinished int64
	// MaxRecordBytes bounds the value of one record (SPEC §12), and
	// MaxNamespaceRecordBytes the bytes of all the records of a namespace
	// (each record counts its name and its value). A limit other than its
	// default needs LevelRecords (CommandLevel).
	MaxRecordBytes          int64
	MaxNamespaceRecordBytes int64
}

const (
	defaultMaxRecordBytes          = 4096
	defaultMaxNamespaceRecordBytes = 1 << 20
)

// defaultRecordLimits reports whether l's record limits are the defaults,
// which the formats before LevelRecords imply.
func (l *Limits) defaultRecordLimits() bool {
	return l.MaxRecordBytes == defaultMaxRecordBytes && l.MaxNamespaceRecordBytes == defaultMaxNamespaceRecordBytes
}

// DefaultLimits are the limits of a new state machine.
func DefaultLimits() Limits {
	return Limits{
		MaxNameBytes:            1024,
		MaxScopeNames:           64,
		MaxPendingPerSession:    100_000,
		MaxHeldPerSession:       100_000,
		MaxSessionsPerNamespace: 0,
		maxNamespaceBytes:       256,
		maxLabelBytes:           256,
		maxReasonBytes:          256,
		MinTTL:                  100e6,  // 100 ms
		MaxTTL:                  3600e9, // 1 h
		maxFinished:             1024,
		MaxRecordBytes:          defaultMaxRecordBytes,
		MaxNamespaceRecordBytes: defaultMaxNamespaceRecordBytes,
	}
}

// Validate checks that every limit is usable.
func (l Limits) Validate() error {
	pos := []struct {
		name string
		v    int64
	}{
		{"MaxNameBytes", l.MaxNameBytes}, {"MaxScopeNames", l.MaxScopeNames},
		{"MaxPendingPerSession", l.MaxPendingPerSession}, {"MaxHeldPerSession", l.MaxHeldPerSession},
		{"MaxNamespaceBytes", l.maxNamespaceBytes}, {"MaxLabelBytes", l.maxLabelBytes},
		{"MaxReasonBytes", l.maxReasonBytes}, {"MinTTL", l.MinTTL}, {"MaxTTL", l.MaxTTL},
		{"MaxFinished", l.maxFinished}, {"MaxRecordBytes", l.MaxRecordBytes},
		{"MaxNamespaceRecordBytes", l.MaxNamespaceRecordBytes},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return errorf(CodeInvalid, "limit %s is %d: it must be positive", p.name, p.v)
		}
	}
	if l.MaxSessionsPerNamespace < 0 {
		return errorf(CodeInvalid, "limit MaxSessionsPerNamespace is %d: it must be 0 (no limit) or positive", l.MaxSessionsPerNamespace)
	}
	if l.MinTTL > l.MaxTTL {
		return errorf(CodeInvalid, "limit MinTTL %d is above MaxTTL %d", l.MinTTL, l.MaxTTL)
	}
	return nil
}

// quote shortens a value for an error message: a hostile name of a megabyte
// must not become a megabyte of log.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strq(s[:cut]) + "…"
	}
	return strq(s)
}

// strq quotes s as Go does, so invalid UTF-8 shows as \xff escapes.
func strq(s string) string { return strconv.Quote(s) }

// checkNamespace validates a namespace name carried by an entry.
func (l *Limits) checkNamespace(ns string) *Error {
	switch {
	case ns == "":
		return errorf(CodeInvalid, "namespace is empty")
	case !utf8.ValidString(ns):
		return errorf(CodeInvalid, "namespace %s is not valid UTF-8", quote(ns))
	case int64(len(ns)) > l.maxNamespaceBytes:
		return errorf(CodeLimit, "namespace %s is %d bytes, over the limit of %d", quote(ns), len(ns), l.maxNamespaceBytes)
	}
	return nil
}

// checkRequest runs the checks of spec §3.2.1 (steps 5–8, after WebIDL's
// own TypeErrors) and SPEC §2 and §7 on a request. The spec's step 9 (an
// already aborted signal) is the client's: such a request is never sent.
func (l *Limits) checkRequest(r *Request) *Error {
	if r.RequestID == 0 {
		return errorf(CodeInvalid, "request id 0 is not allowed")
	}
	if r.Mode != Exclusive && r.Mode != Shared {
		return errorf(CodeInvalid, "mode %d is not exclusive (0) or shared (1)", r.Mode)
	}
	if len(r.Names) == 0 {
		return errorf(CodeInvalid, "request %d names no resource", r.RequestID)
	}
	if int64(len(r.Names)) > l.MaxScopeNames {
		return errorf(CodeLimit, "request %d names %d resources, over the limit of %d", r.RequestID, len(r.Names), l.MaxScopeNames)
	}
	for _, n := range r.Names {
		if err := l.checkName(n); err != nil {
			return err
		}
	}
	if dup, ok := duplicateName(r.Names); ok {
		return errorf(CodeInvalid, "name %s appears twice in request %d", quote(dup), r.RequestID)
	}
	switch {
	case r.Steal && r.IfAvailable: // step 6
		return errorf(CodeNotSupported, "steal and ifAvailable cannot both be set")
	case r.Steal && r.Mode != Exclusive: // step 7
		return errorf(CodeNotSupported, "steal needs mode exclusive, not %s", r.Mode)
	case r.Signal && r.Steal: // step 8
		return errorf(CodeNotSupported, "an abort signal cannot be combined with steal")
	case r.Signal && r.IfAvailable: // step 8
		return errorf(CodeNotSupported, "an abort signal cannot be combined with ifAvailable")
	case r.MaxHolders > 0 && r.Mode != Shared: // SPEC §14
		return errorf(CodeNotSupported, "maxHolders %d needs mode shared, not %s", r.MaxHolders, r.Mode)
	}
	return nil
}

// checkName is SPEC §2's rule for a name, of a request or a record.
func (l *Limits) checkName(n string) *Error {
	if !utf8.ValidString(n) {
		return errorf(CodeInvalid, "name %s is not valid UTF-8", quote(n))
	}
	if int64(len(n)) > l.MaxNameBytes {
		return errorf(CodeLimit, "name %s is %d bytes, over the limit of %d", quote(n), len(n), l.MaxNameBytes)
	}
	if strings.HasPrefix(n, "-") { // step 5
		return errorf(CodeNotSupported, "name %s starts with \"-\": such names are reserved", quote(n))
	}
	return nil
}

// checkRecord runs the checks of a SetRecord that need no state (SPEC
// §12): the name's rules and the value's limit.
func (l *Limits) checkRecord(c *SetRecord) *Error {
	if c.RequestID == 0 {
		return errorf(CodeInvalid, "request id 0 is not allowed")
	}
	if err := l.checkName(c.Name); err != nil {
		return err
	}
	if c.Delete && len(c.Value) > 0 {
		return errorf(CodeInvalid, "the delete of the record of %s carries a value of %d bytes", quote(c.Name), len(c.Value))
	}
	if int64(len(c.Value)) > l.MaxRecordBytes {
		return errorf(CodeLimit, "the record of %s is %d bytes, over the limit of %d", quote(c.Name), len(c.Value), l.MaxRecordBytes)
	}
	return nil
}

func duplicateName(names []string) (string, bool) {
	if len(names) < 2 {
		return "", false
	}
	if len(names) <= 8 {
		for i := range names {
			for j := i + 1; j < len(names); j++ {
				if names[i] == names[j] {
					return names[i], true
				}
			}
		}
		return "", false
	}
	seen := make(map[string]struct{}, len(names))
	for _, n := range names {
		if _, ok := seen[n]; ok {
			return n, true
		}
		seen[n] = struct{}{}
	}
	return "", false
}

func (l *Limits) checkOpen(c *OpenSession) *Error {
	if err := l.checkNamespace(c.Namespace); err != nil {
		return err
	}
	for _, f := range [...]struct{ what, v string }{{"label", c.Label}, {"client id", c.ClientID}} {
		if !utf8.ValidString(f.v) {
			return errorf(CodeInvalid, "session %s %s is not valid UTF-8", f.what, quote(f.v))
		}
		if int64(len(f.v)) > l.maxLabelBytes {
			return errorf(CodeLimit, "session %s is %d bytes, over the limit of %d", f.what, len(f.v), l.maxLabelBytes)
		}
	}
	if c.TTL < l.MinTTL || c.TTL > l.MaxTTL {
		return errorf(CodeInvalid, "session TTL %s is outside [%s, %s]", dur(c.TTL), dur(l.MinTTL), dur(l.MaxTTL))
	}
	return nil
}

// Check runs the checks of cmd that need no state (SPEC §2, §3.2.1, §9)
// under the limits l, so that the API can refuse bad input before it
// reaches the log. Apply runs them again, against the replicated limits.
func (l Limits) Check(cmd Command) error {
	var err *Error
	switch c := cmd.(type) {
	case *OpenSession:
		err = l.checkOpen(c)
	case *CloseSession:
		err = l.checkNamespace(c.Namespace)
	case *Request:
		if err = l.checkNamespace(c.Namespace); err == nil {
			err = l.checkRequest(c)
		}
	case *Release:
		err = l.checkNamespace(c.Namespace)
	case *SetRecord:
		if err = l.checkNamespace(c.Namespace); err == nil {
			err = l.checkRecord(c)
		}
	case *Abort:
		if err = l.checkNamespace(c.Namespace); err == nil {
			err = l.checkAbort(c)
		}
	}
	if err != nil {
		return err
	}
	return nil
}

func (l *Limits) checkAbort(c *Abort) *Error {
	if c.RequestID == 0 {
		return errorf(CodeInvalid, "request id 0 is not allowed")
	}
	if int64(len(c.Reason)) > l.maxReasonBytes {
		return errorf(CodeLimit, "abort reason is %d bytes, over the limit of %d", len(c.Reason), l.maxReasonBytes)
	}
	return nil
}
