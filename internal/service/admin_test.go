package service_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/service"
)

// adminInstance is one lockd serving LockService, ElectionService,
// SemaphoreService and AdminService behind authentication: client "ops"
// is an admin, "orders" and "billing" may lock their own prefixes.
type adminInstance struct {
	locks lockdv1.LockServiceClient
	sem   lockdv1.SemaphoreServiceClient
	elect lockdv1.ElectionServiceClient
	admin lockdv1.AdminServiceClient
	audit *logtest.Buffer
}

const (
	opsToken     = "ops-bearer-token-0123456789"
	ordersToken  = "orders-bearer-token-0123456"
	billingToken = "billing-bearer-token-012345"
)

func startAdmin(t *testing.T, rdb redis.UniversalClient) adminInstance {
	t.Helper()
	engine := redislock.New(rdb, redislock.Options{})
	t.Cleanup(func() { _ = engine.Close() })
	audit := &logtest.Buffer{}
	srv := service.NewLockServer(engine, service.DefaultBounds(), slog.New(slog.NewTextHandler(audit, nil)),
		service.WithAudit(slog.New(slog.NewJSONHandler(audit, nil))))
	authn, err := auth.New([]auth.Client{
		{Name: "ops", Token: opsToken, Admin: true},
		{Name: "orders", Token: ordersToken, Locks: []string{"orders/"}},
		{Name: "billing", Token: billingToken, Locks: []string{"billing/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := serveWith(t, authn, func(gs *grpc.Server) {
		lockdv1.RegisterLockServiceServer(gs, srv)
		lockdv1.RegisterSemaphoreServiceServer(gs, service.NewSemaphoreServer(srv))
		lockdv1.RegisterElectionServiceServer(gs, service.NewElectionServer(srv))
		lockdv1.RegisterAdminServiceServer(gs, service.NewAdminServer(srv, nil))
	})
	return adminInstance{locks: lockdv1.NewLockServiceClient(conn), sem: lockdv1.NewSemaphoreServiceClient(conn),
		elect: lockdv1.NewElectionServiceClient(conn), admin: lockdv1.NewAdminServiceClient(conn), audit: audit}
}

func bearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// listAll pages through ListLocks and returns the keys listed.
func listAll(t *testing.T, ctx context.Context, c lockdv1.AdminServiceClient, prefix string) map[string]*lockdv1.LockInfo {
	t.Helper()
	out := map[string]*lockdv1.LockInfo{}
	token := ""
	for range 1000 {
		page, err := c.ListLocks(ctx, &lockdv1.ListLocksRequest{Prefix: prefix, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatalf("ListLocks(%q): %v", prefix, err)
		}
		for _, l := range page.GetLocks() {
			out[l.GetKey()] = l
		}
		if token = page.GetNextPageToken(); token == "" {
			return out
		}
	}
	t.Fatal("ListLocks does not end")
	return nil
}

func keysOf(m map[string]*lockdv1.LockInfo) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return strings.Join(sorted(ks), ",")
}

func sorted(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// TestAdminScopesAndForceRelease: clients list and describe only within
// their prefixes and never see other clients' names; only the admin may
// ForceRelease, which ends a KeepAlive holder's stream with NOT_FOUND,
// lets a waiting writer in with a greater fencing token, and is audited
// with who did it.
func TestAdminScopesAndForceRelease(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		a := startAdmin(t, rdb)
		ctx := timeout(t, 60*time.Second)
		ops, orders, billing := bearer(ctx, opsToken), bearer(ctx, ordersToken), bearer(ctx, billingToken)

		held, err := a.locks.Acquire(orders, &lockdv1.AcquireRequest{Key: "orders/42", Owner: "worker-1", Ttl: durationpb.New(3 * time.Second)})
		if err != nil || !held.GetAcquired() {
			t.Fatal(held, err)
		}
		kctx, stopKeep := context.WithCancel(orders)
		defer stopKeep()
		ka, err := a.locks.KeepAlive(kctx, &lockdv1.KeepAliveRequest{Key: "orders/42", LeaseId: held.GetLease().GetLeaseId()})
		if err != nil {
			t.Fatal(err)
		}
		kept := follow(ka.Recv)
		kept.next(t, "the first KeepAlive renewal")
		if _, err := a.sem.Acquire(billing, &lockdv1.SemaphoreServiceAcquireRequest{Key: "billing/upstream", Limit: 4, Owner: "b1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.locks.Acquire(billing, &lockdv1.AcquireRequest{Key: "billing/x", Owner: "b2"}); err != nil {
			t.Fatal(err)
		}

		_, err = a.admin.ListLocks(ctx, &lockdv1.ListLocksRequest{})
		wantCode(t, "ListLocks without a token", err, codes.Unauthenticated)
		if got := keysOf(listAll(t, orders, a.admin, "")); got != "orders/42" {
			t.Errorf("orders lists %s, want only orders/42", got)
		}
		if got := keysOf(listAll(t, billing, a.admin, "b")); got != "billing/upstream,billing/x" {
			t.Errorf("billing lists %s", got)
		}
		all := listAll(t, ops, a.admin, "")
		if got := keysOf(all); got != "billing/upstream,billing/x,orders/42" {
			t.Errorf("ops lists %s", got)
		}
		if h := all["orders/42"].GetHolders(); len(h) != 1 || h[0].GetOwner() != "worker-1" || h[0].GetClient() != "orders" ||
			h[0].GetFencingToken() != held.GetLease().GetFencingToken() {
			t.Errorf("ops sees holders %v", h)
		}
		if s := all["billing/upstream"]; s.GetKind() != lockdv1.LockKind_LOCK_KIND_SEMAPHORE || s.GetSemaphore().GetLimit() != 4 || s.GetSemaphore().GetPermitsInUse() != 1 {
			t.Errorf("ops sees the semaphore as %v", s)
		}

		d, err := a.admin.DescribeLock(orders, &lockdv1.DescribeLockRequest{Key: "orders/42"})
		if err != nil || d.GetLock().GetKind() != lockdv1.LockKind_LOCK_KIND_LOCK || len(d.GetLock().GetHolders()) != 1 {
			t.Fatalf("orders describes its lock: %v, %v", d, err)
		}
		if h := d.GetLock().GetHolders()[0]; h.GetOwner() != "worker-1" || h.GetClient() != "" || h.GetMode() != lockdv1.LockMode_LOCK_MODE_WRITE ||
			h.GetTtlLeft().AsDuration() <= 0 || h.GetTtlLeft().AsDuration() > 3*time.Second {
			t.Errorf("orders sees its holder as %v", h)
		}
		_, err = a.admin.DescribeLock(orders, &lockdv1.DescribeLockRequest{Key: "billing/x"})
		wantCode(t, "orders describing billing's key", err, codes.PermissionDenied)
		_, err = a.admin.ForceRelease(orders, &lockdv1.ForceReleaseRequest{Key: "orders/42", Owner: "worker-1"})
		wantCode(t, "ForceRelease by a client that is no admin", err, codes.PermissionDenied)
		_, err = a.admin.ForceRelease(ctx, &lockdv1.ForceReleaseRequest{Key: "orders/42"})
		wantCode(t, "ForceRelease without a token", err, codes.Unauthenticated)

		// A writer waits for the stuck key.
		waited := make(chan *lockdv1.AcquireResponse, 1)
		go func() {
			res, err := a.locks.Acquire(orders, &lockdv1.AcquireRequest{Key: "orders/42", Owner: "worker-2", WaitTimeout: durationpb.New(45 * time.Second)})
			if err != nil {
				t.Error(err)
			}
			waited <- res
		}()
		waitFor(t, "the writer waits", func() bool {
			d, err := a.admin.DescribeLock(ops, &lockdv1.DescribeLockRequest{Key: "orders/42"})
			return err == nil && d.GetLock().GetWaitingWriters() == 1
		})

		_, err = a.admin.ForceRelease(ops, &lockdv1.ForceReleaseRequest{Key: "orders/42", Owner: "nobody"})
		wantCode(t, "ForceRelease of an owner holding nothing", err, codes.NotFound)
		fr, err := a.admin.ForceRelease(ops, &lockdv1.ForceReleaseRequest{Key: "orders/42", Owner: "worker-1"})
		if err != nil || len(fr.GetReleased()) != 1 || fr.GetReleased()[0].GetOwner() != "worker-1" {
			t.Fatalf("ForceRelease = %v, %v", fr, err)
		}
		select {
		case res := <-waited:
			if !res.GetAcquired() || res.GetLease().GetFencingToken() <= held.GetLease().GetFencingToken() {
				t.Fatalf("waiter got %v", res)
			}
		case <-time.After(40 * time.Second):
			t.Fatal("the waiting writer did not get the lock")
		}
		if err := kept.ended(t, "the evicted KeepAlive"); grpcstatus.Code(err) != codes.NotFound {
			t.Fatalf("evicted KeepAlive ended with %v, want NOT_FOUND", err)
		}
		_, err = a.locks.Renew(orders, &lockdv1.RenewRequest{Key: "orders/42", LeaseId: held.GetLease().GetLeaseId()})
		wantCode(t, "Renew of the evicted lease", err, codes.NotFound)
		waitFor(t, "the audit log names who force-released", func() bool {
			out := a.audit.String()
			return strings.Contains(out, `"msg":"force-released","client":"ops","key":"orders/42","owner":"worker-1"`)
		})
	})
}

// TestAdminInvalidRequests: malformed requests are INVALID_ARGUMENT
// naming the field, unknown apps NOT_FOUND.
func TestAdminInvalidRequests(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		a := startAdmin(t, rdb)
		ops := bearer(timeout(t, 30*time.Second), opsToken)
		for what, call := range map[string]func() error{
			"an empty key": func() error {
				_, err := a.admin.DescribeLock(ops, &lockdv1.DescribeLockRequest{})
				return err
			},
			"a key with a control character": func() error {
				_, err := a.admin.ForceRelease(ops, &lockdv1.ForceReleaseRequest{Key: "a\x00b"})
				return err
			},
			"an owner too long": func() error {
				_, err := a.admin.ForceRelease(ops, &lockdv1.ForceReleaseRequest{Key: "k", Owner: strings.Repeat("o", 300)})
				return err
			},
			"a page too large": func() error {
				_, err := a.admin.ListLocks(ops, &lockdv1.ListLocksRequest{PageSize: 501})
				return err
			},
			"a page token of nothing": func() error {
				_, err := a.admin.ListLocks(ops, &lockdv1.ListLocksRequest{PageToken: "garbage"})
				return err
			},
			"a prefix with a control character": func() error {
				_, err := a.admin.ListLocks(ops, &lockdv1.ListLocksRequest{Prefix: "a\nb"})
				return err
			},
			"an empty app": func() error {
				_, err := a.admin.DescribeApp(ops, &lockdv1.DescribeAppRequest{})
				return err
			},
		} {
			if err := call(); grpcstatus.Code(err) != codes.InvalidArgument {
				t.Errorf("%s: %v, want INVALID_ARGUMENT", what, err)
			}
		}
		_, err := a.admin.DescribeApp(ops, &lockdv1.DescribeAppRequest{App: "mp"})
		wantCode(t, "DescribeApp of an unknown app", err, codes.NotFound)
		apps, err := a.admin.ListApps(ops, &lockdv1.ListAppsRequest{})
		if err != nil || len(apps.GetApps()) != 0 {
			t.Errorf("ListApps without apps = %v, %v", apps, err)
		}
		_, err = a.admin.ForceRelease(ops, &lockdv1.ForceReleaseRequest{Key: "free"})
		wantCode(t, "ForceRelease of a free key", err, codes.NotFound)
	})
}
