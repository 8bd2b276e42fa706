package auth_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
)

// fakeLocks grants everything and reports who called.
type fakeLocks struct {
	lockdv1.UnimplementedLockServiceServer
}

func (fakeLocks) Acquire(ctx context.Context, req *lockdv1.AcquireRequest) (*lockdv1.AcquireResponse, error) {
	name, _ := auth.ClientName(ctx)
	return &lockdv1.AcquireResponse{Acquired: true, Lease: &lockdv1.Lease{Key: req.GetKey(), Owner: name}}, nil
}

func (fakeLocks) KeepAlive(req *lockdv1.KeepAliveRequest, stream lockdv1.LockService_KeepAliveServer) error {
	return stream.Send(&lockdv1.KeepAliveResponse{Lease: &lockdv1.Lease{Key: req.GetKey()}})
}

type fakeElections struct {
	lockdv1.UnimplementedElectionServiceServer
}

func (fakeElections) Leader(_ context.Context, req *lockdv1.LeaderRequest) (*lockdv1.LeaderResponse, error) {
	return &lockdv1.LeaderResponse{Leader: &lockdv1.Leader{Name: req.GetName()}}, nil
}

type fakeTokens struct {
	lockdv1.UnimplementedTokenServiceServer
}

func (fakeTokens) GetAccessToken(ctx context.Context, _ *lockdv1.GetAccessTokenRequest) (*lockdv1.GetAccessTokenResponse, error) {
	id, _ := auth.FromContext(ctx)
	return &lockdv1.GetAccessTokenResponse{AccessToken: "tok for " + id.Name}, nil
}

func (fakeTokens) GetTicket(context.Context, *lockdv1.GetTicketRequest) (*lockdv1.GetTicketResponse, error) {
	return &lockdv1.GetTicketResponse{Ticket: "ticket"}, nil
}

func (fakeTokens) WatchAccessToken(req *lockdv1.WatchAccessTokenRequest, stream lockdv1.TokenService_WatchAccessTokenServer) error {
	return stream.Send(&lockdv1.WatchAccessTokenResponse{AccessToken: "tok"})
}

func serve(t *testing.T, a *auth.Authenticator) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer(grpc.UnaryInterceptor(a.UnaryInterceptor()), grpc.StreamInterceptor(a.StreamInterceptor()))
	lockdv1.RegisterLockServiceServer(gs, fakeLocks{})
	lockdv1.RegisterTokenServiceServer(gs, fakeTokens{})
	lockdv1.RegisterElectionServiceServer(gs, fakeElections{})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestAuth(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Client{
		{Name: "orders", Token: "orders-secret-token", Locks: []string{"orders/"}, Apps: []string{"mp"}},
		{Name: "ops", Token: "ops-secret-token", Locks: []string{""}},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, a)
	locks, tokens := lockdv1.NewLockServiceClient(conn), lockdv1.NewTokenServiceClient(conn)
	leader := func(name string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := lockdv1.NewElectionServiceClient(conn).Leader(ctx, &lockdv1.LeaderRequest{Name: name})
			return err
		}
	}
	with := func(header string) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		if header == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", header)
	}
	cases := []struct {
		name   string
		header string
		call   func(ctx context.Context) error
		want   codes.Code
	}{
		{"no token is unauthenticated", "", acquire(locks, "orders/1"), codes.Unauthenticated},
		{"a wrong token is unauthenticated", "Bearer nope", acquire(locks, "orders/1"), codes.Unauthenticated},
		{"another scheme is unauthenticated", "Basic orders-secret-token", acquire(locks, "orders/1"), codes.Unauthenticated},
		{"a token prefix is unauthenticated", "Bearer orders-secret", acquire(locks, "orders/1"), codes.Unauthenticated},
		{"a key under the client's prefix is allowed", "Bearer orders-secret-token", acquire(locks, "orders/1"), codes.OK},
		{"the scheme is case-insensitive", "bearer orders-secret-token", acquire(locks, "orders/1"), codes.OK},
		{"a key outside the prefix is denied", "Bearer orders-secret-token", acquire(locks, "billing/1"), codes.PermissionDenied},
		{"another client's prefix is denied", "Bearer orders-secret-token", acquire(locks, "ops/1"), codes.PermissionDenied},
		{"an empty prefix allows every key", "Bearer ops-secret-token", acquire(locks, "anything"), codes.OK},
		{"a listed app is allowed", "Bearer orders-secret-token", getToken(tokens, "mp"), codes.OK},
		{"an unlisted app is denied", "Bearer orders-secret-token", getToken(tokens, "other"), codes.PermissionDenied},
		{"a client without apps is denied tokens", "Bearer ops-secret-token", getToken(tokens, "mp"), codes.PermissionDenied},
		{"KeepAlive outside the prefix is denied", "Bearer orders-secret-token", keepAlive(locks, "billing/1"), codes.PermissionDenied},
		{"KeepAlive under the prefix is allowed", "Bearer orders-secret-token", keepAlive(locks, "orders/1"), codes.OK},
		{"KeepAlive without a token is unauthenticated", "", keepAlive(locks, "orders/1"), codes.Unauthenticated},
		{"an election under the prefix is allowed", "Bearer orders-secret-token", leader("orders/leader"), codes.OK},
		{"an election outside the prefix is denied", "Bearer orders-secret-token", leader("billing/leader"), codes.PermissionDenied},
		{"an empty election name is invalid", "Bearer orders-secret-token", leader(""), codes.InvalidArgument},
		{"an election without a token is unauthenticated", "", leader("orders/leader"), codes.Unauthenticated},
		{"a ticket of a listed app is allowed", "Bearer orders-secret-token", getTicket(tokens, "mp"), codes.OK},
		{"a ticket of an unlisted app is denied", "Bearer orders-secret-token", getTicket(tokens, "other"), codes.PermissionDenied},
		{"watching a listed app is allowed", "Bearer orders-secret-token", watchToken(tokens, "mp"), codes.OK},
		{"watching an unlisted app is denied", "Bearer orders-secret-token", watchToken(tokens, "other"), codes.PermissionDenied},
		{"watching without a token is unauthenticated", "", watchToken(tokens, "mp"), codes.Unauthenticated},
		{"health needs no token", "", func(ctx context.Context) error {
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}, codes.OK},
	}
	for _, tc := range cases {
		err := tc.call(with(tc.header))
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: %v (%v), want %v", tc.name, got, err, tc.want)
		}
		if err != nil && (contains(err.Error(), "secret-token")) {
			t.Errorf("%s: error %q shows a token", tc.name, err)
		}
	}
	res, err := locks.Acquire(with("Bearer orders-secret-token"), &lockdv1.AcquireRequest{Key: "orders/2"})
	if err != nil || res.GetLease().GetOwner() != "orders" {
		t.Fatalf("handler saw client %q (%v), want orders", res.GetLease().GetOwner(), err)
	}
	tok, err := tokens.GetAccessToken(with("Bearer orders-secret-token"), &lockdv1.GetAccessTokenRequest{App: "mp"})
	if err != nil || tok.GetAccessToken() != "tok for orders" {
		t.Fatalf("FromContext in the handler: %q (%v), want the client orders", tok.GetAccessToken(), err)
	}
}

