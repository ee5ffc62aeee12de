package server

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Messages that do not decode are the caller's mistake, not the node's:
// InvalidArgument (TypeError), never Internal (SPEC §9, issue 11). grpc-go
// turns any error of the codec's Unmarshal into codes.Internal before an
// interceptor or handler sees the call, so the server's codec never fails:
// on a decode error it resets the message and leaves a marker on it (an
// unknown field), and decodeUnary and decodeStream, which see the message
// before anything else does, answer a marked message with InvalidArgument.
// A proto3 string field that is not valid UTF-8 (names, namespaces sent by a
// client that does not validate them) is named in the answer; a truncated
// or garbage message is described as such. The .proto is unchanged.

// decodeMarker is the field number of the marker: the largest a field may
// have, used by no message of this API. Its value is the error's message.
const decodeMarker protowire.Number = protowire.MaxValidNumber

// decodeMagic starts the marker's value, so that a client's own unknown
// field of that number is not taken for one.
const decodeMagic = "lockcluster-decode-error\x00"

type decodeCodec struct{ proto encoding.CodecV2 }

// DecodeOptions are the server options that make undecodable messages
// InvalidArgument: the codec and its interceptors. Pass them to
// grpc.NewServer after the metrics interceptors (so that the refusals are
// counted) and before auth (garbage has no namespace to authorise).
func DecodeOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(decodeCodec{proto: encoding.GetCodecV2("proto")}),
		grpc.ChainUnaryInterceptor(decodeUnary),
		grpc.ChainStreamInterceptor(decodeStream),
	}
}

func (c decodeCodec) Name() string { return c.proto.Name() }

func (c decodeCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c decodeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	err := proto.Unmarshal(b, m)
	if err == nil {
		if r := m.ProtoReflect(); len(r.GetUnknown()) > 0 && decodeFailure(m) != nil {
			r.SetUnknown(nil) // a client's own "marker": not a decode error
		}
		return nil
	}
	proto.Reset(m)
	r := m.ProtoReflect()
	var mark []byte
	mark = protowire.AppendTag(mark, decodeMarker, protowire.BytesType)
	field, msg := describeDecodeError(r.Descriptor(), b, err)
	mark = protowire.AppendString(mark, decodeMagic+field+"\x00"+msg)
	r.SetUnknown(mark)
	return nil
}

// describeDecodeError says what is wrong with b, which did not decode as a
// message of type md: the first string field that is not UTF-8, by its
// path (attach.namespace), or that the message is not valid protobuf
// (field "").
func describeDecodeError(md protoreflect.MessageDescriptor, b []byte, err error) (field, msg string) {
	if path := badUTF8(md, b, 0); path != "" {
		return path, fmt.Sprintf("%s: field %s is not valid UTF-8", md.FullName(), path)
	}
	return "", fmt.Sprintf("the message is not a valid %s (truncated or not protobuf): %s", md.FullName(), strings.TrimPrefix(err.Error(), "proto: "))
}

// badUTF8 walks the wire form of a message of type md and returns the path
// of the first string field whose value is not valid UTF-8 ("" if none, or
// if the bytes stop making sense first).
func badUTF8(md protoreflect.MessageDescriptor, b []byte, depth int) string {
	if depth > 32 {
		return ""
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return string(fd.Name())
			}
		case protoreflect.MessageKind, protoreflect.GroupKind:
			if fd.IsMap() {
				// A map entry's key and value: name the map.
				if badUTF8(fd.Message(), v, depth+1) != "" {
					return string(fd.Name())
				}
			} else if p := badUTF8(fd.Message(), v, depth+1); p != "" {
				return string(fd.Name()) + "." + p
			}
		}
	}
	return ""
}

// decodeFailure returns the InvalidArgument error a marked message stands
// for, or nil.
func decodeFailure(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	u := pm.ProtoReflect().GetUnknown()
	for len(u) > 0 {
		num, typ, n := protowire.ConsumeTag(u)
		if n < 0 {
			return nil
		}
		u = u[n:]
		if num == decodeMarker && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(u)
			if n < 0 {
				return nil
			}
			if rest, ok := strings.CutPrefix(string(v), decodeMagic); ok {
				field, msg, _ := strings.Cut(rest, "\x00")
				return invalidField(field, msg)
			}
			u = u[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, u); n < 0 {
			return nil
		}
		u = u[n:]
	}
	return nil
}

// decodeUnary answers a call whose request did not decode with
// InvalidArgument.
func decodeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := decodeFailure(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// decodeStream makes a stream message that did not decode an
// InvalidArgument error of RecvMsg, which ends the stream with it.
func decodeStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, decodedStream{ss})
}

type decodedStream struct{ grpc.ServerStream }

func (s decodedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return decodeFailure(m)
}
