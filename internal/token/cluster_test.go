package token_test

import (
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
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
		first := oneToken(t, p.name+" cold Get", f.concurrently(60, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, p.name, anyone) }))
		reject(fake, p, first.AccessToken)
		second := oneToken(t, p.name+" Refresh", f.concurrently(30, func(b *token.Broker) (token.Token, error) {
			return b.Refresh(ctx, p.name, first.AccessToken, anyone)
		}))
		// Reports of a valid token: checked once, the verdict shared.
		checks := fake.Calls("/cgi-bin/getcallbackip")
		if got := oneToken(t, p.name+" reports of a valid token", f.concurrently(30, func(b *token.Broker) (token.Token, error) {
			return b.Refresh(ctx, p.name, second.AccessToken, anyone)
		})); got.AccessToken != second.AccessToken || fake.Calls("/cgi-bin/getcallbackip") != checks+1 {
			t.Fatalf("%s: reports of a valid token got %v after %d checks", p.name, got, fake.Calls("/cgi-bin/getcallbackip")-checks)
		}
		if n := fake.Issued(p.id); n != 2 {
			t.Fatalf("%s: %d tokens minted, want 2", p.name, n)
		}
		ticket := oneToken(t, p.name+" Ticket", f.concurrently(30, func(b *token.Broker) (token.Token, error) {
			return b.Ticket(ctx, p.name, wechat.TicketJSAPI, anyone)
		}))
		if !fake.TicketValid(ticket.AccessToken) {
			t.Fatalf("%s: the ticket is not valid", p.name)
		}
	}
}
