package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestWatchSeesTokensMintedByAnotherProcess watches through one lockd
// process while another replaces and renews the token.
func TestWatchSeesTokensMintedByAnotherProcess(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{ExpiresIn: 6 * time.Second})
	configPath, env := tokenSetup(t, fake)
	a := startLockd(t, env, "--redis="+srv.Addr(), "--config="+configPath)
	b := startLockd(t, env, "--redis="+srv.Addr(), "--config="+configPath)
	ca, cb := lockdv1.NewTokenServiceClient(a.dial(t)), lockdv1.NewTokenServiceClient(b.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	stream, err := ca.WatchAccessToken(ctx, &lockdv1.WatchAccessTokenRequest{App: "stable"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	fake.Reject(first.GetAccessToken())
	res, err := cb.RefreshAccessToken(ctx, &lockdv1.RefreshAccessTokenRequest{App: "stable", InvalidToken: first.GetAccessToken()})
	if err != nil {
		t.Fatal(err)
	}
	second, err := stream.Recv()
	if err != nil || second.GetAccessToken() != res.GetAccessToken() {
		t.Fatalf("the watch through A after B replaced the token: %v, %v", second, err)
	}
	// The watch is demand: the processes renew the token as it runs out,
	// and the watch hears of each renewal.
	for i := range 2 {
		next, err := stream.Recv()
		if err != nil || next.GetAccessToken() == second.GetAccessToken() || !fake.Valid(next.GetAccessToken()) {
			t.Fatalf("renewal %d: %v, %v", i, next, err)
		}
		second = next
	}
	if err := a.terminate(t); err != nil {
		t.Fatalf("lockd exit after SIGTERM: %v", err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("the watch outlived its process")
	}
}

// TestSIGTERMLetsAMintUnderWayStore stops lockd while WeChat is answering
// its mint: the token is stored and the app's lock released before lockd
// exits, so the other replicas neither wait nor mint again.
func TestSIGTERMLetsAMintUnderWayStore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	configPath, env := tokenSetup(t, fake)
	a := startLockd(t, env, "--redis="+srv.Addr(), "--config="+configPath)
	b := startLockd(t, env, "--redis="+srv.Addr(), "--config="+configPath)
	fake.SetLatency(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		_, _ = lockdv1.NewTokenServiceClient(a.dial(t)).GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "classic"})
	}()
	for fake.Mints("wx-classic") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := a.terminate(t); err != nil {
		t.Fatalf("lockd exit after SIGTERM: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	cached, err := rdb.HGet(ctx, "lockd:token:{"+token.Identity(wechat.Config{Provider: wechat.ProviderWeChat, AppID: "wx-classic", Secret: classicSecret})+"}", "token").Result()
	if err != nil || !fake.Valid(cached) {
		t.Fatalf("lockd exited without storing the token it was minting: %q, %v", cached, err)
	}
	fake.SetLatency(0)
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	res, err := lockdv1.NewTokenServiceClient(b.dial(t)).GetAccessToken(short, &lockdv1.GetAccessTokenRequest{App: "classic"})
	if err != nil || res.GetAccessToken() != cached || fake.Mints("wx-classic") != 1 {
		t.Fatalf("the other replica: %v, %v; %d mints, want the stored token", res, err, fake.Mints("wx-classic"))
	}
}
