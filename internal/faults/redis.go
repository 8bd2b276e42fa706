package faults

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Unexpiring returns the Redis keys of locks under prefix (every key of a
// lock starts with prefix + ":{") that carry no expiry, on every master of
// rdb (one server, a Sentinel master, or every Cluster master). Keys that
// belong to no lock (a fixed set of markers, say) are not its concern.
func Unexpiring(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, error) {
	return unexpiring(ctx, rdb, prefix+":{*")
}

// UnexpiringLimiters returns the Redis keys of rate limiters under prefix
// (prefix + ":rl:{…}") that carry no expiry, on every master of rdb.
func UnexpiringLimiters(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, error) {
	return unexpiring(ctx, rdb, prefix+":rl:{*")
}

// unexpiring returns the keys matching pattern that carry no expiry, on
// every master of rdb.
func unexpiring(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			ttl, err := c.PTTL(ctx, key).Result()
			if err != nil {
				return err
			}
			if ttl == -1 { // -2: gone meanwhile
				mu.Lock()
				out = append(out, key)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = fmt.Errorf("faults: cannot scan a %T", rdb)
	}
	return out, err
}
