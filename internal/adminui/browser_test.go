package adminui_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

const (
	opsToken    = "ops-admin-token-0123456789"
	ordersToken = "orders-token-0123456789ab"
)

// lockd is a lockd serving gRPC and --http-listen, with authentication
// (client "ops" an admin, "orders" locking orders/) and one app, "mp", on
// a fake WeChat.
type lockd struct {
	http string // http://host:port
	conn *grpc.ClientConn
	logs *logtest.Buffer
}

func startLockd(t *testing.T) *lockd {
	t.Helper()
	rs := redistest.Start(t)
	fake := wechatfake.New(wechatfake.Options{Apps: map[string]string{"wx-ui": "ui-app-secret"}})
	t.Cleanup(fake.Close)
	file := &config.Config{
		Apps: []config.App{{Name: "mp", Provider: wechat.ProviderWeChat, AppID: "wx-ui", TokenAPI: wechat.TokenAPIClassic,
			APIBase: fake.URL(), Secret: "ui-app-secret"}},
		Auth: &config.Auth{Clients: []config.Client{
			{Name: "ops", Token: opsToken, Admin: true},
			{Name: "orders", Token: ordersToken, Locks: []string{"orders/"}, Apps: []string{"mp"}},
		}},
	}
	logs := &logtest.Buffer{}
	started := make(chan server.Addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Redis: rs.Addr(), File: file,
			Bounds: service.DefaultBounds(), HealthInterval: 50 * time.Millisecond,
			Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Started: func(a server.Addrs) { started <- a }})
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !t.Failed() {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("lockd did not stop")
		}
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("lockd logs:\n%s", logs)
		}
	})
	var addrs server.Addrs
	select {
	case addrs = <-started:
	case err := <-done:
		done <- err
		t.Fatalf("Run: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatal("lockd did not start")
	}
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &lockd{http: "http://" + addrs.HTTP, conn: conn, logs: logs}
}

