package token_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/token"
	"github.com/lockd/lockd/internal/wechat"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

func TestAReplicaWithAnOldSecretDoesNotBlockTheOthers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	stale := apps(fake)[:1]
	stale[0].Upstream.Secret = "an-old-secret"
	bad := newFleet(t, srv, 1, stale, token.Options{}).brokers[0]
	good := newFleet(t, srv, 2, apps(fake)[:1], token.Options{}).brokers
	ctx := timeout(t, time.Minute)
	if _, err := bad.Get(ctx, "classic", anyone); !errors.Is(err, wechat.ErrCredentials) {
		t.Fatalf("replica with the old secret: %v", err)
	}
	tok, err := good[0].Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatalf("replica with the right secret: %v", err)
	}
	if got, err := good[1].Get(ctx, "classic", anyone); err != nil || got != tok {
		t.Fatalf("another replica with the right secret: %v, %v", got, err)
	}
	// The replica with the old secret never serves the token the others
	// minted: it does not prove it knows the account.
	if got, err := bad.Get(ctx, "classic", anyone); !errors.Is(err, wechat.ErrCredentials) {
		t.Fatalf("the replica with the old secret, once a token is cached: %v, %v", got, err)
	}
}

// failAfterHold calls Get until one calls the upstream again and fails,
// and returns the hold that call's error announces.
func failAfterHold(t *testing.T, ctx context.Context, b *token.Broker, fake *wechatfake.Server) time.Duration {
	t.Helper()
	calls := fake.Calls("/cgi-bin/token")
	for {
		_, err := b.Get(ctx, "classic", anyone)
		var te *token.Error
		if !errors.As(err, &te) {
			t.Fatalf("Get = %v, want a *token.Error", err)
		}
		if fake.Calls("/cgi-bin/token") > calls {
			if te.Recorded {
				t.Fatalf("the call that met the upstream got a recorded failure: %v", err)
			}
			return te.RetryAfter
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestErrorsThatDoNotClearBackOff(t *testing.T) {
	t.Parallel()
	t.Run("an unknown errcode is retried ever more rarely", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t, wechatfake.Options{})
		f := newFleet(t, redistest.Start(t), 1, apps(fake)[:1], token.Options{UnavailableHold: 100 * time.Millisecond})
		ctx := timeout(t, time.Minute)
		fake.FailNext(100, 50002)
		var holds []time.Duration
		for range 4 {
			holds = append(holds, failAfterHold(t, ctx, f.brokers[0], fake))
		}
		t.Logf("holds after 50002 in a row: %v", holds)
		for i := 1; i < len(holds); i++ {
			if holds[i] < holds[i-1]*3/2 {
				t.Fatalf("holds %v do not back off", holds)
			}
		}
	})
	t.Run("a spent daily quota waits for the day to turn, probing rarely", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t, wechatfake.Options{})
		f := newFleet(t, redistest.Start(t), 1, apps(fake)[:1], token.Options{})
		ctx := timeout(t, time.Minute)
		fake.FailNext(1, 45009)
		_, err := f.brokers[0].Get(ctx, "classic", anyone)
		var te *token.Error
		if !errors.Is(err, wechat.ErrQuota) || !errors.As(err, &te) {
			t.Fatalf("Get = %v", err)
		}
		want := min(time.Until(nextBeijingMidnight()), time.Hour)
		if te.RetryAfter < want-5*time.Second || te.RetryAfter > want+time.Minute {
			t.Fatalf("RetryAfter %v, want %v (the quota's reset or the hourly probe)", te.RetryAfter, want)
		}
	})
}

func nextBeijingMidnight() time.Time {
	cst := time.FixedZone("CST", 8*3600)
	y, m, d := time.Now().In(cst).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, cst)
}

func TestAMinterThatDiesHoldsTheOthersUpBriefly(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	rdbA := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	a, err := token.New(rdbA, apps(fake), token.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newFleet(t, srv, 1, apps(fake), token.Options{}).brokers[0]
	fake.SetLatency(30 * time.Second)
	go func() { _, _ = a.Get(context.Background(), "classic", anyone) }()
	waitFor(t, "A's mint", func() bool { return fake.Calls("/cgi-bin/token") == 1 })
	_ = rdbA.Close() // A dies: its lock is no longer kept alive
	fake.SetLatency(0)
	// The lock's lease is a few seconds: a deadline well past it lets the
	// other replica mint once it ran out.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Get(ctx, "classic", anyone); err != nil {
		t.Fatalf("another replica, after the minter died: %v", err)
	}
}

func TestCloseLetsTheMintUnderWayStoreAndRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, srv, 2, apps(fake), token.Options{})
	fake.SetLatency(time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The caller waits on this replica's own mint: it gets its token.
		if _, err := f.brokers[0].Get(context.Background(), "classic", anyone); err != nil && !errors.Is(err, token.ErrClosed) {
			t.Errorf("a caller waiting when the broker closed got %v", err)
		}
	}()
	waitFor(t, "the mint", func() bool { return fake.Calls("/cgi-bin/token") == 1 })
	_ = f.brokers[0].Close()
	ctx := timeout(t, 10*time.Second)
	if n, _ := f.rdb.Exists(ctx, classicKey).Result(); n != 1 {
		t.Fatal("Close returned before the mint under way was stored")
	}
	locks := redislock.New(f.rdb, redislock.Options{Prefix: "lockd:token:lock"})
	defer locks.Close()
	if res, err := locks.Acquire(ctx, redislock.Request{Key: classicID, Mode: redislock.Write, TTL: time.Second}); err != nil || !res.Acquired {
		t.Fatalf("Close returned with the lock still held: %v, %v", res, err)
	}
	wg.Wait()
	if _, err := f.brokers[1].Get(ctx, "classic", anyone); err != nil || fake.Mints("wx-classic") != 1 {
		t.Fatalf("another replica: %v; %d mints, want the stored one", err, fake.Mints("wx-classic"))
	}
}

