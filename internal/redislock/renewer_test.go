package redislock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// pipelineCounter counts pipelines and the commands in them.
type pipelineCounter struct {
	pipelines, commands atomic.Int64
}

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.pipelines.Add(1)
		p.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestKeepAliveRenewalsShareRoundTrips keeps many leases alive on one Client
// and counts: their renewals travel in far fewer pipelines than renewals.
func TestKeepAliveRenewalsShareRoundTrips(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	counter := &pipelineCounter{}
	rdb.AddHook(counter)
	c := newClient(t, rdb, redislock.Options{})
	ctx, cancel := context.WithCancel(ctxT(t, time.Minute))
	defer cancel()

	const leases = 200
	var renewals atomic.Int64
	var wg sync.WaitGroup
	for i := range leases {
		key := fmt.Sprint("kept/", i)
		l := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, TTL: 3 * time.Second})
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.KeepAlive(ctx, key, l.ID, 0, func(redislock.Lease) error {
				renewals.Add(1)
				return nil
			})
		}()
	}
	// Each lease renews when its stream opens (streams opened one by one
	// renew one by one), then every second in step with the others.
	waitUntil(t, "the first round of renewals", func() bool { return renewals.Load() >= leases })
	n0, p0 := renewals.Load(), counter.pipelines.Load()
	waitUntil(t, "two more rounds of renewals", func() bool { return renewals.Load() >= n0+2*leases })
	cancel()
	wg.Wait()
	n, p := renewals.Load()-n0, counter.pipelines.Load()-p0
	if p*10 > n {
		t.Fatalf("%d renewals took %d pipelines, want at least 10 renewals per round trip", n, p)
	}
	t.Logf("%d renewals in %d pipelines", n, p)
}
