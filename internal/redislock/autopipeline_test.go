package redislock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestAutoPipelineKeepsEachCallersOrder has many goroutines take and give
// back a key of their own, each as fresh owner, at once, through one
// autopipelined engine, on every backend: each call must run after the
// caller's previous one, or a take would find the key still held by the
// caller's last lease.
func TestAutoPipelineKeepsEachCallersOrder(t *testing.T) {
	t.Parallel()
	backends := map[string]func(t *testing.T) redis.UniversalClient{
		"redis":    func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) },
		"cluster":  func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t, 3).ClusterClient(t) },
		"sentinel": func(t *testing.T) redis.UniversalClient { return redistest.StartSentinel(t).FailoverClient(t) },
		"embedded": func(t *testing.T) redis.UniversalClient {
			st, err := embedded.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			rdb := redis.NewClient(&redis.Options{Addr: st.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, open(t), redislock.Options{Prefix: "t-order", AutoPipeline: true})
			const callers, rounds = 32, 40
			ctx := ctxT(t, 2*time.Minute)
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprint("order/", w)
					for r := range rounds {
						res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, TTL: time.Minute})
						if err != nil || !res.Acquired {
							errs <- fmt.Errorf("caller %d round %d: acquire = %+v, %v (its last release had not run)", w, r, res, err)
							return
						}
						if n, err := c.Release(ctx, key, res.Lease.ID, ""); err != nil || n != 0 {
							errs <- fmt.Errorf("caller %d round %d: release = %d, %v", w, r, n, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}
