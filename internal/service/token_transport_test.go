package service_test

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
)

// TestUpstreamTransportErrorsKeepNetworkDetailInTheLog: the upstream
// cannot be reached (nothing listens where api_base points). The caller
// gets UNAVAILABLE with a generic message and no address, resolver or
// socket detail, in the message or its details; the log has the detail.
func TestUpstreamTransportErrorsKeepNetworkDetailInTheLog(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	_ = lis.Close() // nothing listens there any more
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	b, err := token.New(redistest.Start(t).Client(t), []token.App{{Name: "mp", Upstream: wechat.Config{
		Provider: wechat.ProviderWeChat, APIBase: fmt.Sprintf("http://localhost:%d", port), AppID: "wx-mp", Secret: tokenSecret,
	}}}, token.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	srv := service.NewTokenServer(b, log)
	conn := serveWith(t, nil, func(gs *grpc.Server) { lockdv1.RegisterTokenServiceServer(gs, srv) })
	c := lockdv1.NewTokenServiceClient(conn)

	// The first call meets the failure itself, the second the failure as
	// recorded in Redis for the fleet.
	for _, call := range []string{"first", "second"} {
		_, err = c.GetAccessToken(timeout(t, 30*time.Second), &lockdv1.GetAccessTokenRequest{App: "mp"})
		wantCode(t, call+" GetAccessToken with the upstream unreachable", err, codes.Unavailable)
		told := status.Convert(err).Message()
		for _, d := range status.Convert(err).Details() {
			told += fmt.Sprint(" ", d)
		}
		for _, detail := range []string{"127.0.0.1", "::1", "dial", "tcp", "connect", "refused", "lookup"} {
			if strings.Contains(told, detail) {
				t.Errorf("the %s caller was told %q: it holds %q", call, told, detail)
			}
		}
		if !strings.Contains(told, "unreachable") {
			t.Errorf("the %s caller was told %q: want it to say the upstream is unreachable", call, told)
		}
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the log lacks the transport detail:\n%s", logs.String())
	}
}
