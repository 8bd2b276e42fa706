package token_test

import (
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestClusterMintsOncePerRefresh runs three brokers on a Redis Cluster:
// every app's keys share a slot, and the notices travel by sharded pub/sub
// (the re-check is too slow to stand in for them).
func TestClusterMintsOncePerRefresh(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	fake := newFake(t, wechatfake.Options{})
	fake.SetLatency(100 * time.Millisecond)
	f := &fleet{obs: newObserver()}
	for range 3 {
		b, err := token.New(cluster.ClusterClient(t), apps(fake), token.Options{Recheck: time.Minute, Observer: f.obs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		f.brokers = append(f.brokers, b)
	}
	ctx := timeout(t, 20*time.Second)
	for _, p := range providers {
		first := oneToken(t, p.name+" cold Get", f.concurrently(60, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, p.name) }))
		oneToken(t, p.name+" Refresh", f.concurrently(30, func(b *token.Broker) (token.Token, error) {
			return b.Refresh(ctx, p.name, first.AccessToken)
		}))
		if n := fake.Mints(p.id); n != 2 {
			t.Fatalf("%s: %d mints, want 2", p.name, n)
		}
	}
}
