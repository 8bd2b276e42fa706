package token_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// reject makes the upstream refuse tok the way each API would (see
// provider.reject).
func reject(fake *wechatfake.Server, p provider, tok string) { p.reject(fake, tok) }

func TestStampedeMintsOnce(t *testing.T) {
	t.Parallel()
	for _, p := range guaranteed() {
		t.Run(fmt.Sprintf("callers of three replicas share one %s mint per refresh", p.name), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			fake := newFake(t, wechatfake.Options{})
			fake.SetLatency(50 * time.Millisecond) // callers pile up while the mint is under way
			clock := newClock()
			f := newFleet(t, srv, 3, []token.App{p.app(fake)}, token.Options{Now: clock.Now})
			// An upstream that cannot be asked whether it accepts a token
			// is asked for its current one instead; an OAuth2 server
			// answers with a new one.
			checkMints := 0
			if p.name == "oauth2" {
				checkMints = 1
			}
			ctx := timeout(t, 30*time.Second)
			report := func(tok string) func(b *token.Broker) (token.Token, error) {
				return func(b *token.Broker) (token.Token, error) { return b.Refresh(ctx, p.name, tok, anyone) }
			}

			first := oneToken(t, "cold Get", f.concurrently(200, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, p.name, anyone) }))
			if n := fake.Calls(p.path); n != 1 {
				t.Fatalf("cold Get: %d upstream calls, want 1", n)
			}
			if !fake.Valid(first.AccessToken) {
				t.Fatal("cold Get returned a token the upstream does not accept")
			}
			if left := time.Until(first.ExpireTime); left < 7100*time.Second || left > 7200*time.Second {
				t.Fatalf("expire_time %v from now, want about 2h", left)
			}

			// Reports of a token the upstream still accepts are checked
			// once and change nothing.
			calls := fake.Calls(p.path)
			got := oneToken(t, "reports of a valid token", f.concurrently(100, report(first.AccessToken)))
			if (got.AccessToken != first.AccessToken) != (checkMints == 1) {
				t.Fatalf("reports of a valid token got %v, want it back (OAuth2: one new token)", got)
			}
			if p.probe {
				if n := fake.Calls("/cgi-bin/getcallbackip"); n != 1 {
					t.Fatalf("%d checks of the reported token, want 1", n)
				}
				if n := fake.Calls(p.path) - calls; n > 1 || (n == 1) != (p.name == "stable") {
					t.Fatalf("%d token calls for reports of a valid token; want none (stable: one in normal mode)", n)
				}
			} else if n := fake.Calls(p.path) - calls; n != 1 {
				t.Fatalf("%d token calls for reports of a valid token; want one", n)
			}
			first = got

			// Once the upstream refuses it, one report replaces it.
			reject(fake, p, first.AccessToken)
			clock.Advance(time.Minute) // past the fleet's verdict on it
			second := oneToken(t, "reports of a refused token", f.concurrently(100, report(first.AccessToken)))
			if second.AccessToken == first.AccessToken || !fake.Valid(second.AccessToken) {
				t.Fatal("reports did not replace the refused token with a valid one")
			}
			if p.name == "stable" && fake.Forces(p.id) != 1 {
				t.Fatalf("%d force_refresh calls, want 1", fake.Forces(p.id))
			}
			if n := fake.Issued(p.id); n != 2+checkMints {
				t.Fatalf("%d tokens minted upstream, want %d", n, 2+checkMints)
			}

			third := oneToken(t, "reports of a stale token", f.concurrently(100, report(first.AccessToken)))
			if third != second {
				t.Fatalf("reports of a stale token returned %v, want the cached %v", third, second)
			}
			again := oneToken(t, "Get after the refresh", f.concurrently(50, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, p.name, anyone) }))
			if again != second {
				t.Fatalf("Get returned %v, want the cached %v", again, second)
			}
			if n, err := f.brokers[1].MintsOn(ctx, p.name, time.Now()); err != nil || n != int64(2+checkMints) {
				t.Fatalf("MintsOn = %d, %v; want %d", n, err, 2+checkMints)
			}
			if n := f.obs.minted(p.name, token.CauseDemand) + f.obs.minted(p.name, token.CauseInvalid); n != 2+checkMints {
				t.Fatalf("observer saw %d mints, want %d", n, 2+checkMints)
			}
			assertRedisClean(t, ctx, f.rdb)
			assertNoSecret(t, "logs", f.logs.String())
		})
	}
}

