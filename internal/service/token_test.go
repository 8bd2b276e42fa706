package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/clocktest"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// tokenSecret is every test app's secret; its spellings must never show.
const tokenSecret = "svc-S3cr3t/+&=%"

func secretLeaks(text string) bool {
	for _, form := range []string{tokenSecret, url.QueryEscape(tokenSecret), url.PathEscape(tokenSecret)} {
		if strings.Contains(text, form) {
			return true
		}
	}
	return false
}

// tokenApp is one configured app of the token tests.
type tokenApp struct {
	name, id string
	cfg      func(base string) wechat.Config
}

var tokenApps = []tokenApp{
	{"classic", "wx-classic", func(base string) wechat.Config {
		return wechat.Config{Provider: wechat.ProviderWeChat, APIBase: base, AppID: "wx-classic", Secret: tokenSecret}
	}},
	{"stable", "wx-stable", func(base string) wechat.Config {
		return wechat.Config{Provider: wechat.ProviderWeChat, TokenAPI: wechat.TokenAPIStable, APIBase: base, AppID: "wx-stable", Secret: tokenSecret}
	}},
	{"wecom", "ww-corp", func(base string) wechat.Config {
		return wechat.Config{Provider: wechat.ProviderWeCom, APIBase: base, AppID: "ww-corp", Secret: tokenSecret}
	}},
	// An appid the upstream does not know.
	{"stranger", "wx-stranger", func(base string) wechat.Config {
		return wechat.Config{Provider: wechat.ProviderWeChat, APIBase: base, AppID: "wx-stranger", Secret: tokenSecret}
	}},
	{"feishu", "cli-feishu", func(base string) wechat.Config {
		return wechat.Config{Provider: upstream.Feishu, APIBase: base, AppID: "cli-feishu", Secret: tokenSecret}
	}},
	{"dingtalk", "ding-app", func(base string) wechat.Config {
		return wechat.Config{Provider: upstream.DingTalk, APIBase: base, AppID: "ding-app", Secret: tokenSecret}
	}},
	{"oauth2", "oauth-client", func(base string) wechat.Config {
		return wechat.Config{Provider: upstream.OAuth2, TokenURL: base + "/oauth2/token", AppID: "oauth-client", Secret: tokenSecret}
	}},
}

func newTokenFake(t *testing.T) *wechatfake.Server {
	fake := wechatfake.New(wechatfake.Options{
		Apps:     map[string]string{"wx-classic": tokenSecret, "wx-stable": tokenSecret},
		Corps:    map[string]string{"ww-corp": tokenSecret},
		Feishu:   map[string]string{"cli-feishu": tokenSecret},
		DingTalk: map[string]string{"ding-app": tokenSecret},
		OAuth2:   map[string]string{"oauth-client": tokenSecret},
	})
	t.Cleanup(fake.Close)
	return fake
}

// tokenFleet is several TokenService instances (replicas) on one Redis,
// each with its own broker, Redis connection and bufconn server, logging
// into one buffer.
type tokenFleet struct {
	clients []lockdv1.TokenServiceClient
	logs    *logtest.Buffer
}

func startTokenFleet(t *testing.T, srv *redistest.Server, n int, fake *wechatfake.Server, opts token.Options) *tokenFleet {
	t.Helper()
	f := &tokenFleet{logs: &logtest.Buffer{}}
	log := slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Logger = log
	var apps []token.App
	for _, a := range tokenApps {
		apps = append(apps, token.App{Name: a.name, Upstream: a.cfg(fake.URL())})
	}
	for range n {
		broker, err := token.New(srv.Client(t), apps, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = broker.Close() })
		conn := serve(t, func(gs *grpc.Server) { lockdv1.RegisterTokenServiceServer(gs, service.NewTokenServer(broker, log)) })
		f.clients = append(f.clients, lockdv1.NewTokenServiceClient(conn))
	}
	return f
}

type tokenReply interface {
	GetAccessToken() string
}

// burstResult is what a burst of calls returned: the distinct tokens, with
// how many calls got each, and the errors.
type burstResult struct {
	tokens map[string]int
	errs   []error
}

