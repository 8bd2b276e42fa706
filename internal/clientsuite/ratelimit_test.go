package clientsuite_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/ratelimit"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// startRateLimiter runs lockd's RateLimitService on a loopback port, on
// its own connection to srv, with opts; it returns the address.
func startRateLimiter(t *testing.T, srv *redistest.Server, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	engine := redislock.New(rdb, redislock.Options{})
	locks := service.NewLockServer(engine, service.DefaultBounds(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(service.Codec()),
		grpc.UnaryInterceptor(service.UnaryInterceptor)}, opts...)...)
	lockdv1.RegisterRateLimitServiceServer(gs, service.NewRateLimitServer(ratelimit.New(rdb, ratelimit.Options{}), locks))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		_ = engine.Close()
		_ = rdb.Close()
	})
	return lis.Addr().String()
}

// TestTakeAndWait: two clients on two replicas share one limit.
func TestTakeAndWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, []string{startRateLimiter(t, srv)}), newClient(t, []string{startRateLimiter(t, srv)})
	ctx := timeout(t, time.Minute)
	rate := client.Rate{Limit: 20, Period: time.Minute, Burst: 2} // a turn every 3s

	for i, c := range []*client.Client{a, b} {
		d, err := c.Take(ctx, "c/api", rate)
		if err != nil || !d.Allowed || d.Remaining != uint32(1-i) {
			t.Fatalf("take %d: %+v, %v", i, d, err)
		}
	}
	d, err := a.Take(ctx, "c/api", rate)
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 3*time.Second {
		t.Fatalf("third take of a burst of 2: %+v, %v", d, err)
	}
	// Wait gets the next turn.
	if d, err := b.Wait(ctx, "c/api", rate); err != nil || !d.Allowed {
		t.Fatalf("Wait: %+v, %v", d, err)
	}
	// A turn beyond the deadline is refused at once.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = a.Wait(short, "c/api", rate, client.WithCost(2))
	var limited *client.RateLimitedError
	if !errors.As(err, &limited) || !errors.Is(err, client.ErrRateLimited) || limited.RetryAfter <= time.Second || short.Err() != nil {
		t.Fatalf("Wait with a 1s deadline for a turn 6s away: %v (context %v)", err, short.Err())
	}
	// Another rate for the same key is refused while it is in use.
	_, err = a.Take(ctx, "c/api", client.Rate{Limit: 40, Period: time.Minute})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("another rate: %v, want FAILED_PRECONDITION", err)
	}
}

// TestTakeWhoseReplyIsLostSpendsOnce: the first replica decides and then
// loses the reply (UNAVAILABLE); the client asks the second with the same
// request_id and gets the same decision, spent once.
func TestTakeWhoseReplyIsLostSpendsOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var lost atomic.Int32
	loseFirst := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		res, err := handler(ctx, req)
		if err == nil && lost.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "reply lost")
		}
		return res, err
	})
	c := newClient(t, []string{startRateLimiter(t, srv, loseFirst), startRateLimiter(t, srv)})
	ctx := timeout(t, time.Minute)
	rate := client.Rate{Limit: 3, Period: time.Hour}
	if d, err := c.Take(ctx, "c/lost", rate); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("take whose first reply was lost: %+v, %v", d, err)
	}
	if lost.Load() < 1 {
		t.Fatal("no reply was lost")
	}
	if d, err := c.Take(ctx, "c/lost", rate); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("next take: %+v, %v; want 1 left (the lost reply spent once)", d, err)
	}
}
