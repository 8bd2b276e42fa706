package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// backend is one store the lock contract runs against.
type backend struct {
	name string
	rdb  *redis.Client
	// restart empties the store as a Redis restart without persistence does;
	// nil where the store cannot.
	restart func(tb testing.TB)
}

// eachBackend runs fn against a real redis-server and the embedded store.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		fn(t, backend{name: "redis", rdb: srv.Client(t), restart: srv.Restart})
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		st, err := embedded.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		rdb := redis.NewClient(&redis.Options{Addr: st.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		fn(t, backend{name: "embedded", rdb: rdb})
	})
}

func newClient(t *testing.T, rdb redis.UniversalClient, opts redislock.Options) *redislock.Client {
	t.Helper()
	c := redislock.New(rdb, opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, c *redislock.Client, req redislock.Request) redislock.Lease {
	t.Helper()
	res, err := c.Acquire(ctxT(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	if !res.Acquired {
		t.Fatalf("Acquire(%+v): not acquired, retry after %v", req, res.RetryAfter)
	}
	return res.Lease
}

func mustRefuse(t *testing.T, c *redislock.Client, req redislock.Request) redislock.Result {
	t.Helper()
	res, err := c.Acquire(ctxT(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	if res.Acquired {
		t.Fatalf("Acquire(%+v): acquired %+v, want refused", req, res.Lease)
	}
	return res
}
