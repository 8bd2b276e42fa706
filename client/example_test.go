package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/lockd/lockd/client"
)

// The lease keeps itself alive until Release. Stop working on the resource
// as soon as Lost is closed, and pass the fencing token along with every
// write.
func Example() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	lease, err := c.Acquire(ctx, "orders/42", client.WithTTL(10*time.Second), client.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrLocked): held by someone else for 5s
	}
	defer lease.Release(ctx)

	select {
	case <-lease.Lost():
		log.Print("lock lost: stop writing orders/42")
	default:
		fmt.Printf("holding %s (fencing token given: %t)\n", lease.Key(), lease.FencingToken() > 0)
	}
	// Output: holding orders/42 (fencing token given: true)
}

// New connects lazily, to the first replica that answers; WithTLS and
// WithBearerToken secure the calls beyond loopback. (This example compiles
// but does not run: it needs replicas with TLS.)
func ExampleNew() {
	c, err := client.New([]string{"10.0.0.1:50051", "10.0.0.2:50051"},
		client.WithTLS(nil), // the system's roots; or a *tls.Config
		client.WithBearerToken(os.Getenv("LOCKD_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // releases what the client still holds
}

// A key held by someone else gives a *LockedError: who holds it, and for
// how long at most.
func ExampleLockedError() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	held, err := c.Acquire(ctx, "invoices/7", client.WithOwner("billing-1"), client.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release(ctx)

	_, err = c.Acquire(ctx, "invoices/7", client.WithWait(0))
	var locked *client.LockedError
	if errors.As(err, &locked) { // errors.Is(err, client.ErrLocked) holds too
		fmt.Printf("%s is held by %s for up to %v more\n", locked.Key, locked.Holder, locked.RetryAfter.Round(time.Minute))
	}
	// Output: invoices/7 is held by billing-1 for up to 1m0s more
}

// A nightly job runs on one replica of a service only: the others find the
// key locked and skip it.
func ExampleMutex_TryLock() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	job := c.NewMutex("jobs/nightly-report", client.WithTTL(10*time.Minute))
	if err := job.TryLock(ctx); err != nil {
		log.Fatal(err)
	}
	defer job.Unlock(ctx)
	fmt.Println("this replica runs the report")

	other := c.NewMutex("jobs/nightly-report") // as on another replica
	if err := other.TryLock(ctx); errors.Is(err, client.ErrLocked) {
		fmt.Println("another replica skips it")
	}
	// Output:
	// this replica runs the report
	// another replica skips it
}

// Readers share a key; a writer waits for them, and new readers wait for
// the writer.
func ExampleRWMutex() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	prices := c.NewRWMutex("catalog/prices")
	if err := prices.RLock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := prices.RLock(ctx); err != nil { // a second reader
		log.Fatal(err)
	}
	fmt.Println("two readers; a writer now locked out:", errors.Is(prices.TryLock(ctx), client.ErrLocked))
	_ = prices.RUnlock(ctx)
	_ = prices.RUnlock(ctx)

	if err := prices.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("writing with fencing token given:", prices.Lease().FencingToken() > 0)
	_ = prices.Unlock(ctx)
	// Output:
	// two readers; a writer now locked out: true
	// writing with fencing token given: true
}

// A read lock is a lease too, shared with every other reader of the key.
func ExampleClient_AcquireRead() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	a, err := c.AcquireRead(ctx, "config/tenants")
	if err != nil {
		log.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := c.AcquireRead(ctx, "config/tenants", client.WithWait(0))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Release(ctx)
	fmt.Println(a.Mode(), b.Mode(), "at once")
	// Output: read read at once
}

// A lease shared by one owner's holds is re-entered: each Acquire adds a
// hold, each Release takes one away.
func ExampleWithOwner() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	outer, err := c.Acquire(ctx, "accounts/7", client.WithOwner("billing-worker-3"))
	if err != nil {
		log.Fatal(err)
	}
	inner, err := c.Acquire(ctx, "accounts/7", client.WithOwner("billing-worker-3"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same lease:", inner.ID() == outer.ID())
	_ = inner.Release(ctx)
	_ = outer.Release(ctx)
	// Output: same lease: true
}

// A semaphore caps calls to a rate-limited upstream at 5 at once across
// every replica. Each permit is a lease: it keeps itself alive until
// Release, and a crashed holder's permit comes back when its lease runs
// out.
func ExampleClient_AcquirePermit() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	permit, err := c.AcquirePermit(ctx, "upstream/wechat", 5, client.WithTTL(30*time.Second), client.WithWait(10*time.Second))
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrLocked): all 5 in use
	}
	defer permit.Release(ctx)
	fmt.Println("calling upstream holding a", permit.Mode())
	// Output: calling upstream holding a permit
}
