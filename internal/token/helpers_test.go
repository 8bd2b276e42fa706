package token_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/clocktest"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// The secrets of the test apps: characters that URL and JSON encoding
// change, so that every spelling of them can be looked for.
const (
	classicSecret  = "classic-S3cr3t/+&=%"
	stableSecret   = "stable-S3cr3t/+&=%"
	wecomSecret    = "wecom-S3cr3t/+&=%"
	feishuSecret   = "feishu-S3cr3t/+&=%"
	dingtalkSecret = "dingtalk-S3cr3t/+&=%"
	oauth2Secret   = "oauth2-S3cr3t/+&=%"
)

// secretForms returns every spelling of the test secrets that could leak.
func secretForms() []string {
	var out []string
	for _, s := range []string{classicSecret, stableSecret, wecomSecret, feishuSecret, dingtalkSecret, oauth2Secret} {
		out = append(out, s, url.QueryEscape(s), url.PathEscape(s))
	}
	return out
}

// provider is one of the upstream APIs the tests run against.
type provider struct {
	name   string // the app's name in the broker
	id     string // appid or corpid
	secret string
	config func(apiBase string) wechat.Config
	path   string // the token endpoint
	// probe is true when the upstream can be asked whether it accepts a
	// token without minting (WeChat, WeCom).
	probe bool
}

// app is the broker's app of p on fake.
func (p provider) app(fake *wechatfake.Server) token.App {
	return token.App{Name: p.name, Upstream: p.config(fake.URL())}
}

// key is the Redis key of p's cached token on fake under the default
// prefix (an OAuth2 client's tokens differ by token_url).
func (p provider) key(fake *wechatfake.Server) string {
	return "lockd:token:{" + token.Identity(p.config(fake.URL())) + "}"
}

// issued is how many distinct tokens fake minted for p.
func (p provider) issued(fake *wechatfake.Server) int { return fake.Issued(p.id) }

// reject makes the upstream refuse tok the way each API would: the classic
// and stable token endpoints keep handing out what they have (so only the
// check tells, and the stable API needs force_refresh); the others drop the
// token and mint a new one on the next call.
func (p provider) reject(fake *wechatfake.Server, tok string) {
	switch p.name {
	case "classic", "stable":
		fake.Reject(tok)
	default:
		fake.RevokeTokens(p.id)
	}
}

var providers = []provider{
	{"classic", "wx-classic", classicSecret, func(base string) wechat.Config {
		return wechat.Config{Provider: wechat.ProviderWeChat, TokenAPI: wechat.TokenAPIClassic, APIBase: base, AppID: "wx-classic", Secret: classicSecret}
	}, "/cgi-bin/token", true},
	{"stable", "wx-stable", stableSecret, func(base string) wechat.Config {
		return wechat.Config{Provider: wechat.ProviderWeChat, TokenAPI: wechat.TokenAPIStable, APIBase: base, AppID: "wx-stable", Secret: stableSecret}
	}, "/cgi-bin/stable_token", true},
	{"wecom", "ww-corp", wecomSecret, func(base string) wechat.Config {
		return wechat.Config{Provider: wechat.ProviderWeCom, APIBase: base, AppID: "ww-corp", Secret: wecomSecret}
	}, "/cgi-bin/gettoken", true},
}

// others are the providers beyond WeChat, held to the same guarantees.
var others = []provider{
	{"feishu", "cli-feishu", feishuSecret, func(base string) wechat.Config {
		return wechat.Config{Provider: upstream.Feishu, APIBase: base, AppID: "cli-feishu", Secret: feishuSecret}
	}, "/open-apis/auth/v3/tenant_access_token/internal", false},
	{"dingtalk", "ding-app", dingtalkSecret, func(base string) wechat.Config {
		return wechat.Config{Provider: upstream.DingTalk, APIBase: base, AppID: "ding-app", Secret: dingtalkSecret}
	}, "/v1.0/oauth2/accessToken", false},
	{"oauth2", "oauth-client", oauth2Secret, func(base string) wechat.Config {
		return wechat.Config{Provider: upstream.OAuth2, TokenURL: base + "/oauth2/token", AppID: "oauth-client", Secret: oauth2Secret,
			Scope: "tokens.read", Audience: "https://api.example.com"}
	}, "/oauth2/token", false},
}

// guaranteed returns every provider the fleet guarantees hold for.
func guaranteed() []provider { return append(append([]provider(nil), providers...), others...) }

// The identities of the classic and stable apps (provider, API, appid and a
// fingerprint of the secret), and the keys of their cached tokens.
var (
	classicID  = token.Identity(providers[0].config(""))
	classicKey = "lockd:token:{" + classicID + "}"
	stableKey  = "lockd:token:{" + token.Identity(providers[1].config("")) + "}"
)

// anyone is the caller of tests that do not look at callers.
var anyone = token.Caller{Name: "tests"}

// newFake starts a fake upstream knowing every provider's app.
func newFake(t *testing.T, opts wechatfake.Options) *wechatfake.Server {
	t.Helper()
	opts.Apps = map[string]string{"wx-classic": classicSecret, "wx-stable": stableSecret}
	opts.Corps = map[string]string{"ww-corp": wecomSecret}
	opts.Feishu = map[string]string{"cli-feishu": feishuSecret}
	opts.DingTalk = map[string]string{"ding-app": dingtalkSecret}
	opts.OAuth2 = map[string]string{"oauth-client": oauth2Secret}
	opts.OAuth2Audience = "https://api.example.com"
	opts.OAuth2Scopes = []string{"tokens.read"}
	fake := wechatfake.New(opts)
	t.Cleanup(fake.Close)
	return fake
}

