package client_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
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

	held := make([]*client.Lease, limit)
	for i := range held {
		p, err := clients[0].AcquirePermit(ctx, "c/sem-full", limit, client.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		held[i] = p
	}
	if _, err := clients[1].AcquirePermit(ctx, "c/sem-full", limit, client.WithWait(0)); !errors.Is(err, client.ErrNotAcquired) {
		t.Fatalf("a permit beyond the limit: %v, want ErrNotAcquired", err)
	}
	if _, err := clients[1].AcquirePermit(ctx, "c/sem-full", limit+1, client.WithWait(0)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a different limit: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := clients[1].AcquirePermit(ctx, "c/sem-full", 0); err == nil {
		t.Fatal("a limit of 0 was taken")
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := clients[1].AcquirePermit(ctx, "c/sem-full", limit, client.WithWait(0)); err != nil {
		t.Fatalf("a permit given back was not taken: %v", err)
	}
}

// TestCrashedHoldersPermitComesBack takes the only permit with a holder
// that never renews it (as one that crashed): a waiting client gets it
// once its lease runs out, and keeps its own alive past several ttls.
func TestCrashedHoldersPermitComesBack(t *testing.T) {
	t.Parallel()
	r := startReplica(t, redistest.Start(t))
	c := newClient(t, []string{r.addr})
	ctx := timeout(t, time.Minute)
	sems := lockdv1.NewSemaphoreServiceClient(rawConn(t, r))
	res, err := sems.Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: "c/sem-crash", Limit: 1, Ttl: durationpb.New(time.Second)})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("Acquire = %v, %v", res, err)
	}
	p, err := c.AcquirePermit(ctx, "c/sem-crash", 1, client.WithTTL(time.Second), client.WithWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if p.FencingToken() <= res.GetLease().GetFencingToken() {
		t.Fatalf("fencing token %d after %d", p.FencingToken(), res.GetLease().GetFencingToken())
	}
	exp := p.ExpireTime()
	for !p.ExpireTime().After(exp.Add(2 * time.Second)) {
		select {
		case <-p.Lost():
			t.Fatalf("permit lost: %v", p.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	again, err := sems.Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: "c/sem-crash", Limit: 1})
	if err != nil || again.GetAcquired() {
		t.Fatalf("a kept permit was taken again: %v, %v", again, err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
