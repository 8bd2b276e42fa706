package service_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/ratelimit"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// rateLimitInstance is RateLimitService (with the LockServer it shares
// bounds and drain with) over bufconn, behind authn when given.
type rateLimitInstance struct {
	client lockdv1.RateLimitServiceClient
	locks  *service.LockServer
}

func startRateLimits(t *testing.T, rdb redis.UniversalClient, bounds service.Bounds, authn *auth.Authenticator) rateLimitInstance {
	t.Helper()
	engine := redislock.New(rdb, redislock.Options{})
	t.Cleanup(func() { _ = engine.Close() })
	locks := service.NewLockServer(engine, bounds, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := service.NewRateLimitServer(ratelimit.New(rdb, ratelimit.Options{DataLoss: engine}), locks)
	conn := serveWith(t, authn, func(gs *grpc.Server) { lockdv1.RegisterRateLimitServiceServer(gs, srv) })
	return rateLimitInstance{client: lockdv1.NewRateLimitServiceClient(conn), locks: locks}
}

func perMinute(key string, limit uint32) *lockdv1.TakeRequest {
	return &lockdv1.TakeRequest{Key: key, Limit: limit, Period: durationpb.New(time.Minute)}
}

func TestRateLimitServiceContract(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		rc := startRateLimits(t, rdb, service.DefaultBounds(), nil).client
		ctx := timeout(t, time.Minute)
		takeOK := func(req *lockdv1.TakeRequest) *lockdv1.TakeResponse {
			t.Helper()
			res, err := rc.Take(ctx, req)
			if err != nil {
				t.Fatalf("Take(%v): %v", req, err)
			}
			return res
		}
		// WeChat-like: 2 calls a minute for the whole fleet.
		for want := uint32(1); ; want-- {
			res := takeOK(perMinute("wechat/api", 2))
			if !res.GetAllowed() || res.GetRemaining() != want || res.GetRetryAfter() != nil || res.GetResetAfter().AsDuration() <= 0 {
				t.Fatalf("take with %d left: %v", want, res)
			}
			if want == 0 {
				break
			}
		}
		res := takeOK(perMinute("wechat/api", 2))
		if res.GetAllowed() || res.GetRetryAfter().AsDuration() <= 29*time.Second || res.GetResetAfter().AsDuration() <= 59*time.Second {
			t.Fatalf("third of 2 a minute: %v", res)
		}
		_, err := rc.Take(ctx, perMinute("wechat/api", 3))
		wantCode(t, "another limit for a limiter in use", err, codes.FailedPrecondition)
		if !strings.Contains(status.Convert(err).Message(), "2 per 1m0s, burst 2") {
			t.Errorf("the refusal does not name the limit in use: %v", err)
		}

		// Cost, and a retried request.
		req := &lockdv1.TakeRequest{Key: "partner", Limit: 10, Period: durationpb.New(time.Hour), Burst: 4, Cost: 3, RequestId: "r1"}
		if res := takeOK(req); !res.GetAllowed() || res.GetRemaining() != 1 {
			t.Fatalf("cost 3 of a burst of 4: %v", res)
		}
		if res := takeOK(req); !res.GetAllowed() || res.GetRemaining() != 1 {
			t.Fatalf("retry: %v", res)
		}
		if res := takeOK(&lockdv1.TakeRequest{Key: "partner", Limit: 10, Period: durationpb.New(time.Hour), Burst: 4}); !res.GetAllowed() || res.GetRemaining() != 0 {
			t.Fatalf("the retry spent again: %v", res)
		}

		// Waiting: a turn within the wait is awaited, one beyond the
		// deadline is refused at once.
		quick := &lockdv1.TakeRequest{Key: "quick", Limit: 20, Period: durationpb.New(time.Minute), Burst: 1}
		takeOK(quick)
		quick.WaitTimeout = durationpb.New(30 * time.Second)
		if res := takeOK(quick); !res.GetAllowed() {
			t.Fatalf("waiting 30s for a turn 3s away: %v", res)
		}
		slow := &lockdv1.TakeRequest{Key: "slow", Limit: 1, Period: durationpb.New(time.Hour), WaitTimeout: durationpb.New(2 * time.Hour)}
		takeOK(slow)
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		res, err = rc.Take(dctx, slow)
		if err != nil || res.GetAllowed() || res.GetRetryAfter().AsDuration() <= 59*time.Minute || dctx.Err() != nil {
			t.Fatalf("a turn an hour away with a 20s deadline: %v, %v (context: %v)", res, err, dctx.Err())
		}

		for _, tc := range []struct {
			what string
			req  *lockdv1.TakeRequest
			says string
		}{
			{"an empty key", &lockdv1.TakeRequest{Limit: 1, Period: durationpb.New(time.Second)}, "key"},
			{"no limit", &lockdv1.TakeRequest{Key: "k", Period: durationpb.New(time.Second)}, "limit"},
			{"no period", &lockdv1.TakeRequest{Key: "k", Limit: 1}, "period"},
			{"a negative period", &lockdv1.TakeRequest{Key: "k", Limit: 1, Period: durationpb.New(-time.Second)}, "period"},
			{"a period under a millisecond", &lockdv1.TakeRequest{Key: "k", Limit: 1, Period: durationpb.New(time.Microsecond)}, "period"},
			{"a cost over the burst", &lockdv1.TakeRequest{Key: "k", Limit: 5, Period: durationpb.New(time.Second), Cost: 6}, "cost"},
			{"a negative wait", &lockdv1.TakeRequest{Key: "k", Limit: 1, Period: durationpb.New(time.Second), WaitTimeout: durationpb.New(-time.Second)}, "wait_timeout"},
			{"a wait over a day", &lockdv1.TakeRequest{Key: "k", Limit: 1, Period: durationpb.New(time.Second), WaitTimeout: durationpb.New(25 * time.Hour)}, "wait_timeout"},
			{"a request id with a control character", &lockdv1.TakeRequest{Key: "k", Limit: 1, Period: durationpb.New(time.Second), RequestId: "a\x00"}, "request_id"},
		} {
			_, err := rc.Take(ctx, tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.says) {
				t.Errorf("%s: %v, want INVALID_ARGUMENT naming %s", tc.what, err, tc.says)
			}
		}
	})
}

