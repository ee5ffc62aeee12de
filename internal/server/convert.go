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
	}
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
	}
}