func TestNewRefusesBadClients(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		clients []auth.Client
		want    string
	}{
		{"no clients", nil, "no clients"},
		{"a client without a name", []auth.Client{{Token: "t"}}, "name must not be empty"},
		{"a client without a token", []auth.Client{{Name: "a"}}, `"a": token must not be empty`},
		{"two clients sharing a token", []auth.Client{{Name: "a", Token: "t"}, {Name: "b", Token: "t"}}, "share a token"},
	}
	for _, tc := range cases {
		_, err := auth.New(tc.clients)
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := auth.New(nil); !errors.Is(err, auth.ErrNoClients) {
		t.Errorf("New(nil) = %v", err)
	}
}

func acquire(c lockdv1.LockServiceClient, key string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.Acquire(ctx, &lockdv1.AcquireRequest{Key: key})
		return err
	}
}

func getToken(c lockdv1.TokenServiceClient, app string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: app})
		return err
	}
}

func keepAlive(c lockdv1.LockServiceClient, key string) func(context.Context) error {
	return func(ctx context.Context) error {
		s, err := c.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: key})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestIdentify names the client of an Authorization header, as calls are
// authenticated: scheme in any case, the token exact.
func TestIdentify(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Client{
		{Name: "orders", Token: "orders-token-0123456789", Locks: []string{"orders/"}},
		{Name: "ops", Token: "ops-token-0123456789", Locks: []string{""}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for header, want := range map[string]string{
		"Bearer orders-token-0123456789":  "orders",
		"bearer ops-token-0123456789":     "ops",
		"Bearer orders-token-012345678":   "",
		"Bearer orders-token-0123456789 ": "",
		"Basic orders-token-0123456789":   "",
		"orders-token-0123456789":         "",
		"":                                "",
	} {
		name, ok := a.Identify(header)
		if name != want || ok != (want != "") {
			t.Errorf("Identify(%q) = %q, %v, want %q", header, name, ok, want)
		}
	}
	if name, ok := auth.Open().Identify("Bearer orders-token-0123456789"); ok {
		t.Errorf("with authentication off, Identify named %q", name)
	}
}

func getTicket(c lockdv1.TokenServiceClient, app string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.GetTicket(ctx, &lockdv1.GetTicketRequest{App: app, Type: lockdv1.TicketType_TICKET_TYPE_JSAPI})
		return err
	}
}

func watchToken(c lockdv1.TokenServiceClient, app string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		stream, err := c.WatchAccessToken(ctx, &lockdv1.WatchAccessTokenRequest{App: app})
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
}