// burst makes n calls at once, spread over the fleet.
func (f *tokenFleet) burst(n int, call func(c lockdv1.TokenServiceClient) (tokenReply, error)) burstResult {
	var mu sync.Mutex
	tokens := map[string]int{}
	var errs []error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := call(f.clients[i%len(f.clients)])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			tokens[res.GetAccessToken()]++
		}()
	}
	close(start)
	wg.Wait()
	return burstResult{tokens, errs}
}

// only returns the one token of a burst, failing on errors or several.
func only(t *testing.T, what string, r burstResult) string {
	t.Helper()
	if len(r.errs) > 0 {
		t.Fatalf("%s: %d errors, first %v", what, len(r.errs), r.errs[0])
	}
	if len(r.tokens) != 1 {
		t.Fatalf("%s: %d distinct tokens, want 1", what, len(r.tokens))
	}
	for tok := range r.tokens {
		return tok
	}
	return ""
}

func TestTokenServiceMintsOncePerRefreshAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, app := range tokenApps[:3] {
		t.Run(fmt.Sprintf("the %s API is called once per refresh by three instances", app.name), func(t *testing.T) {
			t.Parallel()
			fake := newTokenFake(t)
			fake.SetLatency(50 * time.Millisecond)
			clock := clocktest.New(time.Now())
			f := startTokenFleet(t, redistest.Start(t), 3, fake, token.Options{Now: clock.Now})
			ctx := timeout(t, 30*time.Second)
			get := func(c lockdv1.TokenServiceClient) (tokenReply, error) {
				return c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: app.name})
			}
			refresh := func(invalid string) func(c lockdv1.TokenServiceClient) (tokenReply, error) {
				return func(c lockdv1.TokenServiceClient) (tokenReply, error) {
					return c.RefreshAccessToken(ctx, &lockdv1.RefreshAccessTokenRequest{App: app.name, InvalidToken: invalid})
				}
			}
			wctx, stopWatch := context.WithCancel(ctx)
			defer stopWatch()
			watch, err := f.clients[2].WatchAccessToken(wctx, &lockdv1.WatchAccessTokenRequest{App: app.name})
			if err != nil {
				t.Fatal(err)
			}

			first := only(t, "200 cold GetAccessToken", f.burst(200, get))
			if n := fake.Mints(app.id); n != 1 {
				t.Fatalf("200 cold GetAccessToken: %d mints, want 1", n)
			}
			if got, err := watch.Recv(); err != nil || got.GetAccessToken() != first {
				t.Fatalf("the watch's first token: %v, %v", got, err)
			}
			if again := only(t, "100 RefreshAccessToken of a token the upstream accepts", f.burst(100, refresh(first))); again != first {
				t.Fatal("RefreshAccessToken replaced a token the upstream accepts")
			}
			// The upstream drops the token.
			if app.name == "wecom" {
				fake.RevokeTokens(app.id)
			} else {
				fake.Reject(first)
			}
			clock.Advance(time.Minute) // past the fleet's trust in its check of it
			second := only(t, "100 RefreshAccessToken of the refused token", f.burst(100, refresh(first)))
			if n := fake.Issued(app.id); n != 2 || second == first {
				t.Fatalf("100 RefreshAccessToken of the refused token: %d tokens minted in all, want 2", n)
			}
			if got, err := watch.Recv(); err != nil || got.GetAccessToken() != second {
				t.Fatalf("the watch on another instance: %v, %v; want the new token", got, err)
			}
			if third := only(t, "100 RefreshAccessToken of a stale token", f.burst(100, refresh(first))); third != second {
				t.Fatal("RefreshAccessToken of a stale token did not return the cached token")
			}
			if n := fake.Issued(app.id); n != 2 {
				t.Fatalf("RefreshAccessToken of a stale token minted: %d tokens in all, want 2", n)
			}
			ticket := only(t, "100 GetTicket", f.burst(100, func(c lockdv1.TokenServiceClient) (tokenReply, error) {
				res, err := c.GetTicket(ctx, &lockdv1.GetTicketRequest{App: app.name, Type: lockdv1.TicketType_TICKET_TYPE_JSAPI})
				return ticketReply{res}, err
			}))
			if !fake.TicketValid(ticket) || fake.TicketsIssued(app.id) != 1 {
				t.Fatalf("GetTicket: valid %v, %d tickets issued", fake.TicketValid(ticket), fake.TicketsIssued(app.id))
			}
			if secretLeaks(f.logs.String()) {
				t.Fatalf("the logs hold the secret:\n%s", f.logs)
			}
		})
	}
}

