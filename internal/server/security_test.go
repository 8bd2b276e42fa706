package server

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/grpctest"
	"github.com/lockd/lockd/internal/redistest"
)

const ordersToken = "orders-bearer-0123456789"

func ordersOnly(t *testing.T) Config {
	t.Helper()
	return Config{
		Redis: redistest.Start(t).Addr(),
		File: parseConfig(t, `auth:
  clients:
    - {name: orders, token_env: ORDERS, locks: ["orders/"]}
`, map[string]string{"ORDERS": ordersToken}),
	}
}

// TestInputIsValidatedBeforeAuthorizationAndNeverEchoedWhole: a malformed
// request is INVALID_ARGUMENT whoever sends it and whatever its key; a
// refused key is shown as a short escaped excerpt, in the status and in
// the log.
func TestInputIsValidatedBeforeAuthorizationAndNeverEchoedWhole(t *testing.T) {
	t.Parallel()
	r := start(t, ordersOnly(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	orders := as(ctx, ordersToken)
	huge := "billing/" + strings.Repeat("x\u202e", 3<<18) // 3 MiB
	long := "billing/" + strings.Repeat("y", 400)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		call func(context.Context) error
		want codes.Code
		msg  string
	}{
		{"a key of invalid UTF-8 under the client's prefix", orders, func(ctx context.Context) error {
			return grpctest.Invoke(ctx, r.conn, "/lockd.v1.LockService/Acquire", grpctest.String(1, "orders/\xff"))
		}, codes.InvalidArgument, "key must be valid UTF-8"},
		{"a 3 MiB key outside the prefix", orders, func(ctx context.Context) error {
			_, err := lockdv1.NewLockServiceClient(r.conn).Acquire(ctx, &lockdv1.AcquireRequest{Key: huge})
			return err
		}, codes.InvalidArgument, "longer than 512"},
		{"a long key outside the prefix", orders, func(ctx context.Context) error {
			_, err := lockdv1.NewLockServiceClient(r.conn).Acquire(ctx, &lockdv1.AcquireRequest{Key: long})
			return err
		}, codes.PermissionDenied, `may not lock key "billing/yyy`},
		{"garbage with a token", orders, func(ctx context.Context) error {
			return grpctest.Invoke(ctx, r.conn, "/lockd.v1.LockService/Acquire", []byte{0xff, 0xff})
		}, codes.InvalidArgument, "not a valid lockd.v1.AcquireRequest"},
		{"garbage without a token", ctx, func(ctx context.Context) error {
			return grpctest.Invoke(ctx, r.conn, "/lockd.v1.LockService/KeepAlive", []byte{0xff, 0xff})
		}, codes.Unauthenticated, "Bearer"},
		{"a garbage health check", ctx, func(ctx context.Context) error {
			return grpctest.Invoke(ctx, r.conn, "/grpc.health.v1.Health/Check", []byte{0x0a, 0x80})
		}, codes.InvalidArgument, "not a valid grpc.health.v1.HealthCheckRequest"},
	} {
		err := tc.call(tc.ctx)
		st := status.Convert(err)
		if st.Code() != tc.want || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("%s: %v %.200q, want %v naming %q", tc.name, st.Code(), st.Message(), tc.want, tc.msg)
		}
		if len(st.Message()) > 256 {
			t.Errorf("%s: the status message is %d bytes long", tc.name, len(st.Message()))
		}
	}
	if logs := r.logs.String(); strings.Contains(logs, strings.Repeat("y", 100)) || strings.Contains(logs, strings.Repeat("x\\u202e", 100)) || len(logs) > 1<<20 {
		t.Errorf("the logs hold long excerpts of user input (%d bytes)", len(logs))
	}
}

