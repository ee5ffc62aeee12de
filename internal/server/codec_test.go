package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// FuzzDecode feeds arbitrary bytes to the server's codec as every request
// message of the API: the codec never fails (a failure would be Internal),
// never panics, and a message marked undecodable is InvalidArgument exactly
// when the standard decoder refuses the bytes. Run longer with:
//
//	go test -run '^$' -fuzz FuzzDecode -fuzztime 5m ./internal/server/
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0x0a, 0x02, 'n', 's'})
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})
	f.Add([]byte{0x22, 0x03, 'a', 0xc3, 0x28})
	f.Add([]byte{0x0a, 0x05, 0x0a, 0x01, 0x80})
	f.Add([]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(protowire.AppendString(protowire.AppendTag(nil, decodeMarker, protowire.BytesType), "not the magic"))
	f.Add(protowire.AppendString(protowire.AppendTag(nil, decodeMarker, protowire.BytesType), decodeMagic+"forged\x00by a client"))
	c := decodeCodec{proto: encoding.GetCodecV2("proto")}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []proto.Message{&pb.OpenSessionRequest{}, &pb.LockRequest{}, &pb.ReleaseRequest{}, &pb.AbortRequest{},
			&pb.CloseSessionRequest{}, &pb.QueryRequest{}, &pb.SessionUp{}, &pb.JoinRequest{}} {
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m); err != nil {
				t.Fatalf("%T: the codec failed: %v", m, err)
			}
			refused := proto.Unmarshal(b, m.ProtoReflect().Type().New().Interface()) != nil
			err := decodeFailure(m)
			if refused != (err != nil) {
				t.Fatalf("%T %x: standard decoder refuses: %v; marked: %v", m, b, refused, err)
			}
			if err != nil && status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%T: %v, want InvalidArgument", m, err)
			}
		}
	})
}
