package service_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/grpctest"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

// instance is one lockd LockService over bufconn.
type instance struct {
	conn   *grpc.ClientConn
	client lockdv1.LockServiceClient
	server *service.LockServer
}

func startInstance(t *testing.T, rdb redis.UniversalClient, bounds service.Bounds, opts ...grpc.ServerOption) instance {
	t.Helper()
	engine := redislock.New(rdb, redislock.Options{})
	srv := service.NewLockServer(engine, bounds, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { _ = engine.Close() })
	conn := serve(t, func(gs *grpc.Server) { lockdv1.RegisterLockServiceServer(gs, srv) }, opts...)
	return instance{conn: conn, client: lockdv1.NewLockServiceClient(conn), server: srv}
}

// serve runs a gRPC server with lockd's codec and UTF-8 interceptors (and
// opts) over bufconn, with the services register adds, and returns a client
// connection; both end with the test, before cleanups registered earlier.
func serve(t *testing.T, register func(*grpc.Server), opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	return serveWith(t, nil, register, opts...)
}

// serveWith is serve behind authn's interceptors (none when nil).
func serveWith(t *testing.T, authn *auth.Authenticator, register func(*grpc.Server), opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	unary := []grpc.UnaryServerInterceptor{service.UnaryInterceptor}
	stream := []grpc.StreamServerInterceptor{service.StreamInterceptor}
	if authn != nil {
		unary = append([]grpc.UnaryServerInterceptor{authn.UnaryInterceptor()}, unary...)
		stream = append([]grpc.StreamServerInterceptor{authn.StreamInterceptor()}, stream...)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(service.Codec()),
		grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...)}, opts...)...)
	register(gs)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
	})
	return conn
}

