package token_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// readCounter counts the broker's reads of the classic app's cached token
// (read.lua: five keys, the first the token's hash) and slows them down, so
// that a burst of callers is certain to overlap one read.
type readCounter struct {
	reads atomic.Int64
	delay atomic.Int64 // a time.Duration
}

func (h *readCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *readCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *readCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) == 9 && args[3] == classicKey {
			h.reads.Add(1)
			time.Sleep(time.Duration(h.delay.Load()))
		}
		return next(ctx, cmd)
	}
}

func TestOneReplicaReadsTheCacheOncePerBurst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	rdb := srv.Client(t)
	hook := &readCounter{}
	rdb.AddHook(hook)
	b, err := token.New(rdb, apps(fake), token.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := timeout(t, 30*time.Second)
	warm, err := b.Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}

	hook.reads.Store(0)
	hook.delay.Store(int64(200 * time.Millisecond))
	f := &fleet{brokers: []*token.Broker{b}}
	if got := oneToken(t, "burst", f.concurrently(200, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, "classic", anyone) })); got != warm {
		t.Fatalf("burst got %v, want the cached %v", got, warm)
	}
	if n := hook.reads.Load(); n > 3 {
		t.Fatalf("200 concurrent calls made %d cache reads, want one (a few at most)", n)
	}
}

func TestWaitersAreWokenByTheNoticeNotTheRecheck(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	fake.SetLatency(300 * time.Millisecond)
	// Without the notice, a waiter would sleep until the re-check (a
	// minute), past the deadline.
	f := newFleet(t, srv, 3, apps(fake), token.Options{Recheck: time.Minute})
	ctx := timeout(t, 15*time.Second)
	oneToken(t, "cold Get", f.concurrently(60, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, "wecom", anyone) }))
	if n := fake.Mints("ww-corp"); n != 1 {
		t.Fatalf("%d mints, want 1", n)
	}
}
