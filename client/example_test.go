package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/service"
)

// addr is where lockd listens; TestMain points it at a lockd of its own.
var addr = "127.0.0.1:50051"

// TestMain runs a lockd (on its embedded store) for the examples.
func TestMain(m *testing.M) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{
			Listen: "127.0.0.1:0", Limits: service.DefaultLimits(),
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Started: func(a server.Addrs) { started <- a },
		})
	}()
	select {
	case a := <-started:
		addr = a.GRPC
	case err := <-done:
		fmt.Fprintln(os.Stderr, "lockd for the examples:", err)
		os.Exit(1)
	}
	code := m.Run()
	cancel()
	<-done
	os.Exit(code)
}

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
		log.Fatal(err)
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

// A nightly job runs on one replica of a service only: the others find the
// key locked and skip it.
func ExampleMutex_TryLock() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	job := c.NewMutex("jobs/nightly-report")
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
	fmt.Println("two readers; a writer now:", prices.TryLock(ctx))
	_ = prices.RUnlock(ctx)
	_ = prices.RUnlock(ctx)

	if err := prices.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("writing with fencing token given:", prices.Lease().FencingToken() > 0)
	_ = prices.Unlock(ctx)
	// Output:
	// two readers; a writer now: client: locked by another owner
	// writing with fencing token given: true
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
