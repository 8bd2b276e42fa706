// Package grpctest lets tests send requests as raw protobuf bytes, as a
// client in another language, or a hostile one, may: strings that are not
// UTF-8, truncated or garbage messages.
package grpctest

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// String encodes a string field without checking its UTF-8.
func String(num protowire.Number, v string) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), []byte(v))
}

// Invoke sends req's bytes as they are to a unary method and discards the
// reply.
func Invoke(ctx context.Context, conn *grpc.ClientConn, method string, req []byte) error {
	var reply []byte
	return conn.Invoke(ctx, method, &req, &reply, grpc.ForceCodecV2(Codec{}))
}

// Codec passes *[]byte messages through as they are.
type Codec struct{}

// Name is "proto", so that servers take the bytes as protobuf.
func (Codec) Name() string { return "proto" }

// Marshal returns the bytes of a *[]byte.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

// Unmarshal stores the bytes in a *[]byte.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
