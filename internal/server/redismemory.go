package server

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/telemetry"
)

// Redis with maxmemory and the noeviction policy lockd requires refuses
// writes once full: every team's grants then fail. lockd reads Redis's
// memory every redisMemoryEvery, exports it (lockd_redis_used_memory_bytes,
// lockd_redis_maxmemory_bytes) and warns while it is above
// redisMemoryWarn of maxmemory, so operators act before that.

const (
	// redisMemoryEvery is how often Redis's memory is read.
	redisMemoryEvery = 30 * time.Second
	// redisMemoryWarn is the share of maxmemory above which lockd warns.
	redisMemoryWarn = 0.8
	// redisMemoryRewarn is how often the warning is repeated while it
	// holds.
	redisMemoryRewarn = 10 * time.Minute
)

// redisMemory is the memory of one Redis server, in bytes; max 0 means no
// limit.
type redisMemory struct{ used, max int64 }

// fuller reports whether m is fuller than o, relative to its limit.
func (m redisMemory) fuller(o redisMemory) bool {
	return m.ratio() > o.ratio() || o.max == 0 && m.max > 0
}

func (m redisMemory) ratio() float64 {
	if m.max <= 0 {
		return 0
	}
	return float64(m.used) / float64(m.max)
}

// readRedisMemory reads the memory of rdb's server, or of its fullest
// master on a Cluster.
func readRedisMemory(ctx context.Context, rdb redis.UniversalClient) (redisMemory, error) {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		var (
			mu      sync.Mutex
			fullest redisMemory
		)
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			m, err := memoryOf(ctx, n)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if m.fuller(fullest) {
				fullest = m
			}
			return nil
		})
		return fullest, err
	}
	return memoryOf(ctx, rdb)
}

func memoryOf(ctx context.Context, c redis.Cmdable) (redisMemory, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return redisMemory{}, err
	}
	used, _ := strconv.ParseInt(infoValue(info, "used_memory"), 10, 64)
	max, _ := strconv.ParseInt(infoValue(info, "maxmemory"), 10, 64)
	return redisMemory{used: used, max: max}, nil
}

// infoValue reads field of an INFO reply; "" when absent.
func infoValue(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// watchRedisMemory reads Redis's memory every interval until ctx ends,
// records it in metrics and warns (at most every redisMemoryRewarn)
// while it is above redisMemoryWarn of maxmemory. A Redis whose INFO
// cannot be read (the embedded store, a proxy) is not watched.
func watchRedisMemory(ctx context.Context, rdb redis.UniversalClient, every time.Duration, log *slog.Logger, metrics *telemetry.SecurityMetrics) {
	var warned time.Time
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := readRedisMemory(rctx, rdb)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Debug("could not read Redis's memory", "err", err)
		case m.used > 0:
			metrics.RedisMemory(m.used, m.max)
			if m.ratio() >= redisMemoryWarn {
				if time.Since(warned) >= redisMemoryRewarn {
					warned = time.Now()
					log.Warn("Redis is near its maxmemory: once full, it refuses every grant of every client; give it more memory, or bound clients' held leases (limits.leases, --fair-share-leases)",
						"used_memory", m.used, "maxmemory", m.max, "used", strconv.FormatFloat(100*m.ratio(), 'f', 0, 64)+"%")
				}
			} else if !warned.IsZero() {
				warned = time.Time{}
				log.Info("Redis's memory is below the warning mark again", "used_memory", m.used, "maxmemory", m.max)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
