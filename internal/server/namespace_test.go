package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestNamespacesOnOneRedisStayApart runs two deployments on one Redis
// database, each with its own --namespace: both hold the same key at once,
// each serves its own app "mp" (different appids) its own token, and every
// Redis key and pub/sub channel either made starts with its namespace.
func TestNamespacesOnOneRedisStayApart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx-team-a": "secret-a", "wx-team-b": "secret-b"}})
	t.Cleanup(fake.Close)
	deployment := func(ns, appid, secret string) *running {
		file := parseConfig(t, `apps:
  - {name: mp, provider: wechat, appid: `+appid+`, secret_env: SECRET, api_base: "`+fake.URL()+`"}
`, map[string]string{"SECRET": secret})
		return start(t, Config{Redis: srv.Addr(), Namespace: ns, File: file})
	}
	a, b := deployment("team-a", "wx-team-a", "secret-a"), deployment("team-b", "wx-team-b", "secret-b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	la, lb := lockdv1.NewLockServiceClient(a.conn), lockdv1.NewLockServiceClient(b.conn)
	ra, err := la.Acquire(ctx, &lockdv1.AcquireRequest{Key: "jobs/nightly", Owner: "w", Ttl: durationpb.New(time.Minute)})
	if err != nil || !ra.GetAcquired() {
		t.Fatal(ra, err)
	}
	rb, err := lb.Acquire(ctx, &lockdv1.AcquireRequest{Key: "jobs/nightly", Owner: "w", Ttl: durationpb.New(time.Minute)})
	if err != nil || !rb.GetAcquired() || rb.GetLease().GetLeaseId() == ra.GetLease().GetLeaseId() {
		t.Fatalf("the same key in the other namespace: %v, %v (want its own lease)", rb, err)
	}
	// A waiter in team-b, woken through team-b's channel only.
	waited := make(chan *lockdv1.AcquireResponse, 1)
	go func() {
		res, _ := lb.Acquire(ctx, &lockdv1.AcquireRequest{Key: "jobs/nightly", Owner: "x", WaitTimeout: durationpb.New(20 * time.Second)})
		waited <- res
	}()

	ta, err := lockdv1.NewTokenServiceClient(a.conn).GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "mp"})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := lockdv1.NewTokenServiceClient(b.conn).GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "mp"})
	if err != nil {
		t.Fatal(err)
	}
	if ta.GetAccessToken() == tb.GetAccessToken() {
		t.Fatal("two deployments' apps named mp got the same token")
	}

	rdb := srv.Client(t)
	waitFor(t, "team-b's waiter to subscribe", func() bool {
		chans, err := rdb.PubSubChannels(ctx, "*").Result()
		return err == nil && strings.Contains(strings.Join(chans, " "), "team-b:")
	})
	chans, err := rdb.PubSubChannels(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(keys, chans...) {
		if !strings.HasPrefix(k, "team-a:") && !strings.HasPrefix(k, "team-b:") {
			t.Errorf("Redis key or channel %q is in neither namespace", k)
		}
	}
	if _, err := lb.Release(ctx, &lockdv1.ReleaseRequest{Key: "jobs/nightly", LeaseId: rb.GetLease().GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	if res := <-waited; !res.GetAcquired() {
		t.Fatalf("team-b's waiter after team-b's release: %v", res)
	}
}

func TestNamespaceIsChecked(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{"", "a:b", "{x}", "-x", strings.Repeat("n", 65), "spa ce", "ü"} {
		if ns == "" {
			continue // empty means the default
		}
		if err := validNamespace(ns); err == nil {
			t.Errorf("namespace %q accepted", ns)
		}
	}
	for _, ns := range []string{"lockd", "team-a", "prod.eu_1"} {
		if err := validNamespace(ns); err != nil {
			t.Errorf("namespace %q: %v", ns, err)
		}
	}
}
