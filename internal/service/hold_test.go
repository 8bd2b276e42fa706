package service_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/leasetest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// hold opens a Hold stream and returns it with its first response.
func hold(ctx context.Context, t *testing.T, lc lockdv1.LockServiceClient, req *lockdv1.HoldRequest) (lockdv1.LockService_HoldClient, *lockdv1.HoldResponse) {
	t.Helper()
	stream, err := lc.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("Hold %v: first response: %v", req, err)
	}
	return stream, first
}

// recvUntilErr reads a stream until it ends and returns how it ended.
func recvUntilErr(stream lockdv1.LockService_HoldClient) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}

func TestHoldContract(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		inst := startInstance(t, rdb, service.DefaultBounds())
		lc := inst.client
		ctx := timeout(t, time.Minute)

		// Granted: the first response carries the lease; unset mode is write.
		hctx, closeHold := context.WithCancel(ctx)
		defer closeHold()
		_, first := hold(hctx, t, lc, &lockdv1.HoldRequest{Key: "hold/1", Owner: "a", Ttl: durationpb.New(time.Minute)})
		l := first.GetLease()
		if !first.GetAcquired() || l.GetKey() != "hold/1" || l.GetOwner() != "a" || l.GetMode() != lockdv1.LockMode_LOCK_MODE_WRITE ||
			l.GetHoldCount() != 1 || l.GetTtl().AsDuration() != time.Minute || l.GetFencingToken() == 0 || first.GetRetryAfter() != nil {
			t.Fatalf("first Hold response = %v", first)
		}

		// Busy: acquired=false with the holder's remaining lease and name,
		// then the stream ends OK.
		busy, res := hold(ctx, t, lc, &lockdv1.HoldRequest{Key: "hold/1", Owner: "b", WaitTimeout: durationpb.New(50 * time.Millisecond)})
		if res.GetAcquired() || res.GetLease() != nil || res.GetRetryAfter().AsDuration() <= 0 || res.GetHolder() != "a" {
			t.Fatalf("busy Hold = %v", res)
		}
		if err := recvUntilErr(busy); !errors.Is(err, io.EOF) {
			t.Fatalf("busy Hold ended with %v, want OK", err)
		}

		// Closing the stream releases the lease at once: a waiter gets the
		// key long before the minute-long lease could run out.
		waiter := make(chan *lockdv1.AcquireResponse, 1)
		go func() {
			res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "hold/1", Owner: "c", WaitTimeout: durationpb.New(30 * time.Second)})
			if err != nil {
				t.Error(err)
			}
			waiter <- res
		}()
		waitFor(t, "the waiter to queue", func() bool { return queuedWaiters(ctx, rdb, "lockd:{hold/1}") == 1 })
		closeHold()
		if res := <-waiter; !res.GetAcquired() {
			t.Fatalf("waiter after the Hold closed: %v", res)
		}

		// Read holds share the key.
		for _, owner := range []string{"r1", "r2"} {
			_, res := hold(ctx, t, lc, &lockdv1.HoldRequest{Key: "hold/read", Owner: owner, Mode: lockdv1.LockMode_LOCK_MODE_READ})
			if !res.GetAcquired() || res.GetLease().GetMode() != lockdv1.LockMode_LOCK_MODE_READ {
				t.Fatalf("read Hold by %s = %v", owner, res)
			}
		}
	})
}

func TestHoldRenewsUntilLost(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		lc := startInstance(t, rdb, service.DefaultBounds()).client
		ctx := timeout(t, time.Minute)
		const ttl = time.Second
		stream, first := hold(ctx, t, lc, &lockdv1.HoldRequest{Key: "hold/renew", Owner: "a", Ttl: durationpb.New(ttl)})
		if !first.GetAcquired() {
			t.Fatal(first)
		}
		id := first.GetLease().GetLeaseId()

		// Each renewal is sent with a later expiry; meanwhile nobody else
		// gets the key, across several ttls.
		last := first.GetLease().GetExpireTime().AsTime()
		for renewals := 0; renewals < 4; {
			msg, err := stream.Recv()
			if err != nil {
				t.Fatalf("after %d renewals: %v", renewals, err)
			}
			if !msg.GetAcquired() || msg.GetLease().GetLeaseId() != id || msg.GetLease().GetTtl().AsDuration() != ttl {
				t.Fatalf("renewal = %v", msg)
			}
			if exp := msg.GetLease().GetExpireTime().AsTime(); exp.After(last) {
				last = exp
				renewals++
			}
		}
		if res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "hold/renew", Owner: "b"}); err != nil || res.GetAcquired() {
			t.Fatalf("key taken while held: %v, %v", res, err)
		}

		// The lease lost (here released by its id) ends the stream NOT_FOUND.
		if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "hold/renew", LeaseId: id}); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "Hold after its lease was released", recvUntilErr(stream), codes.NotFound)
	})
}

