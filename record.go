package lockcluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// Records (SPEC §12): a name may carry a byte string that only its
// exclusive holder writes, fenced by its grant's token when the cluster
// applies the write. A record outlives the grant, the session and the
// queue; a grant carries the records of its names as they stood at the
// grant, so a new holder sees what its predecessor left.

// Record is the data a name carries.
type Record struct {
	Name  string `json:"name"`
	Value []byte `json:"value"`
	// Token is the fencing token of the grant that wrote it.
	Token uint64 `json:"token"`
	// WrittenAt is the leader's time in the entry that wrote it (never a
	// client's clock); Index is that entry's Raft index.
	WrittenAt time.Time `json:"writtenAt"`
	Index     uint64    `json:"index"`
}

func recordOf(r *pb.Record) *Record {
	if r == nil {
		return nil
	}
	out := &Record{Name: r.Name, Value: r.Value, Token: r.Token, Index: r.Index}
	if r.WrittenAt != nil {
		out.WrittenAt = r.WrittenAt.AsTime()
	}
	return out
}

func recordsOf(in []*pb.Record) []Record {
	if len(in) == 0 {
		return nil
	}
	out := make([]Record, 0, len(in))
	for _, r := range in {
		out = append(out, *recordOf(r))
	}
	slices.SortStableFunc(out, byName)
	return out
}

func byName(a, b Record) int { return strings.Compare(a.Name, b.Name) }

// checkMaxHolders checks Options.MaxHolders before anything is sent.
func checkMaxHolders(name string, opts Options) error {
	switch {
	case opts.MaxHolders == 0:
		return nil
	case opts.MaxHolders < 0 || opts.MaxHolders > math.MaxUint32:
		return &Error{Name: "TypeError", Code: codes.InvalidArgument, Reason: pb.ErrorReason_INVALID,
			Message: fmt.Sprintf("MaxHolders %d of request for %q is not between 1 and %d", opts.MaxHolders, name, uint32(math.MaxUint32))}
	case opts.Mode != Shared:
		return &Error{Name: "NotSupportedError", Code: codes.InvalidArgument, Reason: pb.ErrorReason_NOT_SUPPORTED,
			Message: fmt.Sprintf("MaxHolders %d of request for %q needs mode shared (a semaphore), not %s", opts.MaxHolders, name, opts.Mode)}
	}
	return nil
}

// Records are the records of the lock's names as they stood at the grant
// (names without one are left out), sorted by name: what the lock's
// predecessors left. Writes of this lock do not change them.
func (l *Lock) Records() []Record { return slices.Clone(l.records) }

// Record is the record of name (one of the lock's names) as it stood at
// the grant; ok is false when it had none.
func (l *Lock) Record(name string) (rec Record, ok bool) {
	for _, r := range l.records {
		if r.Name == name {
			return r, true
		}
	}
	return Record{}, false
}

// grantRecords reads the records of a lock whose grant reached the client
// without them (by a session stream's sync, after a reconnection). While
// the lock is held nobody else can write them, so what is read now is
// what the grant would have carried. If they cannot be read the lock is
// released: a holder must not act without knowing what its predecessor
// left.
func (c *Client) grantRecords(ctx context.Context, l *Lock) error {
	if l.recordsKnown {
		return nil
	}
	var recs []Record
	for _, n := range l.names {
		r, ok, err := c.Record(ctx, n)
		if isUnimplemented(err) {
			break // a node of a release without records: there are none
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			l.Release(rctx)
			return fmt.Errorf("reading the records of lock %q after its grant (the lock was released): %w", l.Name(), err)
		}
		if ok {
			recs = append(recs, r)
		}
	}
	slices.SortFunc(recs, byName)
	l.records, l.recordsKnown = recs, true
	return nil
}

func isUnimplemented(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == codes.Unimplemented
}

// Record reads the record of name in the client's namespace,
// linearizably (as Query): ok is false when the name has none.
func (c *Client) Record(ctx context.Context, name string) (rec Record, ok bool, err error) {
	if err := c.closedErr(); err != nil {
		return Record{}, false, err
	}
	var resp *pb.GetRecordResponse
	err = c.call(ctx, func(ctx context.Context, lc pb.LocksClient) error {
		var err error
		resp, err = lc.GetRecord(ctx, &pb.GetRecordRequest{Namespace: c.cfg.namespace, Name: name})
		return err
	})
	if err != nil {
		return Record{}, false, err
	}
	c.seen(resp.Index)
	if resp.Record == nil {
		return Record{}, false, nil
	}
	return *recordOf(resp.Record), true, nil
}

// SetRecord writes value as the record of name, one of the lock's names,
// and returns the record as written (its leader time and index). Only an
// exclusive lock writes records; the cluster checks, when it applies the
// write, that this lock still holds the name with its token: a lock lost
// meanwhile (stolen, its session expired) gets an error matching
// ErrNotHolder, naming the name's current token, and nothing changes.
//
// A write whose answer is lost is sent again (the same value, fenced by
// the same token): it may then be applied twice, which leaves the same
// value with a later index. If the lock is lost before the retry, the
// error matches ErrOutcomeUnknown, not ErrNotHolder: the first attempt
// may have written the record.
func (l *Lock) SetRecord(ctx context.Context, name string, value []byte) (Record, error) {
	r, err := l.writeRecord(ctx, name, value, false)
	if err != nil {
		return Record{}, err
	}
	return *r, nil
}

