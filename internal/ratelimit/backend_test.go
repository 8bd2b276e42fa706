package ratelimit_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/ratelimit"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// contract is the limiter's contract suite: every case runs against a real
// redis-server, a valkey-server, the embedded store, a 3-master Redis
// Cluster and a Sentinel deployment. Under `make test-valkey`
// (REDISTEST_SERVER=valkey-server) the harness starts valkey-server in
// place of redis-server, so the single server, the Cluster's nodes and the
// Sentinel deployment (Sentinels included) are all Valkey.
var contract = []struct {
	name string
	run  func(t *testing.T, b backend)
}{
	{"BurstThenRate", contractBurstThenRate},
	{"CostSpendsMore", contractCostSpendsMore},
	{"InvalidRequests", contractInvalidRequests},
	{"ConflictingParameters", contractConflictingParameters},
	{"NothingLeftBehind", contractNothingLeftBehind},
	{"RefusalWritesNothing", contractRefusalWritesNothing},
	{"RetriesReplayTheirDecision", contractRetriesReplayTheirDecision},
	{"KeptDecisionsAreBounded", contractKeptDecisionsAreBounded},
	{"WaitForTurn", contractWaitForTurn},
	{"WaitersGoInOrder", contractWaitersGoInOrder},
	{"OnlyTheLastTurnIsGivenBack", contractOnlyTheLastTurnIsGivenBack},
	{"RetryClaimsItsTurn", contractRetryClaimsItsTurn},
	{"ManyCallersNeverExceedTheLimit", contractManyCallersNeverExceedTheLimit},
	{"UnreadableValueCountsAsSpent", contractUnreadableValueCountsAsSpent},
}

// backend is one store the contract runs against. Cases sharing a store
// keep apart through their own prefix.
type backend struct {
	name   string
	rdb    redis.UniversalClient
	prefix string
	// loss watches for data loss as lockd does on a real Redis.
	loss bool
}

// limiter returns a limiter on the backend, under the case's prefix, with
// the lock engine's data-loss markers where lockd would use them.
func (b backend) limiter(t *testing.T, opts ratelimit.Options) *ratelimit.Limiter {
	t.Helper()
	opts.Prefix = b.prefix
	if b.loss && opts.DataLoss == nil {
		locks := redislock.New(b.rdb, redislock.Options{Prefix: b.prefix, DataLossGrace: 5 * time.Second})
		t.Cleanup(func() { _ = locks.Close() })
		opts.DataLoss = locks
	}
	return ratelimit.New(b.rdb, opts)
}

// key is the Redis key of the limiter named name.
func (b backend) key(name string) string {
	return b.prefix + ":rl:{" + redislock.HashTag(name) + "}"
}

// keys lists the case's limiter keys on every master.
func (b backend) keys(ctx context.Context) ([]string, error) {
	var (
		mu  sync.Mutex
		all []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, b.prefix+":rl:*").Result()
		mu.Lock()
		all = append(all, ks...)
		mu.Unlock()
		return err
	}
	switch c := b.rdb.(type) {
	case *redis.ClusterClient:
		return all, c.ForEachMaster(ctx, scan)
	case *redis.Client:
		return all, scan(ctx, c)
	}
	panic("unknown client type")
}

func TestContract(t *testing.T) {
	t.Parallel()
	prefix := func(name string) string { return "t-" + strings.ToLower(name) }
	single := func(name string, opts ...redistest.Option) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Start(t, opts...).Client(t)
			runsOn(t, rdb, name)
			for _, tc := range contract {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, backend{name: name, rdb: rdb, prefix: prefix(tc.name), loss: true})
				})
			}
		})
	}
	// The harness's own server, named for what it is; Valkey beside it
	// when that is not Valkey already.
	server := strings.TrimSuffix(filepath.Base(redistest.ServerBinary()), "-server")
	single(server)
	if server != "valkey" {
		single("valkey", redistest.Valkey())
	}
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		st, err := embedded.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		rdb := redis.NewClient(&redis.Options{Addr: st.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		for _, tc := range contract {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, backend{name: "embedded", rdb: rdb, prefix: prefix(tc.name)})
			})
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.StartCluster(t, 3).ClusterClient(t)
		runsOn(t, rdb, server)
		for _, tc := range contract {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, backend{name: "cluster", rdb: rdb, prefix: prefix(tc.name), loss: true})
			})
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.StartSentinel(t).FailoverClient(t)
		runsOn(t, rdb, server)
		for _, tc := range contract {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, backend{name: "sentinel", rdb: rdb, prefix: prefix(tc.name), loss: true})
			})
		}
	})
}

// runsOn fails the test unless every master behind rdb is the server
// named (redis or valkey, as INFO server tells them apart), so that a
// backend is what its name says; other servers are not checked.
func runsOn(t *testing.T, rdb redis.UniversalClient, server string) {
	t.Helper()
	if server != "redis" && server != "valkey" {
		return
	}
	check := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		if isValkey := strings.Contains(info, "valkey_version:"); isValkey != (server == "valkey") {
			return fmt.Errorf("%s is not %s (valkey_version in INFO server: %v)", c.Options().Addr, server, isValkey)
		}
		return nil
	}
	ctx := ctxT(t, 30*time.Second)
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, check)
	case *redis.Client:
		err = check(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// take takes and fails the test on an error.
func take(t *testing.T, l *ratelimit.Limiter, req ratelimit.Request) ratelimit.Result {
	t.Helper()
	res, err := l.Take(ctxT(t, 30*time.Second), req)
	if err != nil {
		t.Fatalf("Take(%+v): %v", req, err)
	}
	return res
}
