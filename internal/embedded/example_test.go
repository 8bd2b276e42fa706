package embedded_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
)

func ExampleStart() {
	store, err := embedded.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	c := redis.NewClient(&redis.Options{Addr: store.Addr()})
	defer c.Close()
	ctx := context.Background()

	// Keys expire with the real clock, as on Redis.
	c.Set(ctx, "lockd:{orders/42}:lease", "owner-1", 50*time.Millisecond)
	for c.Exists(ctx, "lockd:{orders/42}:lease").Val() == 1 {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("expired")
	// Output: expired
}
