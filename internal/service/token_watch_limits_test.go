package service_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/token"
)

// TestWatchStreamsAreBounded: a replica allows 3 WatchAccessToken streams
// at once, and client "orders" (keepalives: 1) one of its own. Orders'
// second stream is RESOURCE_EXHAUSTED while "shop" is served; beyond 3 in
// all every client is refused; a stream that ends gives its place back.
func TestWatchStreamsAreBounded(t *testing.T) {
	t.Parallel()
	b, _, _ := newBroker(t, token.Options{})
	a, err := auth.New([]auth.Client{
		{Name: "orders", Token: "orders-bearer-token-0123", Apps: []string{"classic"}, Limits: config.Limits{KeepAlives: 1}},
		// shop's own limit is above the replica's, so that the
		// replica's is what bounds it (not its fair share).
		{Name: "shop", Token: "shop-bearer-token-012345", Apps: []string{"classic"}, Limits: config.Limits{Watches: 5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := service.NewTokenServer(b, slog.New(slog.NewTextHandler(io.Discard, nil)), service.WithMaxWatches(3))
	conn := serveWith(t, a, func(gs *grpc.Server) { lockdv1.RegisterTokenServiceServer(gs, srv) })
	c := lockdv1.NewTokenServiceClient(conn)
	ctx := timeout(t, time.Minute)
	orders := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer orders-bearer-token-0123")
	shop := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer shop-bearer-token-012345")

	watch := func(ctx context.Context) (error, func()) { return watchClassic(ctx, c) }
	mustOpen := func(who string, ctx context.Context) func() {
		t.Helper()
		err, stop := watch(ctx)
		if err != nil {
			t.Fatalf("%s's watch: %v", who, err)
		}
		return stop
	}
	mustRefuse := func(who string, ctx context.Context) {
		t.Helper()
		if err, _ := watch(ctx); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s's watch beyond the limit: %v, want RESOURCE_EXHAUSTED", who, err)
		}
	}

	stopOrders := mustOpen("orders", orders)
	mustRefuse("orders (its own limit)", orders)
	stopShop1 := mustOpen("shop", shop)
	mustOpen("shop", shop)
	mustRefuse("shop (the replica's limit)", shop)
	stopOrders()
	stopShop1()
	// Places come back once the server has seen the streams end.
	deadline := time.Now().Add(20 * time.Second)
	for {
		err, _ := watch(orders)
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("orders' watch after streams ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchClassic opens a WatchAccessToken stream of app "classic" and
// returns its first answer's error and a function that closes it.
func watchClassic(ctx context.Context, c lockdv1.TokenServiceClient) (error, func()) {
	sctx, cancel := context.WithCancel(ctx)
	s, err := c.WatchAccessToken(sctx, &lockdv1.WatchAccessTokenRequest{App: "classic"})
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		cancel()
	}
	return err, cancel
}

// TestWatchStreamsFairShare: two clients without limits of their own on a
// replica of 4 WatchAccessToken places. Orders gets its fair share, 2 (half
// the pool), and its third is RESOURCE_EXHAUSTED though the replica has
// places left; shop still gets in.
func TestWatchStreamsFairShare(t *testing.T) {
	t.Parallel()
	b, _, _ := newBroker(t, token.Options{})
	a, err := auth.New([]auth.Client{
		{Name: "orders", Token: "orders-bearer-token-0123", Apps: []string{"classic"}},
		{Name: "shop", Token: "shop-bearer-token-012345", Apps: []string{"classic"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := service.NewTokenServer(b, slog.New(slog.NewTextHandler(io.Discard, nil)), service.WithMaxWatches(4))
	conn := serveWith(t, a, func(gs *grpc.Server) { lockdv1.RegisterTokenServiceServer(gs, srv) })
	c := lockdv1.NewTokenServiceClient(conn)
	ctx := timeout(t, time.Minute)
	orders := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer orders-bearer-token-0123")
	shop := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer shop-bearer-token-012345")

	for i := range 2 {
		if err, _ := watchClassic(orders, c); err != nil {
			t.Fatalf("orders' watch %d of its fair share: %v", i+1, err)
		}
	}
	err, _ = watchClassic(orders, c)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "fair share") {
		t.Fatalf("orders' third watch: %v, want RESOURCE_EXHAUSTED for its fair share (2 of 4)", err)
	}
	if err, _ := watchClassic(shop, c); err != nil {
		t.Fatalf("shop's watch while orders has its fair share: %v", err)
	}
}
