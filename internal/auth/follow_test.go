package auth_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
)

// waitingLocks answers Acquire only when the call ends, as an acquire
// waiting for a busy key does, telling the test it started.
type waitingLocks struct {
	lockdv1.UnimplementedLockServiceServer
	started chan struct{}
}

func (w waitingLocks) Acquire(ctx context.Context, _ *lockdv1.AcquireRequest) (*lockdv1.AcquireResponse, error) {
	w.started <- struct{}{}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestReplaceEndsOnlyTheCallsTheNewListRefuses: calls under way are judged
// again at every Replace, as new calls would be.
func TestReplaceEndsOnlyTheCallsTheNewListRefuses(t *testing.T) {
	t.Parallel()
	orders := auth.Client{Name: "orders", Token: "orders-token-0123456789", Locks: []string{"orders/"}}
	ops := auth.Client{Name: "ops", Token: "ops-token-0123456789", Locks: []string{""}}
	for _, tc := range []struct {
		name        string
		start, then []auth.Client
		token       string
		want        codes.Code // codes.OK: the call goes on
	}{
		{"the client stays as it was", []auth.Client{orders, ops}, []auth.Client{orders}, orders.Token, codes.OK},
		{"the client is removed", []auth.Client{orders, ops}, []auth.Client{ops}, orders.Token, codes.Unauthenticated},
		{"the client's token is replaced", []auth.Client{orders}, []auth.Client{{Name: "orders", Token: "orders-token-rotated-01", Locks: []string{"orders/"}}}, orders.Token, codes.Unauthenticated},
		{"the token now names another client", []auth.Client{orders}, []auth.Client{{Name: "billing", Token: orders.Token, Locks: []string{"orders/"}}}, orders.Token, codes.Unauthenticated},
		{"the key leaves the client's prefixes", []auth.Client{orders}, []auth.Client{{Name: "orders", Token: orders.Token, Locks: []string{"orders/eu/"}}}, orders.Token, codes.PermissionDenied},
		{"the client gets more prefixes", []auth.Client{orders}, []auth.Client{{Name: "orders", Token: orders.Token, Locks: []string{"jobs/", "orders/"}}}, orders.Token, codes.OK},
		{"authentication is turned off", []auth.Client{orders}, nil, orders.Token, codes.OK},
		{"authentication is turned on", nil, []auth.Client{orders}, "", codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := auth.Open()
			if err := a.Replace(tc.start); err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{}, 1)
			conn := serveWith(t, a, waitingLocks{started: started})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if tc.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
			}
			ended := make(chan error, 1)
			go func() {
				_, err := lockdv1.NewLockServiceClient(conn).Acquire(ctx, &lockdv1.AcquireRequest{Key: "orders/42", WaitTimeout: durationpb.New(time.Hour)})
				ended <- err
			}()
			<-started
			if err := a.Replace(tc.then); err != nil {
				t.Fatal(err)
			}
			if tc.want != codes.OK {
				if err := <-ended; status.Code(err) != tc.want {
					t.Fatalf("the call ended with %v, want %v", err, tc.want)
				}
				return
			}
			// Going on: a later reload that narrows orders' prefixes ends it
			// with PERMISSION_DENIED, not with whatever the first reload
			// would have ended it with.
			if err := a.Replace([]auth.Client{{Name: "orders", Token: orders.Token, Locks: []string{"orders/eu/"}}}); err != nil {
				t.Fatal(err)
			}
			if err := <-ended; status.Code(err) != codes.PermissionDenied {
				t.Fatalf("the call ended with %v, want it to go on until a later reload denied its key", err)
			}
		})
	}
}

// serveWith serves locks behind a's interceptors and tap handle.
func serveWith(t *testing.T, a *auth.Authenticator, locks lockdv1.LockServiceServer) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer(grpc.InTapHandle(a.TapHandle), grpc.UnaryInterceptor(a.UnaryInterceptor()), grpc.StreamInterceptor(a.StreamInterceptor()))
	lockdv1.RegisterLockServiceServer(gs, locks)
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
