package token_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// TestEveryProviderHoldsOffAfterARefusal has each provider's upstream
// refuse the fleet once, with its own shape of a quota error (HTTP 429) or
// of rejected credentials: callers of three replicas get the class's error
// with a retry delay, the provider's code, and no second upstream call
// while the hold lasts.
func TestEveryProviderHoldsOffAfterARefusal(t *testing.T) {
	t.Parallel()
	for _, p := range guaranteed() {
		for _, tt := range []struct {
			name    string
			setup   func(*wechatfake.Server, *token.App)
			class   error
			code    bool // the provider's code is in the error
			maxHold time.Duration
		}{
			{"quota", func(fake *wechatfake.Server, _ *token.App) { fake.FailHTTPNext(1, http.StatusTooManyRequests) },
				upstream.ErrQuota, false, 72 * time.Second},
			{"credentials", func(_ *wechatfake.Server, a *token.App) { a.Upstream.Secret = "not-" + p.secret },
				upstream.ErrCredentials, true, 72 * time.Second},
		} {
			t.Run(p.name+" "+tt.name, func(t *testing.T) {
				t.Parallel()
				fake := newFake(t, wechatfake.Options{})
				app := p.app(fake)
				tt.setup(fake, &app)
				// A generous Redis timeout: sixty callers at once on a loaded
				// machine must not pass for Redis being away.
				f := newFleet(t, redistest.Start(t), 3, []token.App{app}, token.Options{RedisTimeout: 10 * time.Second})
				ctx := timeout(t, 30*time.Second)
				for i, r := range f.concurrently(60, func(b *token.Broker) (token.Token, error) { return b.Get(ctx, p.name, anyone) }) {
					var te *token.Error
					var ue *upstream.Error
					switch {
					case !errors.Is(r.err, tt.class) || !errors.As(r.err, &te) || !errors.As(r.err, &ue):
						t.Fatalf("call %d: %v, want a *token.Error matching %v", i, r.err, tt.class)
					case te.RetryAfter <= 0 || te.RetryAfter > tt.maxHold:
						t.Fatalf("call %d: RetryAfter %v", i, te.RetryAfter)
					case tt.code && ue.CodeText() == "":
						t.Fatalf("call %d: %v carries no code of the provider", i, r.err)
					case ue.Provider != p.config("").Provider:
						t.Fatalf("call %d: provider %q in %v", i, ue.Provider, r.err)
					}
				}
				for i := range 10 {
					if _, err := f.brokers[i%3].Get(ctx, p.name, anyone); !errors.Is(err, tt.class) {
						t.Fatalf("later Get: %v", err)
					}
				}
				if n := fake.Calls(p.path); n != 1 {
					t.Fatalf("%d upstream calls, want 1 while the hold lasts", n)
				}
				assertNoSecret(t, "logs", f.logs.String())
			})
		}
	}
}

// TestEveryProviderWatchSendsEveryNewToken watches each provider's app on
// three replicas while another replaces the token: every watch gets the
// new one, in order, and never one the upstream refuses.
func TestEveryProviderWatchSendsEveryNewToken(t *testing.T) {
	t.Parallel()
	for _, p := range guaranteed() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, wechatfake.Options{})
			f := newFleet(t, redistest.Start(t), 3, []token.App{p.app(fake)}, token.Options{})
			ctx, cancel := context.WithCancel(timeout(t, time.Minute))
			defer cancel()
			var ws []*watcher
			for i := range 6 {
				ws = append(ws, watch(ctx, f.brokers[i%3], p.name, fake.ValidAt))
			}
			waitFor(t, "the first token", func() bool { return allReceived(ws, 1) })
			first, _ := ws[0].received()
			p.reject(fake, first[0].AccessToken)
			second, err := f.brokers[2].Refresh(ctx, p.name, first[0].AccessToken, anyone)
			if err != nil || second.AccessToken == first[0].AccessToken {
				t.Fatalf("Refresh = %v, %v", second, err)
			}
			waitFor(t, "the second token", func() bool { return allReceived(ws, 2) })
			for i, w := range ws {
				got, invalid := w.received()
				if len(got) != 2 || got[0].AccessToken != first[0].AccessToken || got[1].AccessToken != second.AccessToken || invalid != 0 {
					t.Fatalf("watch %d received %v (%d refused)", i, got, invalid)
				}
			}
		})
	}
}

// TestEveryProviderIsRenewedAheadThroughExpiries runs three replicas with
// their refreshers and callers through several lifetimes of short-lived
// tokens of the providers beyond WeChat: no caller fails or gets a token
// the upstream refuses, and each token costs one upstream call.
func TestEveryProviderIsRenewedAheadThroughExpiries(t *testing.T) {
	t.Parallel()
	const life, cycles = 4 * time.Second, 3
	for _, p := range []provider{others[0], others[2]} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			// Feishu's window scaled down with the lifetime: a new token in
			// the last half of it.
			fake := newFake(t, wechatfake.Options{ExpiresIn: life, FeishuFreshWindow: life / 2})
			f := newFleet(t, redistest.Start(t), 3, []token.App{p.app(fake)}, token.Options{})
			f.refresh(t)
			ctx := timeout(t, time.Minute)
			stop := make(chan struct{})
			time.AfterFunc(cycles*life+life/2, func() { close(stop) })
			var loop servedLoop
			loop.run(f, 6, stop, 0, fake.ValidAt, func(b *token.Broker) (token.Token, error) {
				c, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				return b.Get(c, p.name, anyone)
			})
			calls, issued := fake.Calls(p.path), p.issued(fake)
			t.Logf("%d Gets, %d failed, %d refused; %d upstream calls for %d tokens", loop.calls.Load(), loop.failed.Load(), loop.refused.Load(), calls, issued)
			if loop.failed.Load()+loop.refused.Load() > 0 {
				t.Fatalf("callers not served (first error: %v)", loop.firstErr.Load())
			}
			if issued < cycles || calls > issued {
				t.Fatal(fmt.Sprintf("%d upstream calls for %d tokens over %d lifetimes, want one per token", calls, issued, cycles))
			}
		})
	}
}

func TestProvidersWithoutTicketsSaySo(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	var all []token.App
	for _, p := range others {
		all = append(all, p.app(fake))
	}
	f := newFleet(t, redistest.Start(t), 1, all, token.Options{})
	for _, p := range others {
		_, err := f.brokers[0].Ticket(timeout(t, 10*time.Second), p.name, "jsapi", anyone)
		if !errors.Is(err, token.ErrTicketType) || !strings.Contains(err.Error(), p.name+" apps have no tickets") {
			t.Fatalf("%s: Ticket = %v", p.name, err)
		}
		if kinds, err := f.brokers[0].TicketTypes(p.name); err != nil || len(kinds) != 0 {
			t.Fatalf("%s: TicketTypes = %v, %v", p.name, kinds, err)
		}
	}
}