// DeleteRecord deletes the record of name, one of the lock's names, under
// the same rules as SetRecord. Deleting a record that does not exist
// succeeds.
func (l *Lock) DeleteRecord(ctx context.Context, name string) error {
	_, err := l.writeRecord(ctx, name, nil, true)
	return err
}

// ReleaseWithRecord writes value as the record of name and releases the
// lock, in one entry: both happen, or neither. It is Release otherwise
// (idempotent with it: whichever comes first decides, later calls return
// its answer; an unconfirmed release goes on being sent, with its record,
// in the background). A lock lost before it reached the cluster writes
// nothing: the error matches ErrNotHolder, and the lock's context ends.
// When the first answer was lost and a retry finds the write applied, the
// record returned has no Index or WrittenAt (Client.Record reads them, if
// no later holder wrote over it).
func (l *Lock) ReleaseWithRecord(ctx context.Context, name string, value []byte) (Record, error) {
	if err := l.recordCheck(name); err != nil {
		return Record{}, err
	}
	err := l.end(ctx, l.recordRequest(name, value, false, true))
	if err != nil {
		return Record{}, err
	}
	l.s.mu.Lock()
	written := l.written
	l.s.mu.Unlock()
	if written == nil || written.Name != name {
		// An earlier Release (or release with another record) ended the
		// lock, or it had been lost: nothing was written now.
		return Record{}, fmt.Errorf("%w: lock %q had ended before this release with record (%v): nothing was written", ErrNotHolder, name, context.Cause(l.ctx))
	}
	return *written, nil
}

// ReleaseDeletingRecord deletes the record of name and releases the lock,
// in one entry, as ReleaseWithRecord.
func (l *Lock) ReleaseDeletingRecord(ctx context.Context, name string) error {
	if err := l.recordCheck(name); err != nil {
		return err
	}
	return l.end(ctx, l.recordRequest(name, nil, true, true))
}

func (l *Lock) recordRequest(name string, value []byte, del, release bool) *pb.SetRecordRequest {
	return &pb.SetRecordRequest{Namespace: l.s.c.cfg.namespace, SessionId: l.s.id, SessionSecret: l.s.secret,
		RequestId: l.r.id, Token: l.token, Name: name, Value: value, Delete: del, Release: release}
}

// recordCheck refuses, before anything is sent, a write the cluster would
// refuse: a name the lock does not hold, or a shared lock.
func (l *Lock) recordCheck(name string) error {
	if !slices.Contains(l.names, name) {
		return &Error{Name: "TypeError", Code: codes.InvalidArgument, Reason: pb.ErrorReason_INVALID,
			Message: fmt.Sprintf("the lock holds %q, not %q: it can write only the records of its names", l.names, name)}
	}
	if l.mode != Exclusive {
		return fmt.Errorf("%w: lock %q is %s: only an exclusive holder writes records", ErrNotHolder, name, l.mode)
	}
	return nil
}

func (l *Lock) writeRecord(ctx context.Context, name string, value []byte, del bool) (*Record, error) {
	if err := l.recordCheck(name); err != nil {
		return nil, err
	}
	// A lock that ended here (released, stolen, lost) is not refused
	// here: the cluster refuses it, naming the name's current token.
	req := l.recordRequest(name, value, del, false)
	var resp *pb.SetRecordResponse
	var lost lostAnswer
	err := l.s.c.call(ctx, func(ctx context.Context, lc pb.LocksClient) error {
		req.AckBelow = l.s.ackBelow()
		var err error
		resp, err = lc.SetRecord(ctx, req)
		lost.note(err)
		return err
	})
	l.s.endIfNotOpen(err)
	err = lost.verdict(err, name)
	if err != nil {
		return nil, err
	}
	l.s.c.seen(resp.Index)
	if resp.Record == nil {
		return &Record{Name: name, Token: l.token, Index: resp.Index}, nil
	}
	return recordOf(resp.Record), nil
}

// lostAnswer remembers, across the attempts of one record write (and of
// a release with record), an attempt whose answer was lost after the
// cluster may have applied it. A record write is not deduplicated
// (writing the same value under the same token changes nothing a reader
// could tell, and a release with record finds its duplicate only while
// its session's outcomes last), so a retry that finds the lock gone must
// not say "nothing was written".
type lostAnswer struct{ err error }

func (la *lostAnswer) note(err error) {
	if la.err == nil && mayHaveApplied(err) {
		la.err = err
	}
}

// verdict is the error to give the caller for the last attempt's err: a
// NOT_HOLDER or a closed session after a lost answer is ErrOutcomeUnknown.
func (la *lostAnswer) verdict(err error, name string) error {
	if err == nil || la.err == nil || !errors.Is(err, ErrNotHolder) && !errors.Is(err, ErrSessionClosed) {
		return err
	}
	return fmt.Errorf("%w: the record of %q may have been written: an earlier attempt's answer was lost (%v), and the lock was lost before the retry (%w)",
		ErrOutcomeUnknown, name, fromStatus(la.err), errNotHolderCause{err})
}

// errNotHolderCause carries the retry's refusal (NOT_HOLDER, or the
// session closed) inside ErrOutcomeUnknown without matching it: the
// refusal is true of the retry, not of the write.
type errNotHolderCause struct{ err error }

func (e errNotHolderCause) Error() string { return e.err.Error() }
