package service_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// TestLeasesRenewedElsewhereCount: two replicas on one Redis, two clients
// with limits.leases 1. Each takes a lease with a short ttl on replica A
// and renews it on replica B, orders by Renew for an hour and shop by a
// KeepAlive that stays open (with a ttl of 3s, so that it renews, and
// learns of the release, within a second even if it missed the notice). B counts both as held: neither client gets a second lease
// there, and a reload that removes them releases both through B, though
// A granted them (the KeepAlive ends NOT_FOUND).
func TestLeasesRenewedElsewhereCount(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	_, onA := leaseReplica(t, rdb)
	b, onB := leaseReplica(t, rdb)
	ctx := timeout(t, time.Minute)
	orders := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+ordersToken)
	shop := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+shopToken)
	take := func(ctx context.Context, c lockdv1.LockServiceClient, key string) (*lockdv1.AcquireResponse, error) {
		return c.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: "w", Ttl: durationpb.New(2 * time.Second)})
	}

	first, err := take(orders, onA, "orders/1")
	if err != nil || !first.GetAcquired() {
		t.Fatalf("orders' lease on A: %v, %v", first, err)
	}
	if _, err := onB.Renew(orders, &lockdv1.RenewRequest{Key: "orders/1", LeaseId: first.GetLease().GetLeaseId(), Ttl: durationpb.New(time.Hour)}); err != nil {
		t.Fatalf("orders' renewal on B: %v", err)
	}
	kept, err := take(shop, onA, "shop/1")
	if err != nil || !kept.GetAcquired() {
		t.Fatalf("shop's lease on A: %v, %v", kept, err)
	}
	stream, err := onB.KeepAlive(shop, &lockdv1.KeepAliveRequest{Key: "shop/1", LeaseId: kept.GetLease().GetLeaseId(), Ttl: durationpb.New(3 * time.Second)})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		t.Fatalf("shop's KeepAlive on B: %v", err)
	}

	for who, ctx := range map[string]context.Context{"orders": orders, "shop": shop} {
		if res, err := take(ctx, onB, who+"/2"); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s's second lease on B, which renewed its first: %v, %v (want RESOURCE_EXHAUSTED: its limits.leases is 1)", who, res, err)
		}
	}

	// A reload removes both clients: B releases what it renewed.
	if n := b.Revoke(ctx, func(string, string) bool { return false }); n != 2 {
		t.Errorf("B revoked %d leases, want 2 (the two it renewed)", n)
	}
	for err = nil; err == nil; {
		_, err = stream.Recv() // renewals sent before the release may come first
	}
	if status.Code(err) != codes.NotFound {
		t.Errorf("shop's KeepAlive after its client was revoked: %v, want NOT_FOUND", err)
	}
	engine := redislock.New(rdb, redislock.Options{})
	t.Cleanup(func() { _ = engine.Close() })
	for _, key := range []string{"orders/1", "shop/1"} {
		waitFor(t, key+" free after its client was revoked on B", func() bool {
			info, err := engine.Describe(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			return info.Held == 0
		})
	}
}

// shopToken is the bearer token of client shop (ordersToken, orders').
const shopToken = "shop-bearer-token-012345"

// leaseReplica is one LockServer on rdb behind authentication of two
// clients, orders and shop, each with limits.leases 1 and its own prefix.
func leaseReplica(t *testing.T, rdb redis.UniversalClient) (*service.LockServer, lockdv1.LockServiceClient) {
	t.Helper()
	a, err := auth.New([]auth.Client{
		{Name: "orders", Token: ordersToken, Locks: []string{"orders/"}, Limits: config.Limits{Leases: 1}},
		{Name: "shop", Token: shopToken, Locks: []string{"shop/"}, Limits: config.Limits{Leases: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	engine := redislock.New(rdb, redislock.Options{})
	t.Cleanup(func() { _ = engine.Close() })
	srv := service.NewLockServer(engine, service.DefaultBounds(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	conn := serveWith(t, a, func(gs *grpc.Server) { lockdv1.RegisterLockServiceServer(gs, srv) })
	return srv, lockdv1.NewLockServiceClient(conn)
}

// TestLeasesRenewedElsewhereCountWhereTaken: orders (limits.leases 1)
// takes a lease for 100ms on replica A and renews it for an hour on
// replica B. Once the 100ms have passed, A still counts it, as Redis
// says it is held: orders gets no second lease through A, so it cannot
// pile up leases by taking them on A and renewing them on B. Once it
// releases the lease on B, A frees its place (it asks Redis again within
// seconds).
func TestLeasesRenewedElsewhereCountWhereTaken(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	_, onA := leaseReplica(t, rdb)
	_, onB := leaseReplica(t, rdb)
	orders := metadata.AppendToOutgoingContext(timeout(t, time.Minute), "authorization", "Bearer "+ordersToken)
	take := func(key string, ttl time.Duration) (*lockdv1.AcquireResponse, error) {
		return onA.Acquire(orders, &lockdv1.AcquireRequest{Key: key, Owner: "w", Ttl: durationpb.New(ttl)})
	}

	first, err := take("orders/where-taken-1", 100*time.Millisecond)
	if err != nil || !first.GetAcquired() {
		t.Fatalf("orders' lease on A: %v, %v", first, err)
	}
	if _, err := onB.Renew(orders, &lockdv1.RenewRequest{Key: "orders/where-taken-1", LeaseId: first.GetLease().GetLeaseId(), Ttl: durationpb.New(time.Hour)}); err != nil {
		t.Fatalf("orders' renewal on B: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // past the ttl A granted
	if res, err := take("orders/where-taken-2", time.Hour); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("orders' second lease on A, its first still held: %v, %v (want RESOURCE_EXHAUSTED: its limits.leases is 1)", res, err)
	}
	if _, err := onB.Release(orders, &lockdv1.ReleaseRequest{Key: "orders/where-taken-1", LeaseId: first.GetLease().GetLeaseId()}); err != nil {
		t.Fatalf("orders' release on B: %v", err)
	}
	waitFor(t, "orders' second lease on A once its first was released on B", func() bool {
		res, err := take("orders/where-taken-2", time.Hour)
		if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatal(err)
		}
		return res.GetAcquired()
	})
}