func as(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// chromium starts a headless Chromium for the test. It runs as root in CI
// containers too (--no-sandbox there), with a profile of its own.
func chromium(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("no chromium on PATH: make test installs Debian's chromium (make deps)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", "new"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(1280, 1000),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelTimeout)
	return ctx
}

// TestAdminPageInChromium loads /ui in headless Chromium: it asks for an
// admin token and refuses another client's, shows a lock a test holds with
// its owner and waiting writer, an election's leader and term, a
// semaphore's permits and the app's token state; force-releasing the lock
// (confirmed) ends the holder's KeepAlive stream with NOT_FOUND and the
// waiting writer gets the lock. With LOCKD_UI_SCREENSHOT=path it saves a
// screenshot of the page.
func TestAdminPageInChromium(t *testing.T) {
	t.Parallel()
	l := startLockd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	orders := as(ctx, ordersToken)
	lc := lockdv1.NewLockServiceClient(l.conn)

	held, err := lc.Acquire(orders, &lockdv1.AcquireRequest{Key: "orders/42", Owner: "worker-1", Ttl: durationpb.New(3 * time.Second)})
	if err != nil || !held.GetAcquired() {
		t.Fatal(held, err)
	}
	ka, err := lc.KeepAlive(orders, &lockdv1.KeepAliveRequest{Key: "orders/42", LeaseId: held.GetLease().GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Recv(); err != nil {
		t.Fatal(err)
	}
	kept := make(chan error, 1)
	go func() {
		for {
			if _, err := ka.Recv(); err != nil {
				kept <- err
				return
			}
		}
	}()
	waited := make(chan *lockdv1.AcquireResponse, 1)
	go func() {
		res, err := lc.Acquire(orders, &lockdv1.AcquireRequest{Key: "orders/42", Owner: "worker-2", Ttl: durationpb.New(time.Minute), WaitTimeout: durationpb.New(2 * time.Minute)})
		if err != nil {
			t.Error(err)
		}
		waited <- res
	}()
	camp, err := lockdv1.NewElectionServiceClient(l.conn).Campaign(orders, &lockdv1.CampaignRequest{Name: "orders/scheduler", Owner: "node-a", Value: "10.0.0.7:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := camp.Recv(); err != nil {
		t.Fatal(err)
	}
	sc := lockdv1.NewSemaphoreServiceClient(l.conn)
	for _, owner := range []string{"sender-1", "sender-2"} {
		if _, err := sc.Acquire(orders, &lockdv1.SemaphoreServiceAcquireRequest{Key: "orders/wechat-api", Limit: 5, Owner: owner, Ttl: durationpb.New(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lockdv1.NewTokenServiceClient(l.conn).GetAccessToken(orders, &lockdv1.GetAccessTokenRequest{App: "mp"}); err != nil {
		t.Fatal(err)
	}
	// An owner ending in a right-to-left override: shown as it is, the
	// override would run on into the client's name ("(sredro)").
	if res, err := lc.Acquire(orders, &lockdv1.AcquireRequest{Key: "orders/bidi", Owner: "evil\u202e", Ttl: durationpb.New(time.Minute)}); err != nil || !res.GetAcquired() {
		t.Fatal(res, err)
	}

	b := chromium(t)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(b, actions...); err != nil {
			t.Fatalf("%s: %v\nlockd logs:\n%s", what, err, l.logs)
		}
	}
	errorShows := func(text string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.Search(`//span[@id="status" and @class="error" and contains(., "` + text + `")]`))
	}
	step("load the page", chromedp.Navigate(l.http+"/ui"), errorShows("enter an admin client's bearer token"))
	step("another client's token", chromedp.SendKeys(chromedp.ID("token"), ordersToken), chromedp.Click(chromedp.ID("save")),
		errorShows("needs the token of a client with admin: true"))
	step("the admin token", chromedp.SendKeys(chromedp.ID("token"), opsToken), chromedp.Click(chromedp.ID("save")),
		chromedp.WaitVisible(chromedp.Search(`//table[@id="locks"]//td[.="worker-1 (orders)"]`)))
	step("the waiting writer", chromedp.WaitVisible(chromedp.Search(`//table[@id="locks"]//tr[td[.="orders/42"]]/td[7][.="1"]`)))
	step("the election", chromedp.WaitVisible(chromedp.Search(`//table[@id="elections"]//tr[td[.="orders/scheduler"] and td[.="node-a (orders)"] and td[.="10.0.0.7:8080"]]`)))
	step("the semaphore", chromedp.WaitVisible(chromedp.Search(`//table[@id="semaphores"]//tr[td[.="orders/wechat-api"] and td[.="2 / 5"]]`)))
	step("the app", chromedp.WaitVisible(chromedp.Search(`//table[@id="apps"]//tr[td[.="mp"] and td[4][.="1"]]`)))
	step("a right-to-left override shown, and isolated", chromedp.WaitVisible(chromedp.Search(
		"//table[@id=\"locks\"]//tr[td[.=\"orders/bidi\"]]/td[2][.=\"evil\u27e8U+202E\u27e9 (orders)\"]/bdi[1]")))
	if path := os.Getenv("LOCKD_UI_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsAbs(path) {
			t.Fatalf("LOCKD_UI_SCREENSHOT=%s: give an absolute path", path)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	step("force release, confirmed", chromedp.Click(chromedp.CSS(`#locks button[data-key="orders/42"][data-owner="worker-1"]`)),
		chromedp.WaitVisible(chromedp.ID("confirm")), chromedp.Click(chromedp.ID("confirm-yes")))
	select {
	case err := <-kept:
		if status.Code(err) != codes.NotFound {
			t.Fatalf("the evicted holder's KeepAlive ended with %v, want NOT_FOUND", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the evicted holder's KeepAlive stream did not end")
	}
	select {
	case res := <-waited:
		if !res.GetAcquired() || res.GetLease().GetFencingToken() <= held.GetLease().GetFencingToken() {
			t.Fatalf("the waiting writer got %v", res)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiting writer did not get the lock")
	}
	step("the page shows the new holder", chromedp.WaitVisible(chromedp.Search(`//table[@id="locks"]//td[.="worker-2 (orders)"]`)),
		chromedp.WaitNotPresent(chromedp.Search(`//table[@id="locks"]//td[.="worker-1 (orders)"]`)))
	if !errors.Is(ctx.Err(), nil) {
		t.Fatal(ctx.Err())
	}
}
