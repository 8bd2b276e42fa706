package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockd/lockd/client"
)

// Every process of a fleet calls Wait before calling an upstream whose
// quota is per minute: together they stay within it, and each waits its
// turn rather than failing.
func ExampleClient_Wait() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// WeChat's per-minute limit of one API, shared by the whole fleet.
	quota := client.Rate{Limit: 600, Period: time.Minute, Burst: 10}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 12 {
		_, err := c.Wait(ctx, "wechat/message/custom/send", quota)
		if errors.Is(err, client.ErrRateLimited) {
			log.Fatal("the quota will not allow the call before the deadline")
		}
		if err != nil {
			log.Fatal(err)
		}
		// ... call the API
	}
	fmt.Println("12 calls, the last two waited for their turn")
	// Output: 12 calls, the last two waited for their turn
}

// Take decides at once: a refusal says when to come back.
func ExampleClient_Take() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	quota := client.Rate{Limit: 2, Period: time.Hour}
	for range 3 {
		d, err := c.Take(context.Background(), "partner/report", quota)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter > 29*time.Minute)
	}
	// Output:
	// true 1 false
	// true 0 false
	// false 0 true
}
