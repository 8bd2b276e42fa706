package token_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// ticketPaths names each provider's ticket endpoints.
var ticketPaths = map[string]map[wechat.TicketType]string{
	"classic": {wechat.TicketJSAPI: "/cgi-bin/ticket/getticket", wechat.TicketWXCard: "/cgi-bin/ticket/getticket"},
	"stable":  {wechat.TicketJSAPI: "/cgi-bin/ticket/getticket", wechat.TicketWXCard: "/cgi-bin/ticket/getticket"},
	"wecom":   {wechat.TicketJSAPI: "/cgi-bin/get_jsapi_ticket", wechat.TicketAgentConfig: "/cgi-bin/ticket/get"},
}

// callLoop has workers call get, spread over the fleet, until stop closes,
// and counts the calls that failed or returned a token the upstream did
// not accept when the call returned.
type callLoop struct {
	calls, failed, expired atomic.Int64
	firstErr               atomic.Value
}

func (l *callLoop) run(f *fleet, workers int, stop <-chan struct{}, valid func(string, time.Time) bool, get func(b *token.Broker) (token.Token, error)) {
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tok, err := get(f.brokers[i%len(f.brokers)])
				at := time.Now()
				l.calls.Add(1)
				switch {
				case err != nil:
					l.failed.Add(1)
					l.firstErr.CompareAndSwap(nil, err.Error())
				case !valid(tok.AccessToken, at) || !at.Before(tok.ExpireTime):
					l.expired.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// TestExpiryCyclesCostOneCallAndNoErrors runs three replicas with their
// refreshers and callers asking without pause through several expiries of
// short-lived tokens (or tickets): callers never get an error or a value
// the upstream refuses, and each value costs one upstream call.
func TestExpiryCyclesCostOneCallAndNoErrors(t *testing.T) {
	t.Parallel()
	const life, cycles = 3 * time.Second, 4
	tests := []struct {
		name     string
		app      int               // index in providers
		ticket   wechat.TicketType // the value asked for; "" for the token
		fake     wechatfake.Options
		perToken int // upstream calls per token minted
	}{
		{"WeCom hands out the same token until it expires, then expires_in 0 in its last second", 2, "",
			wechatfake.Options{Rounding: wechatfake.RoundDown}, 1},
		{"WeCom rounding the life left up", 2, "", wechatfake.Options{Rounding: wechatfake.RoundUp}, 1},
		{"classic mints a new token on every call", 0, "", wechatfake.Options{}, 1},
		// A stable API that never hands out a successor early: the
		// renewal ahead gets the same token, the next one a new token.
		{"stable in normal mode without a successor before expiry", 1, "",
			wechatfake.Options{StableLastWindow: -1, Rounding: wechatfake.RoundUp}, 2},
		// Whether a ticket asked for again is a new one differs by
		// provider: lockd tries ahead of expiry, and once more after it
		// when the upstream handed out the same one.
		{"WeCom's agent_config ticket, fetched with a token of the same lifetime", 2, wechat.TicketAgentConfig,
			wechatfake.Options{Rounding: wechatfake.RoundUp}, 2},
		{"WeChat's jsapi ticket", 0, wechat.TicketJSAPI, wechatfake.Options{}, 2},
		{"WeChat's jsapi ticket from an upstream handing out a new one in its last seconds", 0, wechat.TicketJSAPI,
			wechatfake.Options{TicketFreshWindow: 1500 * time.Millisecond}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := providers[tt.app]
			tt.fake.ExpiresIn = life
			fake := newFake(t, tt.fake)
			f := newFleet(t, redistest.Start(t), 3, apps(fake)[tt.app:tt.app+1], token.Options{})
			f.refresh(t)
			ctx := timeout(t, time.Minute)
			stop := make(chan struct{})
			time.AfterFunc(cycles*life+life/2, func() { close(stop) })
			var loop callLoop
			valid, path, issuedOf := fake.ValidAt, p.path, fake.Issued
			if tt.ticket != "" {
				valid, path, issuedOf = fake.TicketValidAt, ticketPaths[p.name][tt.ticket], fake.TicketsIssued
			}
			loop.run(f, 6, stop, valid, func(b *token.Broker) (token.Token, error) {
				c, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if tt.ticket != "" {
					return b.Ticket(c, p.name, tt.ticket, anyone)
				}
				return b.Get(c, p.name, anyone)
			})
			calls, issued := fake.Calls(path), issuedOf(p.id)
			t.Logf("%d Gets, %d failed, %d refused; %d upstream calls for %d tokens", loop.calls.Load(), loop.failed.Load(), loop.expired.Load(), calls, issued)
			if loop.failed.Load() > 0 || loop.expired.Load() > 0 {
				t.Fatalf("%d calls failed (first: %v) and %d returned a token the upstream refuses", loop.failed.Load(), loop.firstErr.Load(), loop.expired.Load())
			}
			if issued < cycles {
				t.Fatalf("%d tokens over %d lifetimes", issued, cycles)
			}
			if calls > tt.perToken*issued {
				t.Fatalf("%d upstream calls for %d tokens, want %d per token\n%s", calls, issued, tt.perToken, f.logs)
			}
		})
	}
}

func TestATokenInItsLastSecondIsNoError(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{ExpiresIn: 2 * time.Second})
	// Another system fetched the WeCom token a moment ago; lockd first asks
	// in its last second, and WeCom answers expires_in 0.
	resp, err := http.Get(fake.URL() + "/cgi-bin/gettoken?" + url.Values{"corpid": {"ww-corp"}, "corpsecret": {wecomSecret}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	time.Sleep(1200 * time.Millisecond)
	f := newFleet(t, redistest.Start(t), 2, apps(fake)[2:], token.Options{})
	ctx := timeout(t, 30*time.Second)
	tok := oneToken(t, "Get in the token's last second", f.concurrently(20, func(b *token.Broker) (token.Token, error) {
		return b.Get(ctx, "wecom", anyone)
	}))
	if !fake.Valid(tok.AccessToken) || fake.Issued("ww-corp") != 2 {
		t.Fatalf("got a token the upstream refuses, or no new one (%d issued)", fake.Issued("ww-corp"))
	}
	if n := fake.Calls("/cgi-bin/gettoken"); n > 3 {
		t.Fatalf("%d gettoken calls, want lockd's two at most (one answered expires_in 0)", n)
	}
}

func TestAFailedMintNeverReturnsAnExpiredToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{ExpiresIn: 3 * time.Second})
	f := newFleet(t, srv, 1, apps(fake)[:1], token.Options{Margin: time.Second, MintTimeout: 1500 * time.Millisecond})
	ctx := timeout(t, time.Minute)
	t1, err := f.brokers[0].Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the token's last second", func() bool { return time.Until(t1.ExpireTime) < 900*time.Millisecond })
	fake.SetLatency(5 * time.Second) // the mint times out after 1.5 s, past the token's expiry
	tok, err := f.brokers[0].Get(ctx, "classic", anyone)
	if err == nil {
		t.Fatalf("Get returned %v, %v past its expiry", tok, time.Since(tok.ExpireTime))
	}
}

