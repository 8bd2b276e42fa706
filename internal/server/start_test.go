package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// TestAFailedStartLeavesNothingBehind: a start that fails at its last
// step (the HTTP port taken) returns that error, and stops what the steps
// before it started: its gRPC and gateway ports can be listened on again,
// and its connections to Redis are closed.
func TestAFailedStartLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients := func() int {
		list, err := rdb.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(list, "\n")
	}
	before := clients()

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	grpcAddr, gatewayAddr := freeAddr(t), freeAddr(t)
	err = Run(ctx, Config{Redis: srv.Addr(), Listen: grpcAddr, GatewayListen: gatewayAddr, HTTPListen: taken.Addr().String(),
		Bounds: service.DefaultBounds(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "listen "+taken.Addr().String()) {
		t.Fatalf("Run with its HTTP port taken = %v, want that listen error", err)
	}
	for _, addr := range []string{grpcAddr, gatewayAddr} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s is still taken after the failed start: %v", addr, err)
			continue
		}
		l.Close()
	}
	waitFor(t, "lockd's Redis connections to close", func() bool { return clients() <= before })
}

// freeAddr returns a loopback address with a port free just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
