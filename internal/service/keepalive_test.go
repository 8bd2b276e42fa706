package service_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// unreadStream is a KeepAlive stream whose client never reads: once its
// flow-control window is full, every Send blocks until the stream ends.
type unreadStream struct {
	lockdv1.LockService_KeepAliveServer
	ctx   context.Context
	sends atomic.Int64
}

func (s *unreadStream) Context() context.Context { return s.ctx }

func (s *unreadStream) Send(*lockdv1.KeepAliveResponse) error {
	s.sends.Add(1)
	<-s.ctx.Done()
	return s.ctx.Err()
}

// TestKeepAliveRenewsForAClientThatNeverReads keeps a lease alive on a
// stream whose Send blocks for good, as it does once a client that never
// reads has filled its window: the lease must go on being renewed for many
// ttls, and no one else may take the key.
func TestKeepAliveRenewsForAClientThatNeverReads(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	inst := startInstance(t, rdb, service.DefaultBounds())
	ctx := timeout(t, time.Minute)
	const ttl = time.Second
	a, err := inst.client.Acquire(ctx, &lockdv1.AcquireRequest{Key: "unread", Owner: "a", Ttl: durationpb.New(ttl)})
	if err != nil || !a.GetAcquired() {
		t.Fatal(a, err)
	}
	sctx, closeStream := context.WithCancel(ctx)
	stream := &unreadStream{ctx: sctx}
	ended := make(chan error, 1)
	go func() {
		ended <- inst.server.KeepAlive(&lockdv1.KeepAliveRequest{Key: "unread", LeaseId: a.GetLease().GetLeaseId()}, stream)
	}()
	for end := time.Now().Add(5 * ttl); time.Now().Before(end); time.Sleep(ttl / 5) {
		select {
		case err := <-ended:
			t.Fatalf("KeepAlive ended: %v", err)
		default:
		}
		res, err := inst.client.Acquire(ctx, &lockdv1.AcquireRequest{Key: "unread", Owner: "intruder"})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetAcquired() {
			t.Fatal("another owner was granted the key: the lease of a stream nobody reads was not renewed")
		}
	}
	if n := stream.sends.Load(); n != 1 {
		t.Fatalf("%d sends started on a stream whose first send never returned, want 1", n)
	}
	closeStream()
	if err := <-ended; status.Code(err) != codes.Canceled {
		t.Fatalf("KeepAlive after the client went = %v", err)
	}
}

