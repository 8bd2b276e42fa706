package server

import (
	"fmt"
	"net"
	"testing"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