// TestHoldReleasesTheWholeLease re-enters an owner's lease through Hold:
// closing the stream releases every hold of it, not only the Hold's own.
func TestHoldReleasesTheWholeLease(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	lc := startInstance(t, rdb, service.DefaultBounds()).client
	ctx := timeout(t, time.Minute)
	a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "hold/reenter", Owner: "a", Ttl: durationpb.New(time.Minute)})
	if err != nil || !a.GetAcquired() {
		t.Fatal(a, err)
	}
	hctx, closeHold := context.WithCancel(ctx)
	_, res := hold(hctx, t, lc, &lockdv1.HoldRequest{Key: "hold/reenter", Owner: "a"})
	if res.GetLease().GetLeaseId() != a.GetLease().GetLeaseId() || res.GetLease().GetHoldCount() != 2 {
		t.Fatalf("re-entering Hold = %v", res)
	}
	closeHold()
	waitFor(t, "the whole lease to be released", func() bool {
		_, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: "hold/reenter", LeaseId: a.GetLease().GetLeaseId()})
		return err != nil
	})
	_, err = lc.Renew(ctx, &lockdv1.RenewRequest{Key: "hold/reenter", LeaseId: a.GetLease().GetLeaseId()})
	wantCode(t, "Renew after the Hold closed", err, codes.NotFound)
}

// TestHoldDrainKeepsTheLease: a draining replica ends Hold with
// UNAVAILABLE and leaves the lease held, to be resumed with KeepAlive on
// another replica.
func TestHoldDrainKeepsTheLease(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	inst := startInstance(t, rdb, service.DefaultBounds())
	other := startInstance(t, rdb, service.DefaultBounds()).client
	ctx := timeout(t, time.Minute)
	stream, res := hold(ctx, t, inst.client, &lockdv1.HoldRequest{Key: "hold/drain", Owner: "a", Ttl: durationpb.New(time.Minute)})
	if !res.GetAcquired() {
		t.Fatal(res)
	}
	inst.server.Drain()
	wantCode(t, "Hold on drain", recvUntilErr(stream), codes.Unavailable)
	ka, err := other.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "hold/drain", LeaseId: res.GetLease().GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := ka.Recv(); err != nil || msg.GetLease().GetFencingToken() != res.GetLease().GetFencingToken() {
		t.Fatalf("KeepAlive on another replica after drain: %v, %v", msg, err)
	}
}

func TestHoldBadInputAndLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	bounds := service.DefaultBounds()
	bounds.MaxKeepAlives = 1
	lc := startInstance(t, rdb, bounds).client
	ctx := timeout(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		req  *lockdv1.HoldRequest
	}{
		{"an empty key", &lockdv1.HoldRequest{}},
		{"an unknown mode", &lockdv1.HoldRequest{Key: "k", Mode: lockdv1.LockMode(7)}},
		{"a ttl below the minimum", &lockdv1.HoldRequest{Key: "k", Ttl: durationpb.New(time.Millisecond)}},
		{"a negative wait", &lockdv1.HoldRequest{Key: "k", WaitTimeout: durationpb.New(-time.Second)}},
		{"an owner with a control character", &lockdv1.HoldRequest{Key: "k", Owner: "a\nb"}},
	} {
		stream, err := lc.Hold(ctx, tc.req)
		if err == nil {
			err = recvUntilErr(stream)
		}
		wantCode(t, tc.name, err, codes.InvalidArgument)
	}

	// A Hold is a KeepAlive stream: it counts against --max-keepalives.
	_, res := hold(ctx, t, lc, &lockdv1.HoldRequest{Key: "hold/limit"})
	if !res.GetAcquired() {
		t.Fatal(res)
	}
	stream, err := lc.Hold(ctx, &lockdv1.HoldRequest{Key: "hold/limit2"})
	if err == nil {
		err = recvUntilErr(stream)
	}
	wantCode(t, "a second Hold over the stream limit", err, codes.ResourceExhausted)
}

