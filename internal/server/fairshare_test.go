package server

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/redistest"
)

// TestClientsWithoutLimitsGetAFairShare: two clients, neither with limits
// of its own, on a replica of 4 waiter and 4 KeepAlive places. The first
// takes what it can: half of each pool; the second still gets its own.
func TestClientsWithoutLimitsGetAFairShare(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := twoTeams(t, srv, "", boundsWith(4, 4))
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ledger := as(ctx, ledgerToken)
	for _, tk := range []struct{ token, key string }{{billingToken, "billing/busy"}, {ledgerToken, "billing-ledger/busy"}} {
		if res, err := lc.Acquire(as(ctx, tk.token), &lockdv1.AcquireRequest{Key: tk.key, Owner: "holder", Ttl: durationpb.New(time.Minute)}); err != nil || !res.GetAcquired() {
			t.Fatal(res, err)
		}
	}

	// billing's waiters, until the replica refuses one.
	streams, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	waitCtx := as(streams, billingToken)
	var (
		mu      sync.Mutex
		waiters []chan error
	)
	refused := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			waiter := make(chan error, 1)
			mu.Lock()
			waiters = append(waiters, waiter)
			mu.Unlock()
			go func() {
				_, err := lc.Acquire(waitCtx, &lockdv1.AcquireRequest{Key: "billing/busy", WaitTimeout: durationpb.New(time.Minute)})
				waiter <- err
			}()
			select {
			case err := <-waiter:
				waiter <- err
				if status.Code(err) == codes.ResourceExhausted {
					close(refused)
					return
				}
				t.Errorf("billing's waiter %d: %v", i, err)
				return
			case <-time.After(200 * time.Millisecond):
				// It waits, or its refusal is slow to come.
			}
		}
	}()
	select {
	case <-refused:
	case <-ctx.Done():
		t.Fatal("billing's waiters were never refused")
	}
	// The waiters still waiting a moment later hold their places; a
	// refusal slower than the loop's 200ms has come back by then.
	time.Sleep(time.Second)
	mu.Lock()
	n := 0
	for _, w := range waiters {
		if len(w) == 0 {
			n++
		}
	}
	mu.Unlock()
	if n != 2 {
		t.Errorf("billing, without limits of its own, got %d of the replica's 4 waiter places, want 2 (half)", n)
	}
	res, err := lc.Acquire(ledger, &lockdv1.AcquireRequest{Key: "billing-ledger/busy", WaitTimeout: durationpb.New(50 * time.Millisecond)})
	if err != nil || res.GetAcquired() {
		t.Fatalf("ledger's wait while billing waits all it may: %v, %v (want OK, not acquired)", res, err)
	}

	// KeepAlive streams: billing gets two of four, ledger its own.
	keepAlive := func(token, key string) error {
		l, err := lc.Acquire(as(ctx, token), &lockdv1.AcquireRequest{Key: key})
		if err != nil {
			return err
		}
		s, err := lc.KeepAlive(as(streams, token), &lockdv1.KeepAliveRequest{Key: key, LeaseId: l.GetLease().GetLeaseId()})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	for i, key := range []string{"billing/k1", "billing/k2"} {
		if err := keepAlive(billingToken, key); err != nil {
			t.Fatalf("billing's KeepAlive %d: %v", i, err)
		}
	}
	if err := keepAlive(billingToken, "billing/k3"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("billing's third KeepAlive: %v, want RESOURCE_EXHAUSTED (its fair share is 2 of 4)", err)
	}
	if err := keepAlive(ledgerToken, "billing-ledger/k1"); err != nil {
		t.Fatalf("ledger's KeepAlive: %v", err)
	}
}

