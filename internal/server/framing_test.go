package server

import (
	"bytes"
	"encoding/binary"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// grpcFrame is a gRPC length-prefixed message: the compressed flag, the
// length, the bytes.
func grpcFrame(flag byte, length int, payload []byte) []byte {
	b := []byte{flag}
	b = binary.BigEndian.AppendUint32(b, uint32(length))
	return append(b, payload...)
}

// rawCall sends one request on a new HTTP/2 connection, written frame by
// frame (headers, then each DATA frame; the last ends the stream), and
// returns the grpc-status and grpc-message of the answer.
func rawCall(t *testing.T, addr, path string, extra map[string]string, data ...[]byte) (codes.Code, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}}
	for k, v := range extra {
		fields = append(fields, [2]string{k, v})
	}
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: len(data) == 0}); err != nil {
		t.Fatal(err)
	}
	for i, d := range data {
		if err := fr.WriteData(1, i == len(data)-1, d); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("the server reset the stream: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("the server went away: %v", f.ErrCode)
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 || !f.StreamEnded() {
				continue
			}
			code, err := strconv.Atoi(f.PseudoValue("status")) // a Trailers-Only answer has :status
			if f.PseudoValue("status") != "" && (err != nil || code != 200) {
				t.Fatalf(":status %s", f.PseudoValue("status"))
			}
			c, err := strconv.Atoi(headerValue(f, "grpc-status"))
			if err != nil {
				t.Fatalf("no grpc-status in %v", f.Fields)
			}
			return codes.Code(c), headerValue(f, "grpc-message")
		}
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// What a server with DecodeOptions answers to malformed gRPC framing, one
// case at a time on the wire. grpc-go (v1.85.0) answers the framing errors
// itself, before the codec runs and before any interceptor: the generated
// unary handler decodes the request before it calls the interceptor chain,
// and serverStream.RecvMsg writes the status to the stream itself
// (stream.go) before returning the error, so nothing of ours can map it.
// Internal there: a message cut short by the end of the stream (its
// 5-byte prefix or its body), the compressed flag without a grpc-encoding,
// a flag byte other than 0 or 1, no request message, or two, on a unary
// RPC (rpc_util.go, recvMsg, checkRecvPayload; stream.go, RecvMsg). A
// compressed message in an encoding the server does not have is
// Unimplemented; a length over the limit, ResourceExhausted. Bytes that
// are framed correctly and do not decode are ours: InvalidArgument. If
// grpc-go changes any of these, this test fails: update the README
// ("never Internal").
func TestMalformedFramingAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(DecodeOptions()...)
	pb.RegisterLocksServer(g, pb.UnimplementedLocksServer{})
	go g.Serve(l)
	t.Cleanup(g.Stop)
	addr := l.Addr().String()
	unary := pb.Locks_Query_FullMethodName
	for _, tc := range []struct {
		name  string
		extra map[string]string
		data  [][]byte
		want  codes.Code
	}{
		// Framed correctly: the handler runs (Unimplemented here), or our
		// codec refuses the bytes.
		{name: "well-formed", data: [][]byte{grpcFrame(0, 0, nil)}, want: codes.Unimplemented},
		{name: "garbage-message", data: [][]byte{grpcFrame(0, 2, []byte{0x0a, 0xff})}, want: codes.InvalidArgument},
		// grpc-go's own answers.
		{name: "body-cut-short", data: [][]byte{grpcFrame(0, 10, []byte{0x0a, 0x00})}, want: codes.Internal},
		{name: "prefix-cut-short", data: [][]byte{{0, 0, 0}}, want: codes.Internal},
		{name: "compressed-flag-no-encoding", data: [][]byte{grpcFrame(1, 0, nil)}, want: codes.Internal},
		{name: "flag-byte-2", data: [][]byte{grpcFrame(2, 0, nil)}, want: codes.Internal},
		{name: "no-message", want: codes.Internal},
		{name: "two-messages", data: [][]byte{append(grpcFrame(0, 0, nil), grpcFrame(0, 0, nil)...)}, want: codes.Internal},
		{name: "unknown-encoding", extra: map[string]string{"grpc-encoding": "gzip"}, data: [][]byte{grpcFrame(1, 0, nil)}, want: codes.Unimplemented},
		{name: "length-over-limit", data: [][]byte{grpcFrame(0, 1<<30, nil)}, want: codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := rawCall(t, addr, unary, tc.extra, tc.data...)
			t.Logf("%v: %s", code, msg)
			if code != tc.want {
				t.Fatalf("%v %q, want %v", code, msg, tc.want)
			}
		})
	}
}
