package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// parseConfig parses a --config file whose secrets come from env.
func parseConfig(t *testing.T, yaml string, env map[string]string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(yaml), config.Sources{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// as returns a context carrying a bearer token.
func as(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

const (
	billingToken = "billing-bearer-0123456789"
	ledgerToken  = "ledger-bearer-0123456789"
)

// twoTeams serves two clients whose prefixes overlap as strings: billing
// ("billing") may lock every key of ledger ("billing-ledger/").
// limits is added to billing's entry; a replica argument, if given, is
// the replica's bounds.
func twoTeams(t *testing.T, srv *redistest.Server, limits string, replica ...service.Bounds) *running {
	t.Helper()
	file := parseConfig(t, `auth:
  clients:
    - {name: billing, token_env: BILLING, locks: ["billing"]`+limits+`}
    - {name: ledger, token_env: LEDGER, locks: ["billing-ledger/"]}
`, map[string]string{"BILLING": billingToken, "LEDGER": ledgerToken})
	cfg := Config{Redis: srv.Addr(), File: file}
	if len(replica) > 0 {
		cfg.Bounds = replica[0]
	}
	return start(t, cfg)
}

// TestCrossTeamTakeoverFails: billing may lock ledger's keys (its prefix
// covers them), but no owner name, request_id or guessed lease id hands it
// ledger's lease; ledger's lease is untouched throughout.
func TestCrossTeamTakeoverFails(t *testing.T) {
	t.Parallel()
	r := twoTeams(t, redistest.Start(t), "")
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	billing, ledger := as(ctx, billingToken), as(ctx, ledgerToken)
	const key = "billing-ledger/run-7"

	mine, err := lc.Acquire(ledger, &lockdv1.AcquireRequest{Key: key, Owner: "worker-1", RequestId: "req-1", Ttl: durationpb.New(time.Minute)})
	if err != nil || !mine.GetAcquired() {
		t.Fatalf("ledger's Acquire: %v, %v", mine, err)
	}
	lease := mine.GetLease()
	if lease.GetOwner() != "worker-1" {
		t.Fatalf("ledger sees owner %q, want its own name worker-1", lease.GetOwner())
	}

	attempts := []struct {
		name string
		req  *lockdv1.AcquireRequest
	}{
		{"naming ledger's owner", &lockdv1.AcquireRequest{Key: key, Owner: "worker-1"}},
		{"replaying ledger's request_id without an owner", &lockdv1.AcquireRequest{Key: key, RequestId: "req-1"}},
		{"replaying ledger's request_id with ledger's owner", &lockdv1.AcquireRequest{Key: key, Owner: "worker-1", RequestId: "req-1"}},
		{"an owner spelling ledger's name into it", &lockdv1.AcquireRequest{Key: key, Owner: "ledger:worker-1"}},
		{"an owner continuing billing's name into ledger's", &lockdv1.AcquireRequest{Key: key, Owner: "-ledger:worker-1"}},
		{"an owner continuing the prefix", &lockdv1.AcquireRequest{Key: key, Owner: "-ledger/worker-1"}},
		{"an owner with a separator first", &lockdv1.AcquireRequest{Key: key, Owner: ":worker-1"}},
	}
	for _, a := range attempts {
		for _, call := range []func() (bool, *lockdv1.Lease, error){
			func() (bool, *lockdv1.Lease, error) {
				res, err := lc.Acquire(billing, a.req)
				return res.GetAcquired(), res.GetLease(), err
			},
			func() (bool, *lockdv1.Lease, error) {
				res, err := lc.RLock(billing, &lockdv1.RLockRequest{Key: a.req.Key, Owner: a.req.Owner, RequestId: a.req.RequestId})
				return res.GetAcquired(), res.GetLease(), err
			},
		} {
			got, l, err := call()
			if err != nil && status.Code(err) != codes.FailedPrecondition {
				t.Errorf("billing %s: %v", a.name, err)
			}
			if got || l.GetLeaseId() == lease.GetLeaseId() {
				t.Errorf("billing %s: got ledger's lock (lease %v)", a.name, l)
			}
		}
	}
	// A released request_id of billing's own is billing's, not ledger's.
	if _, err := lc.Release(billing, &lockdv1.ReleaseRequest{Key: key, LeaseId: lease.GetLeaseId()[:10] + "AAAAAAAAAAAA", RequestId: "req-1"}); status.Code(err) != codes.NotFound {
		t.Errorf("billing releasing a guessed lease id: %v, want NOT_FOUND", err)
	}
	for _, guess := range []string{"AAAAAAAAAAAAAAAAAAAAAA", lease.GetLeaseId() + "x", strings.ToUpper(lease.GetLeaseId())} {
		if _, err := lc.Renew(billing, &lockdv1.RenewRequest{Key: key, LeaseId: guess}); status.Code(err) != codes.NotFound {
			t.Errorf("billing renewing guessed lease id %q: %v, want NOT_FOUND", guess, err)
		}
	}

	// ledger's own retry still replays its lease, unchanged.
	again, err := lc.Acquire(ledger, &lockdv1.AcquireRequest{Key: key, Owner: "worker-1", RequestId: "req-1", Ttl: durationpb.New(time.Minute)})
	if err != nil || again.GetLease().GetLeaseId() != lease.GetLeaseId() || again.GetLease().GetOwner() != "worker-1" {
		t.Fatalf("ledger's retry: %v, %v", again, err)
	}
	// Nothing billing did added or removed a hold: one Release frees it.
	rel, err := lc.Release(ledger, &lockdv1.ReleaseRequest{Key: key, LeaseId: lease.GetLeaseId()})
	if err != nil || rel.GetHoldCount() != 0 {
		t.Fatalf("ledger's Release: %v, %v (want hold_count 0: no hold was added)", rel, err)
	}
}

// TestOneTeamAtItsLimitsLeavesOthersServed: billing may have 2 waiters
// and 1 KeepAlive stream; the replica allows 3 waiters in all. With
// billing at its limits, its third waiter is refused, its tries of free
// keys still succeed, and ledger is served as usual.
func TestOneTeamAtItsLimitsLeavesOthersServed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	file := parseConfig(t, `auth:
  clients:
    - {name: billing, token_env: BILLING, locks: ["billing/"], limits: {waiters: 2, keepalives: 1}}
    - {name: ledger, token_env: LEDGER, locks: ["ledger/"]}
`, map[string]string{"BILLING": billingToken, "LEDGER": ledgerToken})
	r := start(t, Config{Redis: srv.Addr(), File: file, Bounds: boundsWith(3, 0)})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	billing, ledger := as(ctx, billingToken), as(ctx, ledgerToken)

	held, err := lc.Acquire(billing, &lockdv1.AcquireRequest{Key: "billing/busy", Ttl: durationpb.New(time.Minute)})
	if err != nil || !held.GetAcquired() {
		t.Fatal(held, err)
	}
	// Two waiters of billing's, each on its own connection, wait until
	// the test ends (trying again when a probe below holds a place).
	waitCtx, stopWaiting := context.WithCancel(billing)
	var wg sync.WaitGroup
	defer func() { stopWaiting(); wg.Wait() }()
	for range 2 {
		conn, err := grpc.NewClient(r.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for waitCtx.Err() == nil {
				_, err := lockdv1.NewLockServiceClient(conn).Acquire(waitCtx, &lockdv1.AcquireRequest{Key: "billing/busy", WaitTimeout: durationpb.New(time.Minute)})
				if status.Code(err) != codes.ResourceExhausted {
					return
				}
			}
		}()
	}
	// Billing's third waiter is refused once the two are waiting.
	waitFor(t, "billing's third waiter refused", func() bool {
		_, err := lc.Acquire(billing, &lockdv1.AcquireRequest{Key: "billing/busy", WaitTimeout: durationpb.New(20 * time.Millisecond)})
		return status.Code(err) == codes.ResourceExhausted
	})
	// A try that succeeds at once takes no waiter slot, whatever its wait.
	free, err := lc.Acquire(billing, &lockdv1.AcquireRequest{Key: "billing/free", WaitTimeout: durationpb.New(time.Minute)})
	if err != nil || !free.GetAcquired() {
		t.Fatalf("billing at its waiter limit, a free key: %v, %v", free, err)
	}
	// Ledger is served: a free key, and a wait of its own.
	if res, err := lc.Acquire(ledger, &lockdv1.AcquireRequest{Key: "ledger/free", WaitTimeout: durationpb.New(time.Minute)}); err != nil || !res.GetAcquired() {
		t.Fatalf("ledger, a free key: %v, %v", res, err)
	}
	if res, err := lc.Acquire(ledger, &lockdv1.AcquireRequest{Key: "ledger/free", Owner: "other", WaitTimeout: durationpb.New(50 * time.Millisecond)}); err != nil || res.GetAcquired() {
		t.Fatalf("ledger, waiting on its busy key: %v, %v (want OK, not acquired)", res, err)
	}

	// KeepAlive streams: billing's second is refused, ledger's opens.
	keepAlive := func(ctx context.Context, key, lease string) (lockdv1.LockService_KeepAliveClient, error) {
		s, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: key, LeaseId: lease})
		if err != nil {
			return nil, err
		}
		_, err = s.Recv()
		return s, err
	}
	if _, err := keepAlive(waitCtx, "billing/busy", held.GetLease().GetLeaseId()); err != nil {
		t.Fatalf("billing's first KeepAlive: %v", err)
	}
	if _, err := keepAlive(waitCtx, "billing/free", free.GetLease().GetLeaseId()); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("billing's second KeepAlive: %v, want RESOURCE_EXHAUSTED", err)
	}
	mine, err := lc.Acquire(ledger, &lockdv1.AcquireRequest{Key: "ledger/kept"})
	if err != nil {
		t.Fatal(err)
	}
	ledgerStreams, stopLedger := context.WithCancel(ledger)
	defer stopLedger()
	if _, err := keepAlive(ledgerStreams, "ledger/kept", mine.GetLease().GetLeaseId()); err != nil {
		t.Fatalf("ledger's KeepAlive while billing is at its limit: %v", err)
	}
}

