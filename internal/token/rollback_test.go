package token_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// rollback is a way Redis comes back with older data than the fleet saw.
type rollback struct {
	name string
	do   func(t *testing.T, srv *redistest.Server, snapshot string)
}

var rollbacks = []rollback{
	{"a restart from an older RDB snapshot", func(t *testing.T, srv *redistest.Server, snapshot string) {
		srv.RestartFrom(t, snapshot)
	}},
	{"DEBUG RELOAD of the older RDB file, connections kept", func(t *testing.T, srv *redistest.Server, _ string) {
		if err := srv.Client(t).Do(context.Background(), "DEBUG", "RELOAD", "NOSAVE").Err(); err != nil {
			t.Fatal(err)
		}
	}},
}

// TestRollbackNeverServesAnOlderToken has Redis come back with the data of
// a snapshot taken before the fleet replaced a token the upstream then
// refused: no caller of any replica gets the older token again, no watcher
// is sent it after the newer one, and at most one mint replaces it.
func TestRollbackNeverServesAnOlderToken(t *testing.T) {
	t.Parallel()
	for _, p := range guaranteed() {
		for _, rb := range rollbacks {
			t.Run(p.name+": "+rb.name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t, redistest.WithArgs("--enable-debug-command", "yes"))
				fake := newFake(t, wechatfake.Options{})
				f := newFleet(t, srv, 3, []token.App{p.app(fake)}, token.Options{})
				ctx, cancel := context.WithCancel(timeout(t, 2*time.Minute))
				defer cancel()

				t1, err := f.brokers[0].Get(ctx, p.name, anyone)
				if err != nil {
					t.Fatal(err)
				}
				var watchers []*watcher
				for i := range 30 {
					watchers = append(watchers, watch(ctx, f.brokers[i%3], p.name, fake.ValidAt))
				}
				waitFor(t, "every watcher's first token", func() bool { return allReceived(watchers, 1) })
				snapshot := srv.Snapshot(t)

				// The upstream stops accepting t1; a report replaces it.
				p.reject(fake, t1.AccessToken)
				t2, err := f.brokers[1].Refresh(ctx, p.name, t1.AccessToken, anyone)
				if err != nil || t2.AccessToken == t1.AccessToken {
					t.Fatalf("Refresh = %v, %v; want a new token", t2, err)
				}
				waitFor(t, "every watcher's second token", func() bool { return allReceived(watchers, 2) })
				for _, b := range f.brokers {
					if got, err := b.Get(ctx, p.name, anyone); err != nil || got.AccessToken != t2.AccessToken {
						t.Fatalf("Get before the rollback = %v, %v", got, err)
					}
				}
				issued := p.issued(fake)

				rb.do(t, srv, snapshot)

				// Callers on every replica, for a while: never t1.
				var mu sync.Mutex
				old, failed := 0, 0
				deadline := time.Now().Add(3 * time.Second)
				var wg sync.WaitGroup
				for i := range 30 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(deadline) {
							c, cancelCall := context.WithTimeout(ctx, 10*time.Second)
							got, err := f.brokers[i%3].Get(c, p.name, anyone)
							cancelCall()
							mu.Lock()
							switch {
							case err != nil:
								failed++
							case got.AccessToken == t1.AccessToken:
								old++
							}
							mu.Unlock()
							time.Sleep(10 * time.Millisecond)
						}
					}()
				}
				wg.Wait()
				if old > 0 || failed > 0 {
					t.Fatalf("after the rollback %d calls got the older token and %d failed", old, failed)
				}
				cached, err := f.rdb.HGet(ctx, p.key(fake), "token").Result()
				if err != nil || cached == t1.AccessToken {
					t.Fatalf("the cache holds %q (%v) after the rollback: the older token", cached, err)
				}
				for i, w := range watchers {
					got, _ := w.received()
					for j := 1; j < len(got); j++ {
						if got[j].AccessToken == t1.AccessToken {
							t.Fatalf("watcher %d was sent the older token after the newer one: %v", i, got)
						}
					}
				}
				if n := p.issued(fake) - issued; n > 1 {
					t.Fatalf("%d tokens minted after the rollback, want at most one", n)
				}
			})
		}
	}
}

// allReceived reports whether every watcher received n tokens or more.
func allReceived(ws []*watcher, n int) bool {
	for _, w := range ws {
		if got, _ := w.received(); len(got) < n {
			return false
		}
	}
	return true
}