func TestProactiveRefreshRenewsBeforeExpiryOnOneReplica(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{ExpiresIn: 10 * time.Second})
	f := newFleet(t, srv, 3, apps(fake)[:1], token.Options{RefreshAhead: 5 * time.Second, Margin: 500 * time.Millisecond})
	f.refresh(t)
	ctx := timeout(t, time.Minute)

	t1, err := f.brokers[0].Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	// Callers keep asking on every replica until each serves the renewed
	// token; none of them may have to mint.
	renewed := map[int]token.Token{}
	for len(renewed) < len(f.brokers) {
		for i, b := range f.brokers {
			tok, err := b.Get(ctx, "classic", anyone)
			if err != nil {
				t.Fatal(err)
			}
			if tok != t1 {
				renewed[i] = tok
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t2 := renewed[0]
	for i, tok := range renewed {
		if tok != t2 {
			t.Fatalf("replica %d serves %v, replica 0 %v", i, tok, t2)
		}
	}
	if !t2.ExpireTime.After(t1.ExpireTime) {
		t.Fatalf("renewed token expires %v, not after %v", t2.ExpireTime, t1.ExpireTime)
	}
	// The first mint may be the callers' or a refresher's that saw their
	// demand; the renewal is a refresher's.
	if ahead, demand := f.obs.minted("classic", token.CauseAhead), f.obs.minted("classic", token.CauseDemand); ahead < 1 || ahead+demand != 2 {
		t.Fatalf("%d mints ahead of expiry and %d on demand, want 2 with the renewal ahead (callers never waited on the upstream)", ahead, demand)
	}
	if n := fake.Mints("wx-classic"); n != 2 {
		t.Fatalf("%d mints, want 2", n)
	}
}

func TestFailedRefreshKeepsServingTheLastGoodToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{ExpiresIn: 12 * time.Second})
	f := newFleet(t, srv, 2, apps(fake)[:1], token.Options{
		RefreshAhead: 8 * time.Second, Margin: 500 * time.Millisecond, UnavailableHold: 300 * time.Millisecond,
	})
	f.refresh(t)
	ctx := timeout(t, time.Minute)

	t1, err := f.brokers[0].Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	fake.FailNext(2, -1) // the first two renewals meet "system busy"
	for {
		tok, err := f.brokers[1].Get(ctx, "classic", anyone)
		if err != nil {
			t.Fatalf("Get while renewals fail: %v", err)
		}
		if tok != t1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := f.obs.failed("classic"); n != 2 {
		t.Fatalf("%d failed renewals, want 2", n)
	}
	if ahead, demand := f.obs.minted("classic", token.CauseAhead), f.obs.minted("classic", token.CauseDemand); ahead < 1 || ahead+demand != 2 {
		t.Fatalf("%d mints ahead and %d on demand, want 2 with the renewal ahead", ahead, demand)
	}
}

func TestCredentialsErrorIsNotHammered(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	fake.AddApp("wx-classic", "the-secret-an-operator-rotated") // lockd's secret is now wrong
	f := newFleet(t, srv, 3, apps(fake), token.Options{})
	ctx := timeout(t, 30*time.Second)

	var texts []string
	check := func(what string, err error, recorded bool) {
		t.Helper()
		var te *token.Error
		var we *wechat.Error
		switch {
		case !errors.Is(err, wechat.ErrCredentials) || !errors.As(err, &te) || !errors.As(err, &we):
			t.Fatalf("%s: %v, want a *token.Error matching wechat.ErrCredentials", what, err)
		case we.Errcode != 40125:
			t.Fatalf("%s: errcode %d, want 40125", what, we.Errcode)
		case te.RetryAfter <= 0 || te.RetryAfter > 72*time.Second:
			t.Fatalf("%s: RetryAfter %v, want about a minute", what, te.RetryAfter)
		case recorded && !te.Recorded:
			t.Fatalf("%s: not answered from the recorded failure", what)
		}
		texts = append(texts, err.Error())
	}
	for _, r := range f.concurrently(100, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, "classic", anyone) }) {
		check("stampede", r.err, false)
	}
	for i := range 20 {
		_, err := f.brokers[i%3].Get(ctx, "classic", anyone)
		check("later Get", err, true)
	}
	_, err := f.brokers[0].Refresh(ctx, "classic", "some-token", anyone)
	check("Refresh", err, true)
	if n := fake.Mints("wx-classic"); n != 1 {
		t.Fatalf("%d upstream calls, want 1 a minute", n)
	}
	if n := f.obs.failed("classic"); n != 1 {
		t.Fatalf("observer saw %d failures, want 1", n)
	}

	// The operator fixes the secret; once the recorded failure's hold
	// ends (a minute, cut short here), the next call mints.
	fake.AddApp("wx-classic", classicSecret)
	keys, err := f.rdb.Keys(ctx, classicKey+":failure:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("failure records %v, %v; want one", keys, err)
	}
	if err := f.rdb.HSet(ctx, keys[0], "until_ms", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.brokers[2].Get(ctx, "classic", anyone); err != nil {
		t.Fatal(err)
	}
	if n := fake.Mints("wx-classic"); n != 2 {
		t.Fatalf("%d upstream calls, want 2", n)
	}
	if n, _ := f.rdb.Exists(ctx, keys[0]).Result(); n != 0 {
		t.Fatal("the failure record outlived the success")
	}
	assertNoSecret(t, "errors", texts...)
	assertNoSecret(t, "logs", f.logs.String())
	assertRedisClean(t, ctx, f.rdb)
}

func TestForceRefreshStaysWithinWeChatsLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		opts     token.Options
		fake     wechatfake.Options
		forces   int           // successful force_refresh calls before the refused one
		errcode  int           // the upstream's errcode on the refusal, 0 when lockd refused
		maxRetry time.Duration // bound on RetryAfter
	}{
		{
			"a second force_refresh within 30 s is not sent",
			token.Options{},
			wechatfake.Options{ForceRefreshInterval: -1},
			1, 0, 30 * time.Second,
		},
		{
			"no more force_refresh calls than the daily budget are sent",
			token.Options{ForceRefreshInterval: -1, ForceRefreshPerDay: 2},
			wechatfake.Options{ForceRefreshInterval: -1},
			2, 0, 24 * time.Hour,
		},
		{
			"a force_refresh WeChat refuses is reported with its errcode",
			token.Options{ForceRefreshInterval: -1},
			wechatfake.Options{},
			1, 45011, time.Hour,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			fake := newFake(t, tt.fake)
			clock := newClock()
			tt.opts.Now = clock.Now
			f := newFleet(t, srv, 2, apps(fake), tt.opts)
			ctx := timeout(t, 30*time.Second)

			cur, err := f.brokers[0].Get(ctx, "stable", anyone)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tt.forces {
				fake.Reject(cur.AccessToken)
				clock.Advance(time.Minute)
				next, err := f.brokers[i%2].Refresh(ctx, "stable", cur.AccessToken, anyone)
				if err != nil || next.AccessToken == cur.AccessToken || !fake.Valid(next.AccessToken) {
					t.Fatalf("force_refresh %d: %v, %v", i+1, next, err)
				}
				cur = next
			}
			fake.Reject(cur.AccessToken)
			clock.Advance(time.Minute)
			_, err = f.brokers[1].Refresh(ctx, "stable", cur.AccessToken, anyone)
			var te *token.Error
			if !errors.Is(err, token.ErrRefreshLimited) || !errors.As(err, &te) {
				t.Fatalf("refused Refresh = %v, want ErrRefreshLimited", err)
			}
			var we *wechat.Error
			if tt.errcode != 0 && (!errors.As(err, &we) || we.Errcode != tt.errcode) {
				t.Fatalf("refused Refresh = %v, want errcode %d", err, tt.errcode)
			}
			if te.RetryAfter <= 0 || te.RetryAfter > tt.maxRetry {
				t.Fatalf("RetryAfter = %v, want in (0, %v]", te.RetryAfter, tt.maxRetry)
			}
			if got, err := f.brokers[0].Get(ctx, "stable", anyone); err != nil || got.AccessToken != cur.AccessToken {
				t.Fatalf("Get after the refusal = %v, %v; want the current token", got, err)
			}
			forces, err := f.rdb.Get(ctx, stableKey+":forces:"+token.Day(time.Now())).Int()
			want := tt.forces
			if tt.errcode != 0 {
				want++ // counted: it was sent
			}
			if err != nil || forces != want {
				t.Fatalf("force_refresh counter %d (%v), want %d", forces, err, want)
			}
			// Later reports while the limit lasts are answered from the
			// fleet's verdict, without calling the upstream.
			calls := fake.Calls("/cgi-bin/stable_token")
			for i := range 10 {
				if _, err := f.brokers[i%2].Refresh(ctx, "stable", cur.AccessToken, anyone); !errors.Is(err, token.ErrRefreshLimited) {
					t.Fatalf("report %d while limited = %v", i, err)
				}
			}
			if n := fake.Calls("/cgi-bin/stable_token") - calls; n != 0 {
				t.Fatalf("%d upstream calls for reports while limited, want 0", n)
			}
		})
	}
}

