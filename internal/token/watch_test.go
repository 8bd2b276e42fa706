package token_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// watcher collects what a Watch sends, checking each token with the
// upstream as it arrives.
type watcher struct {
	mu      sync.Mutex
	tokens  []token.Token
	invalid int
	done    chan error
}

func watch(ctx context.Context, b *token.Broker, app string, valid func(string, time.Time) bool) *watcher {
	w := &watcher{done: make(chan error, 1)}
	go func() {
		w.done <- b.Watch(ctx, app, anyone, func(tok token.Token) error {
			at := time.Now()
			w.mu.Lock()
			defer w.mu.Unlock()
			if !valid(tok.AccessToken, at) {
				w.invalid++
			}
			w.tokens = append(w.tokens, tok)
			return nil
		})
	}()
	return w
}

func (w *watcher) received() ([]token.Token, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]token.Token(nil), w.tokens...), w.invalid
}

func TestWatchSendsEveryNewTokenAcrossReplicas(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, redistest.Start(t), 3, apps(fake), token.Options{})
	ctx, cancel := context.WithCancel(timeout(t, time.Minute))
	w := watch(ctx, f.brokers[0], "classic", fake.ValidAt)
	waitFor(t, "the current token", func() bool { got, _ := w.received(); return len(got) == 1 })
	got, _ := w.received()
	// Another replica replaces the token; the watch on the first hears of
	// it through Redis.
	fake.Reject(got[0].AccessToken)
	t2, err := f.brokers[2].Refresh(ctx, "classic", got[0].AccessToken, anyone)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new token", func() bool { got, _ := w.received(); return len(got) == 2 })
	got, invalid := w.received()
	if got[1] != t2 || invalid != 0 {
		t.Fatalf("watch received %v (%d refused), want %v second", got, invalid, t2)
	}
	cancel()
	if err := <-w.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch ended with %v", err)
	}
	if _, err := f.brokers[0].Get(timeout(t, 10*time.Second), "classic", anyone); err != nil {
		t.Fatal(err)
	}
	if err := f.brokers[1].Watch(context.Background(), "nope", anyone, func(token.Token) error { return nil }); !errors.Is(err, token.ErrUnknownApp) {
		t.Fatalf("Watch of an unknown app = %v", err)
	}
}

func TestWatchFollowsRenewalsWithOrWithoutRefreshers(t *testing.T) {
	t.Parallel()
	for _, refresher := range []bool{true, false} {
		for _, p := range []provider{providers[0], providers[2]} {
			t.Run(p.name+map[bool]string{true: " renewed by the refreshers", false: " renewed by the watch itself"}[refresher], func(t *testing.T) {
				t.Parallel()
				fake := newFake(t, wechatfake.Options{ExpiresIn: 3 * time.Second, Rounding: wechatfake.RoundUp})
				f := newFleet(t, redistest.Start(t), 3, apps(fake), token.Options{})
				if refresher {
					f.refresh(t)
				}
				ctx, cancel := context.WithCancel(timeout(t, time.Minute))
				defer cancel()
				watchers := []*watcher{watch(ctx, f.brokers[0], p.name, fake.ValidAt), watch(ctx, f.brokers[1], p.name, fake.ValidAt)}
				waitFor(t, "three tokens", func() bool { got, _ := watchers[1].received(); return len(got) >= 4 })
				for i, w := range watchers {
					got, invalid := w.received()
					if invalid != 0 {
						t.Fatalf("watch %d received %d tokens the upstream refused", i, invalid)
					}
					for j := 1; j < len(got); j++ {
						if got[j].AccessToken == got[j-1].AccessToken || got[j-1].ExpireTime.After(got[j].ExpireTime) {
							t.Fatalf("watch %d: token %d repeats or goes back: %v", i, j, got)
						}
					}
				}
				if calls, issued := fake.Calls(p.path), fake.Issued(p.id); calls != issued {
					t.Fatalf("%d upstream calls for %d tokens", calls, issued)
				}
			})
		}
	}
}