// TestRollbackNeverServesAnOlderTokenToAReplicaThatOnlyHeardOfTheNewer has
// one replica replace a token while another, which read only the older
// one, hears of the newer through the notice alone. Neither while Redis is
// away (from its memory) nor after Redis came back with the older data
// does that replica serve the older token, and at most one mint replaces
// it.
func TestRollbackNeverServesAnOlderTokenToAReplicaThatOnlyHeardOfTheNewer(t *testing.T) {
	t.Parallel()
	for _, p := range guaranteed() {
		for _, rb := range rollbacks {
			t.Run(p.name+": "+rb.name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t, redistest.WithArgs("--enable-debug-command", "yes"))
				fake := newFake(t, wechatfake.Options{})
				f := newFleet(t, srv, 2, []token.App{p.app(fake)}, token.Options{RedisTimeout: 200 * time.Millisecond})
				minter, listener := f.brokers[0], f.brokers[1]
				ctx := timeout(t, 2*time.Minute)

				t1, err := listener.Get(ctx, p.name, anyone)
				if err != nil {
					t.Fatal(err)
				}
				snapshot := srv.Snapshot(t)
				p.reject(fake, t1.AccessToken)
				t2, err := minter.Refresh(ctx, p.name, t1.AccessToken, anyone)
				if err != nil || t2.AccessToken == t1.AccessToken {
					t.Fatalf("Refresh = %v, %v; want a new token", t2, err)
				}
				ver, err := f.rdb.HGet(ctx, p.key(fake), "ver").Int64()
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the notice of the newer token", func() bool { return token.HeardVersion(listener, p.name, "") >= ver })
				issued := p.issued(fake)

				// Redis away: the replica remembers only the older token.
				srv.Freeze()
				c, cancelCall := context.WithTimeout(ctx, 2*time.Second)
				got, err := listener.Get(c, p.name, anyone)
				cancelCall()
				srv.Thaw()
				if err == nil && got.AccessToken == t1.AccessToken {
					t.Fatal("with Redis away, the replica served the older token from memory after hearing of a newer one")
				}

				rb.do(t, srv, snapshot)

				for range 20 {
					c, cancelCall := context.WithTimeout(ctx, 10*time.Second)
					got, err := listener.Get(c, p.name, anyone)
					cancelCall()
					if err != nil {
						t.Fatalf("Get after the rollback: %v", err)
					}
					if got.AccessToken == t1.AccessToken {
						t.Fatal("after the rollback the replica served the older token")
					}
					time.Sleep(10 * time.Millisecond)
				}
				if n := p.issued(fake) - issued; n > 1 {
					t.Fatalf("%d tokens minted after the rollback, want at most one", n)
				}
			})
		}
	}
}

