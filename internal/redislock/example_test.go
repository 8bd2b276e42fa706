package redislock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/redislock"
)

func Example() {
	store, err := embedded.Start() // or any Redis: redis.NewClient(...)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	rdb := redis.NewClient(&redis.Options{Addr: store.Addr()})
	defer rdb.Close()

	locks := redislock.New(rdb, redislock.Options{})
	defer locks.Close()
	ctx := context.Background()

	res, err := locks.Acquire(ctx, redislock.Request{
		Key: "orders/42", Mode: redislock.Write, Owner: "billing-1", TTL: 10 * time.Second, Wait: time.Second,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("acquired:", res.Acquired, "holds:", res.Lease.HoldCount)

	// Another owner is refused while the lease is held.
	other, _ := locks.Acquire(ctx, redislock.Request{Key: "orders/42", Mode: redislock.Write, Owner: "billing-2", TTL: time.Second})
	fmt.Println("second owner acquired:", other.Acquired)

	left, err := locks.Release(ctx, "orders/42", res.Lease.ID, "")
	fmt.Println("holds left:", left, err)
	// Output:
	// acquired: true holds: 1
	// second owner acquired: false
	// holds left: 0 <nil>
}