// TestOnlyTheNewestStreamReleasesOnClose resumes a lease's KeepAlive on a
// second replica, as a client does when the first one seems gone, then
// closes the first stream: the lease stays held, because only the newest
// stream of a lease may release it; closing that one releases it.
func TestOnlyTheNewestStreamReleasesOnClose(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	replicaA := startInstance(t, rdb, service.DefaultBounds()).client
	replicaB := startInstance(t, rdb, service.DefaultBounds()).client
	ctx := timeout(t, time.Minute)
	a, err := replicaA.Acquire(ctx, &lockdv1.AcquireRequest{Key: "resumed", Owner: "a", Ttl: durationpb.New(time.Minute)})
	if err != nil || !a.GetAcquired() {
		t.Fatal(a, err)
	}
	req := &lockdv1.KeepAliveRequest{Key: "resumed", LeaseId: a.GetLease().GetLeaseId(), ReleaseOnClose: true}
	actx, closeA := context.WithCancel(ctx)
	streamA, err := replicaA.KeepAlive(actx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streamA.Recv(); err != nil {
		t.Fatal(err)
	}
	bctx, closeB := context.WithCancel(ctx)
	defer closeB()
	streamB, err := replicaB.KeepAlive(bctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streamB.Recv(); err != nil {
		t.Fatal(err)
	}

	closeA()
	for {
		if _, err := streamA.Recv(); err != nil {
			break
		}
	}
	// The release that closing A would have done is attempted at once;
	// Renew shows whether it happened (repeated, to see it settle).
	for range 20 {
		if _, err := replicaB.Renew(ctx, &lockdv1.RenewRequest{Key: "resumed", LeaseId: a.GetLease().GetLeaseId()}); err != nil {
			t.Fatalf("the stale stream's close released the lease kept alive on another replica: %v", err)
		}
		if res, err := replicaB.Acquire(ctx, &lockdv1.AcquireRequest{Key: "resumed", Owner: "b"}); err != nil || res.GetAcquired() {
			t.Fatalf("another owner got the key after the stale stream closed: %v, %v", res, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	closeB()
	waitFor(t, "the newest stream's close to release the lease", func() bool {
		res, err := replicaA.Acquire(ctx, &lockdv1.AcquireRequest{Key: "resumed", Owner: "b"})
		return err == nil && res.GetAcquired()
	})
}

// TestReleaseOnCloseReleasesEveryHold keeps alive a lease held twice by its
// owner and closes the stream: release_on_close ends the whole lease at
// once, not one hold of it.
func TestReleaseOnCloseReleasesEveryHold(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		lc := startInstance(t, rdb, service.DefaultBounds()).client
		ctx := timeout(t, time.Minute)
		var lease *lockdv1.Lease
		for range 2 {
			a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "twice", Owner: "a", Ttl: durationpb.New(time.Hour)})
			if err != nil || !a.GetAcquired() {
				t.Fatal(a, err)
			}
			lease = a.GetLease()
		}
		if lease.GetHoldCount() != 2 {
			t.Fatalf("hold_count %d, want 2", lease.GetHoldCount())
		}
		sctx, closeStream := context.WithCancel(ctx)
		stream, err := lc.KeepAlive(sctx, &lockdv1.KeepAliveRequest{Key: "twice", LeaseId: lease.GetLeaseId(), ReleaseOnClose: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		closeStream()
		waitFor(t, "the whole lease to be released", func() bool {
			res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "twice", Owner: "b"})
			return err == nil && res.GetAcquired()
		})
		_, err = lc.Renew(ctx, &lockdv1.RenewRequest{Key: "twice", LeaseId: lease.GetLeaseId()})
		wantCode(t, "Renew of the released lease", err, codes.NotFound)
	})
}

// TestKeepAliveEndsForAClientThatStoppedReading lets a client stop reading
// its KeepAlive stream until the stream's window is full, then has the
// lease lost: the stream still ends, and the client reads NOT_FOUND after
// the leases buffered for it.
func TestKeepAliveEndsForAClientThatStoppedReading(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	inst := startInstance(t, rdb, service.DefaultBounds())
	lc := inst.client
	ctx := timeout(t, time.Minute)
	key := strings.Repeat("k", 500) // big leases fill the window soon
	a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: strings.Repeat("o", 250), Ttl: durationpb.New(150 * time.Millisecond)})
	if err != nil || !a.GetAcquired() {
		t.Fatal(a, err)
	}
	stream, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: key, LeaseId: a.GetLease().GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	// About 160 leases fill the window; renewals come every 50ms. (On a
	// machine too loaded to renew a 150ms lease in time it lapses sooner,
	// and the stream ends all the same.)
	start := redistest.ScriptCalls(t, rdb)
	waitFor(t, "the window to fill", func() bool {
		return redistest.ScriptCalls(t, rdb)-start > 250 || inst.server.KeepAliveStreams() == 0
	})
	// The lease goes (released here; on a loaded machine it may also have
	// lapsed): the stream ends with NOT_FOUND either way.
	_, _ = lc.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: a.GetLease().GetLeaseId()})
	received := 0
	for {
		if _, err := stream.Recv(); err != nil {
			wantCode(t, "KeepAlive of a lost lease", err, codes.NotFound)
			break
		}
		received++
	}
	t.Logf("%d leases were buffered before NOT_FOUND", received)
	waitFor(t, "the stream to be closed on the server", func() bool { return inst.server.KeepAliveStreams() == 0 })
}
