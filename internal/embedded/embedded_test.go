package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartListensOnLoopback(t *testing.T) {
	t.Parallel()
	s := startStore(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Addr() = %q, want 127.0.0.1:port", s.Addr())
	}
	if err := newClient(t, s.Addr()).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

func TestCloseStopsTheClockAndTheServer(t *testing.T) {
	t.Parallel()
	s, err := Start()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	// A connection made before Close must be closed by it. (Dialing the
	// address afterwards proves nothing: another test may have been given
	// the freed port.)
	conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-s.done:
	default:
		t.Fatal("the clock goroutine still runs after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("a client connection still reads after Close")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("a client connection stays open after Close")
	}
}

func TestKeysExpireWithTheRealClock(t *testing.T) {
	t.Parallel()
	c := newClient(t, startStore(t).Addr())
	ctx := context.Background()

	before := serverTime(t, c)
	start := time.Now()
	if err := c.Set(ctx, "k", "v", 200*time.Millisecond).Err(); err != nil {
		t.Fatalf("SET PX 200: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS right after SET = %d, %v; want 1", n, err)
	}
	eventually(t, 5*time.Second, "key expired", func() bool {
		n, err := c.Exists(ctx, "k").Result()
		return err == nil && n == 0
	})
	// Not early: the store's clock never runs ahead of the host's, and it
	// read at most before when the SET ran.
	if early := time.UnixMicro(before + 200_000).Sub(time.Now()); early > 0 {
		t.Errorf("key expired %v before its 200ms TTL ran out", early)
	}
	t.Logf("SET PX 200 expired after %v of real time", time.Since(start))
}

func TestPTTLCountsDownWithTIME(t *testing.T) {
	t.Parallel()
	c := newClient(t, startStore(t).Addr())
	ctx := context.Background()
	set := redis.NewScript(`
		redis.call('SET', KEYS[1], 'v')
		redis.call('PEXPIRE', KEYS[1], 1000)
		local t = redis.call('TIME')
		return t[1] * 1000000 + t[2]`)
	read := redis.NewScript(`
		local t = redis.call('TIME')
		return {redis.call('PTTL', KEYS[1]), t[1] * 1000000 + t[2]}`)

	t0, err := set.Run(ctx, c, []string{"k"}).Int64()
	if err != nil {
		t.Fatalf("set script: %v", err)
	}
	calls := int64(1)
	eventually(t, 5*time.Second, "PTTL down to 900ms", func() bool {
		r, err := read.Run(ctx, c, []string{"k"}).Int64Slice()
		if err != nil {
			t.Fatalf("read script: %v", err)
		}
		calls++
		fallen, elapsed := (1000-r[0])*1000, r[1]-t0 // µs
		// PTTL truncates to whole milliseconds; TIME runs ahead of the
		// expiry clock by a microsecond a call at most.
		if fallen+calls < elapsed || fallen > elapsed+1000 {
			t.Fatalf("PTTL fell by %dµs while TIME moved %dµs", fallen, elapsed)
		}
		return r[0] <= 900
	})
}

func TestTimeFollowsTheRealClockAndNeverGoesBack(t *testing.T) {
	t.Parallel()
	c := newClient(t, startStore(t).Addr())

	first := serverTime(t, c)
	if d := time.Since(time.UnixMicro(first)).Abs(); d > time.Second {
		t.Fatalf("TIME is %v away from the host clock", d)
	}
	prev := first
	eventually(t, 5*time.Second, "TIME advanced by 100ms", func() bool {
		now := serverTime(t, c)
		host := time.Now()
		if now < prev {
			t.Fatalf("TIME went back from %d to %d", prev, now)
		}
		if ahead := time.UnixMicro(now).Sub(host); ahead > time.Millisecond {
			t.Fatalf("TIME runs %v ahead of the host clock", ahead)
		}
		prev = now
		return now-first >= 100_000
	})
}

func TestManyKeysLengthenTheClockStep(t *testing.T) {
	t.Parallel()
	s := startStore(t)
	c := newClient(t, s.Addr())
	ctx := context.Background()
	const n, batch = 20_000, 1000
	for b := 0; b < n; b += batch {
		p := c.Pipeline()
		for i := b; i < b+batch; i++ {
			p.Set(ctx, fmt.Sprintf("many:%d", i), "v", time.Hour)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatalf("SET keys %d to %d: %v", b, b+batch-1, err)
		}
	}
	eventually(t, 10*time.Second, "step lengthened", func() bool {
		return time.Duration(s.step.Load()) > tickInterval
	})
	t.Logf("step with %d keys: %v", n, time.Duration(s.step.Load()))

	before := serverTime(t, c)
	if err := c.Set(ctx, "k", "v", 100*time.Millisecond).Err(); err != nil {
		t.Fatalf("SET PX 100: %v", err)
	}
	eventually(t, 10*time.Second, "key expired", func() bool {
		n, err := c.Exists(ctx, "k").Result()
		return err == nil && n == 0
	})
	if early := time.UnixMicro(before + 100_000).Sub(time.Now()); early > 0 {
		t.Errorf("key expired %v before its 100ms TTL ran out", early)
	}
	if got, err := c.DBSize(ctx).Result(); err != nil || got != n {
		t.Errorf("DBSIZE = %d, %v; want the %d long-lived keys", got, err, n)
	}
}

// Inside one script the clock stands still, so TIME and expiry agree: a key
// set with PX d exists exactly while TIME is less than d past its SET.
func TestTimeAndExpiryAgreeInsideScripts(t *testing.T) {
	t.Parallel()
	c := newClient(t, startStore(t).Addr())
	ctx := context.Background()
	set := redis.NewScript(`
		redis.call('SET', KEYS[1], 'v', 'PX', ARGV[1])
		local t = redis.call('TIME')
		return t[1] * 1000000 + t[2]`)
	check := redis.NewScript(`
		local e = redis.call('EXISTS', KEYS[1])
		local t = redis.call('TIME')
		return {t[1] * 1000000 + t[2], e}`)

	t0, err := set.Run(ctx, c, []string{"k"}, 50).Int64()
	if err != nil {
		t.Fatalf("set script: %v", err)
	}
	sawBefore := false
	calls := int64(1)
	eventually(t, 5*time.Second, "key expired", func() bool {
		r, err := check.Run(ctx, c, []string{"k"}).Int64Slice()
		if err != nil {
			t.Fatalf("check script: %v", err)
		}
		calls++
		elapsed, exists := r[0]-t0, r[1] == 1
		// TIME truncates to microseconds, and runs ahead of the expiry
		// clock by a microsecond a call at most: allow that at the
		// boundary.
		if exists != (elapsed < 50_000) && (elapsed < 49_999 || elapsed > 50_001+calls) {
			t.Fatalf("%dµs after SET PX 50: EXISTS = %v", elapsed, exists)
		}
		sawBefore = sawBefore || exists
		return !exists
	})
	if !sawBefore {
		t.Log("the key expired before the first check; the load is high")
	}
}

func TestScriptsRaceWithTheClock(t *testing.T) {
	t.Parallel()
	s := startStore(t)
	script := redis.NewScript(`
		local t = redis.call('TIME')
		redis.call('SET', KEYS[1], t[1] .. t[2], 'PX', 20)
		redis.call('ZADD', KEYS[2], t[1] * 1000000 + t[2], KEYS[1])
		return redis.call('PTTL', KEYS[1])`)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		c := newClient(t, s.Addr())
		wg.Go(func() {
			for i := range 100 {
				keys := []string{fmt.Sprintf("k:{%d}:%d", g, i), fmt.Sprintf("z:{%d}", g)}
				if pttl, err := script.Run(context.Background(), c, keys).Int64(); err != nil || pttl <= 0 || pttl > 20 {
					errs <- fmt.Errorf("goroutine %d run %d: PTTL %d, %v", g, i, pttl, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestPublishFromAScriptReachesSubscribers(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sub := b.client.Subscribe(ctx, "lockd:{k}:released")
			defer sub.Close()
			if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
				t.Fatalf("SUBSCRIBE: %v", err)
			}
			n, err := b.client.Eval(ctx, `return redis.call('PUBLISH', KEYS[1], ARGV[1])`,
				[]string{"lockd:{k}:released"}, "lease-1").Int()
			if err != nil || n != 1 {
				t.Fatalf("PUBLISH from script = %d, %v; want 1 receiver", n, err)
			}
			select {
			case msg := <-sub.Channel():
				if msg.Channel != "lockd:{k}:released" || msg.Payload != "lease-1" {
					t.Errorf("got %s %q", msg.Channel, msg.Payload)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no message within 5s")
			}
		})
	}
}

func TestScriptRunFallsBackToEvalOnNOSCRIPT(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			script := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
			if err := b.client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
			err := script.EvalSha(ctx, b.client, []string{"n"}).Err()
			if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
				t.Fatalf("EVALSHA of an unknown script: err = %v, want NOSCRIPT", err)
			}
			for want := int64(1); want <= 2; want++ { // EVAL, then EVALSHA
				if got, err := script.Run(ctx, b.client, []string{"n"}).Int64(); err != nil || got != want {
					t.Fatalf("Run = %d, %v; want %d", got, err, want)
				}
			}
			if got, err := script.EvalSha(ctx, b.client, []string{"n"}).Int64(); err != nil || got != 3 {
				t.Fatalf("EVALSHA after EVAL = %d, %v; want 3 (EVAL caches the script)", got, err)
			}
			exists, err := script.Exists(ctx, b.client).Result()
			if err != nil || len(exists) != 1 || !exists[0] {
				t.Fatalf("SCRIPT EXISTS = %v, %v", exists, err)
			}
			if err := b.client.Eval(ctx, `return redis.error_reply('NOTHELD lease not held')`, nil).Err(); err == nil ||
				err.Error() != "NOTHELD lease not held" {
				t.Fatalf("error_reply: err = %v", err)
			} else if errors.Is(err, redis.Nil) {
				t.Fatalf("error_reply came back as redis.Nil")
			}
		})
	}
}

// TestTimeNeverAnswersTheSameTwice asks TIME many times in a row, in
// scripts and outside them, faster than the store's clock steps: every
// answer is later than the one before, as on Redis, so fencing tokens made
// of it rise.
func TestTimeNeverAnswersTheSameTwice(t *testing.T) {
	t.Parallel()
	c := newClient(t, startStore(t).Addr())
	ctx := context.Background()
	script := redis.NewScript(`local t = redis.call('TIME'); return t[1] * 1000000 + t[2]`)
	var last int64
	for i := range 2000 {
		var us int64
		if i%2 == 0 {
			v, err := script.Run(ctx, c, nil).Int64()
			if err != nil {
				t.Fatal(err)
			}
			us = v
		} else {
			now, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			us = now.UnixMicro()
		}
		if us <= last {
			t.Fatalf("TIME answered %d after %d", us, last)
		}
		last = us
	}
}