// TestRedisClockSteppingBack writes the app's cache as Redis holds it after
// its clock stepped back an hour: written by a minter whose lock fencing
// token (Redis's microsecond clock) is an hour ahead of any new one.
func TestRedisClockSteppingBack(t *testing.T) {
	t.Parallel()
	t.Run("a renewal is stored, not refused as older than the cached token", func(t *testing.T) {
		t.Parallel()
		fake, f, ctx, t1 := startClassic(t, 1, wechatfake.Options{}, token.Options{}, anyone)
		now, err := f.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		exp := now.Add(20 * time.Second) // within the margin: due for renewal
		f.rdb.HSet(ctx, classicKey, "expire_ms", exp.UnixMilli(), "hi_ms", exp.UnixMilli(),
			"fence", fmt.Sprint(now.Add(time.Hour).UnixMicro()))
		for range 3 {
			if _, err := f.brokers[0].Get(ctx, "classic", anyone); err != nil {
				t.Fatal(err)
			}
		}
		cached, _ := f.rdb.HGet(ctx, classicKey, "token").Result()
		if n := fake.Mints("wx-classic"); n != 2 || cached == t1.AccessToken {
			t.Fatalf("%d mints; the cache holds the old token: %v", n, cached == t1.AccessToken)
		}
	})
	t.Run("a token read before does not gain life", func(t *testing.T) {
		t.Parallel()
		_, f, ctx, t1 := startClassic(t, 1, wechatfake.Options{}, token.Options{}, anyone)
		// The same stored token (same generation) now seems to expire an
		// hour later.
		later := t1.ExpireTime.Add(time.Hour).UnixMilli()
		f.rdb.HSet(ctx, classicKey, "expire_ms", later, "hi_ms", later)
		t2, err := f.brokers[0].Get(ctx, "classic", anyone)
		if err != nil || t2.AccessToken != t1.AccessToken {
			t.Fatal(t2, err)
		}
		if t2.ExpireTime.After(t1.ExpireTime.Add(time.Second)) {
			t.Fatalf("expiry moved from %v to %v", t1.ExpireTime, t2.ExpireTime)
		}
	})
	t.Run("a token written in Redis's future is renewed at once", func(t *testing.T) {
		t.Parallel()
		fake, f, ctx, t1 := startClassic(t, 2, wechatfake.Options{}, token.Options{}, anyone)
		now, _ := f.rdb.Time(ctx).Result()
		f.rdb.HSet(ctx, classicKey, "written_ms", now.Add(time.Hour).UnixMilli())
		f.refresh(t)
		waitFor(t, "the renewal", func() bool {
			cached, _ := f.rdb.HGet(ctx, classicKey, "token").Result()
			return cached != t1.AccessToken
		})
		if n := fake.Mints("wx-classic"); n != 2 {
			t.Fatalf("%d mints, want 2", n)
		}
	})
}
