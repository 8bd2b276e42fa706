package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

type running struct {
	addrs Addrs
	conn  *grpc.ClientConn
	logs  *logtest.Buffer
	stop  func() error // cancels Run and returns its error
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = "127.0.0.1:0"
	if cfg.Bounds == (service.Bounds{}) {
		cfg.Bounds = service.DefaultBounds()
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 50 * time.Millisecond
	}
	logs := &logtest.Buffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	started := make(chan Addrs, 1)
	cfg.Started = func(a Addrs) { started <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	var addrs Addrs
	select {
	case addrs = <-started:
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v\n%s", err, logs)
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatal("lockd did not start")
	}
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Error("lockd did not stop")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		_ = conn.Close()
		_ = stop()
	})
	return &running{addrs: addrs, conn: conn, logs: logs, stop: stop}
}

func healthOf(t *testing.T, conn *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return res.GetStatus()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	code, _ := httpGet(t, url)
	return code
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	_, body := httpGet(t, url)
	return body
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

func TestHealthFollowsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := start(t, Config{Redis: "redis://" + srv.Addr(), Reflection: true})
	names := append([]string{""}, serviceNames...)
	allAre := func(want healthpb.HealthCheckResponse_ServingStatus) func() bool {
		return func() bool {
			for _, n := range names {
				if healthOf(t, r.conn, n) != want {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "SERVING", allAre(healthpb.HealthCheckResponse_SERVING))
	if c := httpStatus(t, "http://"+r.addrs.HTTP+"/readyz"); c != 200 {
		t.Fatalf("/readyz = %d while serving", c)
	}

	// Frozen (SIGSTOP): NOT_SERVING, and back by itself once it thaws.
	srv.Freeze()
	waitFor(t, "NOT_SERVING while Redis is frozen", allAre(healthpb.HealthCheckResponse_NOT_SERVING))
	srv.Thaw()
	waitFor(t, "SERVING after Redis thaws", allAre(healthpb.HealthCheckResponse_SERVING))

	// Killed (SIGKILL).
	srv.Kill()
	waitFor(t, "NOT_SERVING while Redis is down", allAre(healthpb.HealthCheckResponse_NOT_SERVING))
	if c := httpStatus(t, "http://"+r.addrs.HTTP+"/readyz"); c != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d while Redis is down", c)
	}
	if c := httpStatus(t, "http://"+r.addrs.HTTP+"/healthz"); c != 200 {
		t.Fatalf("/healthz = %d: the process is alive", c)
	}
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Acquire with Redis down: %v", err)
	}

	srv.Restart(t)
	waitFor(t, "SERVING again", allAre(healthpb.HealthCheckResponse_SERVING))
	res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k"})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("Acquire after recovery: %v, %v", res, err)
	}
}

func TestReflection(t *testing.T) {
	t.Parallel()
	list := func(r *running) ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := reflectionpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			if errors.Is(err, io.EOF) {
				// The server ended the stream first: Recv tells why.
				_, err = stream.Recv()
			}
			return nil, err
		}
		res, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range res.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		return names, nil
	}
	on := start(t, Config{Reflection: true})
	names, err := list(on)
	if err != nil || !strings.Contains(strings.Join(names, ","), "lockd.v1.LockService") {
		t.Fatalf("reflection lists %v, %v", names, err)
	}
	off := start(t, Config{Reflection: false})
	if _, err := list(off); status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection off: %v", err)
	}
}

func TestEmbeddedStore(t *testing.T) {
	t.Parallel()
	r := start(t, Config{})
	if !strings.Contains(r.logs.String(), "not for production") {
		t.Fatalf("no warning about the embedded store in:\n%s", r.logs)
	}
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "trial", Owner: "a", Ttl: durationpb.New(200 * time.Millisecond)})
	if err != nil || !a.GetAcquired() {
		t.Fatal(a, err)
	}
	// The lease runs out with the real clock; a waiter gets the lock then.
	start := time.Now()
	b, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "trial", Owner: "b", WaitTimeout: durationpb.New(10 * time.Second)})
	if err != nil || !b.GetAcquired() {
		t.Fatalf("after expiry: %v, %v", b, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("waited %v for a 200ms lease to run out", waited)
	}
	// Calls are logged when they end (at DEBUG, as they ended OK).
	for _, want := range []string{`"msg":"finished call"`, `"grpc.method":"/lockd.v1.LockService/Acquire"`, `"grpc.code":"OK"`, `"level":"DEBUG"`} {
		if !strings.Contains(r.logs.String(), want) {
			t.Errorf("logs lack %s", want)
		}
	}
}