// stateObserver records the last state the broker reported per app.
type stateObserver struct {
	*observer
	mu         sync.Mutex
	fromMemory map[string]bool
	expire     map[string]time.Time
	mints      map[string]int64
	failures   map[string]int
}

func (o *stateObserver) TokenState(app string, expire time.Time, mintsToday int64, failures int, fromMemory bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fromMemory[app], o.expire[app] = fromMemory, expire
	if mintsToday >= 0 {
		o.mints[app] = mintsToday
	}
	if failures >= 0 {
		o.failures[app] = failures
	}
}

func (o *stateObserver) serving(app string) (bool, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fromMemory[app], o.expire[app]
}

func TestARedisBlipServesTheLastGoodTokenFromMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fake := newFake(t, wechatfake.Options{})
	obs := &stateObserver{observer: newObserver(), fromMemory: map[string]bool{}, expire: map[string]time.Time{},
		mints: map[string]int64{}, failures: map[string]int{}}
	b, err := token.New(srv.Client(t), apps(fake)[:1], token.Options{Observer: obs, RedisTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := timeout(t, time.Minute)
	t1, err := b.Get(ctx, "classic", anyone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "classic", anyone); err != nil { // read: remembered
		t.Fatal(err)
	}
	if mem, expire := obs.serving("classic"); mem || time.Until(expire) < time.Hour || obs.mints["classic"] != 1 {
		t.Fatalf("state before the blip: from memory %v, expiry in %v, %d mints today", mem, time.Until(expire), obs.mints["classic"])
	}

	for _, blip := range []struct {
		name       string
		start, end func()
	}{
		{"Redis frozen", srv.Freeze, srv.Thaw},
		{"Redis down", srv.Stop, func() { srv.Restart(t) }}, // restarts empty: last
	} {
		blip.start()
		got, err := b.Get(ctx, "classic", anyone)
		if err != nil || got.AccessToken != t1.AccessToken {
			blip.end()
			t.Fatalf("%s: Get = %v, %v; want the last good token", blip.name, got, err)
		}
		if mem, _ := obs.serving("classic"); !mem {
			blip.end()
			t.Fatalf("%s: the observer was not told the token comes from memory", blip.name)
		}
		// A report of that very token cannot be acted on without Redis.
		if _, err := b.Refresh(ctx, "classic", t1.AccessToken, anyone); err == nil {
			blip.end()
			t.Fatalf("%s: a report of the remembered token was answered with it", blip.name)
		}
		blip.end()
		waitFor(t, "Redis to answer again", func() bool {
			_, err := b.Get(ctx, "classic", anyone)
			mem, _ := obs.serving("classic")
			return err == nil && !mem
		})
	}
	// Redis came back empty: the replica put back the token it knew,
	// rather than minting (nothing is minted while Redis is away either).
	if n := fake.Mints("wx-classic"); n != 1 {
		t.Fatalf("%d mints, want 1: the token the replica knew was not put back", n)
	}
	if cached, err := srv.Client(t).HGet(ctx, classicKey, "token").Result(); err != nil || cached != t1.AccessToken {
		t.Fatalf("cached %q, %v once Redis came back empty; want the token put back", cached, err)
	}
	if n, err := b.MintsOn(ctx, "classic", time.Now()); err != nil || n != 1 {
		t.Fatalf("MintsOn = %d, %v once Redis came back empty; want the count put back too", n, err)
	}
}

// TestATimedOutMintIsCountedAsAPossibleMint has the upstream mint but lose
// its answer past lockd's timeout: the day's mint count includes it, since
// the quota was spent all the same, and the observer is told of a possible
// mint.
func TestATimedOutMintIsCountedAsAPossibleMint(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	f := newFleet(t, redistest.Start(t), 1, apps(fake)[:1], token.Options{MintTimeout: 300 * time.Millisecond, UnavailableHold: 50 * time.Millisecond})
	ctx := timeout(t, time.Minute)
	b := f.brokers[0]
	fake.SetReplyDelay(2 * time.Second)
	if tok, err := b.Get(ctx, "classic", anyone); err == nil {
		t.Fatalf("Get = %v with the answer lost", tok)
	}
	waitFor(t, "the upstream's mint", func() bool { return fake.Issued("wx-classic") == 1 })
	fake.SetReplyDelay(0)
	var tok token.Token
	waitFor(t, "a token once the hold ends", func() bool {
		var err error
		tok, err = b.Get(ctx, "classic", anyone)
		return err == nil
	})
	if !fake.Valid(tok.AccessToken) || fake.Issued("wx-classic") != 2 {
		t.Fatalf("got %v; %d tokens issued, want 2", tok, fake.Issued("wx-classic"))
	}
	if n, err := b.MintsOn(ctx, "classic", time.Now()); err != nil || n != 2 {
		t.Fatalf("MintsOn = %d, %v; want 2: the upstream minted twice", n, err)
	}
	if n := f.obs.possiblyMinted("classic"); n != 1 {
		t.Fatalf("the observer was told of %d possible mints, want 1", n)
	}
	if e, n := f.obs.fetched("classic", "access_token", "error"), f.obs.fetched("classic", "access_token", "new"); e != 1 || n != 1 {
		t.Fatalf("fetches counted: %d errors and %d new, want 1 and 1", e, n)
	}
}
