package server

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// oncePerHour is a Take on key that a fresh limiter allows once and then
// refuses for an hour.
func oncePerHour(key string) *lockdv1.TakeRequest {
	return &lockdv1.TakeRequest{Key: key, Limit: 1, Period: durationpb.New(time.Hour)}
}

// TestRateLimiterAndLockWithOneNameStayApart: a rate limiter and a lock
// named alike live in separate Redis keys and are usable at once. Holding
// the lock does not spend the limiter, spending the limiter does not take
// or break the lock, and releasing the lock leaves the limiter spent.
func TestRateLimiterAndLockWithOneNameStayApart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := start(t, Config{Redis: srv.Addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locks, limits := lockdv1.NewLockServiceClient(r.conn), lockdv1.NewRateLimitServiceClient(r.conn)
	const name = "wechat/api"

	held, err := locks.Acquire(ctx, &lockdv1.AcquireRequest{Key: name, Owner: "w", Ttl: durationpb.New(time.Minute)})
	if err != nil || !held.GetAcquired() {
		t.Fatalf("Acquire(%s): %v, %v", name, held, err)
	}
	rdb := srv.Client(t)
	lockKeys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if res, err := limits.Take(ctx, oncePerHour(name)); err != nil || !res.GetAllowed() {
		t.Fatalf("Take(%s) while its lock is held: %v, %v (want allowed)", name, res, err)
	}
	all, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var limiterKeys []string
	for _, k := range all {
		if !slices.Contains(lockKeys, k) {
			limiterKeys = append(limiterKeys, k)
		}
	}
	if len(limiterKeys) != 1 || !strings.Contains(limiterKeys[0], ":rl:") {
		t.Fatalf("the Take added keys %v to the lock's %v, want the limiter's one key", limiterKeys, lockKeys)
	}
	for _, k := range lockKeys {
		if strings.Contains(k, ":rl:") {
			t.Errorf("the lock made %q, a key in the limiters' space", k)
		}
	}

	// The lock is still held, by the same lease, and still refuses another.
	other, err := locks.Acquire(ctx, &lockdv1.AcquireRequest{Key: name, Owner: "x"})
	if err != nil || other.GetAcquired() {
		t.Fatalf("another Acquire(%s) after the Take: %v, %v (want refused)", name, other, err)
	}
	if _, err := locks.Renew(ctx, &lockdv1.RenewRequest{Key: name, LeaseId: held.GetLease().GetLeaseId(), Ttl: durationpb.New(time.Minute)}); err != nil {
		t.Fatalf("Renew after the Take: %v", err)
	}
	if _, err := locks.Release(ctx, &lockdv1.ReleaseRequest{Key: name, LeaseId: held.GetLease().GetLeaseId()}); err != nil {
		t.Fatalf("Release after the Take: %v", err)
	}
	// Releasing the lock gave the limiter nothing back.
	if res, err := limits.Take(ctx, oncePerHour(name)); err != nil || res.GetAllowed() {
		t.Fatalf("Take(%s) after the lock's release: %v, %v (want refused: spent)", name, res, err)
	}
	if n, err := rdb.Exists(ctx, limiterKeys[0]).Result(); err != nil || n != 1 {
		t.Fatalf("the limiter's key after the lock's release: exists=%d, %v", n, err)
	}
	// And the free lock is granted while the limiter stays spent.
	again, err := locks.Acquire(ctx, &lockdv1.AcquireRequest{Key: name, Owner: "x", Ttl: durationpb.New(time.Minute)})
	if err != nil || !again.GetAcquired() {
		t.Fatalf("Acquire(%s) with its limiter spent: %v, %v (want granted)", name, again, err)
	}
}

// TestNamespacesKeepRateLimitersApart: two deployments on one Redis, each
// with its own --namespace, each have their own limiter of a key: spending
// one leaves the other whole, and each limiter's Redis key starts with its
// namespace.
func TestNamespacesKeepRateLimitersApart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := start(t, Config{Redis: srv.Addr(), Namespace: "team-a"})
	b := start(t, Config{Redis: srv.Addr(), Namespace: "team-b"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ra, rb := lockdv1.NewRateLimitServiceClient(a.conn), lockdv1.NewRateLimitServiceClient(b.conn)
	const key = "partner/api"

	if res, err := ra.Take(ctx, oncePerHour(key)); err != nil || !res.GetAllowed() {
		t.Fatalf("team-a's first Take: %v, %v", res, err)
	}
	if res, err := ra.Take(ctx, oncePerHour(key)); err != nil || res.GetAllowed() {
		t.Fatalf("team-a's second Take: %v, %v (want refused)", res, err)
	}
	// team-a's limiter is spent; team-b's is whole.
	if res, err := rb.Take(ctx, oncePerHour(key)); err != nil || !res.GetAllowed() {
		t.Fatalf("team-b's first Take after team-a spent its own: %v, %v (want allowed)", res, err)
	}
	if res, err := rb.Take(ctx, oncePerHour(key)); err != nil || res.GetAllowed() {
		t.Fatalf("team-b's second Take: %v, %v (want refused)", res, err)
	}
	// Parameters are each namespace's own: team-b may use the key with
	// another limit without a conflict with team-a's.
	other := oncePerHour("orders/api")
	if _, err := ra.Take(ctx, other); err != nil {
		t.Fatal(err)
	}
	other.Limit = 5
	if res, err := rb.Take(ctx, other); err != nil || !res.GetAllowed() {
		t.Fatalf("team-b's limiter with other parameters than team-a's: %v, %v (want allowed)", res, err)
	}

	keys, err := srv.Client(t).Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	perNamespace := map[string]int{}
	for _, k := range keys {
		ns, _, _ := strings.Cut(k, ":")
		if ns != "team-a" && ns != "team-b" {
			t.Errorf("Redis key %q is in neither namespace", k)
		}
		if strings.Contains(k, ":rl:") {
			perNamespace[ns]++
		}
	}
	if perNamespace["team-a"] != 2 || perNamespace["team-b"] != 2 {
		t.Errorf("limiter keys per namespace: %v in %v, want 2 each", perNamespace, keys)
	}
}

// TestTakeWaitsWithoutPolling: a Take that waits for its turn asks Redis
// once for it and then sleeps; it does not poll Redis while it waits. The
// wait lasts over a second (the refused Take before it says so), so a
// poll even every few tens of milliseconds would show as dozens of calls.
func TestTakeWaitsWithoutPolling(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Health pings would be counted too: keep them out of the wait.
	r := start(t, Config{Redis: srv.Addr(), HealthInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	limits := lockdv1.NewRateLimitServiceClient(r.conn)
	req := &lockdv1.TakeRequest{Key: "partner/api", Limit: 1, Period: durationpb.New(3 * time.Second)}
	if res, err := limits.Take(ctx, req); err != nil || !res.GetAllowed() {
		t.Fatalf("first Take: %v, %v", res, err)
	}
	res, err := limits.Take(ctx, req)
	if err != nil || res.GetAllowed() || res.GetRetryAfter().AsDuration() < time.Second {
		t.Fatalf("Take without a wait: %v, %v (want refused, the next turn over a second away)", res, err)
	}

	rdb := srv.Client(t)
	before := redistest.CommandCalls(t, rdb)
	req.WaitTimeout = durationpb.New(30 * time.Second)
	if res, err := limits.Take(ctx, req); err != nil || !res.GetAllowed() {
		t.Fatalf("Take waiting for its turn: %v, %v (want allowed)", res, err)
	}
	after := redistest.CommandCalls(t, rdb)
	var scripts, all int64
	var ran []string
	for name, n := range after {
		d := n - before[name]
		if name == "info" {
			d-- // the INFO that read before
		}
		if d <= 0 {
			continue
		}
		all += d
		ran = append(ran, name+"="+strconv.FormatInt(d, 10))
		if name == "eval" || name == "evalsha" {
			scripts += d
		}
	}
	t.Logf("Redis commands during the waiting Take: %v", ran)
	// One take.lua; a retry of it after a NOSCRIPT (EVALSHA, then EVAL)
	// at most; nothing while the call sleeps.
	if scripts > 2 || all > 6 {
		t.Errorf("the waiting Take ran %d scripts and %d commands in all (%v), want at most 2 and 6", scripts, all, ran)
	}
}
