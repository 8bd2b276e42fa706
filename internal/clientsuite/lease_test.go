package clientsuite_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/leasetest"
	"github.com/lockd/lockd/internal/redistest"
)

// TestLeaseMovesToAnotherReplica kills, then drains, the replica a lease
// is kept alive through: the lease resumes KeepAlive on the next replica
// and stays held.
func TestLeaseMovesToAnotherReplica(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"killed", "drained"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			a, b := startReplica(t, srv), startReplica(t, srv)
			c := newClient(t, []string{a.addr, b.addr})
			ctx := timeout(t, time.Minute)
			l, err := c.Acquire(ctx, "c/move", client.WithTTL(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			leasetest.Renewals(ctx, t, l, 1)
			if how == "killed" {
				a.kill()
			} else {
				a.drain()
			}
			leasetest.Renewals(ctx, t, l, 4)
			if res, err := raw(t, b).Acquire(ctx, &lockdv1.AcquireRequest{Key: "c/move"}); err != nil || res.GetAcquired() {
				t.Fatalf("key taken while the lease moved: %v, %v", res, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release through the other replica: %v", err)
			}
		})
	}
}

// TestLeaseLeavesASilentReplica has a replica stop sending renewals while
// its stream stays open: the client opens a stream on the next replica and
// lets the silent one go only once the new one works, so the old stream's
// release on close finds a newer keeper and leaves the lease held.
func TestLeaseLeavesASilentReplica(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	silence := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &silentStream{ServerStream: ss})
	}
	a := startReplica(t, srv, grpc.ChainStreamInterceptor(silence))
	b := startReplica(t, srv)
	c := newClient(t, []string{a.addr, b.addr})
	ctx := timeout(t, time.Minute)
	l, err := c.Acquire(ctx, "c/silent", client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	leasetest.Renewals(ctx, t, l, 4) // the first through a, the rest through b
	if res, err := raw(t, b).Acquire(ctx, &lockdv1.AcquireRequest{Key: "c/silent"}); err != nil || res.GetAcquired() {
		t.Fatalf("key taken after the lease left the silent replica: %v, %v", res, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// silentStream sends its first message and then nothing, as a replica
// that froze would.
type silentStream struct {
	grpc.ServerStream
	sent bool
}

func (s *silentStream) SendMsg(m any) error {
	if s.sent {
		<-s.Context().Done()
		return s.Context().Err()
	}
	s.sent = true
	return s.ServerStream.SendMsg(m)
}

// TestRetryReturnsTheGrantWhoseReplyWasLost has the first replica grant a
// lock and then answer UNAVAILABLE, as if the reply were lost: the retry on
// the second replica, with the same request_id, returns that grant rather
// than taking a second hold.
func TestRetryReturnsTheGrantWhoseReplyWasLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var dropped atomic.Int32
	dropReply := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		res, err := handler(ctx, req)
		if info.FullMethod == lockdv1.LockService_Acquire_FullMethodName && err == nil && dropped.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "reply lost")
		}
		return res, err
	}
	a := startReplica(t, srv, grpc.ChainUnaryInterceptor(dropReply))
	b := startReplica(t, srv)
	c := newClient(t, []string{a.addr, b.addr})
	ctx := timeout(t, time.Minute)
	l, err := c.Acquire(ctx, "c/retry", client.WithOwner("billing-1"), client.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	if dropped.Load() != 1 {
		t.Fatalf("%d replies dropped, want 1", dropped.Load())
	}
	// One hold: a single Release frees the key.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := raw(t, b).Acquire(ctx, &lockdv1.AcquireRequest{Key: "c/retry", Owner: "someone-else"})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("key still held after one Release: %v, %v", res, err)
	}
}

// TestGivingUpTakesBackALostGrant has every reply to a waiting Acquire
// lost after the grant: when the caller gives up, the client takes the
// grant back, so the key is free long before the lease would run out.
func TestGivingUpTakesBackALostGrant(t *testing.T) {
	t.Parallel()
	dropReply := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		res, err := handler(ctx, req)
		if r, ok := req.(*lockdv1.AcquireRequest); ok && r.GetWaitTimeout().AsDuration() > 0 {
			return nil, status.Error(codes.Unavailable, "reply lost")
		}
		return res, err
	}
	r := startReplica(t, redistest.Start(t), grpc.ChainUnaryInterceptor(dropReply))
	c := newClient(t, []string{r.addr})
	ctx := timeout(t, time.Minute)
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := c.Acquire(short, "c/undo", client.WithTTL(time.Hour), client.WithWait(30*time.Second)); err == nil {
		t.Fatal("Acquire succeeded with every reply lost")
	}
	lc := raw(t, r)
	for {
		res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "c/undo", Owner: "next"})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetAcquired() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLostBeforeTheLeaseRunsOut kills every replica under a lease: with no
// renewal confirmed, Lost closes while Redis still holds the lease, so
// before anyone else can be granted the key.
func TestLostBeforeTheLeaseRunsOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	a, b := startReplica(t, srv), startReplica(t, srv)
	c := newClient(t, []string{a.addr, b.addr})
	ctx := timeout(t, time.Minute)
	l, err := c.Acquire(ctx, "c/cut-off", client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	leasetest.Renewals(ctx, t, l, 1)
	a.kill()
	b.kill()
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("Lost did not close")
	}
	// Redis, not the lockd replicas, decides expiry: the lease must still
	// be there when its holder is told it is lost.
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	expiry, err := leasetest.Expiry(ctx, rdb, "c/cut-off", l.ID())
	if err != nil {
		t.Fatalf("the lease was gone from Redis when Lost closed: %v", err)
	}
	if !expiry.After(now) {
		t.Fatalf("Lost closed at Redis time %v, after the lease expired at %v", now, expiry)
	}
	if !errors.Is(l.Err(), client.ErrLost) {
		t.Fatalf("Err = %v", l.Err())
	}
}

// TestMutexExcludes has goroutines of two clients (one per replica) take
// turns on one Mutex key and counts overlapping holders.
func TestMutexExcludes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := startReplica(t, srv), startReplica(t, srv)
	clients := []*client.Client{newClient(t, []string{a.addr}), newClient(t, []string{b.addr})}
	ctx := timeout(t, 2*time.Minute)
	var (
		mu                sync.Mutex
		holding, overlaps int
		lastToken         uint64
		backwards, rounds int
		wg                sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := clients[w%2].NewMutex("c/mutex")
			for range 5 {
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				holding++
				overlaps += holding - 1
				if m.Lease().FencingToken() <= lastToken {
					backwards++
				}
				lastToken = m.Lease().FencingToken()
				rounds++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holding--
				mu.Unlock()
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps != 0 || backwards != 0 || rounds != 40 {
		t.Fatalf("%d overlaps, %d tokens that did not rise, %d rounds of 40", overlaps, backwards, rounds)
	}
	m := clients[0].NewMutex("c/mutex")
	if err := m.Unlock(ctx); !errors.Is(err, client.ErrNotLocked) {
		t.Fatalf("Unlock of an unlocked Mutex = %v", err)
	}
	if err := m.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := clients[1].NewMutex("c/mutex").TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock of a locked key = %v", err)
	}
}