func TestShutdownEndsKeepAliveAndStops(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := start(t, Config{Redis: srv.Addr()})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "drain", Owner: "a", Ttl: durationpb.New(time.Minute)})
	if err != nil || !a.GetAcquired() {
		t.Fatal(a, err)
	}
	stream, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "drain", LeaseId: a.GetLease().GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	for {
		if _, err := stream.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("KeepAlive on shutdown: %v, want UNAVAILABLE", err)
			}
			break
		}
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	// The lease survives the replica: a client resumes elsewhere.
	r2 := start(t, Config{Redis: srv.Addr()})
	rn, err := lockdv1.NewLockServiceClient(r2.conn).Renew(ctx, &lockdv1.RenewRequest{Key: "drain", LeaseId: a.GetLease().GetLeaseId()})
	if err != nil || rn.GetLease().GetHoldCount() != 1 {
		t.Fatalf("Renew on another replica: %v, %v", rn, err)
	}
}

// panicky is a LockService whose Acquire panics.
type panicky struct {
	lockdv1.UnimplementedLockServiceServer
}

func (panicky) Acquire(context.Context, *lockdv1.AcquireRequest) (*lockdv1.AcquireResponse, error) {
	panic("boom")
}

func TestPanicIsInternalAndServerKeepsServing(t *testing.T) {
	t.Parallel()
	logs := &logtest.Buffer{}
	gs := grpc.NewServer(interceptors(slog.New(slog.NewJSONHandler(logs, nil)), nil)...)
	lockdv1.RegisterLockServiceServer(gs, panicky{})
	lis := listen(t)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lc := lockdv1.NewLockServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if _, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "k"}); status.Code(err) != codes.Internal {
			t.Fatalf("panicking handler: %v, want INTERNAL", err)
		}
	}
	if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("server after panics: %v", err)
	}
	if !strings.Contains(logs.String(), "boom") {
		t.Fatalf("panic not logged:\n%s", logs)
	}
}

func TestNewRedisClient(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, spec string
		cluster    bool
		master     string
		wantType   string
		wantErr    string
	}{
		{"a redis URL is one server", "redis://127.0.0.1:6379/0", false, "", "*redis.Client", ""},
		{"a rediss URL is one server over TLS", "rediss://127.0.0.1:6380", false, "", "*redis.Client", ""},
		{"one address is one server", "127.0.0.1:6379", false, "", "*redis.Client", ""},
		{"several addresses are a Cluster", "127.0.0.1:7000,127.0.0.1:7001", false, "", "*redis.ClusterClient", ""},
		{"one seed may be forced to Cluster", "127.0.0.1:7000", true, "", "*redis.ClusterClient", ""},
		{"a master name means sentinels", "127.0.0.1:26379,127.0.0.1:26380", false, "mymaster", "*redis.Client", ""},
		{"a bad URL is refused", "redis://[::1", false, "", "", "--redis"},
		{"an address without a port is refused", "localhost", false, "", "", "not host:port"},
		{"an empty list is refused", " , ", false, "", "", "no address"},
	}
	for _, tc := range cases {
		rdb, err := NewRedisClient(tc.spec, tc.cluster, tc.master)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := typeName(rdb); got != tc.wantType {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.wantType)
		}
		_ = rdb.Close()
	}
}

func TestWarnIfExposed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		listen        string
		authenticated bool
		tls           TLSFiles
		want          []string // substrings of the warnings; none when empty
	}{
		{"loopback needs no warning", "127.0.0.1:50051", false, TLSFiles{}, nil},
		{"localhost needs no warning", "localhost:50051", false, TLSFiles{}, nil},
		{"IPv6 loopback needs no warning", "[::1]:50051", false, TLSFiles{}, nil},
		{"all interfaces without auth or TLS warns of both", ":50051", false, TLSFiles{}, []string{"INSECURE", "without TLS"}},
		{"a public address without auth warns", "0.0.0.0:50051", false, TLSFiles{Cert: "c", Key: "k"}, []string{"INSECURE"}},
		{"auth without TLS warns of plaintext", "0.0.0.0:50051", true, TLSFiles{}, []string{"without TLS"}},
		{"auth and TLS need no warning", "0.0.0.0:50051", true, TLSFiles{Cert: "c", Key: "k"}, nil},
	}
	for _, tc := range cases {
		logs := &logtest.Buffer{}
		warnIfExposed(slog.New(slog.NewTextHandler(logs, nil)), tc.listen, tc.authenticated, tc.tls)
		out := logs.String()
		if len(tc.want) == 0 && out != "" {
			t.Errorf("%s: warned %q", tc.name, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: %q lacks %q", tc.name, out, w)
			}
		}
	}
}

func TestTLSConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files TLSFiles
		want  string
	}{
		{"a key without a certificate", TLSFiles{Key: "k.pem"}, "--tls-cert and --tls-key go together"},
		{"a client CA alone", TLSFiles{ClientCA: "ca.pem"}, "--tls-cert and --tls-key go together"},
		{"missing files", TLSFiles{Cert: "/nonexistent/c.pem", Key: "/nonexistent/k.pem"}, "no such file"},
	} {
		if _, err := newTLS(tc.files, tlsEvents{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
