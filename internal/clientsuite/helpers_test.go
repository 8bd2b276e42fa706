package clientsuite_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// replica is one lockd (its lock, election and semaphore services) on a
// loopback port, with its own connection to the Redis the other replicas of
// a test share.
type replica struct {
	addr  string
	rdb   *redis.Client
	gs    *grpc.Server
	locks *service.LockServer
}

func startReplica(t *testing.T, srv *redistest.Server, opts ...grpc.ServerOption) *replica {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	engine := redislock.New(rdb, redislock.Options{})
	locks := service.NewLockServer(engine, service.DefaultBounds(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(service.Codec()),
		grpc.UnaryInterceptor(service.UnaryInterceptor), grpc.StreamInterceptor(service.StreamInterceptor)}, opts...)...)
	lockdv1.RegisterLockServiceServer(gs, locks)
	lockdv1.RegisterElectionServiceServer(gs, service.NewElectionServer(locks))
	lockdv1.RegisterSemaphoreServiceServer(gs, service.NewSemaphoreServer(locks))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		_ = engine.Close()
		_ = rdb.Close()
	})
	return &replica{addr: lis.Addr().String(), rdb: rdb, gs: gs, locks: locks}
}

// kill stops the replica as a crash would: it loses Redis and its
// connections at once, without a chance to release anything.
func (r *replica) kill() {
	_ = r.rdb.Close()
	r.gs.Stop()
}

// drain shuts the replica down as SIGTERM does: streams end UNAVAILABLE,
// leases stay held.
func (r *replica) drain() {
	r.locks.Drain()
	r.gs.GracefulStop()
}

func newClient(t *testing.T, addrs []string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// raw returns a plain LockService stub for r.
func raw(t *testing.T, r *replica) lockdv1.LockServiceClient {
	t.Helper()
	return lockdv1.NewLockServiceClient(rawConn(t, r))
}

// rawConn returns a plain connection to r, closed at cleanup.
func rawConn(t *testing.T, r *replica) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
