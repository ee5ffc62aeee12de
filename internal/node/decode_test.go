package node_test

import (
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/node/nodetest"
)

// Bytes that do not decode as the method's message are the client's
// mistake: InvalidArgument with reason INVALID and name TypeError, naming
// the field when a string is not UTF-8; never Internal (gRPC's own answer
// to a codec error), on unary calls and on the session stream alike. The
// node goes on serving (issue 11).
func TestUndecodableMessagesAreInvalidArgument(t *testing.T) {
	c := nodetest.Start(t, 1, nodetest.Options{Quiet: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := rawConn(t, c.Addrs()[0])
	lc := pb.NewLocksClient(cc)

	str := func(b []byte, num protowire.Number, v []byte) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, v)
	}
	num := func(b []byte, n protowire.Number, v uint64) []byte {
		b = protowire.AppendTag(b, n, protowire.VarintType)
		return protowire.AppendVarint(b, v)
	}
	bad := []byte{'a', 0xff, 0xfe}
	// A LockRequest: namespace 1, session_id 2, request_id 3, names 4.
	lockReq := func(ns []byte, names ...[]byte) []byte {
		b := str(nil, 1, ns)
		b = num(b, 2, 1)
		b = num(b, 3, 1)
		for _, n := range names {
			b = str(b, 4, n)
		}
		return b
	}
	openReq := str(str(nil, 1, []byte("ns")), 2, []byte("a label"))
	// An attach inside a SessionUp (field 1): namespace 1, session_id 2.
	attach := func(ns []byte) []byte { return str(nil, 1, num(str(nil, 1, ns), 2, 1)) }

	// check: err must be InvalidArgument, TypeError, naming field (if not
	// "") in its metadata and its message.
	check := func(what string, err error, field string) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", what, err)
			return
		}
		var info *errdetails.ErrorInfo
		for _, d := range st.Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				info = i
			}
		}
		if info == nil || info.Reason != pb.ErrorReason_INVALID.String() || info.Metadata["name"] != "TypeError" {
			t.Errorf("%s: %v: ErrorInfo %v, want reason INVALID, name TypeError", what, err, info)
			return
		}
		if field != "" && (info.Metadata["field"] != field || !strings.Contains(st.Message(), field)) {
			t.Errorf("%s: %v (ErrorInfo %v): want it to name field %s", what, err, info, field)
		}
	}
	unary := func(method string, b []byte) error {
		var out rawMessage
		return cc.Invoke(ctx, "/lockcluster.v1.Locks/"+method, rawMessage(b), &out, grpc.ForceCodecV2(rawCodec{}))
	}
	session := func(first []byte) error {
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/lockcluster.v1.Locks/Session", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			return err
		}
		if err := st.SendMsg(rawMessage(first)); err != nil {
			return err
		}
		var out rawMessage
		return st.RecvMsg(&out)
	}

	check("invalid UTF-8 in a namespace", unary("Request", lockReq(bad, []byte("x"))), "namespace")
	check("invalid UTF-8 in a name", unary("Request", lockReq([]byte("ns"), []byte("ok"), bad)), "names")
	check("invalid UTF-8 in a label", unary("OpenSession", str(str(nil, 1, []byte("ns")), 2, bad)), "label")
	check("invalid UTF-8 in a query's namespace", unary("Query", str(nil, 1, bad)), "namespace")
	check("a truncated message", unary("OpenSession", openReq[:len(openReq)-3]), "")
	check("a varint that never ends", unary("Request", []byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), "")
	check("a session stream attach with invalid UTF-8", session(attach(bad)), "attach.namespace")
	check("a truncated session stream message", session(attach([]byte("ns"))[:4]), "")

	// Random bytes: what does not decode is InvalidArgument; what happens
	// to decode (unknown fields) is answered as the message it is. Never
	// Internal.
	rng := rand.New(rand.NewSource(11))
	garbage := 0
	for i := 0; i < 200; i++ {
		b := make([]byte, 1+rng.Intn(64))
		rng.Read(b)
		err := unary("Request", b)
		if proto.Unmarshal(b, &pb.LockRequest{}) != nil {
			garbage++
			check("random garbage", err, "")
		} else if status.Code(err) == codes.Internal || status.Code(err) == codes.Unknown {
			t.Errorf("random bytes that decode: %v", err)
		}
		if i%4 == 0 {
			if err := session(b); proto.Unmarshal(b, &pb.SessionUp{}) != nil {
				check("random garbage on the session stream", err, "")
			} else if status.Code(err) == codes.Internal {
				t.Errorf("random bytes on the session stream: %v", err)
			}
		}
	}
	if garbage < 50 {
		t.Fatalf("only %d of 200 random messages were garbage: the test proves little", garbage)
	}

	// The node goes on serving.
	if _, err := lc.OpenSession(ctx, &pb.OpenSessionRequest{Namespace: "after", Ttl: durationpb.New(time.Minute)}); err != nil {
		t.Fatalf("after the garbage: %v", err)
	}
}
