package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestTwoProcessesShareLocks runs two lockd processes on one Redis: a lock
// taken through one excludes callers of the other, a waiter on one is woken
// by a release on the other, and SIGTERM stops a process cleanly.
func TestTwoProcessesShareLocks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := startLockd(t, nil, "--redis=redis://"+srv.Addr())
	b := startLockd(t, []string{"LOCKD_REDIS=" + srv.Addr()})
	la := lockdv1.NewLockServiceClient(a.dial(t))
	lb := lockdv1.NewLockServiceClient(b.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	overlaps := contend(ctx, t, []lockdv1.LockServiceClient{la, lb}, "e2e/shared", 16, 10)
	if overlaps != 0 {
		t.Fatalf("%d overlapping holds across two processes", overlaps)
	}
	if err := a.terminate(t); err != nil {
		t.Fatalf("lockd exit after SIGTERM: %v", err)
	}
	if err := b.terminate(t); err != nil {
		t.Fatalf("lockd exit after SIGTERM: %v", err)
	}
}

// contend has workers take turns on key through clients (round robin), each
// rounds times, holding it a millisecond, and returns how many grants found
// another holder still inside.
func contend(ctx context.Context, t *testing.T, clients []lockdv1.LockServiceClient, key string, workers, rounds int) int {
	t.Helper()
	var (
		mu       sync.Mutex
		holding  int
		overlaps int
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := clients[w%len(clients)]
			for range rounds {
				res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: fmt.Sprint("w", w), WaitTimeout: durationpb.New(30 * time.Second)})
				if err != nil || !res.GetAcquired() {
					t.Errorf("worker %d: %v, %v", w, res, err)
					return
				}
				mu.Lock()
				holding++
				overlaps += holding - 1
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holding--
				mu.Unlock()
				if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()}); err != nil {
					t.Errorf("worker %d release: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return overlaps
}
