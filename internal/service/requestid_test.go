package service_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// TestOwnerlessCallersNeverShareALease: without authentication, two
// callers without an owner that happen to send the same request_id are two
// callers, not one retrying: the second is refused like anyone else while
// the first holds the key, and never handed the first one's lease.
func TestOwnerlessCallersNeverShareALease(t *testing.T) {
	t.Parallel()
	lc := startInstance(t, redistest.Start(t).Client(t), service.DefaultBounds()).client
	ctx := timeout(t, 30*time.Second)
	req := &lockdv1.AcquireRequest{Key: "rid/shared", RequestId: "retry-1", Ttl: durationpb.New(time.Minute)}
	x, err := lc.Acquire(ctx, req)
	if err != nil || !x.GetAcquired() {
		t.Fatalf("first caller = %v, %v", x, err)
	}
	y, err := lc.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if y.GetAcquired() {
		t.Fatalf("a second owner-less caller with the same request_id got %v; the first holds %v", y.GetLease(), x.GetLease())
	}
	// With an owner, the request_id is the owner's: its retry replays.
	owned := &lockdv1.AcquireRequest{Key: "rid/owned", Owner: "worker-1", RequestId: "retry-2", Ttl: durationpb.New(time.Minute)}
	first, err := lc.Acquire(ctx, owned)
	if err != nil || !first.GetAcquired() {
		t.Fatal(first, err)
	}
	again, err := lc.Acquire(ctx, owned)
	if err != nil || again.GetLease().GetLeaseId() != first.GetLease().GetLeaseId() || again.GetLease().GetHoldCount() != 1 {
		t.Fatalf("the owner's retry = %v, %v; want the first result", again, err)
	}
}
