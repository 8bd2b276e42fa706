package redislock_test

import (
	"context"
	"errors"
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

func ExampleClient_Campaign() {
	c, done := exampleEngine()
	defer done()
	ctx := context.Background()

	// Campaign returns once elected; Keep renews until ctx ends or the
	// leadership is lost (ErrNotHeld), and Resign hands over.
	lead, err := c.Campaign(ctx, redislock.CampaignRequest{Name: "jobs/scheduler", Value: "10.0.0.5:8080", Owner: "host-a", TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	leader, _ := c.Leader(ctx, "jobs/scheduler")
	fmt.Println("leader:", leader.Owner, leader.Value, leader.Term == lead.Leader().Term)
	resigned, err := lead.Resign(ctx)
	fmt.Println("resigned:", resigned, err)
	_, err = c.Leader(ctx, "jobs/scheduler")
	fmt.Println(errors.Is(err, redislock.ErrNoLeader))
	// Output:
	// leader: host-a 10.0.0.5:8080 true
	// resigned: true <nil>
	// true
}

func ExampleClient_Acquire_permit() {
	c, done := exampleEngine()
	defer done()
	ctx := context.Background()

	// At most two permits of wechat/api at once.
	for _, owner := range []string{"worker-1", "worker-2", "worker-3"} {
		res, err := c.Acquire(ctx, redislock.Request{Key: "wechat/api", Mode: redislock.Permit, Limit: 2, Owner: owner, TTL: 10 * time.Second})
		if err != nil {
			panic(err)
		}
		fmt.Println(owner, "acquired:", res.Acquired, "available:", res.Available)
	}
	// Output:
	// worker-1 acquired: true available: 1
	// worker-2 acquired: true available: 0
	// worker-3 acquired: false available: 0
}

// exampleEngine returns an engine on an embedded store, and what closes
// both.
func exampleEngine() (*redislock.Client, func()) {
	store, err := embedded.Start() // or any Redis: redis.NewClient(...)
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: store.Addr()})
	c := redislock.New(rdb, redislock.Options{})
	return c, func() {
		c.Close()
		rdb.Close()
		store.Close()
	}
}
