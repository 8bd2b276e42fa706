package token_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestEveryKeyAndChannelIsUnderThePrefix drives one broker through tokens,
// reports, limits, force_refresh, tickets and failures, and finds every
// Redis key and pub/sub channel it used under its prefix.
func TestEveryKeyAndChannelIsUnderThePrefix(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, srv, 2, apps(fake), token.Options{Prefix: "tenant-a"})
	f.refresh(t)
	ctx := timeout(t, 30*time.Second)
	b := f.brokers[0]
	for _, p := range providers {
		tok, err := b.Get(ctx, p.name, anyone)
		if err != nil {
			t.Fatal(err)
		}
		reject(fake, p, tok.AccessToken)
		if _, err := b.Refresh(ctx, p.name, tok.AccessToken, anyone); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Ticket(ctx, p.name, wechat.TicketJSAPI, anyone); err != nil {
			t.Fatal(err)
		}
	}
	fake.FailNext(1, -1)
	stale := apps(fake)[:1]
	stale[0].Upstream.Secret = "an-old-secret"
	other, err := token.New(srv.Client(t), stale, token.Options{Prefix: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Refresh(ctx, "classic", "whatever", anyone); !errors.Is(err, wechat.ErrUnavailable) {
		t.Fatal(err) // its own cache is empty: a mint, failed and recorded
	}

	keys, err := f.rdb.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatal(keys, err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "tenant-a:") {
			t.Errorf("key %q is outside the prefix", k)
		}
	}
	channels, err := f.rdb.PubSubChannels(ctx, "*").Result()
	if err != nil || len(channels) == 0 {
		t.Fatal(channels, err)
	}
	for _, c := range channels {
		if !strings.HasPrefix(c, "tenant-a:") {
			t.Errorf("channel %q is outside the prefix", c)
		}
	}
	assertRedisClean(t, ctx, f.rdb)
}

// TestConfigurationsSharingARedisKeepTheirAccountsApart runs two brokers
// with an app of the same name but another appid on one Redis and prefix,
// and two with the same account under two prefixes.
func TestConfigurationsSharingARedisKeepTheirAccountsApart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	fake.AddApp("wx-other", classicSecret)
	ctx := timeout(t, 30*time.Second)
	mp := func(appid string) []token.App {
		return []token.App{{Name: "mp", Upstream: wechat.Config{Provider: wechat.ProviderWeChat, APIBase: fake.URL(), AppID: appid, Secret: classicSecret}}}
	}
	one := newFleet(t, srv, 1, mp("wx-classic"), token.Options{}).brokers[0]
	two := newFleet(t, srv, 1, mp("wx-other"), token.Options{}).brokers[0]
	t1, err := one.Get(ctx, "mp", anyone)
	if err != nil {
		t.Fatal(err)
	}
	t2, err := two.Get(ctx, "mp", anyone)
	if err != nil || t2.AccessToken == t1.AccessToken || fake.Mints("wx-other") != 1 {
		t.Fatalf("the app of another appid got %v (%v): the first account's token", t2, err)
	}
	// The same account under the same prefix, whatever its name, shares
	// the cache: one mint for both.
	alias := newFleet(t, srv, 1, []token.App{{Name: "alias", Upstream: mp("wx-classic")[0].Upstream}}, token.Options{}).brokers[0]
	if t3, err := alias.Get(ctx, "alias", anyone); err != nil || t3 != t1 || fake.Mints("wx-classic") != 1 {
		t.Fatalf("the same account under another name: %v, %v; %d mints", t3, err, fake.Mints("wx-classic"))
	}
}