// TestLogsEscapeBidiAndZeroWidthCharacters: a key holding a right-to-left
// override and zero-width characters reaches the logs escaped.
func TestLogsEscapeBidiAndZeroWidthCharacters(t *testing.T) {
	t.Parallel()
	r := start(t, Config{Redis: redistest.Start(t).Addr()})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "invoice/\u202egnp.exe\u200b\u2066"
	res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute)})
	if err != nil || !res.GetAcquired() {
		t.Fatal(res, err)
	}
	// A KeepAlive stream that releases on close, whose lease is released
	// meanwhile: its release on close finds the lease gone, and lockd logs
	// the key.
	sctx, closeStream := context.WithCancel(ctx)
	stream, err := lc.KeepAlive(sctx, &lockdv1.KeepAliveRequest{Key: key, LeaseId: res.GetLease().GetLeaseId(), ReleaseOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	closeStream()
	waitFor(t, "the release on close to be logged", func() bool {
		return strings.Contains(r.logs.String(), "release on close: the lease was gone already")
	})
	logs := r.logs.String()
	for _, c := range []string{"\u202e", "\u200b", "\u2066"} {
		if strings.Contains(logs, c) {
			t.Errorf("the logs hold %U raw", []rune(c)[0])
		}
	}
	if !strings.Contains(logs, `invoice/\\u202egnp.exe\\u200b\\u2066`) {
		t.Errorf("the logs lack the escaped key:\n%s", logs)
	}
}

// TestHealthStreamsAreBounded: health needs no token, so the health calls
// open at once are bounded; a Watch ending frees its place.
func TestHealthStreamsAreBounded(t *testing.T) {
	t.Parallel()
	cfg := ordersOnly(t)
	cfg.Transport = DefaultTransport()
	cfg.Transport.MaxHealthStreams = 3
	r := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(r.conn)
	var cancels []context.CancelFunc
	watch := func() error {
		wctx, stop := context.WithCancel(ctx)
		cancels = append(cancels, stop)
		w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = w.Recv()
		return err
	}
	for i := range 3 {
		if err := watch(); err != nil {
			t.Fatalf("Watch %d: %v", i, err)
		}
	}
	if err := watch(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth Watch: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a Check with every place taken: %v, want RESOURCE_EXHAUSTED", err)
	}
	cancels[0]()
	waitFor(t, "a Check once a Watch ended", func() bool {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil
	})
	for _, c := range cancels {
		c()
	}
}

// TestAuthFailuresAreCountedAndAudited: refused calls are counted by
// reason on /metrics and summarized in the log; the audit log says who took
// and released which key, with owner and fencing token, and never a lease
// id or a bearer token.
func TestAuthFailuresAreCountedAndAudited(t *testing.T) {
	t.Parallel()
	cfg := ordersOnly(t)
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	r := start(t, cfg)
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	orders := as(ctx, ordersToken)
	_, _ = lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "orders/1"})
	_, _ = lc.Acquire(as(ctx, "not-a-token-of-anyone-here"), &lockdv1.AcquireRequest{Key: "orders/1"})
	_, _ = lc.Acquire(orders, &lockdv1.AcquireRequest{Key: "billing/1"})
	res, err := lc.Acquire(orders, &lockdv1.AcquireRequest{Key: "orders/7", Owner: "worker-3"})
	if err != nil || !res.GetAcquired() {
		t.Fatal(res, err)
	}
	if _, err := lc.Release(orders, &lockdv1.ReleaseRequest{Key: "orders/7", LeaseId: res.GetLease().GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	metrics := func() string { return httpBody(t, "http://"+r.addrs.HTTP+"/metrics") }
	for _, want := range []string{
		`lockd_auth_failures_total{reason="missing_token"} 1`,
		`lockd_auth_failures_total{reason="unknown_token"} 1`,
		`lockd_auth_failures_total{reason="permission_denied"} 1`,
	} {
		if m := metrics(); !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	waitFor(t, "the refusals to be logged", func() bool {
		return strings.Contains(r.logs.String(), "refused calls before they started")
	})
	data, err := os.ReadFile(cfg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	audit := string(data)
	for _, want := range []string{`"msg":"took","log":"audit","client":"orders","key":"orders/7","owner":"worker-3","mode":"write","fencing_token":` + itoa(res.GetLease().GetFencingToken()),
		`"msg":"released","log":"audit","client":"orders","key":"orders/7","hold_count":0`} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit log lacks %s:\n%s", want, audit)
		}
	}
	for _, secret := range []string{res.GetLease().GetLeaseId(), ordersToken} {
		if strings.Contains(audit, secret) || strings.Contains(r.logs.String(), secret) {
			t.Errorf("a lease id or token reached the logs")
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
