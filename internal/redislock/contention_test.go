package redislock_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
)

// contractMutualExclusionUnderContention has many goroutines on two engines
// sharing one Redis take turns on a few keys, counting holders that overlap
// and checking that fencing tokens only rise.
func contractMutualExclusionUnderContention(t *testing.T, b backend) {
	engines := []*redislock.Client{
		b.newClient(t, redislock.Options{}),
		b.newClient(t, redislock.Options{}),
	}
	const (
		workers = 32
		rounds  = 15
		keys    = 2
	)
	type guard struct {
		mu        sync.Mutex
		writers   int
		readers   int
		lastToken uint64
	}
	guards := make([]*guard, keys)
	for i := range guards {
		guards[i] = &guard{}
	}
	var overlaps, backwards, grants atomic.Int64
	ctx := ctxT(t, 2*time.Minute)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := engines[w%len(engines)]
			for r := range rounds {
				k := (w + r) % keys
				mode := redislock.Write
				if (w+r)%4 == 0 {
					mode = redislock.Read
				}
				res, err := c.Acquire(ctx, redislock.Request{
					Key: fmt.Sprint("contended/", k), Mode: mode,
					Owner: fmt.Sprint("worker-", w), TTL: 30 * time.Second, Wait: time.Minute,
				})
				if err != nil || !res.Acquired {
					t.Errorf("worker %d: %+v, %v", w, res, err)
					return
				}
				grants.Add(1)
				g := guards[k]
				g.mu.Lock()
				if mode == redislock.Write {
					if g.writers > 0 || g.readers > 0 {
						overlaps.Add(1)
					}
					// Writers are serialised, so their tokens must
					// rise in the order they were granted.
					if res.Lease.FencingToken <= g.lastToken {
						backwards.Add(1)
					}
					g.lastToken = res.Lease.FencingToken
					g.writers++
				} else {
					if g.writers > 0 {
						overlaps.Add(1)
					}
					if res.Lease.FencingToken <= g.lastToken {
						backwards.Add(1)
					}
					g.readers++
				}
				g.mu.Unlock()
				time.Sleep(time.Millisecond)
				g.mu.Lock()
				if mode == redislock.Write {
					g.writers--
				} else {
					g.readers--
				}
				g.mu.Unlock()
				if _, err := c.Release(ctx, fmt.Sprint("contended/", k), res.Lease.ID, ""); err != nil {
					t.Errorf("worker %d release: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || backwards.Load() != 0 {
		t.Fatalf("%d overlapping holds and %d fencing tokens that did not rise in %d grants", overlaps.Load(), backwards.Load(), grants.Load())
	}
	if grants.Load() != workers*rounds {
		t.Fatalf("%d grants, want %d", grants.Load(), workers*rounds)
	}
}
