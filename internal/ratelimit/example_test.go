package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/ratelimit"
)

// A fleet shares a partner API's quota of 3 calls a minute: every process
// takes from the same limiter before calling.
func Example() {
	st, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer st.Close()
	rdb := redis.NewClient(&redis.Options{Addr: st.Addr()})
	defer rdb.Close()

	l := ratelimit.New(rdb, ratelimit.Options{})
	quota := ratelimit.Limit{Limit: 3, Period: time.Minute}
	for range 4 {
		res, err := l.Take(context.Background(), ratelimit.Request{Key: "partner/orders-api", Limit: quota})
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Remaining, res.RetryAfter > 19*time.Second)
	}
	// Output:
	// true 2 false
	// true 1 false
	// true 0 false
	// false 0 true
}
