package token_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/dingtalk"
	"github.com/lockd/lockd/internal/feishu"
	"github.com/lockd/lockd/internal/oauth2"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// servedLoop has workers call get until stop closes and counts the calls
// that failed, returned a token the upstream refused, or returned one with
// less than margin of life left (the caller would have waited on a mint).
type servedLoop struct {
	calls, failed, refused, short atomic.Int64
	firstErr                      atomic.Value
}

func (l *servedLoop) run(f *fleet, workers int, stop <-chan struct{}, margin time.Duration, valid func(string, time.Time) bool, get func(*token.Broker) (token.Token, error)) {
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
				case !valid(tok.AccessToken, at):
					l.refused.Add(1)
				case tok.ExpireTime.Sub(at) < margin:
					l.short.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// TestUpstreamsRenewingTheSameTokenAreRefreshedAhead runs two replicas with
// their refreshers against upstreams that hand out the same token with its
// life renewed (DingTalk does; WeCom behind a proxy that renews), while
// another system sharing the secret asks too and so keeps renewing it:
// callers are all served, and the upstream is called about once per
// lifetime, not in a loop. Once the fleet knows the upstream renews (for
// DingTalk from the start, for the proxy from its first renewal), the
// refreshers renew the token ahead and no caller waits on the upstream.
func TestUpstreamsRenewingTheSameTokenAreRefreshedAhead(t *testing.T) {
	t.Parallel()
	const life, cycles = 6 * time.Second, 3
	for _, tt := range []struct {
		p provider
		// waits is how many times callers ask the upstream: the first
		// Get, and for an upstream not known to renew, the first expiry.
		waits int
	}{{providers[2], 2}, {others[1], 1}} {
		p := tt.p
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, wechatfake.Options{ExpiresIn: life, Renew: true})
			f := newFleet(t, redistest.Start(t), 2, []token.App{p.app(fake)}, token.Options{})
			f.refresh(t)
			ctx := timeout(t, time.Minute)
			stop := make(chan struct{})
			time.AfterFunc(cycles*life, func() { close(stop) })
			otherSystem := upstreamClient(t, p.config(fake.URL()))
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(life / 3):
					}
					_, _ = otherSystem.Mint(ctx, false)
				}
			}()
			var loop servedLoop
			loop.run(f, 4, stop, life/10, fake.ValidAt, func(b *token.Broker) (token.Token, error) {
				c, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				return b.Get(c, p.name, anyone)
			})
			calls := fake.Calls(p.path) - int(cycles*life/(life/3))
			demand := strings.Count(f.logs.String(), `"msg":"token: upstream answered","app":"`+p.name+`","cause":"demand"`)
			t.Logf("%d Gets over %v: %d failed, %d refused, %d with less than the margin left; %d upstream calls (%d for callers) for %d tokens",
				loop.calls.Load(), cycles*life, loop.failed.Load(), loop.refused.Load(), loop.short.Load(), calls, demand, p.issued(fake))
			if loop.failed.Load()+loop.refused.Load() > 0 {
				t.Fatalf("callers not served (first error: %v)", loop.firstErr.Load())
			}
			if calls > 2*cycles+2 {
				t.Fatalf("%d upstream calls in %d lifetimes, want about one per lifetime", calls, cycles)
			}
			if demand > tt.waits {
				t.Fatalf("callers asked the upstream %d times, want %d: the refreshers did not renew the token ahead\n%s", demand, tt.waits, f.logs)
			}
		})
	}
}

// TestFetchesArePacedWhateverTheUpstreamAnswers runs callers against an
// upstream that answers every call with a new token in its last second
// (expires_in 0), which nobody can use: the fleet asks it at a steady pace,
// not in a loop.
func TestFetchesArePacedWhateverTheUpstreamAnswers(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"dying-%d","expires_in":0}`, n)
	}))
	t.Cleanup(up.Close)
	app := token.App{Name: "dying", Upstream: wechat.Config{Provider: wechat.ProviderWeChat, APIBase: up.URL, AppID: "wx-dying", Secret: classicSecret}}
	f := newFleet(t, redistest.Start(t), 2, []token.App{app}, token.Options{})
	ctx := timeout(t, time.Minute)
	const span = 3 * time.Second
	deadline := time.Now().Add(span)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_, _ = f.brokers[i%2].Get(c, "dying", anyone)
				cancel()
			}
		}()
	}
	wg.Wait()
	n := calls.Load()
	t.Logf("%d upstream calls in %v", n, span)
	if n > int64(span/time.Second)+3 {
		t.Fatalf("%d upstream calls in %v, want about one a second", n, span)
	}
}

// upstreamClient is a client of cfg's upstream of its own: another system
// sharing the app's secret.
func upstreamClient(t *testing.T, cfg wechat.Config) upstream.Client {
	t.Helper()
	var c upstream.Client
	var err error
	switch cfg.Provider {
	case upstream.WeChat, upstream.WeCom:
		c, err = wechat.NewClient(cfg, nil)
	case upstream.Feishu:
		c, err = feishu.NewClient(cfg, nil)
	case upstream.DingTalk:
		c, err = dingtalk.NewClient(cfg, nil)
	case upstream.OAuth2:
		c, err = oauth2.NewClient(cfg, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}
