package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStartPrivateHasNoListener: a private store opens no listening socket
// (no other process can reach it), yet serves commands, Lua and pub/sub
// through Dial.
func TestStartPrivateHasNoListener(t *testing.T) {
	t.Parallel()
	s, err := StartPrivate()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if s.Addr() != "" {
		t.Fatalf("a private store has address %q", s.Addr())
	}
	if srv := s.mr.Server(); srv.Addr() != nil {
		t.Fatalf("a private store listens on %v", srv.Addr())
	}
	rdb := redis.NewClient(&redis.Options{Addr: "embedded", Dialer: s.Dial, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := rdb.Subscribe(ctx, "ch")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Eval(ctx, "redis.call('PUBLISH', 'ch', 'hi'); return redis.call('GET', KEYS[1])", []string{"k"}).Text()
	if err != nil || got != "v" {
		t.Fatalf("EVAL = %q, %v", got, err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "hi" {
		t.Fatalf("pub/sub: %v, %v", msg, err)
	}
	// A large pipeline, as the lock engine's renewals send, passes too.
	pipe := rdb.Pipeline()
	for range 5000 {
		pipe.Set(ctx, "bulk", "0123456789012345678901234567890123456789", time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Dial(ctx, "", ""); err == nil {
		t.Fatal("Dial after Close succeeded")
	}
}
