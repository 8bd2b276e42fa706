package service_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/clocktest"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// startAuthedTokenServer serves TokenService behind lockd's bearer-token
// auth for the client "orders", and returns a client sending its token.
func startAuthedTokenServer(t *testing.T, broker *token.Broker, log *slog.Logger) (lockdv1.TokenServiceClient, *service.TokenServer) {
	t.Helper()
	a, err := auth.New([]auth.Client{{Name: "orders", Token: "orders-bearer-token-0123", Apps: []string{"classic", "stable", "wecom"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := service.NewTokenServer(broker, log)
	conn := serveWith(t, a, func(gs *grpc.Server) { lockdv1.RegisterTokenServiceServer(gs, srv) })
	return lockdv1.NewTokenServiceClient(conn), srv
}

// newBroker returns a broker serving the first three test apps on a fake
// upstream, logging into the buffer it returns.
func newBroker(t *testing.T, opts token.Options) (*token.Broker, *wechatfake.Server, *logtest.Buffer) {
	t.Helper()
	fake := newTokenFake(t)
	logs := &logtest.Buffer{}
	opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	var apps []token.App
	for _, a := range tokenApps[:3] {
		apps = append(apps, token.App{Name: a.name, Upstream: a.cfg(fake.URL())})
	}
	b, err := token.New(redistest.Start(t).Client(t), apps, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, fake, logs
}

func TestAClientOverItsRefreshLimitIsResourceExhausted(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Now().Truncate(time.Hour).Add(time.Hour))
	b, fake, logs := newBroker(t, token.Options{Now: clock.Now})
	c, _ := startAuthedTokenServer(t, b, slog.New(slog.NewJSONHandler(logs, nil)))
	ctx := metadata.AppendToOutgoingContext(timeout(t, 30*time.Second), "authorization", "Bearer orders-bearer-token-0123")
	res, err := c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "classic"})
	if err != nil {
		t.Fatal(err)
	}
	cur := res.GetAccessToken()
	for i := range token.DefaultRefreshesPerHour + 1 {
		fake.Reject(cur)
		clock.Advance(time.Minute)
		res, err := c.RefreshAccessToken(ctx, &lockdv1.RefreshAccessTokenRequest{App: "classic", InvalidToken: cur})
		if i < token.DefaultRefreshesPerHour {
			if err != nil {
				t.Fatalf("report %d: %v", i, err)
			}
			cur = res.GetAccessToken()
			continue
		}
		wantCode(t, "a report over the client's limit", err, codes.ResourceExhausted)
		var info *errdetails.ErrorInfo
		var retry *errdetails.RetryInfo
		for _, d := range status.Convert(err).Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				info = d
			case *errdetails.RetryInfo:
				retry = d
			}
		}
		if info.GetReason() != service.ReasonClientRefreshLimited || retry.GetRetryDelay().AsDuration() <= 0 {
			t.Fatalf("details %v %v, want reason %s and a retry delay", info, retry, service.ReasonClientRefreshLimited)
		}
	}
	if n := strings.Count(logs.String(), `"cause":"invalid","client":"orders"`); n != token.DefaultRefreshesPerHour {
		t.Fatalf("%d mints logged with the client that caused them, want %d:\n%s", n, token.DefaultRefreshesPerHour, logs)
	}
}

