package clientsuite_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/redistest"
)

// TestPermitsCappedAtLimit has many holders in two clients take permits
// of a semaphore of 3: never more than 3 hold one at once, counted.
func TestPermitsCappedAtLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := startReplica(t, srv), startReplica(t, srv)
	clients := []*client.Client{newClient(t, []string{a.addr}), newClient(t, []string{b.addr})}
	ctx := timeout(t, 2*time.Minute)
	const limit = 3
	var in, most, rounds atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				p, err := clients[i%2].AcquirePermit(ctx, "c/sem", limit, client.WithTTL(5*time.Second))
				if err != nil {
					errs <- err
					return
				}
				if p.Mode() != client.Permit || p.FencingToken() == 0 {
					errs <- errors.New("a permit without its mode or fencing token")
				}
				n := in.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				in.Add(-1)
				rounds.Add(1)
				if err := p.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most.Load() > limit || rounds.Load() != 36 {
		t.Fatalf("%d permits held at once (limit %d), %d rounds", most.Load(), limit, rounds.Load())
	}
}