// TestHoldEndsWhenRedisLosesItsData restarts Redis empty under a Hold: the
// stream ends NOT_FOUND.
func TestHoldEndsWhenRedisLosesItsData(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lc := startInstance(t, srv.Client(t), service.DefaultBounds()).client
	ctx := timeout(t, time.Minute)
	stream, res := hold(ctx, t, lc, &lockdv1.HoldRequest{Key: "hold/restart", Ttl: durationpb.New(time.Second)})
	if !res.GetAcquired() {
		t.Fatal(res)
	}
	srv.Restart(t)
	wantCode(t, "Hold after Redis lost its data", recvUntilErr(stream), codes.NotFound)
}

// TestHoldNeverWaitsOnTheClient stalls every send after the first (as a
// client that stops reading with a full flow-control window would): the
// lease is still renewed, and when sends resume the client gets the latest
// lease, not every renewal it missed.
func TestHoldNeverWaitsOnTheClient(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	gate := &sendGate{open: make(chan struct{})}
	lc := startInstance(t, rdb, service.DefaultBounds(), grpc.ChainStreamInterceptor(gate.intercept)).client
	ctx := timeout(t, time.Minute)
	const ttl = 1500 * time.Millisecond
	stream, first := hold(ctx, t, lc, &lockdv1.HoldRequest{Key: "hold/stalled", Ttl: durationpb.New(ttl)})
	if !first.GetAcquired() {
		t.Fatal(first)
	}
	id := first.GetLease().GetLeaseId()

	// Several renewals land in Redis while no send can complete.
	var seen []time.Time
	waitFor(t, "renewals while sends are stalled", func() bool {
		exp, err := leasetest.Expiry(ctx, rdb, "hold/stalled", id)
		if err != nil {
			t.Fatalf("lease gone while sends were stalled: %v", err)
		}
		if len(seen) == 0 || exp.After(seen[len(seen)-1]) {
			seen = append(seen, exp)
		}
		return len(seen) >= 4 && gate.stalled()
	})
	latest := seen[len(seen)-1]
	close(gate.open)

	// The send that was stalled completes, then the latest lease comes:
	// the renewals in between were never queued. The renewal seen last in
	// Redis may not have reached the sender yet when the gate opened, so
	// the one before it may come first: at most that one.
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if !msg.GetLease().GetExpireTime().AsTime().Before(latest) {
			break
		}
		if i == 1 {
			t.Fatalf("after the stall the client got two leases older than the latest renewal (%v): missed renewals were queued", latest)
		}
	}
}

// sendGate lets the first message of each stream through and holds every
// later one until open is closed.
type sendGate struct {
	open chan struct{}
	mu   sync.Mutex
	held int
}

func (g *sendGate) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &gatedStream{ServerStream: ss, gate: g})
}

func (g *sendGate) stalled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held > 0
}

type gatedStream struct {
	grpc.ServerStream
	gate *sendGate
	sent int
}

func (s *gatedStream) SendMsg(m any) error {
	s.sent++
	if s.sent > 1 {
		s.gate.mu.Lock()
		s.gate.held++
		s.gate.mu.Unlock()
		select {
		case <-s.gate.open:
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
	return s.ServerStream.SendMsg(m)
}

// queuedWaiters reads how many waiters a lock record's queue counts: nw,
// the third number of its header (field h, see the redislock package's
// common.lua).
func queuedWaiters(ctx context.Context, rdb redis.UniversalClient, record string) int {
	h, _ := rdb.HGet(ctx, record, "h").Result()
	parts := strings.Split(h, "|")
	if len(parts) < 3 {
		return 0
	}
	n, _ := strconv.Atoi(parts[2])
	return n
}
