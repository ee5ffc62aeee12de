package server

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/fsm"
)

// fsm and protobuf enums are numbered alike where they overlap; these
// functions are the only place that knows it.

var statusToPB = map[fsm.Status]pb.Status{
	fsm.StatusGranted: pb.Status_STATUS_GRANTED, fsm.StatusQueued: pb.Status_STATUS_QUEUED,
	fsm.StatusNotAvailable: pb.Status_STATUS_NOT_AVAILABLE, fsm.StatusReleased: pb.Status_STATUS_RELEASED,
	fsm.StatusAborted: pb.Status_STATUS_ABORTED, fsm.StatusStolen: pb.Status_STATUS_STOLEN,
	fsm.StatusOpened: pb.Status_STATUS_OPENED, fsm.StatusClosed: pb.Status_STATUS_CLOSED,
}

var causeToPB = map[fsm.Cause]pb.Cause{
	fsm.CauseAborted: pb.Cause_CAUSE_ABORTED, fsm.CauseStolen: pb.Cause_CAUSE_STOLEN,
	fsm.CauseSessionClosed: pb.Cause_CAUSE_SESSION_CLOSED, fsm.CauseSessionExpired: pb.Cause_CAUSE_SESSION_EXPIRED,
}

var kindToPB = map[fsm.EventKind]pb.Event_Kind{
	fsm.EventGranted: pb.Event_GRANTED, fsm.EventNotAvailable: pb.Event_NOT_AVAILABLE,
	fsm.EventAborted: pb.Event_ABORTED, fsm.EventLockLost: pb.Event_LOCK_LOST,
	fsm.EventSessionEnded: pb.Event_SESSION_ENDED,
}

func modeToPB(m fsm.Mode) pb.Mode {
	if m == fsm.Shared {
		return pb.Mode_MODE_SHARED
	}
	return pb.Mode_MODE_EXCLUSIVE
}

func modeFromPB(m pb.Mode) (fsm.Mode, error) {
	switch m {
	case pb.Mode_MODE_EXCLUSIVE:
		return fsm.Exclusive, nil
	case pb.Mode_MODE_SHARED:
		return fsm.Shared, nil
	}
	return 0, invalid("mode " + m.String() + " is not MODE_EXCLUSIVE or MODE_SHARED")
}

func ts(unixNano int64) *timestamppb.Timestamp {
	if unixNano == 0 {
		return nil
	}
	return timestamppb.New(time.Unix(0, unixNano))
}

func eventToPB(index uint64, e fsm.Event) *pb.Event {
	return &pb.Event{
		Seq: e.Seq, Index: index, Kind: kindToPB[e.Kind], RequestId: e.RequestID, Names: e.Names,
		Mode: modeToPB(e.Mode), Token: e.Token, AcquiredAt: ts(e.AcquiredAt), Cause: causeToPB[e.Cause], Reason: e.Reason,
		Records: recordsToPB(e.Records),
	}
}

func recordToPB(r fsm.Record) *pb.Record {
	return &pb.Record{Name: r.Name, Value: r.Value, Token: r.Token, WrittenAt: ts(r.Time), Index: r.Index}
}

// recordsToPB is nil for none, so that a message without records encodes
// as before.
func recordsToPB(rs []fsm.Record) []*pb.Record {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*pb.Record, len(rs))
	for i, r := range rs {
		out[i] = recordToPB(r)
	}
	return out
}

var changeKindToPB = map[fsm.ChangeKind]pb.Change_Kind{
	fsm.ChangeGranted: pb.Change_GRANTED, fsm.ChangeQueued: pb.Change_QUEUED, fsm.ChangeReleased: pb.Change_RELEASED,
	fsm.ChangeAborted: pb.Change_ABORTED, fsm.ChangeStolen: pb.Change_STOLEN, fsm.ChangeSessionEnded: pb.Change_SESSION_ENDED,
	fsm.ChangeRecordSet: pb.Change_RECORD_SET, fsm.ChangeRecordDeleted: pb.Change_RECORD_DELETED,
}

func changeToPB(c *fsm.Change) *pb.Change {
	out := &pb.Change{
		Kind: changeKindToPB[c.Kind], Names: c.Names, Mode: modeToPB(c.Mode), SessionId: c.Session, RequestId: c.RequestID,
		ClientId: c.ClientID, Label: c.Label, Token: c.Token, Cause: causeToPB[c.Cause], Reason: c.Reason, MaxHolders: c.MaxHolders,
	}
	if c.Record != nil {
		out.Record = recordToPB(*c.Record)
	}
	return out
}

func requestStateToPB(r fsm.RequestState) *pb.RequestState {
	return &pb.RequestState{
		RequestId: r.RequestID, Names: r.Names, Mode: modeToPB(r.Mode), Status: statusToPB[r.Status],
		Token: r.Token, AcquiredAt: ts(r.AcquiredAt), Cause: causeToPB[r.Cause], Reason: r.Reason,
	}
}

func lockInfoToPB(l fsm.LockInfo) *pb.LockInfo {
	return &pb.LockInfo{
		Name: l.Name, Mode: modeToPB(l.Mode), ClientId: l.ClientID, Label: l.Label, SessionId: l.Session,
		RequestId: l.RequestID, Token: l.Token, AcquiredAt: ts(l.AcquiredAt), RequestedAt: ts(l.RequestedAt),
		MaxHolders: l.MaxHolders,
	}
}