// TestHeldLeasesAreBounded: with two clients, one without a leases limit
// holds at most --fair-share-leases leases at once through a replica, and
// one with limits.leases that many; a re-entry takes no new place, a
// release or a lease running out frees one, and the other client is
// served throughout.
func TestHeldLeasesAreBounded(t *testing.T) {
	t.Parallel()
	bounds := boundsWith(0, 0)
	bounds.FairShareLeases = 3
	r := twoTeams(t, redistest.Start(t), ", limits: {leases: 4}", bounds)
	lc := lockdv1.NewLockServiceClient(r.conn)
	sc := lockdv1.NewSemaphoreServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	billing, ledger := as(ctx, billingToken), as(ctx, ledgerToken)
	take := func(ctx context.Context, key, owner string, ttl time.Duration) (*lockdv1.AcquireResponse, error) {
		return lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: owner, Ttl: durationpb.New(ttl)})
	}

	// ledger, without limits of its own: its fair share, 3.
	var first *lockdv1.Lease
	for i, key := range []string{"billing-ledger/1", "billing-ledger/2"} {
		res, err := take(ledger, key, "w", time.Hour)
		if err != nil || !res.GetAcquired() {
			t.Fatalf("ledger's lease %d: %v, %v", i, res, err)
		}
		if i == 0 {
			first = res.GetLease()
		}
	}
	permit, err := sc.Acquire(ledger, &lockdv1.SemaphoreServiceAcquireRequest{Key: "billing-ledger/pool", Limit: 5, Ttl: durationpb.New(time.Hour)})
	if err != nil || !permit.GetAcquired() {
		t.Fatalf("ledger's permit: %v, %v", permit, err)
	}
	if _, err := take(ledger, "billing-ledger/4", "w", time.Hour); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("ledger's fourth lease: %v, want RESOURCE_EXHAUSTED", err)
	}
	if res, err := take(ledger, "billing-ledger/1", "w", time.Hour); err != nil || res.GetLease().GetLeaseId() != first.GetLeaseId() {
		t.Fatalf("ledger's re-entry at its bound: %v, %v (want the same lease)", res, err)
	}
	// billing is served while ledger is at its bound, up to its own 4.
	for i := range 4 {
		if res, err := take(billing, "billing/"+string(rune('a'+i)), "", time.Hour); err != nil || !res.GetAcquired() {
			t.Fatalf("billing's lease %d: %v, %v", i, res, err)
		}
	}
	if _, err := take(billing, "billing/e", "", time.Hour); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("billing's fifth lease: %v, want RESOURCE_EXHAUSTED (its limits.leases is 4)", err)
	}
	// A release frees a place: both holds of the re-entered lease.
	for range 2 {
		if _, err := lc.Release(ledger, &lockdv1.ReleaseRequest{Key: "billing-ledger/1", LeaseId: first.GetLeaseId()}); err != nil {
			t.Fatal(err)
		}
	}
	short, err := take(ledger, "billing-ledger/4", "w", 100*time.Millisecond)
	if err != nil || !short.GetAcquired() {
		t.Fatalf("ledger after a release: %v, %v", short, err)
	}
	// So does a lease whose ttl runs out.
	waitFor(t, "the short lease's place back", func() bool {
		res, err := take(ledger, "billing-ledger/5", "w", time.Hour)
		return err == nil && res.GetAcquired()
	})
}

// TestReloadReleasesTheLeasesOfRemovedClients: a reload that removes a
// client, or narrows its prefixes, releases the leases it took with unary
// calls at once: another client waiting for one of the keys gets it long
// before the lease's ttl.
func TestReloadReleasesTheLeasesOfRemovedClients(t *testing.T) {
	t.Parallel()
	const opsToken = "ops-bearer-0123456789abc"
	env := map[string]string{"BILLING": billingToken, "LEDGER": ledgerToken, "OPS": opsToken}
	before := `auth:
  clients:
    - {name: billing, token_env: BILLING, locks: ["billing/", "shared/"]}
    - {name: ledger, token_env: LEDGER, locks: ["ledger/"]}
    - {name: ops, token_env: OPS, locks: [""]}
`
	after := `auth:
  clients:
    - {name: billing, token_env: BILLING, locks: ["billing/"]}
    - {name: ops, token_env: OPS, locks: [""]}
`
	var file atomic.Value
	file.Store(before)
	reload := make(chan struct{}, 1)
	audit := t.TempDir() + "/audit.log"
	r := start(t, Config{
		Redis: redistest.Start(t).Addr(), File: parseConfig(t, before, env), Reload: reload, AuditLog: audit,
		LoadConfig: func() (*config.Config, error) {
			return config.Parse([]byte(file.Load().(string)), config.Sources{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		},
	})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hold := func(token, key string, read bool) {
		t.Helper()
		var (
			acquired bool
			err      error
		)
		if read {
			var res *lockdv1.RLockResponse
			res, err = lc.RLock(as(ctx, token), &lockdv1.RLockRequest{Key: key, Owner: "w", Ttl: durationpb.New(time.Hour)})
			acquired = res.GetAcquired()
		} else {
			var res *lockdv1.AcquireResponse
			res, err = lc.Acquire(as(ctx, token), &lockdv1.AcquireRequest{Key: key, Owner: "w", Ttl: durationpb.New(time.Hour)})
			acquired = res.GetAcquired()
		}
		if err != nil || !acquired {
			t.Fatalf("%s: %v %v", key, acquired, err)
		}
	}
	hold(ledgerToken, "ledger/1", false)
	hold(ledgerToken, "ledger/2", true)
	hold(billingToken, "shared/1", false)
	hold(billingToken, "billing/1", false)

	file.Store(after)
	reload <- struct{}{}

	// ops gets every key the reload took from its holder, well within
	// their hour-long ttl.
	for _, key := range []string{"ledger/1", "ledger/2", "shared/1"} {
		res, err := lc.Acquire(as(ctx, opsToken), &lockdv1.AcquireRequest{Key: key, WaitTimeout: durationpb.New(20 * time.Second)})
		if err != nil || !res.GetAcquired() {
			t.Errorf("%s after its client lost it in a reload: %v, %v (want it released)", key, res, err)
		}
	}
	// billing keeps what it may still lock.
	if res, err := lc.Acquire(as(ctx, opsToken), &lockdv1.AcquireRequest{Key: "billing/1"}); err != nil || res.GetAcquired() {
		t.Errorf("billing/1, still billing's to hold: %v, %v (want it held)", res, err)
	}
	waitFor(t, "the releases audited", func() bool {
		return strings.Count(readFile(audit), `"how":"revoked"`) == 3
	})
	// The tokens come from the environment: the reload says they cannot
	// rotate that way.
	if !strings.Contains(r.logs.String(), "token_env are read from the environment lockd started with") {
		t.Error("the reload did not say that token_env tokens cannot rotate")
	}
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}
