package client_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// TestPermitLimits fills a semaphore of 3: a fourth permit is refused, a
// different limit is FAILED_PRECONDITION, and a permit given back is taken.
func TestPermitLimits(t *testing.T) {
	t.Parallel()
	c, other := newClient(t), newClient(t)
	ctx := timeout(t, time.Minute)
	const limit = 3
	held := make([]*client.Lease, limit)
	for i := range held {
		p, err := c.AcquirePermit(ctx, "c/sem-full", limit, client.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		held[i] = p
	}
	if _, err := other.AcquirePermit(ctx, "c/sem-full", limit, client.WithWait(0)); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("a permit beyond the limit: %v, want ErrLocked", err)
	}
	if _, err := other.AcquirePermit(ctx, "c/sem-full", limit+1, client.WithWait(0)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a different limit: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := other.AcquirePermit(ctx, "c/sem-full", 0); err == nil {
		t.Fatal("a limit of 0 was taken")
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.AcquirePermit(ctx, "c/sem-full", limit, client.WithWait(0)); err != nil {
		t.Fatalf("a permit given back was not taken: %v", err)
	}
}

// TestCrashedHoldersPermitComesBack takes the only permit with a holder
// that never renews it (as one that crashed): a waiting client gets it
// once its lease runs out, and keeps its own alive past several ttls.
func TestCrashedHoldersPermitComesBack(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := timeout(t, time.Minute)
	sems := lockdv1.NewSemaphoreServiceClient(rawConn(t))
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