// TestRateLimitServiceAuth: keys are authorized against the client's lock
// prefixes, and request ids belong to the client that sent them.
func TestRateLimitServiceAuth(t *testing.T) {
	t.Parallel()
	authn, err := auth.New([]auth.Client{
		{Name: "orders", Token: ordersToken, Locks: []string{"orders/", "shared/"}},
		{Name: "billing", Token: billingToken, Locks: []string{"billing/", "shared/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Start(t).Client(t)
	rc := startRateLimits(t, rdb, service.DefaultBounds(), authn).client
	orders, billing := bearer(timeout(t, time.Minute), ordersToken), bearer(timeout(t, time.Minute), billingToken)

	if _, err := rc.Take(orders, perMinute("orders/api", 5)); err != nil {
		t.Fatal(err)
	}
	_, err = rc.Take(orders, perMinute("billing/api", 5))
	wantCode(t, "a key outside the client's prefixes", err, codes.PermissionDenied)
	_, err = rc.Take(timeout(t, time.Minute), perMinute("orders/api", 5))
	wantCode(t, "no token", err, codes.Unauthenticated)

	// The same request id from two clients: two decisions.
	req := perMinute("shared/api", 1)
	req.RequestId = "same"
	if res, err := rc.Take(orders, req); err != nil || !res.GetAllowed() {
		t.Fatalf("orders: %v, %v", res, err)
	}
	if res, err := rc.Take(billing, req); err != nil || res.GetAllowed() {
		t.Fatalf("billing was handed orders's decision: %v, %v", res, err)
	}
}

// TestRateLimitWaitersAreLimitedAndDrained: a call waiting for its turn
// counts against the replica's waiters, and ends UNAVAILABLE when the
// server drains.
func TestRateLimitWaitersAreLimitedAndDrained(t *testing.T) {
	t.Parallel()
	bounds := service.DefaultBounds()
	bounds.MaxWaiters = 1
	inst := startRateLimits(t, redistest.Start(t).Client(t), bounds, nil)
	ctx := timeout(t, 10*time.Minute)
	req := &lockdv1.TakeRequest{Key: "k", Limit: 60, Period: durationpb.New(time.Hour), Burst: 1}
	if _, err := inst.client.Take(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.WaitTimeout = durationpb.New(time.Hour)
	first := make(chan error, 1)
	go func() {
		_, err := inst.client.Take(ctx, req)
		first <- err
	}()
	// Once the first has its turn (a minute away: the next after it is
	// two minutes away), a second waiter finds the replica's one waiter
	// place taken.
	probe := &lockdv1.TakeRequest{Key: "k", Limit: 60, Period: durationpb.New(time.Hour), Burst: 1}
	waitFor(t, "the first waiter's turn", func() bool {
		res, err := inst.client.Take(ctx, probe)
		return err == nil && res.GetRetryAfter().AsDuration() > 61*time.Second
	})
	_, err := inst.client.Take(ctx, req)
	wantCode(t, "a second waiter", err, codes.ResourceExhausted)
	inst.locks.Drain()
	if err := <-first; status.Code(err) != codes.Unavailable {
		t.Fatalf("a waiter when the server drained: %v, want UNAVAILABLE", err)
	}
}
