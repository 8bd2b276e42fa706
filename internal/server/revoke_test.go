package server

import (
	"context"
	"strings"
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

// TestReloadEndsTheCallsOfRevokedClients: a reload that removes a client,
// replaces its token or narrows its prefixes ends the calls it has under
// way that the new configuration would refuse (waiting acquires and
// KeepAlive streams, which would otherwise renew for ever), with the code a
// new call would get; calls still allowed go on.
func TestReloadEndsTheCallsOfRevokedClients(t *testing.T) {
	t.Parallel()
	const (
		auditToken   = "audit-bearer-0123456789"
		billingToken = "billing-bearer-0123456789"
		rotatedToken = "billing-bearer-rotated-0123"
		ledgerToken  = "ledger-bearer-0123456789"
	)
	env := map[string]string{"AUDIT": auditToken, "BILLING": billingToken, "LEDGER": ledgerToken, "ROTATED": rotatedToken}
	before := `auth:
  clients:
    - {name: audit, token_env: AUDIT, locks: ["audit/", "shared/"]}
    - {name: billing, token_env: BILLING, locks: ["billing/"]}
    - {name: ledger, token_env: LEDGER, locks: ["ledger/"]}
`
	after := `auth:
  clients:
    - {name: audit, token_env: AUDIT, locks: ["audit/"]}
    - {name: billing, token_env: ROTATED, locks: ["billing/"]}
`
	var file atomic.Value
	file.Store(before)
	reload := make(chan struct{}, 1)
	r := start(t, Config{
		Redis: redistest.Start(t).Addr(), File: parseConfig(t, before, env), Reload: reload,
		LoadConfig: func() (*config.Config, error) {
			return config.Parse([]byte(file.Load().(string)), config.Sources{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		},
	})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// keepAlive takes key as token's client and keeps it alive, with a
	// first renewal received.
	keepAlive := func(token, key string) lockdv1.LockService_KeepAliveClient {
		t.Helper()
		l, err := lc.Acquire(as(ctx, token), &lockdv1.AcquireRequest{Key: key, Ttl: durationpb.New(3 * time.Second)})
		if err != nil || !l.GetAcquired() {
			t.Fatalf("acquire %s: %v %v", key, l, err)
		}
		s, err := lc.KeepAlive(as(ctx, token), &lockdv1.KeepAliveRequest{Key: key, LeaseId: l.GetLease().GetLeaseId()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("keepalive %s: %v", key, err)
		}
		return s
	}
	kept := keepAlive(auditToken, "audit/1")
	narrowed := keepAlive(auditToken, "shared/1")
	rotated := keepAlive(billingToken, "billing/1")
	removed := keepAlive(ledgerToken, "ledger/1")

	// ledger also waits to write a key it reads under another owner.
	if l, err := lc.RLock(as(ctx, ledgerToken), &lockdv1.RLockRequest{Key: "ledger/busy", Owner: "a", Ttl: durationpb.New(time.Minute)}); err != nil || !l.GetAcquired() {
		t.Fatalf("rlock ledger/busy: %v %v", l, err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := lc.Acquire(as(ctx, ledgerToken), &lockdv1.AcquireRequest{Key: "ledger/busy", Owner: "b", WaitTimeout: durationpb.New(time.Hour)})
		waited <- err
	}()
	waitFor(t, "the writer to wait (keeping new readers out)", func() bool { return writerWaits(ctx, t, lc, ledgerToken) })

	file.Store(after)
	reload <- struct{}{}

	ended := func(what string, s lockdv1.LockService_KeepAliveClient, want codes.Code) {
		t.Helper()
		for {
			_, err := s.Recv()
			if err == nil {
				continue
			}
			if status.Code(err) != want {
				t.Errorf("%s ended with %v, want %v", what, err, want)
			}
			return
		}
	}
	ended("the KeepAlive of a removed client", removed, codes.Unauthenticated)
	ended("a KeepAlive with a replaced token", rotated, codes.Unauthenticated)
	ended("a KeepAlive on a key outside the new prefixes", narrowed, codes.PermissionDenied)
	select {
	case err := <-waited:
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("the waiting acquire of a removed client ended with %v, want UNAUTHENTICATED", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting acquire of a removed client still waits after the reload")
	}
	// The call still allowed goes on renewing.
	for range 3 {
		if _, err := kept.Recv(); err != nil {
			t.Fatalf("a KeepAlive the new configuration allows ended: %v", err)
		}
	}
	if m, want := httpBody(t, "http://"+r.addrs.HTTP+"/metrics"), `lockd_auth_failures_total{reason="revoked"} 4`; !strings.Contains(m, want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// writerWaits reports whether a new reader is kept out of ledger/busy,
// as it is while a writer waits.
func writerWaits(ctx context.Context, t *testing.T, lc lockdv1.LockServiceClient, token string) bool {
	res, err := lc.RLock(as(ctx, token), &lockdv1.RLockRequest{Key: "ledger/busy", Owner: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetAcquired() {
		if _, err := lc.Release(as(ctx, token), &lockdv1.ReleaseRequest{Key: "ledger/busy", LeaseId: res.GetLease().GetLeaseId()}); err != nil {
			t.Fatal(err)
		}
	}
	return !res.GetAcquired()
}