// eachStore runs fn against a real redis-server and the embedded store.
func eachStore(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		fn(t, redistest.Start(t).Client(t))
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		st, err := embedded.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		rdb := redis.NewClient(&redis.Options{Addr: st.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		fn(t, rdb)
	})
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func TestLockServiceContract(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		lc := startInstance(t, rdb, service.DefaultBounds()).client
		ctx := timeout(t, 20*time.Second)

		a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "orders/1", Owner: "a"})
		if err != nil || !a.GetAcquired() {
			t.Fatalf("Acquire = %v, %v", a, err)
		}
		l := a.GetLease()
		if l.GetMode() != lockdv1.LockMode_LOCK_MODE_WRITE || l.GetTtl().AsDuration() != 30*time.Second ||
			l.GetHoldCount() != 1 || l.GetFencingToken() == 0 || l.GetOwner() != "a" || l.GetKey() != "orders/1" {
			t.Fatalf("lease = %v", l)
		}
		if d := time.Until(l.GetExpireTime().AsTime()); d < 25*time.Second || d > 31*time.Second {
			t.Fatalf("expire_time %v from now", d)
		}

		// Busy: OK with acquired=false and the holder's remaining lease.
		b, err := lc.WLock(ctx, &lockdv1.WLockRequest{Key: "orders/1", Owner: "b", WaitTimeout: durationpb.New(50 * time.Millisecond)})
		if err != nil || b.GetAcquired() || b.GetLease() != nil || b.GetRetryAfter().AsDuration() < 25*time.Second || b.GetHolder() != "a" {
			t.Fatalf("busy WLock = %v, %v", b, err)
		}
		r, err := lc.RLock(ctx, &lockdv1.RLockRequest{Key: "orders/1", Owner: "b"})
		if err != nil || r.GetAcquired() || r.GetHolder() != "a" {
			t.Fatalf("busy RLock = %v, %v", r, err)
		}

		// Downgrade allowed, upgrade refused.
		down, err := lc.RLock(ctx, &lockdv1.RLockRequest{Key: "orders/1", Owner: "a"})
		if err != nil || !down.GetAcquired() || down.GetLease().GetMode() != lockdv1.LockMode_LOCK_MODE_READ {
			t.Fatalf("downgrade = %v, %v", down, err)
		}
		rl, err := lc.RLock(ctx, &lockdv1.RLockRequest{Key: "reports/1", Owner: "c"})
		if err != nil || !rl.GetAcquired() {
			t.Fatal(rl, err)
		}
		_, err = lc.WLock(ctx, &lockdv1.WLockRequest{Key: "reports/1", Owner: "c"})
		wantCode(t, "read->write upgrade", err, codes.FailedPrecondition)

		// Renew, then Release to zero; stale calls are NOT_FOUND.
		rn, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: "orders/1", LeaseId: l.GetLeaseId(), Ttl: durationpb.New(time.Minute)})
		if err != nil || rn.GetLease().GetTtl().AsDuration() != time.Minute || rn.GetLease().GetFencingToken() != l.GetFencingToken() {
			t.Fatalf("Renew = %v, %v", rn, err)
		}
		rel, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "orders/1", LeaseId: l.GetLeaseId()})
		if err != nil || rel.GetHoldCount() != 0 {
			t.Fatalf("Release = %v, %v", rel, err)
		}
		_, err = lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "orders/1", LeaseId: l.GetLeaseId()})
		wantCode(t, "second Release", err, codes.NotFound)
		_, err = lc.Renew(ctx, &lockdv1.RenewRequest{Key: "orders/1", LeaseId: l.GetLeaseId()})
		wantCode(t, "Renew of released lease", err, codes.NotFound)
		_, err = lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "orders/1", LeaseId: "never-granted"})
		wantCode(t, "Release of unknown lease", err, codes.NotFound)
	})
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		inst := startInstance(t, rdb, service.DefaultBounds())
		lc, conn := inst.client, inst.conn
		ctx := timeout(t, 20*time.Second)
		dur := durationpb.New
		cases := []struct {
			name string
			call func() error
			want codes.Code
			rule string
		}{
			{"an empty key", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{})
				return err
			}, codes.InvalidArgument, "key must not be empty"},
			{"an oversized key", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: strings.Repeat("x", 513)})
				return err
			}, codes.InvalidArgument, "longer than 512"},
			{"a key of invalid UTF-8", func() error {
				return grpctest.Invoke(ctx, conn, "/lockd.v1.LockService/RLock", grpctest.String(1, "bad\xc3("))
			}, codes.InvalidArgument, "key must be valid UTF-8"},
			{"an owner of invalid UTF-8", func() error {
				return grpctest.Invoke(ctx, conn, "/lockd.v1.LockService/Acquire", append(grpctest.String(1, "k"), grpctest.String(2, "\xff")...))
			}, codes.InvalidArgument, "owner must be valid UTF-8"},
			{"a lease_id of invalid UTF-8", func() error {
				return grpctest.Invoke(ctx, conn, "/lockd.v1.LockService/Release", append(grpctest.String(1, "k"), grpctest.String(2, "\xff")...))
			}, codes.InvalidArgument, "lease_id must be valid UTF-8"},
			{"garbage bytes", func() error {
				return grpctest.Invoke(ctx, conn, "/lockd.v1.LockService/Acquire", []byte{0xff, 0xff, 0xff})
			}, codes.InvalidArgument, "not a valid lockd.v1.AcquireRequest message"},
			{"a truncated message", func() error {
				return grpctest.Invoke(ctx, conn, "/lockd.v1.LockService/Release", grpctest.String(1, "k")[:2])
			}, codes.InvalidArgument, "not a valid lockd.v1.ReleaseRequest message"},
			{"garbage bytes opening a KeepAlive stream", func() error {
				var reply []byte
				s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/lockd.v1.LockService/KeepAlive", grpc.ForceCodecV2(grpctest.Codec{}))
				if err != nil {
					return err
				}
				garbage := []byte{0x0a, 0x80}
				if err := s.SendMsg(&garbage); err != nil {
					return err
				}
				_ = s.CloseSend()
				return s.RecvMsg(&reply)
			}, codes.InvalidArgument, "not a valid lockd.v1.KeepAliveRequest message"},
			{"a key with a control character", func() error {
				_, err := lc.WLock(ctx, &lockdv1.WLockRequest{Key: "tab\there"})
				return err
			}, codes.InvalidArgument, "control character"},
			{"a negative ttl", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k", Ttl: dur(-time.Second)})
				return err
			}, codes.InvalidArgument, "ttl must not be negative"},
			{"a ttl below the minimum", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k", Ttl: dur(time.Millisecond)})
				return err
			}, codes.InvalidArgument, "ttl must lie in"},
			{"a huge ttl", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k", Ttl: dur(1000 * time.Hour)})
				return err
			}, codes.InvalidArgument, "ttl must lie in"},
			{"an out-of-range duration", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k", Ttl: &durationpb.Duration{Seconds: 1, Nanos: -5}})
				return err
			}, codes.InvalidArgument, "ttl is not a valid duration"},
			{"a negative wait", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k", WaitTimeout: dur(-time.Second)})
				return err
			}, codes.InvalidArgument, "wait_timeout must not be negative"},
			{"a huge wait", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k", WaitTimeout: dur(1000 * time.Hour)})
				return err
			}, codes.InvalidArgument, "wait_timeout must be at most"},
			{"an owner with a control character", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k", Owner: "a\x00b"})
				return err
			}, codes.InvalidArgument, "owner has control character"},
			{"an oversized request_id", func() error {
				_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k", RequestId: strings.Repeat("r", 200)})
				return err
			}, codes.InvalidArgument, "request_id"},
			{"an empty lease_id on Release", func() error {
				_, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "k"})
				return err
			}, codes.InvalidArgument, "lease_id must not be empty"},
			{"an empty lease_id on Renew", func() error {
				_, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: "k"})
				return err
			}, codes.InvalidArgument, "lease_id must not be empty"},
			{"an unknown lease_id on Renew", func() error {
				_, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: "k", LeaseId: "nope"})
				return err
			}, codes.NotFound, "not held"},
			{"an empty key on KeepAlive", func() error {
				s, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{LeaseId: "x"})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			}, codes.InvalidArgument, "key must not be empty"},
			{"an unknown lease on KeepAlive", func() error {
				s, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "k", LeaseId: "x"})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			}, codes.NotFound, "not held"},
		}
		for _, tc := range cases {
			err := tc.call()
			if status.Code(err) != tc.want || !strings.Contains(status.Convert(err).Message(), tc.rule) {
				t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.want, tc.rule)
			}
		}
		// Still serving, and nothing was written for the refused calls.
		if res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k"}); err != nil || !res.GetAcquired() {
			t.Fatalf("after bad input: %v, %v", res, err)
		}
	})
}