// TestRollbackNeverServesAnOlderTicket has Redis come back with the data
// of a snapshot taken before one replica's refresher replaced a jsapi
// ticket that is still valid: no caller gets the older ticket again, on a
// replica that read the newer one or on one that only heard of it through
// the notice, and at most one fetch replaces it.
func TestRollbackNeverServesAnOlderTicket(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		if p.name == "stable" {
			continue // the same tickets as classic
		}
		for _, rb := range rollbacks {
			t.Run(p.name+": "+rb.name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t, redistest.WithArgs("--enable-debug-command", "yes"))
				// A ticket lives 16s; the refresher renews it 4 to 9s
				// in, when the upstream hands out a new one, and the
				// older one lives on.
				fake := newFake(t, wechatfake.Options{ExpiresIn: 16 * time.Second, TicketFreshWindow: 15 * time.Second})
				f := newFleet(t, srv, 3, []token.App{p.app(fake)}, token.Options{Margin: 2 * time.Second, RefreshAhead: 12 * time.Second})
				refresher, reader, listener := f.brokers[0], f.brokers[1], f.brokers[2]
				ctx := timeout(t, 2*time.Minute)
				key := p.key(fake) + ":ticket:jsapi"
				ticket := func(b *token.Broker) (token.Token, error) { return b.Ticket(ctx, p.name, "jsapi", anyone) }

				t1 := oneToken(t, "every replica's first ticket", f.concurrently(3, ticket))
				snapshot := srv.Snapshot(t)

				rctx, stop := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() {
					defer close(done)
					refresher.RunRefresher(rctx)
				}()
				waitFor(t, "the refresher's new ticket", func() bool {
					cached, _ := f.rdb.HGet(ctx, key, "token").Result()
					return cached != "" && cached != t1.AccessToken
				})
				stop()
				<-done
				t2, err := reader.Ticket(ctx, p.name, "jsapi", anyone)
				if err != nil || t2.AccessToken == t1.AccessToken {
					t.Fatalf("Ticket after the renewal = %v, %v; want the new ticket", t2, err)
				}
				ver, err := f.rdb.HGet(ctx, key, "ver").Int64()
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the notice of the new ticket", func() bool { return token.HeardVersion(listener, p.name, "jsapi") >= ver })
				issued := fake.TicketsIssued(p.id)

				rb.do(t, srv, snapshot)

				old := 0
				for range 20 {
					for _, r := range f.concurrently(6, ticket) {
						switch {
						case r.err != nil:
							t.Fatalf("Ticket after the rollback: %v", r.err)
						case r.tok.AccessToken == t1.AccessToken:
							old++
						}
					}
					time.Sleep(10 * time.Millisecond)
				}
				if old > 0 {
					t.Fatalf("after the rollback %d calls got the older ticket", old)
				}
				if cached, err := f.rdb.HGet(ctx, key, "token").Result(); err != nil || cached == t1.AccessToken {
					t.Fatalf("the cache holds %q (%v) after the rollback: the older ticket", cached, err)
				}
				if n := fake.TicketsIssued(p.id) - issued; n > 1 {
					t.Fatalf("%d tickets fetched after the rollback, want at most one", n)
				}
				// The older ticket was still valid throughout: serving
				// it was the only way to go back.
				if !fake.TicketValid(t1.AccessToken) {
					t.Fatal("the older ticket expired before the test could tell; the test ran too slowly")
				}
			})
		}
	}
}

// TestDeletingTheCachedTokenByHandForcesNoMint deletes the cached token's
// key, as an operator might to force a new token: a replica that read the
// token puts it back, as after a rollback, and nothing is minted. What
// forces a new token is a report of it (RefreshAccessToken) once the
// upstream refuses it; while the upstream accepts it, the report hands it
// back.
func TestDeletingTheCachedTokenByHandForcesNoMint(t *testing.T) {
	t.Parallel()
	fake, f, ctx, t1 := startClassic(t, 2, wechatfake.Options{}, token.Options{}, anyone)
	if got, err := f.brokers[1].Get(ctx, "classic", anyone); err != nil || got.AccessToken != t1.AccessToken {
		t.Fatalf("the second replica's Get = %v, %v", got, err)
	}
	if err := f.rdb.Del(ctx, classicKey).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := f.brokers[1].Get(ctx, "classic", anyone)
	if err != nil || got.AccessToken != t1.AccessToken {
		t.Fatalf("Get after the key was deleted = %v, %v; want the token put back", got, err)
	}
	if cached, err := f.rdb.HGet(ctx, classicKey, "token").Result(); err != nil || cached != t1.AccessToken {
		t.Fatalf("the cache holds %q (%v), want the token put back", cached, err)
	}
	if n := fake.Mints("wx-classic"); n != 1 {
		t.Fatalf("%d mints after the key was deleted, want 1", n)
	}

	if got, err := f.brokers[1].Refresh(ctx, "classic", t1.AccessToken, anyone); err != nil || got.AccessToken != t1.AccessToken {
		t.Fatalf("Refresh of a token the upstream accepts = %v, %v; want it handed back", got, err)
	}
	if n := fake.Mints("wx-classic"); n != 1 {
		t.Fatalf("%d mints after a report of a token the upstream accepts, want 1", n)
	}
	// The upstream now refuses it; another client reports it (the first
	// one's report was just checked, and is trusted for a while).
	fake.Reject(t1.AccessToken)
	t2, err := f.brokers[1].Refresh(ctx, "classic", t1.AccessToken, token.Caller{Name: "another"})
	if err != nil || t2.AccessToken == t1.AccessToken || !fake.Valid(t2.AccessToken) {
		t.Fatalf("Refresh of a refused token = %v, %v; want a new one", t2, err)
	}
	if got, err := f.brokers[0].Get(ctx, "classic", anyone); err != nil || got.AccessToken != t2.AccessToken {
		t.Fatalf("Get after the report = %v, %v; want the new token", got, err)
	}
}
