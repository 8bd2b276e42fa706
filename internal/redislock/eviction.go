package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrEvictionPolicy is returned by CheckEviction when a Redis master
	// may evict keys to free memory, and so lock keys: a lock it evicts is
	// lost while its holder may still believe in it.
	ErrEvictionPolicy = errors.New("redislock: Redis may evict lock keys (maxmemory-policy is not noeviction)")
	// ErrPolicyUnknown is returned by CheckEviction when a master does not
	// tell its maxmemory-policy (CONFIG disabled, renamed or not allowed).
	ErrPolicyUnknown = errors.New("redislock: could not read Redis's maxmemory-policy")
)

// CheckEviction asks every Redis master behind rdb (each master of a
// Cluster) for its maxmemory-policy. It returns nil when all have
// noeviction; an error wrapping ErrEvictionPolicy naming the master and its
// policy when one may evict keys; an error wrapping ErrPolicyUnknown when a
// master does not tell; or the error met when one cannot be reached.
func CheckEviction(ctx context.Context, rdb redis.UniversalClient) error {
	check := func(ctx context.Context, c redis.UniversalClient, addr string) error {
		res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		var re redis.Error
		switch {
		case errors.As(err, &re):
			return fmt.Errorf("%w from %s: %v", ErrPolicyUnknown, addr, err)
		case err != nil:
			return err
		}
		policy, ok := res["maxmemory-policy"]
		switch {
		case !ok:
			return fmt.Errorf("%w from %s: CONFIG GET answered %v", ErrPolicyUnknown, addr, res)
		case policy != "noeviction":
			return fmt.Errorf("%w: %s has maxmemory-policy %s", ErrEvictionPolicy, addr, policy)
		}
		return nil
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		addr := "redis"
		if c, ok := rdb.(*redis.Client); ok {
			addr = c.Options().Addr
		}
		return check(ctx, rdb, addr)
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if err := check(ctx, c, c.Options().Addr); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return err
	}
	// An evicting master outweighs one that would not tell.
	for _, e := range errs {
		if errors.Is(e, ErrEvictionPolicy) {
			return e
		}
	}
	return errors.Join(errs...)
}
