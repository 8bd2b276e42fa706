package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
)

// evictionRecheck is how often lockd asks again for Redis's
// maxmemory-policy when Redis could not be reached at start-up.
const evictionRecheck = 2 * time.Second

// lockOptions checks the Redis locks are kept in and returns the lock
// engine's options. A Redis that may evict keys is refused (unless
// cfg.RedisAllowEviction) now, or, when it cannot be reached yet, as soon as
// it answers, through fail. The embedded store is not checked and gets no
// data-loss grace: its data dies only with the process. The grace never
// exceeds the longest lease a request may ask for.
func lockOptions(ctx context.Context, cfg Config, rdb redis.UniversalClient, log *slog.Logger, fail func(error)) (redislock.Options, error) {
	opts := redislock.Options{Logger: log, WaitReplicas: cfg.RedisWaitReplicas, AutoPipeline: cfg.RedisAutoPipeline}
	if cfg.Redis == "" {
		return opts, nil
	}
	opts.DataLossGrace = min(cfg.DataLossGrace, cfg.Bounds.MaxTTL)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := checkEviction(cctx, rdb, cfg.RedisAllowEviction, log)
	cancel()
	if !errors.Is(err, errRedisUnreachable) {
		return opts, err
	}
	log.Warn("could not check Redis's maxmemory-policy yet (Redis unreachable); checking when it answers", "err", errors.Unwrap(err))
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(evictionRecheck):
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := checkEviction(cctx, rdb, cfg.RedisAllowEviction, log)
			cancel()
			if !errors.Is(err, errRedisUnreachable) {
				if err != nil {
					fail(err)
				}
				return
			}
		}
	}()
	return opts, nil
}

var errRedisUnreachable = errors.New("redis unreachable")

// checkEviction refuses a Redis whose maxmemory-policy may evict lock keys,
// unless allowed (then it warns), and says so when the policy cannot be read.
func checkEviction(ctx context.Context, rdb redis.UniversalClient, allow bool, log *slog.Logger) error {
	err := redislock.CheckEviction(ctx, rdb)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redislock.ErrEvictionPolicy) && allow:
		log.Warn("Redis may evict lock keys: a lock it evicts is lost while its holder may still believe in it (--redis-allow-eviction)", "err", err)
		return nil
	case errors.Is(err, redislock.ErrEvictionPolicy):
		return fmt.Errorf("%w; set maxmemory-policy noeviction, or start with --redis-allow-eviction to accept that risk", err)
	case errors.Is(err, redislock.ErrPolicyUnknown):
		log.Warn("could not check Redis's maxmemory-policy: make sure it is noeviction, or locks may be evicted while held", "err", err)
		return nil
	}
	return fmt.Errorf("%w: %w", errRedisUnreachable, err)
}
