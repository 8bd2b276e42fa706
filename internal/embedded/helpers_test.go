package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
)

// startStore starts a Store that is closed when the test ends.
func startStore(t *testing.T) *Store {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newClient returns a go-redis client for addr, closed when the test ends.
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// backend is a server the lock scripts may run on.
type backend struct {
	name   string
	mini   bool
	client *redis.Client
}

// backends returns the embedded store and a real redis-server.
func backends(t *testing.T) []backend {
	t.Helper()
	return []backend{
		{name: "embedded", mini: true, client: newClient(t, startStore(t).Addr())},
		{name: "redis-server", client: redistest.Start(t).Client(t)},
	}
}

// eventually polls cond every 5 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serverTime reads TIME in microseconds.
func serverTime(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now.UnixMicro()
}