// TestADeploymentWithAnotherSecretNeverReadsTheToken runs a deployment that
// knows only the public appid, with a wrong secret, on the Redis and prefix
// of one that knows the secret: it never gets the first one's token.
func TestADeploymentWithAnotherSecretNeverReadsTheToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	ctx := timeout(t, 30*time.Second)
	for _, p := range guaranteed() {
		t.Run(p.name, func(t *testing.T) {
			right := []token.App{{Name: p.name, Upstream: p.config(fake.URL())}}
			wrong := []token.App{{Name: p.name, Upstream: p.config(fake.URL())}}
			wrong[0].Upstream.Secret = "guessed-" + p.secret
			owner := newFleet(t, srv, 1, right, token.Options{}).brokers[0]
			intruder := newFleet(t, srv, 1, wrong, token.Options{}).brokers[0]
			tok, err := owner.Get(ctx, p.name, anyone)
			if err != nil {
				t.Fatal(err)
			}
			got, err := intruder.Get(ctx, p.name, anyone)
			if err == nil || got.AccessToken == tok.AccessToken {
				t.Fatalf("a deployment with a wrong secret got %v, %v: the owner's token", got, err)
			}
			if !errors.Is(err, wechat.ErrCredentials) {
				t.Fatalf("a deployment with a wrong secret: %v, want the upstream's refusal", err)
			}
		})
	}
	assertRedisClean(t, ctx, srv.Client(t))
}

// TestAnOAuth2ClientWithAnotherScopeOrAudienceGetsAnotherToken serves one
// OAuth2 client with several scopes and audiences, as apps of one
// configuration and as one app name in two deployments sharing a Redis:
// each gets a token asked for with its own scope and audience, never one
// cached for another, from a server that would hand each grant's current
// token out again.
func TestAnOAuth2ClientWithAnotherScopeOrAudienceGetsAnotherToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := wechatfake.New(wechatfake.Options{OAuth2: map[string]string{"oauth-client": oauth2Secret}, OAuth2Reuse: time.Hour})
	t.Cleanup(fake.Close)
	ctx := timeout(t, time.Minute)
	base := others[2].config(fake.URL())
	grants := []struct{ name, scope, audience string }{
		{"reader", base.Scope, base.Audience},
		{"writer", "tokens.write", base.Audience},
		{"elsewhere", base.Scope, "https://other.example.com"},
		{"bare", "", ""},
	}
	var configured []token.App
	for _, g := range grants {
		cfg := base
		cfg.Scope, cfg.Audience = g.scope, g.audience
		configured = append(configured, token.App{Name: g.name, Upstream: cfg})
	}
	f := newFleet(t, srv, 2, configured, token.Options{})
	keys, tokens := map[string]string{}, map[string]string{}
	for i, g := range grants {
		key := "lockd:token:{" + token.Identity(configured[i].Upstream) + "}"
		if other, ok := keys[key]; ok {
			t.Fatalf("%s and %s share the cache key %s", other, g.name, key)
		}
		keys[key] = g.name
		tok := oneToken(t, g.name, f.concurrently(4, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, g.name, anyone) }))
		if other, ok := tokens[tok.AccessToken]; ok {
			t.Fatalf("%s got the token of %s", g.name, other)
		}
		tokens[tok.AccessToken] = g.name
		if scope, audience, ok := fake.Grant(tok.AccessToken); !ok || scope != g.scope || audience != g.audience {
			t.Fatalf("%s got a token asked for with scope %q and audience %q (%v); want %q and %q", g.name, scope, audience, ok, g.scope, g.audience)
		}
		if cached, err := f.rdb.HGet(ctx, key, "token").Result(); err != nil || cached != tok.AccessToken {
			t.Fatalf("%s's key holds %q (%v), want its token", g.name, cached, err)
		}
	}
	if n := fake.Issued("oauth-client"); n != len(grants) {
		t.Fatalf("%d tokens issued, want one per grant (%d)", n, len(grants))
	}

	// Another deployment on the same Redis names its app as the first
	// one's "reader", with another scope.
	cfg := base
	cfg.Scope = "tokens.write tokens.read"
	other := newFleet(t, srv, 1, []token.App{{Name: "reader", Upstream: cfg}}, token.Options{}).brokers[0]
	tok, err := other.Get(ctx, "reader", anyone)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := tokens[tok.AccessToken]; ok {
		t.Fatalf("the other deployment's reader got the token of %s", name)
	}
	if scope, _, _ := fake.Grant(tok.AccessToken); scope != cfg.Scope {
		t.Fatalf("the other deployment's reader got a token asked for with scope %q, want %q", scope, cfg.Scope)
	}
	if got, err := f.brokers[1].Get(ctx, "reader", anyone); err != nil || tokens[got.AccessToken] != "reader" {
		t.Fatalf("the first deployment's reader then got %v, %v; want its own token", got, err)
	}
	assertRedisClean(t, ctx, srv.Client(t))
}
