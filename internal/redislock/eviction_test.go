package redislock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestCheckEvictionAsksEveryMaster reads maxmemory-policy from a single
// Redis and from every master of a Cluster.
func TestCheckEvictionAsksEveryMaster(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	cases := []struct {
		name string
		args []string
		want error
	}{
		{"noeviction passes", nil, nil},
		{"volatile-lru may evict lock keys", []string{"--maxmemory-policy", "volatile-lru"}, redislock.ErrEvictionPolicy},
		{"allkeys-random may evict lock keys", []string{"--maxmemory-policy", "allkeys-random"}, redislock.ErrEvictionPolicy},
		{"a disabled CONFIG cannot tell", []string{"--rename-command", "CONFIG", ""}, redislock.ErrPolicyUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := redislock.CheckEviction(ctx, redistest.Start(t, redistest.WithArgs(tc.args...)).Client(t))
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("CheckEviction = %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("every master of a Cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		rdb := cl.ClusterClient(t)
		if err := redislock.CheckEviction(ctx, rdb); err != nil {
			t.Fatalf("CheckEviction on a noeviction Cluster = %v", err)
		}
		last := cl.Nodes()[len(cl.Nodes())-1]
		one := redis.NewClient(&redis.Options{Addr: last.Addr()})
		defer one.Close()
		if err := one.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
			t.Fatal(err)
		}
		err := redislock.CheckEviction(ctx, rdb)
		if !errors.Is(err, redislock.ErrEvictionPolicy) || !strings.Contains(err.Error(), last.Addr()) || !strings.Contains(err.Error(), "allkeys-lfu") {
			t.Fatalf("CheckEviction with one evicting master = %v, want it named", err)
		}
	})
}