// boundsWith returns the default bounds with replica-wide bounds on
// waiters and KeepAlive streams.
func boundsWith(waiters, keepAlives int) service.Bounds {
	l := service.DefaultBounds()
	l.MaxWaiters, l.MaxKeepAlives = waiters, keepAlives
	return l
}

// TestAFreeKeyTakesNoWaiterPlace: with the replica's only waiter place
// taken, a call with a wait_timeout on a free key is granted at once: it
// never needed to wait, so it never needed a place.
func TestAFreeKeyTakesNoWaiterPlace(t *testing.T) {
	t.Parallel()
	r := start(t, Config{Redis: redistest.Start(t).Addr(), Bounds: boundsWith(1, 0)})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "busy", Owner: "holder"}); err != nil || !res.GetAcquired() {
		t.Fatal(res, err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		for waitCtx.Err() == nil {
			_, _ = lc.Acquire(waitCtx, &lockdv1.AcquireRequest{Key: "busy", Owner: "waiter", WaitTimeout: durationpb.New(time.Minute)})
		}
	}()
	defer func() { stopWaiting(); <-waited }()
	waitFor(t, "the only waiter place taken", func() bool {
		_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "busy", Owner: "probe", WaitTimeout: durationpb.New(10 * time.Millisecond)})
		return status.Code(err) == codes.ResourceExhausted
	})
	res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "free", Owner: "other", WaitTimeout: durationpb.New(time.Minute)})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("a free key with the waiter places full: %v, %v", res, err)
	}
}