func TestKeepAliveStream(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		inst := startInstance(t, rdb, service.DefaultBounds())
		lc := inst.client
		ctx := timeout(t, 30*time.Second)
		const ttl = time.Second
		a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "ka", Owner: "a", Ttl: durationpb.New(ttl)})
		if err != nil || !a.GetAcquired() {
			t.Fatal(a, err)
		}
		id := a.GetLease().GetLeaseId()

		// Held across several ttls while the stream is open.
		sctx, closeStream := context.WithCancel(ctx)
		stream, err := lc.KeepAlive(sctx, &lockdv1.KeepAliveRequest{Key: "ka", LeaseId: id, ReleaseOnClose: true})
		if err != nil {
			t.Fatal(err)
		}
		var renewals int
		start := time.Now()
		for time.Since(start) < 3*ttl {
			msg, err := stream.Recv()
			if err != nil {
				t.Fatalf("Recv after %d renewals: %v", renewals, err)
			}
			if msg.GetLease().GetLeaseId() != id || msg.GetLease().GetTtl().AsDuration() != ttl {
				t.Fatalf("renewed lease = %v", msg.GetLease())
			}
			renewals++
		}
		if renewals < 5 {
			t.Fatalf("%d renewals in 3 ttls, want about 9", renewals)
		}
		b, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "ka", Owner: "b"})
		if err != nil || b.GetAcquired() {
			t.Fatalf("lock taken while kept alive: %v, %v", b, err)
		}

		// Closing the stream with release_on_close frees the lock at once.
		closeStream()
		waitFor(t, "release on close", func() bool {
			res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "ka", Owner: "b", Ttl: durationpb.New(time.Minute)})
			return err == nil && res.GetAcquired()
		})
		if inst.server.KeepAliveStreams() != 0 {
			// The handler may still be returning; give it a moment.
			waitFor(t, "stream count back to zero", func() bool { return inst.server.KeepAliveStreams() == 0 })
		}

		// A stream on a lease that gets lost ends with NOT_FOUND.
		c, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "lost", Owner: "c", Ttl: durationpb.New(300 * time.Millisecond)})
		if err != nil || !c.GetAcquired() {
			t.Fatal(c, err)
		}
		stream, err = lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "lost", LeaseId: c.GetLease().GetLeaseId()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "lost", LeaseId: c.GetLease().GetLeaseId()}); err != nil {
			t.Fatal(err)
		}
		for {
			_, err := stream.Recv()
			if err != nil {
				wantCode(t, "KeepAlive on a lost lease", err, codes.NotFound)
				break
			}
		}

		// Drain ends streams with UNAVAILABLE and keeps the lease.
		d, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "drain", Owner: "d", Ttl: durationpb.New(time.Minute)})
		if err != nil || !d.GetAcquired() {
			t.Fatal(d, err)
		}
		stream, err = lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "drain", LeaseId: d.GetLease().GetLeaseId(), ReleaseOnClose: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		inst.server.Drain()
		for {
			if _, err := stream.Recv(); err != nil {
				wantCode(t, "KeepAlive on drain", err, codes.Unavailable)
				break
			}
		}
		if _, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: "drain", LeaseId: d.GetLease().GetLeaseId()}); err != nil {
			t.Fatalf("lease after drain: %v", err)
		}
	})
}