// ticketReply lets a burst collect tickets.
type ticketReply struct{ *lockdv1.GetTicketResponse }

func (r ticketReply) GetAccessToken() string { return r.GetTicket() }

func TestTokenErrorsCarryTheirCodeAndErrcode(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tests := []struct {
		name    string
		app     string
		setup   func(fake *wechatfake.Server)
		opts    token.Options
		code    codes.Code
		reason  string
		errcode string // "" = none expected
		retry   bool   // a RetryInfo detail is expected
	}{
		{"a wrong secret is FAILED_PRECONDITION with errcode 40125", "classic",
			func(f *wechatfake.Server) { f.AddApp("wx-classic", "rotated-secret") }, token.Options{},
			codes.FailedPrecondition, "WECHAT_CREDENTIALS_REJECTED", "40125", true},
		{"an unknown appid is FAILED_PRECONDITION with errcode 40013", "stranger",
			nil, token.Options{},
			codes.FailedPrecondition, "WECHAT_CREDENTIALS_REJECTED", "40013", true},
		{"a caller IP off the whitelist is FAILED_PRECONDITION with errcode 40164", "stable",
			func(f *wechatfake.Server) { f.SetWhitelisted("wx-stable", false) }, token.Options{},
			codes.FailedPrecondition, "WECHAT_CREDENTIALS_REJECTED", "40164", true},
		{"a wrong WeCom corpsecret is FAILED_PRECONDITION with errcode 40001", "wecom",
			func(f *wechatfake.Server) { f.AddCorp("ww-corp", "rotated-secret") }, token.Options{},
			codes.FailedPrecondition, "WECHAT_CREDENTIALS_REJECTED", "40001", true},
		{"WeCom refusing the caller's IP is FAILED_PRECONDITION with errcode 60020", "wecom",
			func(f *wechatfake.Server) { f.SetWhitelisted("ww-corp", false) }, token.Options{},
			codes.FailedPrecondition, "WECHAT_CREDENTIALS_REJECTED", "60020", true},
		{"the daily quota is RESOURCE_EXHAUSTED with errcode 45009", "classic",
			func(f *wechatfake.Server) { f.FailNext(1, 45009) }, token.Options{},
			codes.ResourceExhausted, "WECHAT_QUOTA_EXHAUSTED", "45009", true},
		{"the minute quota is RESOURCE_EXHAUSTED with errcode 45011", "stable",
			func(f *wechatfake.Server) { f.FailNext(1, 45011) }, token.Options{},
			codes.ResourceExhausted, "WECHAT_QUOTA_EXHAUSTED", "45011", true},
		{"system busy is UNAVAILABLE with errcode -1", "classic",
			func(f *wechatfake.Server) { f.FailNext(1, -1) }, token.Options{},
			codes.Unavailable, "WECHAT_UNAVAILABLE", "-1", true},
		{"an HTTP 502 is UNAVAILABLE without errcode", "wecom",
			func(f *wechatfake.Server) { f.FailHTTPNext(1, 502) }, token.Options{},
			codes.Unavailable, "WECHAT_UNAVAILABLE", "", true},
		{"an upstream timeout is UNAVAILABLE without errcode", "classic",
			func(f *wechatfake.Server) { f.SetLatency(5 * time.Second) }, token.Options{MintTimeout: 200 * time.Millisecond},
			codes.Unavailable, "WECHAT_UNAVAILABLE", "", true},
		{"a wrong Feishu app_secret is FAILED_PRECONDITION with code 10014", "feishu",
			func(f *wechatfake.Server) { f.AddFeishu("cli-feishu", "rotated-secret") }, token.Options{},
			codes.FailedPrecondition, "FEISHU_CREDENTIALS_REJECTED", "10014", true},
		{"Feishu's rate limit is RESOURCE_EXHAUSTED with code 99991400", "feishu",
			func(f *wechatfake.Server) {
				f.FailNextOn("/open-apis/auth/v3/tenant_access_token/internal", 1, 99991400)
			}, token.Options{},
			codes.ResourceExhausted, "FEISHU_QUOTA_EXHAUSTED", "99991400", true},
		{"a wrong DingTalk appSecret is FAILED_PRECONDITION with code invalidClientIdOrSecret", "dingtalk",
			func(f *wechatfake.Server) { f.AddDingTalk("ding-app", "rotated-secret") }, token.Options{},
			codes.FailedPrecondition, "DINGTALK_CREDENTIALS_REJECTED", "invalidClientIdOrSecret", true},
		{"a wrong OAuth2 client_secret is FAILED_PRECONDITION with error invalid_client", "oauth2",
			func(f *wechatfake.Server) { f.AddOAuth2("oauth-client", "rotated-secret") }, token.Options{},
			codes.FailedPrecondition, "OAUTH2_CREDENTIALS_REJECTED", "invalid_client", true},
		{"an OAuth2 server's HTTP 429 is RESOURCE_EXHAUSTED", "oauth2",
			func(f *wechatfake.Server) { f.FailHTTPNext(1, 429) }, token.Options{},
			codes.ResourceExhausted, "OAUTH2_QUOTA_EXHAUSTED", "", true},
		{"an unknown app is NOT_FOUND", "nope",
			nil, token.Options{},
			codes.NotFound, service.ReasonUnknownApp, "", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := newTokenFake(t)
			if tt.setup != nil {
				tt.setup(fake)
			}
			tt.opts.Prefix = fmt.Sprintf("lockd-test%d", i)
			f := startTokenFleet(t, srv, 2, fake, tt.opts)
			ctx := timeout(t, 30*time.Second)
			var id string
			for _, a := range tokenApps {
				if a.name == tt.app {
					id = a.id
				}
			}

			// Twice, on two instances: the second answer comes from the
			// fleet's record of the failure, without calling the upstream.
			for round, c := range f.clients {
				_, err := c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: tt.app})
				st := status.Convert(err)
				if st.Code() != tt.code {
					t.Fatalf("round %d: code %v (%v), want %v", round, st.Code(), err, tt.code)
				}
				var info *errdetails.ErrorInfo
				var retry *errdetails.RetryInfo
				for _, d := range st.Details() {
					switch d := d.(type) {
					case *errdetails.ErrorInfo:
						info = d
					case *errdetails.RetryInfo:
						retry = d
					}
				}
				switch {
				case info == nil:
					t.Fatalf("round %d: no ErrorInfo in %v", round, st.Details())
				case info.GetReason() != tt.reason || info.GetDomain() != service.TokenErrorDomain || info.GetMetadata()["app"] != tt.app:
					t.Fatalf("round %d: ErrorInfo %v, want reason %s for app %s", round, info, tt.reason, tt.app)
				case info.GetMetadata()["errcode"] != tt.errcode:
					t.Fatalf("round %d: errcode %q, want %q", round, info.GetMetadata()["errcode"], tt.errcode)
				case tt.retry && (retry == nil || retry.GetRetryDelay().AsDuration() <= 0):
					t.Fatalf("round %d: RetryInfo %v, want a delay", round, retry)
				}
				if secretLeaks(fmt.Sprint(err, st.Details())) {
					t.Fatalf("the error holds the secret: %v %v", err, st.Details())
				}
			}
			if id != "" {
				if n := fake.Mints(id); n != 1 {
					t.Fatalf("%d upstream calls, want 1: a failure is not retried at once", n)
				}
			}
			if secretLeaks(f.logs.String()) {
				t.Fatalf("the logs hold the secret:\n%s", f.logs)
			}
		})
	}
}

func TestTokenServiceRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := startTokenFleet(t, redistest.Start(t), 1, newTokenFake(t), token.Options{})
	c := f.clients[0]
	ctx := timeout(t, 10*time.Second)
	tests := []struct {
		name string
		call func() error
		rule string
	}{
		{"an empty app is refused", func() error {
			_, err := c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{})
			return err
		}, "app must not be empty"},
		{"an oversized app is refused", func() error {
			_, err := c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: strings.Repeat("a", 129)})
			return err
		}, "app is 129 bytes"},
		{"an app with a control character is refused", func() error {
			_, err := c.RefreshAccessToken(ctx, &lockdv1.RefreshAccessTokenRequest{App: "a\x00", InvalidToken: "t"})
			return err
		}, "app has control character"},
		{"a refresh without the invalid token is refused", func() error {
			_, err := c.RefreshAccessToken(ctx, &lockdv1.RefreshAccessTokenRequest{App: "classic"})
			return err
		}, "invalid_token must not be empty"},
		{"an oversized invalid token is refused", func() error {
			_, err := c.RefreshAccessToken(ctx, &lockdv1.RefreshAccessTokenRequest{App: "classic", InvalidToken: strings.Repeat("t", 4097)})
			return err
		}, "invalid_token is 4097 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantCode(t, tt.name, err, codes.InvalidArgument)
			if !strings.Contains(status.Convert(err).Message(), tt.rule) {
				t.Fatalf("message %q does not say %q", status.Convert(err).Message(), tt.rule)
			}
		})
	}
}

