package service

import (
	"context"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A request whose string field is not valid UTF-8 cannot be decoded by the
// standard codec, and gRPC answers INTERNAL before any handler runs. lockd
// owes the caller INVALID_ARGUMENT naming the field, so its codec moves such
// a field's bytes to an unknown field number (the field's own number plus
// movedFieldOffset), where protobuf keeps raw bytes without checking them,
// and the interceptors below refuse the request, naming the field.
const movedFieldOffset = 1 << 24

// malformedField is the unknown field number (the largest protobuf allows)
// the codec sets, in an otherwise empty message, when a request is not a
// valid protobuf encoding at all: gRPC would answer a decoding error with
// INTERNAL, so the codec never fails and the interceptors answer
// INVALID_ARGUMENT.
const malformedField protowire.Number = protowire.MaxValidNumber

// Codec returns the gRPC codec lockd's server uses: the standard proto codec,
// except that decoding never fails: a top-level string field holding invalid
// UTF-8, or a message that is not valid protobuf at all, is marked instead,
// and UnaryInterceptor and StreamInterceptor refuse it with INVALID_ARGUMENT.
func Codec() encoding.CodecV2 { return lenientCodec{} }

type lenientCodec struct{}

func (lenientCodec) Name() string { return "proto" }

func (lenientCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (lenientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := v.(proto.Message)
	// A message in one buffer (most are) is read where it lies, as gRPC's
	// own codec does: proto.Unmarshal copies what it keeps.
	b := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer b.Free()
	buf := b.ReadOnlyData()
	err := proto.Unmarshal(buf, m)
	if err == nil {
		return nil
	}
	if moved, ok := moveInvalidStrings(buf, m.ProtoReflect().Descriptor()); ok {
		if err := proto.Unmarshal(moved, m); err == nil {
			return nil
		}
	}
	proto.Reset(m)
	m.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, malformedField, protowire.BytesType), nil))
	return nil
}

// moveInvalidStrings rewrites the top-level string fields of buf that hold
// invalid UTF-8 to unknown field numbers. It reports false when there is
// nothing to move or buf is malformed.
func moveInvalidStrings(buf []byte, md protoreflect.MessageDescriptor) ([]byte, bool) {
	out := make([]byte, 0, len(buf))
	moved := false
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, buf[n:])
		if m < 0 {
			return nil, false
		}
		field := buf[:n+m]
		if fd := md.Fields().ByNumber(num); fd != nil && fd.Kind() == protoreflect.StringKind && typ == protowire.BytesType {
			if v, _ := protowire.ConsumeBytes(buf[n:]); !utf8.Valid(v) {
				out = protowire.AppendTag(out, num+movedFieldOffset, protowire.BytesType)
				out = protowire.AppendBytes(out, v)
				moved = true
				buf = buf[n+m:]
				continue
			}
		}
		out = append(out, field...)
		buf = buf[n+m:]
	}
	return out, moved
}

// invalidUTF8 returns INVALID_ARGUMENT for a request the codec marked as
// not protobuf, or naming the first field the codec had to move for
// invalid UTF-8; nil for any other request.
func invalidUTF8(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	unknown := m.ProtoReflect().GetUnknown()
	md := m.ProtoReflect().Descriptor()
	for len(unknown) > 0 {
		num, typ, n := protowire.ConsumeTag(unknown)
		if n < 0 {
			return nil
		}
		if num == malformedField {
			return invalid("the request is not a valid %s message", md.FullName())
		}
		if fd := md.Fields().ByNumber(num - movedFieldOffset); num > movedFieldOffset && fd != nil {
			return invalid("%s must be valid UTF-8", fd.Name())
		}
		m := protowire.ConsumeFieldValue(num, typ, unknown[n:])
		if m < 0 {
			return nil
		}
		unknown = unknown[n+m:]
	}
	return nil
}

// UnaryInterceptor refuses requests whose string fields held invalid UTF-8
// with INVALID_ARGUMENT naming the field. Use it with Codec.
func UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := invalidUTF8(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamInterceptor is UnaryInterceptor for the messages of a stream.
func StreamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, checkedStream{ss})
}

type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return invalidUTF8(m)
}
