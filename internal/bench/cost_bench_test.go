package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// longRuns reports whether BENCH_LONG=1 asks for the runs that take
// minutes.
func longRuns() bool { return os.Getenv("BENCH_LONG") == "1" }

// lockdOnRedis is a fresh redis-server with one lockd process (cmd/lockd,
// default flags) on it.
type lockdOnRedis struct {
	rdb    *redis.Client
	client lockdv1.LockServiceClient
	meters []meter // lockd, redis
}

func startLockdOnRedis(b *testing.B) *lockdOnRedis {
	b.Helper()
	rs := redistest.Start(b)
	p := lockdtest.Start(b, lockdtest.Options{Args: []string{"--redis=" + rs.Addr()}})
	pin(b, rs.Pid(), redisCores)
	pin(b, p.Cmd.Process.Pid, serverCores)
	pin(b, 0, loadCores)
	return &lockdOnRedis{
		rdb:    rs.Client(b),
		client: lockdv1.NewLockServiceClient(p.Dial(b)),
		meters: []meter{pidMeter("lockd", p.Cmd.Process.Pid), pidMeter("redis", rs.Pid())},
	}
}

// usedMemory is Redis's used_memory (INFO memory), in bytes.
func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO memory without used_memory")
	return 0
}

func dbSize(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	n, err := rdb.DBSize(context.Background()).Result()
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// lockKeys returns the Redis keys of the lock on key and the bytes MEMORY
// USAGE gives for them. They are found by their hash tag: every Redis key
// of a lock starts with "lockd:{" + key + "}".
func lockKeys(b *testing.B, rdb *redis.Client, key string) (keys int, bytes int64) {
	b.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "lockd:{"+key+"}*", 1000).Iterator()
	for iter.Next(ctx) {
		n, err := rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil && err != redis.Nil {
			b.Fatal(err)
		}
		keys++
		bytes += n
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
	return keys, bytes
}

// BenchmarkRedisMemory measures what locks cost Redis in memory, through
// one lockd process: 10,000 locks on distinct keys are taken and held
// (ttl 10 min). held-bytes/lock is the growth of Redis's used_memory per
// held lock (keys, values, expiry entries and the dictionaries' overhead);
// held-key-bytes/lock and held-keys/lock are MEMORY USAGE and the number of
// Redis keys of a held lock (a sample of 100). Then the locks are released:
// idle-key-bytes/key and idle-keys/key are the same for a key just released
// (nobody holds or waits for it), and idle-linger-s is how long after the
// last release Redis still held any key of them (0 when release leaves
// nothing behind).
func BenchmarkRedisMemory(b *testing.B) {
	const (
		locks  = 10000
		sample = 100
		conc   = 64
	)
	defer fixedShape(b)()
	s := startLockdOnRedis(b)
	ctx := context.Background()
	ttl := durationpb.New(10 * time.Minute)
	key := func(i int) string { return fmt.Sprint("memory/", i) }
	mem0, keys0 := usedMemory(b, s.rdb), dbSize(b, s.rdb)
	leases := make([]string, locks)
	err := forEach(locks, conc, func(_, i int) error {
		res, err := s.client.Acquire(ctx, &lockdv1.AcquireRequest{Key: key(i), Owner: "memory", Ttl: ttl})
		if err == nil && !res.GetAcquired() {
			err = fmt.Errorf("%s not acquired", key(i))
		}
		leases[i] = res.GetLease().GetLeaseId()
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	mem1, keys1 := usedMemory(b, s.rdb), dbSize(b, s.rdb)
	b.ReportMetric(float64(mem1-mem0)/locks, "held-bytes/lock")
	b.ReportMetric(float64(keys1-keys0)/locks, "held-keys/lock")
	var heldKeys, heldBytes, idleKeys, idleBytes int64
	for i := range sample {
		k, n := lockKeys(b, s.rdb, key(i))
		heldKeys += int64(k)
		heldBytes += n
	}
	b.ReportMetric(float64(heldBytes)/sample, "held-key-bytes/lock")
	release := func(i int) error {
		_, err := s.client.Release(ctx, &lockdv1.ReleaseRequest{Key: key(i), LeaseId: leases[i]})
		return err
	}
	// The sample is measured right after each release, before anything
	// left behind may expire.
	for i := range sample {
		if err := release(i); err != nil {
			b.Fatal(err)
		}
		k, n := lockKeys(b, s.rdb, key(i))
		idleKeys += int64(k)
		idleBytes += n
	}
	if err := forEach(locks-sample, conc, func(_, i int) error { return release(sample + i) }); err != nil {
		b.Fatal(err)
	}
	released := time.Now()
	b.ReportMetric(float64(idleKeys)/sample, "idle-keys/key")
	b.ReportMetric(float64(idleBytes)/sample, "idle-key-bytes/key")
	for dbSize(b, s.rdb) > keys0 {
		if time.Since(released) > time.Minute {
			b.Logf("%d Redis keys still there a minute after the last release", dbSize(b, s.rdb)-keys0)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.ReportMetric(time.Since(released).Seconds(), "idle-linger-s")
}

// BenchmarkKeyspace measures lockd's cost as the number of distinct keys
// grows: keys=K runs uncontended Acquire+Release pairs through one lockd
// process, 64 workers, cycling through K distinct keys (max(K, 20,000)
// pairs, so every key is locked at least once). Reported: pairs/s, the CPU
// time of the lockd and Redis processes per pair (from /proc, not wall
// time), and Redis's keys and used_memory when the last pair is done.
// keys=1M runs with BENCH_LONG=1.
func BenchmarkKeyspace(b *testing.B) {
	const (
		conc     = 64
		minPairs = 20000
	)
	sizes := []struct {
		name string
		keys int
	}{{"1k", 1000}, {"100k", 100000}}
	if longRuns() {
		sizes = append(sizes, struct {
			name string
			keys int
		}{"1M", 1000000})
	}
	for _, size := range sizes {
		b.Run("keys="+size.name, func(b *testing.B) {
			defer fixedShape(b)()
			s := startLockdOnRedis(b)
			svc := lockdService{t: lockTarget{client: s.client}}
			ss := sessions(b, svc, conc)
			n := max(size.keys, minPairs)
			ctx := context.Background()
			before := []time.Duration{s.meters[0].read(), s.meters[1].read()}
			start := time.Now()
			err := forEach(n, conc, func(w, i int) error {
				unlock, err := ss[w].lock(ctx, fmt.Sprint("keyspace/", i%size.keys))
				if err != nil {
					return err
				}
				return unlock(ctx)
			})
			took := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)/took.Seconds(), "pairs/s")
			for i, m := range s.meters {
				b.ReportMetric(float64((m.read()-before[i]).Nanoseconds())/1e3/float64(n), m.name+"-cpu-us/pair")
			}
			b.ReportMetric(float64(dbSize(b, s.rdb)), "redis-keys-at-end")
			b.ReportMetric(float64(usedMemory(b, s.rdb))/(1<<20), "redis-used-MiB-at-end")
		})
	}
}