func TestTokenServiceWithoutAppsIsNotFound(t *testing.T) {
	t.Parallel()
	srv := service.NewTokenServer(nil, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	_, err := srv.GetAccessToken(context.Background(), &lockdv1.GetAccessTokenRequest{App: "mp"})
	wantCode(t, "GetAccessToken without apps", err, codes.NotFound)
}

func TestTokenRedisDownIsUnavailableWithoutAMintStormAfter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newTokenFake(t)
	f := startTokenFleet(t, srv, 3, fake, token.Options{})
	ctx := timeout(t, time.Minute)

	srv.Stop()
	errs := f.burst(30, func(c lockdv1.TokenServiceClient) (tokenReply, error) {
		return c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "classic"})
	}).errs
	if len(errs) != 30 {
		t.Fatalf("%d of 30 calls failed with Redis down", len(errs))
	}
	for _, err := range errs {
		wantCode(t, "GetAccessToken with Redis down", err, codes.Unavailable)
	}
	if n := fake.Mints("wx-classic"); n != 0 {
		t.Fatalf("%d mints with Redis down, want 0: no replica may mint behind the others' backs", n)
	}

	srv.Restart(t)
	tok := only(t, "200 GetAccessToken once Redis is back", f.burst(200, func(c lockdv1.TokenServiceClient) (tokenReply, error) {
		return c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "classic"})
	}))
	if n := fake.Mints("wx-classic"); n != 1 || !fake.Valid(tok) {
		t.Fatalf("%d mints once Redis is back, want 1", n)
	}
	// The stored token is served on.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if cached, err := rdb.HGet(ctx, "lockd:token:{"+token.Identity(wechat.Config{Provider: wechat.ProviderWeChat, AppID: "wx-classic", Secret: tokenSecret})+"}", "token").Result(); err != nil || cached != tok {
		t.Fatalf("cached token %q, %v", cached, err)
	}

	// A Redis that does not answer at all is UNAVAILABLE within the
	// caller's deadline, not the caller's own DEADLINE_EXCEEDED.
	srv.Freeze()
	defer srv.Thaw()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := f.clients[1].GetAccessToken(short, &lockdv1.GetAccessTokenRequest{App: "classic"})
	wantCode(t, "GetAccessToken with Redis frozen", err, codes.Unavailable)
	srv.Thaw()
	if n := fake.Mints("wx-classic"); n != 1 {
		t.Fatalf("%d mints, want 1", n)
	}
}

// TestTokenUpstreamCallsLimitIsResourceExhausted has the fleet call the
// upstream as often as its hourly bound allows: the next call that needs
// it is RESOURCE_EXHAUSTED with a retry delay, and the upstream is left
// alone.
func TestTokenUpstreamCallsLimitIsResourceExhausted(t *testing.T) {
	t.Parallel()
	fake := newTokenFake(t)
	fake.FailNext(1, -1)
	f := startTokenFleet(t, redistest.Start(t), 2, fake, token.Options{FetchesPerHour: 1, UnavailableHold: time.Millisecond})
	ctx := timeout(t, 30*time.Second)
	_, err := f.clients[0].GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "classic"})
	wantCode(t, "the first call, refused by the upstream", err, codes.Unavailable)
	time.Sleep(10 * time.Millisecond) // the failure's hold
	_, err = f.clients[1].GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "classic"})
	st := status.Convert(err)
	var info *errdetails.ErrorInfo
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	if st.Code() != codes.ResourceExhausted || info.GetReason() != service.ReasonUpstreamCallsLimited ||
		retry.GetRetryDelay().AsDuration() <= 0 || retry.GetRetryDelay().AsDuration() > time.Hour {
		t.Fatalf("the next call = %v %v", err, st.Details())
	}
	if n := fake.Mints("wx-classic"); n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
}
