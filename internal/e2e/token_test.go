package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// The apps' secrets, handed to lockd through its environment and a file.
const (
	classicSecret = "e2e-classic-S3cr3t/+&="
	stableSecret  = "e2e-stable-S3cr3t/+&="
	wecomSecret   = "e2e-wecom-S3cr3t/+&="
)

func leaks(text string) string {
	for _, s := range []string{classicSecret, stableSecret, wecomSecret} {
		for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			if strings.Contains(text, form) {
				return form
			}
		}
	}
	return ""
}

// tokenSetup writes a config file for a fake upstream and returns the
// arguments and environment that run lockd on it.
func tokenSetup(t *testing.T, fake *wechatfake.Server) (configPath string, env []string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stable.secret"), []byte(stableSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := fmt.Sprintf(`apps:
  - name: classic
    provider: wechat
    appid: wx-classic
    secret_env: CLASSIC_SECRET
    api_base: %[1]s
  - name: stable
    provider: wechat
    appid: wx-stable
    token_api: stable
    secret_file: stable.secret
    api_base: %[1]s
  - name: wecom
    provider: wecom
    appid: ww-corp
    secret_env: WECOM_SECRET
    api_base: %[1]s
  - name: rotated
    provider: wechat
    appid: wx-rotated
    secret_env: CLASSIC_SECRET
    api_base: %[1]s
`, fake.URL())
	configPath = filepath.Join(dir, "lockd.yaml")
	if err := os.WriteFile(configPath, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	return configPath, []string{"CLASSIC_SECRET=" + classicSecret, "WECOM_SECRET=" + wecomSecret}
}

func newFake(t *testing.T, opts wechatfake.Options) *wechatfake.Server {
	opts.Apps = map[string]string{"wx-classic": classicSecret, "wx-stable": stableSecret, "wx-rotated": "a-secret-lockd-does-not-have"}
	opts.Corps = map[string]string{"ww-corp": wecomSecret}
	fake := wechatfake.New(opts)
	t.Cleanup(fake.Close)
	return fake
}

// TestTwoProcessesShareOneTokenPerApp runs two lockd processes on one Redis
// and one fake upstream: however many callers ask through either, each
// refresh mints once, for the classic and stable APIs and WeCom, and each
// ticket is fetched once; a rejected secret is reported as
// FAILED_PRECONDITION with its errcode and not retried at once; the secrets
// appear in no log and no error.
func TestTwoProcessesShareOneTokenPerApp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	fake.SetLatency(50 * time.Millisecond)
	configPath, env := tokenSetup(t, fake)
	a := startLockd(t, env, "--redis=redis://"+srv.Addr(), "--config="+configPath)
	b := startLockd(t, append([]string{"LOCKD_REDIS=" + srv.Addr(), "LOCKD_CONFIG=" + configPath}, env...))
	clients := []lockdv1.TokenServiceClient{lockdv1.NewTokenServiceClient(a.dial(t)), lockdv1.NewTokenServiceClient(b.dial(t))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// burst makes n calls at once through both processes and returns the
	// distinct tokens; every call must succeed.
	burst := func(what string, n int, call func(c lockdv1.TokenServiceClient) (string, error)) map[string]bool {
		t.Helper()
		var mu sync.Mutex
		var wg sync.WaitGroup
		tokens := map[string]bool{}
		var firstErr error
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok, err := call(clients[i%2])
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				tokens[tok] = true
			}()
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatalf("%s: %v", what, firstErr)
		}
		return tokens
	}
	one := func(what string, tokens map[string]bool) string {
		t.Helper()
		if len(tokens) != 1 {
			t.Fatalf("%s: %d distinct tokens, want 1", what, len(tokens))
		}
		for tok := range tokens {
			return tok
		}
		return ""
	}

	for _, app := range []struct{ name, id string }{{"classic", "wx-classic"}, {"stable", "wx-stable"}, {"wecom", "ww-corp"}} {
		get := func(c lockdv1.TokenServiceClient) (string, error) {
			res, err := c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: app.name})
			return res.GetAccessToken(), err
		}
		refresh := func(invalid string) func(c lockdv1.TokenServiceClient) (string, error) {
			return func(c lockdv1.TokenServiceClient) (string, error) {
				res, err := c.RefreshAccessToken(ctx, &lockdv1.RefreshAccessTokenRequest{App: app.name, InvalidToken: invalid})
				return res.GetAccessToken(), err
			}
		}
		first := one(app.name+": 200 cold GetAccessToken", burst(app.name, 200, get))
		if n := fake.Mints(app.id); n != 1 {
			t.Fatalf("%s: 200 cold GetAccessToken made %d mints, want 1", app.name, n)
		}
		// The upstream drops the token (WeCom then mints a new one; the
		// classic and stable endpoints only learn of it from a check).
		if app.name == "wecom" {
			fake.RevokeTokens(app.id)
		} else {
			fake.Reject(first)
		}
		second := one(app.name+": 100 RefreshAccessToken of the refused token", burst(app.name, 100, refresh(first)))
		if n := fake.Issued(app.id); n != 2 {
			t.Fatalf("%s: 100 RefreshAccessToken of the refused token made %d tokens in all, want 2", app.name, n)
		}
		if !fake.Valid(second) || second == first {
			t.Fatalf("%s: RefreshAccessToken did not replace the token", app.name)
		}
		if third := one(app.name+": 100 RefreshAccessToken of a stale token", burst(app.name, 100, refresh(first))); third != second {
			t.Fatalf("%s: RefreshAccessToken of a stale token did not return the cached token", app.name)
		}
		if n := fake.Issued(app.id); n != 2 {
			t.Fatalf("%s: RefreshAccessToken of a stale token minted (%d tokens in all, want 2)", app.name, n)
		}
		ticket := one(app.name+": 100 GetTicket", burst(app.name, 100, func(c lockdv1.TokenServiceClient) (string, error) {
			res, err := c.GetTicket(ctx, &lockdv1.GetTicketRequest{App: app.name, Type: lockdv1.TicketType_TICKET_TYPE_JSAPI})
			return res.GetTicket(), err
		}))
		if !fake.TicketValid(ticket) || fake.TicketsIssued(app.id) != 1 {
			t.Fatalf("%s: GetTicket through both processes: valid %v, %d tickets issued", app.name, fake.TicketValid(ticket), fake.TicketsIssued(app.id))
		}
	}

	// A secret the upstream rejects: FAILED_PRECONDITION with the errcode,
	// then answered from the fleet's record without calling WeChat again.
	var messages []string
	for i := range 10 {
		_, err := clients[i%2].GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "rotated"})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition {
			t.Fatalf("rotated secret: %v, want FAILED_PRECONDITION", err)
		}
		var errcode string
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				errcode = info.GetMetadata()["errcode"]
			}
		}
		if errcode != "40125" {
			t.Fatalf("rotated secret: ErrorInfo errcode %q in %v, want 40125", errcode, st.Details())
		}
		messages = append(messages, fmt.Sprint(err, st.Details()))
	}
	if n := fake.Mints("wx-rotated"); n != 1 {
		t.Fatalf("rotated secret: %d upstream calls, want 1", n)
	}
	if _, err := clients[0].GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown app: %v, want NOT_FOUND", err)
	}

	for _, p := range []*process{a, b} {
		if err := p.terminate(t); err != nil {
			t.Fatalf("lockd exit after SIGTERM: %v", err)
		}
		if form := leaks(p.logs.String()); form != "" {
			t.Fatalf("lockd %s logged a secret (%q):\n%s", p.addr, form, p.logs)
		}
	}
	if form := leaks(strings.Join(messages, "\n")); form != "" {
		t.Fatalf("an error holds a secret (%q)", form)
	}
}

// TestProcessesRenewTokensOnTheirOwn checks that lockd runs the proactive
// refresher: a token nobody asks for again is renewed before it expires, by
// one of the two processes.
func TestProcessesRenewTokensOnTheirOwn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{ExpiresIn: 8 * time.Second})
	configPath, env := tokenSetup(t, fake)
	a := startLockd(t, env, "--redis="+srv.Addr(), "--config="+configPath)
	startLockd(t, env, "--redis="+srv.Addr(), "--config="+configPath)
	c := lockdv1.NewTokenServiceClient(a.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first, err := c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "classic"})
	if err != nil {
		t.Fatal(err)
	}
	// The fake counts a mint when the request arrives, before lockd has
	// stored its answer: wait for the renewed token to be served.
	var renewed *lockdv1.GetAccessTokenResponse
	for {
		if ctx.Err() != nil {
			t.Fatalf("the token was not renewed (%d mints)", fake.Mints("wx-classic"))
		}
		renewed, err = c.GetAccessToken(ctx, &lockdv1.GetAccessTokenRequest{App: "classic"})
		if err != nil {
			t.Fatal(err)
		}
		if renewed.GetAccessToken() != first.GetAccessToken() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !renewed.GetExpireTime().AsTime().After(first.GetExpireTime().AsTime()) {
		t.Fatal("the renewed token expires no later than the first")
	}
	if n := fake.Mints("wx-classic"); n != 2 {
		t.Fatalf("%d mints, want 2: the renewal was made by one process, and served", n)
	}
}

// TestBadConfigStopsLockdNamingTheAppAndField runs lockd with configs whose
// secret or client token variable is unset, or whose file is missing: it
// must exit at once, saying what is wrong, never printing a secret.
func TestBadConfigStopsLockdNamingTheAppAndField(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	configPath, _ := tokenSetup(t, fake)
	authPath := filepath.Join(t.TempDir(), "auth.yaml")
	authFile := "apps: []\nauth:\n  clients:\n    - {name: orders, token_env: ORDERS_TOKEN, locks: [\"\"], apps: []}\n"
	if err := os.WriteFile(authPath, []byte(authFile), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"an unset secret_env is named with its app", []string{"--config=" + configPath}, []string{"WECOM_SECRET=" + wecomSecret},
			`apps[0] "classic": secret_env: environment variable CLASSIC_SECRET is not set`},
		{"a missing config file is named", []string{"--config=" + configPath + ".missing"}, nil, "lockd.yaml.missing"},
		{"an unset client token variable is named", []string{"--config=" + authPath}, nil,
			`auth.clients[0] "orders": token_env: environment variable ORDERS_TOKEN is not set`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(lockdBinary(t), append([]string{"--listen=" + freeAddr(t), "--http-listen="}, tt.args...)...)
			cmd.Env = append(os.Environ(), tt.env...)
			done := make(chan struct{})
			var out []byte
			var err error
			go func() {
				out, err = cmd.CombinedOutput()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("lockd kept running:\n%s", out)
			}
			if err == nil {
				t.Fatalf("lockd exited 0:\n%s", out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Fatalf("output does not say %q:\n%s", tt.want, out)
			}
			if form := leaks(string(out)); form != "" {
				t.Fatalf("output holds a secret (%q):\n%s", form, out)
			}
		})
	}
}
