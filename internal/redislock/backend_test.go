package redislock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// contract is the lock contract suite: every case runs against a real
// redis-server, the embedded store, a 3-master Redis Cluster and a Sentinel
// deployment.
var contract = []struct {
	name string
	run  func(t *testing.T, b backend)
}{
	{"Exclusive", contractExclusive},
	{"Reentrancy", contractReentrancy},
	{"EmptyOwnerIsUnique", contractEmptyOwnerIsUnique},
	{"DowngradeAndUpgrade", contractDowngradeAndUpgrade},
	{"SharedReaders", contractSharedReaders},
	{"WriterPreference", contractWriterPreference},
	{"WriterThatGivesUpStopsBlockingReaders", contractWriterThatGivesUpStopsBlockingReaders},
	{"ExpiryFreesTheLock", contractExpiryFreesTheLock},
	{"Renew", contractRenew},
	{"KeepAlive", contractKeepAlive},
	{"Keys", contractKeys},
	{"InvalidRequests", contractInvalidRequests},
	{"IdempotentRequests", contractIdempotentRequests},
	{"RequestIDsStayWithTheirCall", contractRequestIDsStayWithTheirCall},
	{"NothingLeftBehind", contractNothingLeftBehind},
	{"HandoffIsWokenByRelease", contractHandoffIsWokenByRelease},
	{"WritersGoInArrivalOrder", contractWritersGoInArrivalOrder},
	{"ReadersGoInTogetherAfterAWriter", contractReadersGoInTogetherAfterAWriter},
	{"WaitEnds", contractWaitEnds},
	{"MutualExclusionUnderContention", contractMutualExclusionUnderContention},
	{"RetriesReplayTheirFirstResult", contractRetriesReplayTheirFirstResult},
	{"KeeperReleasesTheWholeLeaseOnlyIfNewest", contractKeeperReleasesTheWholeLeaseOnlyIfNewest},
	{"InconsistentRecordIsLost", contractInconsistentRecordIsLost},
	{"Election", contractElection},
	{"ElectionInvalidRequests", contractElectionInvalidRequests},
	{"Observe", contractObserve},
	{"LeadershipIsKeptAndLost", contractLeadershipIsKeptAndLost},
	{"OneLeaderAtATime", contractOneLeaderAtATime},
	{"Semaphore", contractSemaphore},
	{"SemaphoreEdges", contractSemaphoreEdges},
	{"AtMostLimitPermits", contractAtMostLimitPermits},
	{"PermitsGoInArrivalOrder", contractPermitsGoInArrivalOrder},
	{"BusyAnswersNameTheHolder", contractBusyAnswersNameTheHolder},
	{"Describe", contractDescribe},
	{"ForceRelease", contractForceRelease},
	{"ListLocks", contractListLocks},
}

// backend is one store the contract runs against. Cases sharing a store
// keep apart through their own key prefix.
type backend struct {
	name   string
	rdb    redis.UniversalClient
	prefix string
	// autoPipeline runs the engines of the case with Options.AutoPipeline.
	autoPipeline bool
}

// newClient returns an engine on the backend, under the case's prefix.
func (b backend) newClient(t *testing.T, opts redislock.Options) *redislock.Client {
	t.Helper()
	opts.Prefix = b.prefix
	opts.AutoPipeline = opts.AutoPipeline || b.autoPipeline
	return newClient(t, b.rdb, opts)
}

// keys lists the case's Redis keys on every master.
func (b backend) keys(ctx context.Context) ([]string, error) {
	var (
		mu  sync.Mutex
		all []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, b.prefix+":*").Result()
		mu.Lock()
		all = append(all, ks...)
		mu.Unlock()
		return err
	}
	switch c := b.rdb.(type) {
	case *redis.ClusterClient:
		err := c.ForEachMaster(ctx, scan)
		return all, err
	case *redis.Client:
		err := scan(ctx, c)
		return all, err
	}
	panic("unknown client type")
}

func (b backend) countKeys(ctx context.Context) (int64, error) {
	ks, err := b.keys(ctx)
	return int64(len(ks)), err
}

func TestContract(t *testing.T) {
	t.Parallel()
	runContract(t, false)
}

// TestContractAutoPipeline runs the contract with the engines' scripts sent
// through go-redis's automatic pipelining.
func TestContractAutoPipeline(t *testing.T) {
	t.Parallel()
	runContract(t, true)
}

// runContract runs every case of the contract against every backend.
func runContract(t *testing.T, autoPipeline bool) {
	prefix := func(name string) string { return "t-" + strings.ToLower(name) }
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		for _, tc := range contract {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, backend{name: "redis", rdb: redistest.Start(t).Client(t), prefix: prefix(tc.name), autoPipeline: autoPipeline})
			})
		}
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		for _, tc := range contract {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				st, err := embedded.Start()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.Close() })
				rdb := redis.NewClient(&redis.Options{Addr: st.Addr()})
				t.Cleanup(func() { _ = rdb.Close() })
				tc.run(t, backend{name: "embedded", rdb: rdb, prefix: prefix(tc.name), autoPipeline: autoPipeline})
			})
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.StartCluster(t, 3).ClusterClient(t)
		for _, tc := range contract {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, backend{name: "cluster", rdb: rdb, prefix: prefix(tc.name), autoPipeline: autoPipeline})
			})
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.StartSentinel(t).FailoverClient(t)
		for _, tc := range contract {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, backend{name: "sentinel", rdb: rdb, prefix: prefix(tc.name), autoPipeline: autoPipeline})
			})
		}
	})
}

func newClient(t *testing.T, rdb redis.UniversalClient, opts redislock.Options) *redislock.Client {
	t.Helper()
	c := redislock.New(rdb, opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, c *redislock.Client, req redislock.Request) redislock.Lease {
	t.Helper()
	res, err := c.Acquire(ctxT(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	if !res.Acquired {
		t.Fatalf("Acquire(%+v): not acquired, retry after %v", req, res.RetryAfter)
	}
	return res.Lease
}

func mustRefuse(t *testing.T, c *redislock.Client, req redislock.Request) redislock.Result {
	t.Helper()
	res, err := c.Acquire(ctxT(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	if res.Acquired {
		t.Fatalf("Acquire(%+v): acquired %+v, want refused", req, res.Lease)
	}
	return res
}
