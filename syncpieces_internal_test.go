package lockcluster

import (
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// downStream is a session stream that delivers msgs, then io.EOF.
type downStream struct {
	pb.Locks_SessionClient
	msgs []*pb.SessionDown
}

func (d *downStream) Recv() (*pb.SessionDown, error) {
	if len(d.msgs) == 0 {
		return nil, io.EOF
	}
	m := d.msgs[0]
	d.msgs = d.msgs[1:]
	return m, nil
}

func syncedMsg(index, seq uint64, more bool, ids ...uint64) *pb.SessionDown {
	m := &pb.Synced{Index: index, EventSeq: seq, Calls: true, More: more}
	for _, id := range ids {
		m.Requests = append(m.Requests, &pb.RequestState{RequestId: id, Status: pb.Status_STATUS_GRANTED})
	}
	return &pb.SessionDown{Kind: &pb.SessionDown_Synced{Synced: m}}
}

// recvSync puts a sync's pieces together, and syncs nothing from pieces
// that do not make a whole: cut short, interrupted, or of two syncs.
func TestRecvSyncAssemblesPieces(t *testing.T) {
	got, err := recvSync(&downStream{msgs: []*pb.SessionDown{syncedMsg(9, 4, true, 1, 2), syncedMsg(9, 4, true, 3), syncedMsg(9, 4, false, 4)}})
	want := syncedMsg(9, 4, false, 1, 2, 3, 4).GetSynced()
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("three pieces: %v, %v; want %v", got, err, want)
	}
	got, err = recvSync(&downStream{msgs: []*pb.SessionDown{syncedMsg(9, 4, false, 1)}})
	if err != nil || len(got.Requests) != 1 {
		t.Fatalf("one whole sync: %v, %v", got, err)
	}
	ack := &pb.SessionDown{Kind: &pb.SessionDown_HeartbeatAck{HeartbeatAck: &pb.HeartbeatAck{Id: 1}}}
	for name, c := range map[string]struct {
		msgs []*pb.SessionDown
		want string
	}{
		"cut short":      {[]*pb.SessionDown{syncedMsg(9, 4, true, 1)}, "EOF"},
		"interrupted":    {[]*pb.SessionDown{syncedMsg(9, 4, true, 1), ack}, "interrupted"},
		"two indexes":    {[]*pb.SessionDown{syncedMsg(9, 4, true, 1), syncedMsg(10, 4, false, 2)}, "disagree"},
		"two seqs":       {[]*pb.SessionDown{syncedMsg(9, 4, true, 1), syncedMsg(9, 5, false, 2)}, "disagree"},
		"not a sync":     {[]*pb.SessionDown{ack}, "did not start with a sync"},
		"nothing at all": {nil, "EOF"},
	} {
		if got, err := recvSync(&downStream{msgs: c.msgs}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, %v; want an error saying %q", name, got, err, c.want)
		}
	}
}
