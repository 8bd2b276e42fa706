package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/ratelimit"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// rateConc is how many callers take at once in the rate limit benchmarks.
const rateConc = 16

// BenchmarkRateLimitRedisCost measures what a rate limiter's Take costs
// Redis, beside a bare SET on the same redis-server: the limiter engine
// (with lockd's data-loss marker, as lockd runs it) and plain SETs, 16
// callers each on a key of its own, interleaved in slices for -benchtime
// each. op=allowed takes from limiters that allow every take (the script
// reads the marker and the limiter and writes the limiter back);
// op=refused from spent ones (it only reads). Reported: takes/s and
// sets/s, the Redis process's CPU per take and per SET (from /proc: the
// command and its network round trip), take/set their ratio, and
// script-us/take, the script's own time in Redis (INFO commandstats
// usec_per_call of EVALSHA).
func BenchmarkRateLimitRedisCost(b *testing.B) {
	for _, op := range []struct {
		name string
		lim  ratelimit.Limit
	}{
		{"allowed", ratelimit.Limit{Limit: 1 << 30, Period: time.Second}},
		{"refused", ratelimit.Limit{Limit: 1, Period: time.Hour}},
	} {
		b.Run("op="+op.name, func(b *testing.B) {
			defer fixedShape(b)()
			rs := redistest.Start(b)
			rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), PoolSize: rateConc})
			b.Cleanup(func() { _ = rdb.Close() })
			locks := redislock.New(rdb, redislock.Options{DataLossGrace: time.Minute})
			b.Cleanup(func() { _ = locks.Close() })
			l := ratelimit.New(rdb, ratelimit.Options{DataLoss: locks})
			ctx := context.Background()
			keys := make([]string, rateConc)
			for w := range keys {
				keys[w] = fmt.Sprint("bench/rl/", w)
				if _, err := l.Take(ctx, ratelimit.Request{Key: keys[w], Limit: op.lim}); err != nil {
					b.Fatal(err)
				}
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			redisCPU := pidMeter("redis", rs.Pid())
			take := &workload{name: "take", meters: []meter{redisCPU}, run: func(until time.Time) (int64, time.Duration, error) {
				return untilDeadline(rateConc, until, func(w int) error {
					res, err := l.Take(ctx, ratelimit.Request{Key: keys[w], Limit: op.lim})
					if err == nil && res.Allowed != (op.name == "allowed") {
						err = fmt.Errorf("take %s: %+v", op.name, res)
					}
					return err
				})
			}}
			set := &workload{name: "set", meters: []meter{redisCPU}, run: func(until time.Time) (int64, time.Duration, error) {
				return untilDeadline(rateConc, until, func(w int) error {
					return rdb.Set(ctx, keys[w]+"/set", "x", 0).Err()
				})
			}}
			interleave(b, 2*benchTime(), 6, take, set)
			take.report(b, "take")
			set.report(b, "set")
			perTake := float64(take.cpu[0]) / float64(take.ops)
			perSet := float64(set.cpu[0]) / float64(set.ops)
			b.ReportMetric(perTake/perSet, "take/set")
			b.ReportMetric(commandUsec(b, rdb, "evalsha"), "script-us/take")
		})
	}
}

// commandUsec is INFO commandstats' usec_per_call of cmd.
func commandUsec(b *testing.B, rdb *redis.Client, cmd string) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				return n
			}
		}
	}
	b.Fatalf("INFO commandstats has no %s", cmd)
	return 0
}

// BenchmarkRateLimitThroughLockd measures decisions through one lockd
// process (cmd/lockd on its own redis-server) over gRPC, 64 callers at
// once. keys=distinct: each caller takes from a limiter of its own that
// allows every take; keys=one: every caller takes from one limiter of 10,000
// a second, so most takes are refused. Reported: decisions/s and the
// CPU of lockd and Redis per decision.
func BenchmarkRateLimitThroughLockd(b *testing.B) {
	const conc = 64
	for _, shape := range []struct {
		name string
		req  func(w int) *lockdv1.TakeRequest
	}{
		{"distinct", func(w int) *lockdv1.TakeRequest {
			return &lockdv1.TakeRequest{Key: fmt.Sprint("bench/rl/", w), Limit: 1 << 30, Period: durationpb.New(time.Second)}
		}},
		{"one", func(int) *lockdv1.TakeRequest {
			return &lockdv1.TakeRequest{Key: "bench/rl/one", Limit: 10000, Period: durationpb.New(time.Second)}
		}},
	} {
		b.Run("keys="+shape.name, func(b *testing.B) {
			defer fixedShape(b)()
			rs := redistest.Start(b)
			p := lockdtest.Start(b, lockdtest.Options{Args: []string{"--redis=" + rs.Addr()}})
			rc := lockdv1.NewRateLimitServiceClient(p.Dial(b))
			ctx := context.Background()
			reqs := make([]*lockdv1.TakeRequest, conc)
			for w := range reqs {
				reqs[w] = shape.req(w)
			}
			if _, err := rc.Take(ctx, reqs[0]); err != nil {
				b.Fatal(err)
			}
			decisions := &workload{name: "decision", meters: []meter{pidMeter("lockd", p.Cmd.Process.Pid), pidMeter("redis", rs.Pid())},
				run: func(until time.Time) (int64, time.Duration, error) {
					return untilDeadline(conc, until, func(w int) error {
						_, err := rc.Take(ctx, reqs[w])
						return err
					})
				}}
			interleave(b, benchTime(), 3, decisions)
			decisions.report(b, "decision")
		})
	}
}
