package redislock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lockd/lockd/internal/redislock"
)

func ExampleClient_Describe() {
	c, done := exampleEngine()
	defer done()
	ctx := context.Background()

	lease, err := c.Acquire(ctx, redislock.Request{Key: "orders/42", Mode: redislock.Write, Owner: "worker-1", TTL: time.Minute})
	if err != nil {
		panic(err)
	}
	info, err := c.Describe(ctx, "orders/42")
	if err != nil {
		panic(err)
	}
	h := info.Holders[0]
	fmt.Println(info.Kind, h.Owner, h.Mode, h.FencingToken == lease.Lease.FencingToken)

	// An administrator ends the stuck lease; its holder's next renewal
	// fails with ErrNotHeld.
	ended, err := c.ForceRelease(ctx, "orders/42", "worker-1")
	fmt.Println(len(ended), err)
	page, err := c.List(ctx, redislock.ListOptions{Prefix: "orders/"})
	fmt.Println(len(page.Locks), page.Next == "", err)
	// Output:
	// lock worker-1 write true
	// 1 <nil>
	// 0 true <nil>
}
