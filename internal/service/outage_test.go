package service_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// TestFrozenRedis freezes Redis (SIGSTOP): calls fail with UNAVAILABLE
// within their own deadline, leases taken before stay releasable after
// Redis thaws, and a retried request_id acts once even if the first try
// reached Redis while it was frozen.
func TestFrozenRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lc := startInstance(t, srv.Client(t), service.DefaultBounds()).client
	ctx := timeout(t, time.Minute)
	before, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "frozen/held", Owner: "a", Ttl: durationpb.New(time.Minute)})
	if err != nil || !before.GetAcquired() {
		t.Fatal(before, err)
	}

	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	call := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := f(cctx)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s with Redis frozen: %v, want UNAVAILABLE", what, err)
		}
		if cctx.Err() != nil {
			t.Fatalf("%s: the answer came after the caller's deadline", what)
		}
	}
	call("Acquire with request_id", func(c context.Context) error {
		_, err := lc.Acquire(c, &lockdv1.AcquireRequest{Key: "frozen/new", Owner: "b", RequestId: "try-1", Ttl: durationpb.New(time.Minute)})
		return err
	})
	call("waiting WLock", func(c context.Context) error {
		_, err := lc.WLock(c, &lockdv1.WLockRequest{Key: "frozen/held", Owner: "c", WaitTimeout: durationpb.New(time.Minute)})
		return err
	})
	call("Release", func(c context.Context) error {
		_, err := lc.Release(c, &lockdv1.ReleaseRequest{Key: "frozen/held", LeaseId: before.GetLease().GetLeaseId()})
		return err
	})
	srv.Thaw()
	thawed = true

	// The retry acts once: the same lease, one hold.
	var retried *lockdv1.AcquireResponse
	waitFor(t, "the retried Acquire to succeed", func() bool {
		retried, err = lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "frozen/new", Owner: "b", RequestId: "try-1", Ttl: durationpb.New(time.Minute)})
		return err == nil
	})
	if !retried.GetAcquired() || retried.GetLease().GetHoldCount() != 1 {
		t.Fatalf("retried Acquire = %v, want one hold", retried)
	}
	again, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "frozen/new", Owner: "b", RequestId: "try-1", Ttl: durationpb.New(time.Minute)})
	if err != nil || again.GetLease().GetLeaseId() != retried.GetLease().GetLeaseId() || again.GetLease().GetHoldCount() != 1 {
		t.Fatalf("second retry = %v, %v", again, err)
	}
	// The lease taken before the outage is still held and releasable
	// (the Release that timed out may or may not have reached Redis, so
	// release by request_id, which acts once either way).
	rel, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "frozen/held", LeaseId: before.GetLease().GetLeaseId(), RequestId: "rel-1"})
	if status.Code(err) == codes.NotFound {
		t.Log("the frozen Release reached Redis after it thawed")
	} else if err != nil || rel.GetHoldCount() != 0 {
		t.Fatalf("Release after the outage = %v, %v", rel, err)
	}
	for range 2 {
		if rel, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "frozen/new", LeaseId: retried.GetLease().GetLeaseId(), RequestId: "rel-2"}); err != nil || rel.GetHoldCount() != 0 {
			t.Fatalf("retried Release = %v, %v", rel, err)
		}
	}
}
