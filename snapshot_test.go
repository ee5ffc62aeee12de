package lockcluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockcluster/lockcluster"
	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// snapServer answers SaveSnapshot with data in chunks of 3 bytes; unavailable
// makes it refuse, corrupt changes a byte after the header.
type snapServer struct {
	pb.UnimplementedClusterServer
	data        []byte
	unavailable bool
	corrupt     bool
}

func (s *snapServer) SaveSnapshot(_ *pb.SaveSnapshotRequest, st grpc.ServerStreamingServer[pb.SnapshotChunk]) error {
	if s.unavailable {
		return status.Error(codes.Unavailable, "not the leader")
	}
	sum := sha256.Sum256(s.data)
	if err := st.Send(&pb.SnapshotChunk{Header: &pb.SnapshotHeader{Index: 42, Term: 3, Size: uint64(len(s.data)), Sha256: sum[:], LeaderId: "n1",
		Members: []*pb.Member{{Id: "n1", RaftAddr: "r1", Leader: true}}}}); err != nil {
		return err
	}
	data := bytes.Clone(s.data)
	if s.corrupt {
		data[len(data)/2] ^= 1
	}
	for len(data) > 0 {
		n := min(3, len(data))
		if err := st.Send(&pb.SnapshotChunk{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func serveSnap(t *testing.T, s *snapServer) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterClusterServer(g, s)
	go g.Serve(l)
	t.Cleanup(g.Stop)
	return l.Addr().String()
}

// SaveSnapshot writes a file that ReadSnapshot reads back whole, moving
// past an endpoint that does not serve; a transfer whose bytes do not match
// the header's checksum fails, and so does every damaged file.
func TestSnapshotFileRoundTrip(t *testing.T) {
	state := []byte("LCKSNAP\x00 pretend state machine bytes")
	down := serveSnap(t, &snapServer{unavailable: true})
	up := serveSnap(t, &snapServer{data: state})
	a, err := lockcluster.DialAdmin([]string{down, up})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var file bytes.Buffer
	info, err := a.SaveSnapshot(ctx, &file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(state)
	if info.Index != 42 || info.Term != 3 || info.Size != uint64(len(state)) || info.Leader != "n1" || len(info.Members) != 1 {
		t.Fatalf("info %+v", info)
	}
	got, data, err := lockcluster.ReadSnapshot(bytes.NewReader(file.Bytes()))
	if err != nil || !bytes.Equal(data, state) || got.Index != 42 || got.Term != 3 || got.SHA256 != info.SHA256 || got.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("read back: %+v %q %v", got, data, err)
	}

	bad := serveSnap(t, &snapServer{data: state, corrupt: true})
	b, err := lockcluster.DialAdmin([]string{bad})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.SaveSnapshot(ctx, &bytes.Buffer{}); !errors.Is(err, lockcluster.ErrCorruptSnapshot) {
		t.Fatalf("a transfer with a wrong checksum: %v", err)
	}

	whole := file.Bytes()
	for name, f := range map[string][]byte{
		"empty":      nil,
		"magic":      append([]byte("XX"), whole[2:]...),
		"version":    flip(whole, 11),
		"checksum":   flip(whole, 40),
		"state":      flip(whole, len(whole)-1),
		"truncated":  whole[:len(whole)-1],
		"extended":   append(bytes.Clone(whole), 0),
		"header cut": whole[:20],
	} {
		if _, _, err := lockcluster.ReadSnapshot(bytes.NewReader(f)); !errors.Is(err, lockcluster.ErrCorruptSnapshot) {
			t.Errorf("%s: %v, want ErrCorruptSnapshot", name, err)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}
