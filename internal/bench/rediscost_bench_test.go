package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// costCase is one kind of operation whose cost to Redis is measured: its
// loop, and what Redis spent on it.
type costCase struct {
	name string
	run  func(until time.Time) (int64, time.Duration, error)

	ops     int64
	cpu     time.Duration // the redis-server process's CPU
	lockd   time.Duration // the lockd process's CPU (zero for bare commands)
	cmds    int64         // Redis commands run, those inside scripts too
	scripts int64         // script calls (EVAL, EVALSHA)
	slices  []float64     // Redis CPU per op of each round's slice, µs
}

// commandCount is the number of commands the server behind c has run,
// and of those, script calls (INFO commandstats; INFO itself left out).
func commandCount(b *testing.B, c *redis.Client) (all, scripts int64) {
	for name, n := range redistest.CommandCalls(b, c) {
		switch name {
		case "info":
		case "eval", "evalsha":
			scripts += n
			all += n
		default:
			all += n
		}
	}
	return all, scripts
}

// BenchmarkRedisCost measures what lockd's operations cost Redis, beside the
// bare commands the simplest Redis lock is made of, on one redis-server in
// one run: Redis's process CPU per operation (from /proc, every thread) and
// the commands it ran per operation (INFO commandstats, those scripts run
// included). The cases run in short slices, the order rotating each round,
// so that the machine's other work weighs on each alike:
//
//   - bare: SET key value PX ttl NX, then DEL key (16 workers, a key each)
//   - pair: Acquire+Release through a lockd process, no owner and no
//     request_id (16 workers, a key each)
//   - pair-rid: the same with an owner and a request_id on both calls, as
//     lockd's client libraries send them
//   - handoff: 16 workers on one key, each Acquire waiting its turn and
//     releasing at once: Redis's cost per contended grant and release
//
// Reported: <case>-redis-cpu-us/op, <case>-redis-cmds/op,
// <case>-scripts/op, <case>-lockd-cpu-us/op, <case>-ops/s, and
// pair/bare and pair-rid/bare, the medians of the per-round ratios of
// Redis CPU per op.
func BenchmarkRedisCost(b *testing.B) {
	defer fixedShape(b)()
	const conc = 16
	s := startLockdOnRedis(b)
	redisCPU, lockdCPU := s.meters[1], s.meters[0]
	ctx := context.Background()
	ttl := durationpb.New(30 * time.Second)
	value := "lockd-bench-owner:1234:5" // about an owner's size
	bare := func(until time.Time) (int64, time.Duration, error) {
		return untilDeadline(conc, until, func(w int) error {
			key := fmt.Sprint("cost/bare/", w)
			if err := s.rdb.SetNX(ctx, key, value, 30*time.Second).Err(); err != nil {
				return err
			}
			return s.rdb.Del(ctx, key).Err()
		})
	}
	pair := func(withIDs bool) func(until time.Time) (int64, time.Duration, error) {
		return func(until time.Time) (int64, time.Duration, error) {
			return untilDeadline(conc, until, func(w int) error {
				req := &lockdv1.AcquireRequest{Key: fmt.Sprint("cost/pair/", w), Ttl: ttl}
				rel := &lockdv1.ReleaseRequest{Key: req.Key}
				if withIDs {
					req.Owner = fmt.Sprint("bench-host:1234:worker-", w)
					req.RequestId, rel.RequestId = uuid.NewString(), uuid.NewString()
				}
				res, err := s.client.Acquire(ctx, req)
				if err != nil || !res.GetAcquired() {
					return fmt.Errorf("acquire %s: %v, %v", req.Key, res, err)
				}
				rel.LeaseId = res.GetLease().GetLeaseId()
				_, err = s.client.Release(ctx, rel)
				return err
			})
		}
	}
	handoff := func(until time.Time) (int64, time.Duration, error) {
		wait := durationpb.New(10 * time.Second)
		return untilDeadline(conc, until, func(w int) error {
			res, err := s.client.Acquire(ctx, &lockdv1.AcquireRequest{Key: "cost/handoff", Owner: fmt.Sprint("waiter-", w), Ttl: ttl, WaitTimeout: wait})
			if err != nil || !res.GetAcquired() {
				return fmt.Errorf("acquire: %v, %v", res, err)
			}
			_, err = s.client.Release(ctx, &lockdv1.ReleaseRequest{Key: "cost/handoff", LeaseId: res.GetLease().GetLeaseId()})
			return err
		})
	}
	cases := []*costCase{
		{name: "bare", run: bare},
		{name: "pair", run: pair(false)},
		{name: "pair-rid", run: pair(true)},
		{name: "handoff", run: handoff},
	}
	// Warm up: scripts cached, connections made.
	for _, c := range cases {
		if _, _, err := c.run(time.Now().Add(200 * time.Millisecond)); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}
	const rounds = 12
	slice := benchTime() / rounds
	for r := range rounds {
		for i := range cases {
			c := cases[(r+i)%len(cases)]
			cpu0, lockd0 := redisCPU.read(), lockdCPU.read()
			cmds0, scripts0 := commandCount(b, s.rdb)
			n, _, err := c.run(time.Now().Add(slice))
			if err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			cpu := redisCPU.read() - cpu0
			if c.name != "bare" {
				c.lockd += lockdCPU.read() - lockd0
			}
			cmds1, scripts1 := commandCount(b, s.rdb)
			c.ops += n
			c.cpu += cpu
			c.cmds += cmds1 - cmds0 - 1 // less the INFO of the first reading
			c.scripts += scripts1 - scripts0
			c.slices = append(c.slices, float64(cpu.Microseconds())/float64(n))
		}
	}
	for _, c := range cases {
		ops := float64(c.ops)
		b.ReportMetric(float64(c.cpu.Microseconds())/ops, c.name+"-redis-cpu-us/op")
		b.ReportMetric(float64(c.cmds)/ops, c.name+"-redis-cmds/op")
		b.ReportMetric(float64(c.scripts)/ops, c.name+"-scripts/op")
		if c.lockd > 0 {
			b.ReportMetric(float64(c.lockd.Microseconds())/ops, c.name+"-lockd-cpu-us/op")
		}
		b.ReportMetric(ops/(benchTime().Seconds()), c.name+"-ops/s")
	}
	perRound := func(a, base *costCase) float64 {
		r := make([]float64, len(a.slices))
		for i := range r {
			r[i] = a.slices[i] / base.slices[i]
		}
		return median(r)
	}
	b.ReportMetric(perRound(cases[1], cases[0]), "pair/bare")
	b.ReportMetric(perRound(cases[2], cases[0]), "pair-rid/bare")
}