// TestMutualExclusionAcrossInstances has dozens of goroutines on three lockd
// instances sharing one Redis count overlapping holders.
func TestMutualExclusionAcrossInstances(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	var clients []lockdv1.LockServiceClient
	for range 3 {
		clients = append(clients, startInstance(t, rdb, service.DefaultBounds()).client)
	}
	ctx := timeout(t, 2*time.Minute)
	var (
		mu        sync.Mutex
		holding   int
		overlaps  int
		lastToken uint64
		backwards int
		wg        sync.WaitGroup
	)
	for w := range 36 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := clients[w%len(clients)]
			for range 10 {
				res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "shared/counter", Owner: fmt.Sprint("w", w), WaitTimeout: durationpb.New(time.Minute)})
				if err != nil || !res.GetAcquired() {
					t.Errorf("worker %d: %v, %v", w, res, err)
					return
				}
				mu.Lock()
				holding++
				if holding > 1 {
					overlaps++
				}
				if res.GetLease().GetFencingToken() <= lastToken {
					backwards++
				}
				lastToken = res.GetLease().GetFencingToken()
				mu.Unlock()
				time.Sleep(500 * time.Microsecond)
				mu.Lock()
				holding--
				mu.Unlock()
				if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "shared/counter", LeaseId: res.GetLease().GetLeaseId()}); err != nil {
					t.Errorf("worker %d release: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps != 0 || backwards != 0 {
		t.Fatalf("%d overlaps, %d fencing tokens that did not rise", overlaps, backwards)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	bounds := service.DefaultBounds()
	bounds.MaxWaiters = 1
	bounds.MaxKeepAlives = 1
	lc := startInstance(t, rdb, bounds).client
	ctx := timeout(t, 20*time.Second)
	a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "lim", Owner: "a"})
	if err != nil || !a.GetAcquired() {
		t.Fatal(a, err)
	}
	waiting := make(chan error, 1)
	go func() {
		for {
			_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "lim", Owner: "b", WaitTimeout: durationpb.New(3 * time.Second)})
			if status.Code(err) != codes.ResourceExhausted { // lost the race to a probe: queue again
				waiting <- err
				return
			}
		}
	}()
	waitFor(t, "a second waiter is refused", func() bool {
		_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "lim", Owner: "c", WaitTimeout: durationpb.New(time.Millisecond)})
		return status.Code(err) == codes.ResourceExhausted
	})
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	// Calls that do not wait are never refused for the waiter limit.
	if _, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "lim", Owner: "c"}); err != nil {
		t.Fatal(err)
	}
	s1, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "lim", LeaseId: a.GetLease().GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatal(err)
	}
	s2, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "lim", LeaseId: a.GetLease().GetLeaseId()})
	if err == nil {
		_, err = s2.Recv()
	}
	wantCode(t, "second KeepAlive", err, codes.ResourceExhausted)
}

func TestRedisDownIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	lc := startInstance(t, rdb, service.DefaultBounds()).client
	ctx := timeout(t, 20*time.Second)
	a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "down", Owner: "a"})
	if err != nil || !a.GetAcquired() {
		t.Fatal(a, err)
	}
	srv.Kill()
	_, err = lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "down", Owner: "b"})
	wantCode(t, "Acquire with Redis down", err, codes.Unavailable)
	_, err = lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "down", LeaseId: a.GetLease().GetLeaseId()})
	wantCode(t, "Release with Redis down", err, codes.Unavailable)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDrainEndsWaiters shows a waiting Acquire ends with UNAVAILABLE when
// the server drains, leaving no queued writer behind, so shutdown need not
// wait for it and the caller retries elsewhere.
func TestDrainEndsWaiters(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	inst := startInstance(t, rdb, service.DefaultBounds())
	ctx := timeout(t, 30*time.Second)
	if res, err := inst.client.RLock(ctx, &lockdv1.RLockRequest{Key: "drained", Owner: "r"}); err != nil || !res.GetAcquired() {
		t.Fatal(res, err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := inst.client.WLock(ctx, &lockdv1.WLockRequest{Key: "drained", Owner: "w", WaitTimeout: durationpb.New(time.Minute)})
		waiting <- err
	}()
	// nw counts the writers waiting on a lock (absent: none).
	queued := func() int { return queuedWaiters(ctx, rdb, "lockd:{drained}") }
	waitFor(t, "the writer to queue", func() bool { return queued() == 1 })
	inst.server.Drain()
	select {
	case err := <-waiting:
		wantCode(t, "a waiter on drain", err, codes.Unavailable)
	case <-ctx.Done():
		t.Fatal("the waiter was not ended by Drain")
	}
	waitFor(t, "the writer to leave the queue", func() bool { return queued() == 0 })
}