func TestEmbeddedStoreServesTheSameContract(t *testing.T) {
	t.Parallel()
	st, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	fake := newFake(t, wechatfake.Options{})
	fake.SetLatency(20 * time.Millisecond)
	f := &fleet{obs: newObserver()}
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: st.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		b, err := token.New(rdb, apps(fake), token.Options{Observer: f.obs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		f.brokers = append(f.brokers, b)
	}
	ctx := timeout(t, 30*time.Second)
	first := oneToken(t, "cold Get", f.concurrently(100, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, "stable", anyone) }))
	checked := oneToken(t, "reports of a valid token", f.concurrently(50, func(b *token.Broker) (token.Token, error) {
		return b.Refresh(ctx, "stable", first.AccessToken, anyone)
	}))
	if checked.AccessToken != first.AccessToken || fake.Calls("/cgi-bin/getcallbackip") != 1 {
		t.Fatalf("reports of a valid token: %v, %d checks", checked, fake.Calls("/cgi-bin/getcallbackip"))
	}
	time.Sleep(1100 * time.Millisecond) // past the fleet's first trust in the check
	fake.Reject(first.AccessToken)
	second := oneToken(t, "Refresh", f.concurrently(50, func(b *token.Broker) (token.Token, error) {
		return b.Refresh(ctx, "stable", first.AccessToken, anyone)
	}))
	if second == first || fake.Issued("wx-stable") != 2 || fake.Forces("wx-stable") != 1 {
		t.Fatalf("%d tokens issued, %d forced, tokens %v then %v", fake.Issued("wx-stable"), fake.Forces("wx-stable"), first, second)
	}
	ticket, err := f.brokers[1].Ticket(ctx, "wecom", wechat.TicketAgentConfig, anyone)
	if err != nil || !fake.TicketValid(ticket.AccessToken) {
		t.Fatalf("Ticket = %v, %v", ticket, err)
	}
}

func TestUnknownAppAndClosedBroker(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	b := newFleet(t, srv, 1, apps(fake), token.Options{}).brokers[0]
	ctx := timeout(t, 10*time.Second)
	if _, err := b.Get(ctx, "nope", anyone); !errors.Is(err, token.ErrUnknownApp) {
		t.Fatalf("Get of an unknown app = %v", err)
	}
	if _, err := b.Refresh(ctx, "nope", "x", anyone); !errors.Is(err, token.ErrUnknownApp) {
		t.Fatalf("Refresh of an unknown app = %v", err)
	}
	if _, err := b.Ticket(ctx, "nope", wechat.TicketJSAPI, anyone); !errors.Is(err, token.ErrUnknownApp) {
		t.Fatalf("Ticket of an unknown app = %v", err)
	}
	if _, err := b.Ticket(ctx, "classic", wechat.TicketAgentConfig, anyone); !errors.Is(err, token.ErrTicketType) {
		t.Fatalf("a WeCom ticket of a WeChat app = %v", err)
	}
	if got := strings.Join(b.Apps(), ","); got != "classic,stable,wecom" {
		t.Fatalf("Apps = %s", got)
	}
	_ = b.Close()
	if _, err := b.Get(ctx, "classic", anyone); !errors.Is(err, token.ErrClosed) {
		t.Fatalf("Get on a closed broker = %v", err)
	}
}

func TestNewRefusesBadApps(t *testing.T) {
	t.Parallel()
	good := wechat.Config{Provider: wechat.ProviderWeChat, AppID: "wx1", Secret: classicSecret}
	other := good
	other.Secret = stableSecret
	tests := []struct {
		name string
		apps []token.App
	}{
		{"an empty name is refused", []token.App{{Name: "", Upstream: good}}},
		{"a name with braces is refused", []token.App{{Name: "a{b}", Upstream: good}}},
		{"a name with a control character is refused", []token.App{{Name: "a\nb", Upstream: good}}},
		{"a name given twice is refused", []token.App{{Name: "a", Upstream: good}, {Name: "a", Upstream: good}}},
		{"an invalid upstream is refused", []token.App{{Name: "a", Upstream: wechat.Config{Provider: "x", AppID: "wx1", Secret: classicSecret}}}},
		{"two classic apps on one appid are refused", []token.App{{Name: "a", Upstream: good}, {Name: "b", Upstream: other}}},
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := token.New(rdb, tt.apps, token.Options{})
			if err == nil {
				_ = b.Close()
				t.Fatal("New accepted it")
			}
			assertNoSecret(t, "error", err.Error())
		})
	}
	stable := good
	stable.TokenAPI = wechat.TokenAPIStable
	b, err := token.New(rdb, []token.App{{Name: "a", Upstream: good}, {Name: "b", Upstream: stable}}, token.Options{})
	if err != nil {
		t.Fatalf("a classic and a stable app on one appid (WeChat keeps their tokens apart): %v", err)
	}
	_ = b.Close()
}