func apps(fake *wechatfake.Server) []token.App {
	out := make([]token.App, len(providers))
	for i, p := range providers {
		out[i] = token.App{Name: p.name, Upstream: p.config(fake.URL())}
	}
	return out
}

// fleet is several brokers (replicas) on one Redis, each with its own
// connection, sharing one observer and one log.
type fleet struct {
	brokers []*token.Broker
	obs     *observer
	logs    *logtest.Buffer
	rdb     *redis.Client
}

func newFleet(t *testing.T, srv *redistest.Server, n int, apps []token.App, opts token.Options) *fleet {
	t.Helper()
	f := &fleet{obs: newObserver(), logs: &logtest.Buffer{}, rdb: srv.Client(t)}
	opts.Observer = f.obs
	opts.Logger = slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for range n {
		b, err := token.New(srv.Client(t), apps, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		f.brokers = append(f.brokers, b)
	}
	return f
}

// refresh runs every broker's refresher until the test ends.
func (f *fleet) refresh(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, b := range f.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.RunRefresher(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// result is one call's outcome.
type result struct {
	tok token.Token
	err error
}

// concurrently makes n calls at once, spread over the fleet's brokers.
func (f *fleet) concurrently(n int, call func(b *token.Broker) (token.Token, error)) []result {
	out := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tok, err := call(f.brokers[i%len(f.brokers)])
			out[i] = result{tok, err}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// oneToken checks that every call succeeded with the same token and returns it.
func oneToken(t *testing.T, what string, rs []result) token.Token {
	t.Helper()
	distinct := map[string]bool{}
	for _, r := range rs {
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		distinct[r.tok.AccessToken] = true
	}
	if len(distinct) != 1 {
		t.Fatalf("%s: %d distinct tokens, want 1", what, len(distinct))
	}
	return rs[0].tok
}

// assertNoSecret fails when any text holds a secret.
func assertNoSecret(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, text := range texts {
		for _, s := range secretForms() {
			if strings.Contains(text, s) {
				t.Fatalf("%s holds a secret (%q):\n%s", what, s, text)
			}
		}
	}
}

// assertRedisClean checks that every key expires and no key or value holds
// a secret.
func assertRedisClean(t *testing.T, ctx context.Context, rdb *redis.Client) {
	t.Helper()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var dump bytes.Buffer
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == -1 { // go-redis passes PTTL's -1 (no expiry) through as is
			t.Errorf("key %q has no expiry (%v)", k, ttl)
		}
		typ, _ := rdb.Type(ctx, k).Result()
		var v any
		switch typ {
		case "string":
			v, _ = rdb.Get(ctx, k).Result()
		case "hash":
			v, _ = rdb.HGetAll(ctx, k).Result()
		case "zset":
			v, _ = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		}
		fmt.Fprintf(&dump, "%s = %v\n", k, v)
	}
	assertNoSecret(t, "redis", dump.String())
}

// observer counts the broker's events.
type observer struct {
	mu     sync.Mutex
	mints  map[string]int                 // by app
	causes map[string]map[token.Cause]int // by app
	errors map[string]int                 // by app
	codes  map[string]int                 // by error code, "" = transport
	// fetches counts upstream calls by "app value outcome".
	fetches  map[string]int
	possible map[string]int // possible mints, by app
}

func newObserver() *observer {
	return &observer{mints: map[string]int{}, causes: map[string]map[token.Cause]int{}, errors: map[string]int{}, codes: map[string]int{},
		fetches: map[string]int{}, possible: map[string]int{}}
}

func (o *observer) TokenFetched(app, value, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fetches[app+" "+value+" "+outcome]++
}

func (o *observer) TokenPossiblyMinted(app string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.possible[app]++
}

// fetched is how many of app's calls for value had outcome.
func (o *observer) fetched(app, value, outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fetches[app+" "+value+" "+outcome]
}

// possiblyMinted is how many of app's token calls got no answer after
// they were sent.
func (o *observer) possiblyMinted(app string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.possible[app]
}

func (o *observer) TokenMinted(app string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mints[app]++
}

func (o *observer) TokenMintedBecause(app string, c token.Cause) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.causes[app] == nil {
		o.causes[app] = map[token.Cause]int{}
	}
	o.causes[app][c]++
}

func (o *observer) TokenUpstreamError(app, code string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errors[app]++
	o.codes[code]++
}

func (o *observer) TokenTransportError(app string) { o.TokenUpstreamError(app, "") }

func (o *observer) minted(app string, c token.Cause) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.causes[app][c]
}

func (o *observer) failed(app string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.errors[app]
}

// startClassic starts a fake upstream and n replicas serving the classic
// app, and has caller get its first token.
func startClassic(t *testing.T, n int, fo wechatfake.Options, opts token.Options, caller token.Caller) (*wechatfake.Server, *fleet, context.Context, token.Token) {
	t.Helper()
	fake := newFake(t, fo)
	f := newFleet(t, redistest.Start(t), n, apps(fake)[:1], opts)
	ctx := timeout(t, 2*time.Minute)
	first, err := f.brokers[0].Get(ctx, "classic", caller)
	if err != nil {
		t.Fatal(err)
	}
	return fake, f, ctx, first
}

// newClock returns a manual clock for the broker's and the fake's
// Options.Now, starting at the real time.
func newClock() *clocktest.Clock { return clocktest.New(time.Now()) }

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