func TestGetTicketRefusesBadTypes(t *testing.T) {
	t.Parallel()
	b, _, logs := newBroker(t, token.Options{})
	c, _ := startAuthedTokenServer(t, b, slog.New(slog.NewJSONHandler(logs, nil)))
	ctx := metadata.AppendToOutgoingContext(timeout(t, 30*time.Second), "authorization", "Bearer orders-bearer-token-0123")
	for _, tt := range []struct {
		name string
		req  *lockdv1.GetTicketRequest
		code codes.Code
	}{
		{"no type is refused", &lockdv1.GetTicketRequest{App: "classic"}, codes.InvalidArgument},
		{"a type out of range is refused", &lockdv1.GetTicketRequest{App: "classic", Type: 99}, codes.InvalidArgument},
		{"a WeCom ticket of a WeChat app is refused", &lockdv1.GetTicketRequest{App: "classic", Type: lockdv1.TicketType_TICKET_TYPE_AGENT_CONFIG}, codes.InvalidArgument},
		{"a WeChat ticket of a WeCom app is refused", &lockdv1.GetTicketRequest{App: "wecom", Type: lockdv1.TicketType_TICKET_TYPE_WX_CARD}, codes.InvalidArgument},
		{"an unknown app is not found", &lockdv1.GetTicketRequest{App: "nope", Type: lockdv1.TicketType_TICKET_TYPE_JSAPI}, codes.PermissionDenied},
		{"a WeCom agent_config ticket is served", &lockdv1.GetTicketRequest{App: "wecom", Type: lockdv1.TicketType_TICKET_TYPE_AGENT_CONFIG}, codes.OK},
	} {
		_, err := c.GetTicket(ctx, tt.req)
		wantCode(t, tt.name, err, tt.code)
		if tt.code == codes.InvalidArgument && !strings.Contains(status.Convert(err).Message(), "type") {
			t.Fatalf("%s: message %q does not name the field", tt.name, status.Convert(err).Message())
		}
	}
}

func TestWatchAccessTokenEndsWhenTheServerDrains(t *testing.T) {
	t.Parallel()
	b, _, logs := newBroker(t, token.Options{})
	c, srv := startAuthedTokenServer(t, b, slog.New(slog.NewJSONHandler(logs, nil)))
	ctx := metadata.AppendToOutgoingContext(timeout(t, 30*time.Second), "authorization", "Bearer orders-bearer-token-0123")
	stream, err := c.WatchAccessToken(ctx, &lockdv1.WatchAccessTokenRequest{App: "stable"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetAccessToken() == "" || first.GetExpireTime() == nil {
		t.Fatalf("first message %v, %v", first, err)
	}
	srv.Drain()
	_, err = stream.Recv()
	wantCode(t, "the watch when the server drains", err, codes.Unavailable)
	_, err = service.NewTokenServer(nil, slog.New(slog.DiscardHandler)).GetTicket(context.Background(),
		&lockdv1.GetTicketRequest{App: "mp", Type: lockdv1.TicketType_TICKET_TYPE_JSAPI})
	wantCode(t, "GetTicket without apps", err, codes.NotFound)
}

// TestWatchAccessTokenCarriesOnAcrossAReload replaces the TokenServer's
// broker, as a SIGHUP reload does, while a watch is open: the watch goes on
// with the new broker and sees the next token.
func TestWatchAccessTokenCarriesOnAcrossAReload(t *testing.T) {
	t.Parallel()
	fake := newTokenFake(t)
	srv := redistest.Start(t)
	var apps []token.App
	for _, a := range tokenApps[:1] {
		apps = append(apps, token.App{Name: a.name, Upstream: a.cfg(fake.URL())})
	}
	brokers := make([]*token.Broker, 2)
	for i := range brokers {
		b, err := token.New(srv.Client(t), apps, token.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		brokers[i] = b
	}
	c, ts := startAuthedTokenServer(t, brokers[0], slog.New(slog.DiscardHandler))
	ctx := metadata.AppendToOutgoingContext(timeout(t, 30*time.Second), "authorization", "Bearer orders-bearer-token-0123")
	stream, err := c.WatchAccessToken(ctx, &lockdv1.WatchAccessTokenRequest{App: "classic"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	old, idle := ts.SetBroker(brokers[1])
	<-idle // the watch left the old broker
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	fake.Reject(first.GetAccessToken())
	next, err := c.RefreshAccessToken(ctx, &lockdv1.RefreshAccessTokenRequest{App: "classic", InvalidToken: first.GetAccessToken()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := stream.Recv()
	if err != nil || got.GetAccessToken() != next.GetAccessToken() {
		t.Fatalf("the watch after the reload: %v, %v; want the new token", got, err)
	}
}
