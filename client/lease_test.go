package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

func TestLeaseKeepsItselfAlive(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	other := newClient(t)
	ctx := timeout(t, time.Minute)

	l, err := c.Acquire(ctx, "c/alive", client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Key() != "c/alive" || l.ID() == "" || l.FencingToken() == 0 || l.Mode() != client.Write || l.Owner() == "" {
		t.Fatalf("lease: key %q id %q token %d mode %v owner %q", l.Key(), l.ID(), l.FencingToken(), l.Mode(), l.Owner())
	}
	renewals(ctx, t, l, 4) // more than a ttl
	_, err = other.Acquire(ctx, "c/alive", client.WithWait(0))
	var busy *client.LockedError
	if !errors.Is(err, client.ErrLocked) || !errors.As(err, &busy) || busy.RetryAfter <= 0 {
		t.Fatalf("Acquire of a kept lease = %v, want ErrLocked with a retry_after", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("second Release = %v", err)
	}
	l2, err := other.Acquire(ctx, "c/alive", client.WithWait(0))
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	if l2.FencingToken() <= l.FencingToken() {
		t.Fatalf("fencing token %d after %d", l2.FencingToken(), l.FencingToken())
	}
	select {
	case <-l.Lost():
		t.Fatal("a released lease reported lost")
	default:
	}
}

// TestLostWhenTheLeaseIsGone releases a lease behind its holder's back:
// the KeepAlive stream ends NOT_FOUND and Lost closes.
func TestLostWhenTheLeaseIsGone(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := timeout(t, time.Minute)
	l, err := c.Acquire(ctx, "c/gone", client.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw(t).Release(ctx, &lockdv1.ReleaseRequest{Key: "c/gone", LeaseId: l.ID()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("Lost did not close")
	}
	if !errors.Is(l.Err(), client.ErrLost) {
		t.Fatalf("Err = %v", l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Release of a lost lease = %v", err)
	}
}

// TestLockedUntilTheWaitEnds: a key held by others gives ErrLocked once
// WithWait's bound is over, and the context's error without one.
func TestLockedUntilTheWaitEnds(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := timeout(t, time.Minute)
	if _, err := c.Acquire(ctx, "c/busy"); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []time.Duration{0, 100 * time.Millisecond} {
		_, err := c.Acquire(ctx, "c/busy", client.WithWait(wait))
		if !errors.Is(err, client.ErrLocked) {
			t.Fatalf("wait %v: %v, want ErrLocked", wait, err)
		}
	}
	// Without WithWait, Acquire waits until its context ends.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(short, "c/busy"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until the deadline = %v, want DeadlineExceeded", err)
	}
	// Read locks wait for the writer too.
	if _, err := c.AcquireRead(ctx, "c/busy", client.WithWait(0)); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("read lock of a written key = %v", err)
	}
}

// TestLockedErrorTellsWhoAndHowLong: every call that finds a key held by
// others says who holds it and for how long, in a *LockedError matching
// ErrLocked; TryLock too.
func TestLockedErrorTellsWhoAndHowLong(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := timeout(t, time.Minute)
	if _, err := c.Acquire(ctx, "c/who", client.WithOwner("holder-1"), client.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquirePermit(ctx, "c/who-sem", 1, client.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		try    func() error
		key    string
		holder string
	}{
		{"Mutex.TryLock", func() error { return c.NewMutex("c/who").TryLock(ctx) }, "c/who", "holder-1"},
		{"RWMutex.TryLock", func() error { return c.NewRWMutex("c/who").TryLock(ctx) }, "c/who", "holder-1"},
		{"RWMutex.TryRLock", func() error { return c.NewRWMutex("c/who").TryRLock(ctx) }, "c/who", "holder-1"},
		{"Acquire", func() error { _, err := c.Acquire(ctx, "c/who", client.WithWait(0)); return err }, "c/who", "holder-1"},
		{"AcquireRead", func() error { _, err := c.AcquireRead(ctx, "c/who", client.WithWait(0)); return err }, "c/who", "holder-1"},
		{"AcquirePermit", func() error { _, err := c.AcquirePermit(ctx, "c/who-sem", 1, client.WithWait(0)); return err }, "c/who-sem", ""},
	} {
		err := tc.try()
		var locked *client.LockedError
		if !errors.Is(err, client.ErrLocked) || !errors.As(err, &locked) {
			t.Fatalf("%s of a held key = %#v, want a *LockedError matching ErrLocked", tc.name, err)
		}
		if locked.Key != tc.key || locked.Holder != tc.holder || locked.RetryAfter <= 0 || locked.RetryAfter > time.Minute {
			t.Fatalf("%s: %+v, want key %q, holder %q, and a retry-after within the holder's minute", tc.name, *locked, tc.key, tc.holder)
		}
	}
}

// TestSameOwnerSharesOneLease re-enters one owner's lease twice: both holds
// share one lease, kept alive until the last is released.
func TestSameOwnerSharesOneLease(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := timeout(t, time.Minute)
	opts := []client.AcquireOption{client.WithOwner("job-7"), client.WithTTL(2 * time.Second), client.WithWait(0)}
	l1, err := c.Acquire(ctx, "c/reenter", opts...)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, "c/reenter", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if l1.ID() != l2.ID() || l1.FencingToken() != l2.FencingToken() || l2.Owner() != "job-7" {
		t.Fatalf("re-entry gave lease %s/%d, want %s/%d", l2.ID(), l2.FencingToken(), l1.ID(), l1.FencingToken())
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	renewals(ctx, t, l2, 4)
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "c/reenter", client.WithWait(0)); err != nil {
		t.Fatalf("key held after both holds were released: %v", err)
	}
}

func TestRWMutex(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := timeout(t, time.Minute)
	rw, other := c.NewRWMutex("c/rw"), c.NewRWMutex("c/rw")
	if err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.TryRLock(ctx); err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	if err := other.TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("writer while read-locked: %v", err)
	}
	for _, m := range []*client.RWMutex{rw, other} {
		if err := m.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := rw.RUnlock(ctx); !errors.Is(err, client.ErrNotLocked) {
		t.Fatalf("RUnlock without a read lock = %v", err)
	}
	if err := rw.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if rw.Lease() == nil || rw.Lease().Mode() != client.Write {
		t.Fatalf("write lease = %v", rw.Lease())
	}
	if err := other.TryRLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("reader while write-locked: %v", err)
	}
	if err := rw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.TryRLock(ctx); err != nil {
		t.Fatalf("reader after Unlock: %v", err)
	}
}

// TestClosedClient: calls on a closed client fail at once, and Close
// releases the leases whose owner the client made up.
func TestClosedClient(t *testing.T) {
	t.Parallel()
	c, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, time.Minute)
	if _, err := c.Acquire(ctx, "c/closed", client.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "c/other"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Acquire on a closed client = %v", err)
	}
	res, err := raw(t).Acquire(ctx, &lockdv1.AcquireRequest{Key: "c/closed", WaitTimeout: durationpb.New(30 * time.Second)})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("a minute-long lease of a closed client still held: %v, %v", res, err)
	}
}

func TestNoAddress(t *testing.T) {
	t.Parallel()
	if _, err := client.New(nil); err == nil {
		t.Fatal("New without addresses succeeded")
	}
}
