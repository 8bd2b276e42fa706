// Package embedded serves lockd's Redis contract from an in-process
// miniredis (github.com/alicebob/miniredis/v2) when lockd runs without
// --redis: for trying lockd, not for production.
//
// # The clock
//
// Findings from the miniredis v2.40.0 source:
//
//   - miniredis has one clock, effectiveNow(): the time given to SetTime, or
//     time.Now() while none was given. TIME (also redis.call('TIME') in Lua),
//     PEXPIREAT/EXPIREAT, PEXPIRETIME and stream IDs read it.
//   - TTLs are durations left, not deadlines. Keys expire only when those
//     durations are decreased: by FastForward(d), which does not move the
//     clock, or, since v2.40.0, by ClockTTL(true), which on every database
//     access decreases them by how far the clock moved since the last access
//     (and deletes what reached 0). SetTime alone moves TIME but expires
//     nothing; FastForward alone expires keys but leaves TIME behind. Either
//     one alone lets TIME and expiry drift apart.
//   - EVAL runs the whole script under miniredis's global lock, so inside a
//     script TIME does not move and no key expires (real Redis 7 also freezes
//     expiry during a script, but its TIME keeps moving).
//
// So the Store sets the clock with SetTime from a goroutine every
// tickInterval, and turns ClockTTL on: TIME and expiry then read the same
// clock and cannot disagree (a key set with PX d exists exactly while TIME is
// less than d past the SET). The clock is the wall time at Start plus the
// monotonic time elapsed since, so it follows real time but never goes back,
// not even when the host's wall clock is stepped. It moves in steps of
// tickInterval and lags the host's clock by up to a step (more while the
// process is starved of CPU), and measured by the host's clock a key lives
// its TTL give or take a step. Within a step TIME still moves on: the Store
// answers it itself (a server pre-hook, which scripts' redis.call('TIME')
// goes through too), a microsecond past its last answer, so no two answers
// are alike, as on Redis; the lock engine's fencing tokens are TIME in
// microseconds. The answers run ahead of the expiry clock by a microsecond
// per TIME in the step at most, and the next step starts from the later of
// the two. PTTL truncates to whole milliseconds, so right after PEXPIREAT it
// may read 1 ms lower than on Redis.
//
// Cost: applying a step to the TTLs walks (and sorts) all keys, as
// FastForward does: about 10 ms for 100,000 keys. The clock goroutine applies
// each step itself, off the commands' path, and lengthens the step (up to
// maxTickInterval) so that the walk takes at most about a tenth of the time;
// with many keys TIME and expiry get coarser rather than the store slower.
//
// # Lua
//
// Scripts run in gopher-lua (Lua 5.1). TestLuaAsTheLockScriptsUseIt runs the
// same scripts on miniredis and on a real redis-server 7 and pins every
// difference. Alike on both: redis.call/pcall, TIME (two strings), PUBLISH
// (reaches SUBSCRIBE clients), SET with PX/NX/KEEPTTL/GET, PEXPIRE (also
// GT), PEXPIREAT, PTTL, PEXPIRETIME, INCRBY, HSET/HGET/HDEL/HGETALL/HLEN/
// HINCRBY/HEXISTS/HMGET (HSET and HDEL of several fields counting only new
// and removed ones; HMGET and HGETALL of a missing key),
// ZADD (NX/XX/GT/CH)/ZREM/ZRANGEBYSCORE/ZRANGE/
// ZREMRANGEBYSCORE/ZCARD/ZSCORE/ZRANK/ZCOUNT, 16-digit scores,
// redis.error_reply/status_reply, redis.sha1hex, redis.log, cjson
// round-trips, string.format('%d'/'%.0f') and tonumber on 16-digit numbers,
// string.match/gmatch/sub and plain string.find with the patterns the lock
// record uses, table.insert/remove/concat and unpack,
// integral numbers as redis.call arguments, integer replies beyond 2^31,
// nested tables, EVALSHA with go-redis's NOSCRIPT fallback (Script.Run), and
// no key expiring while a script runs. Different:
//
//   - tostring, '..' and string.format('%s') print numbers with 14
//     significant digits on Redis (1.8e+15) but exactly on miniredis;
//     cjson.encode too. Format numbers with '%d' or '%.0f'.
//   - Fractional numbers passed to redis.call become %.17g on Redis
//     ("0.10000000000000001"), the shortest form on miniredis ("0.1").
//   - TIME stands still during a script on miniredis, moves on Redis.
//   - A failing redis.call and error({err = ...}) keep their message and
//     code on Redis; miniredis turns them into "ERR Error compiling script
//     ... stack traceback ...", losing the code of error({err = ...}).
//     Return redis.error_reply('CODE message') to signal errors: it is alike.
//   - cjson.encode({}) is "{}" on Redis, "[]" on miniredis; cjson.decode
//     turns null into cjson.null on Redis, nil on miniredis.
//   - bit, cmsgpack and struct do not exist on miniredis.
//   - miniredis has no SSUBSCRIBE/SPUBLISH.
//
// Publishing is synchronous: miniredis hands each message to the
// subscriber's connection while it holds its global lock, so a subscriber
// that stops reading stalls the whole store once the socket buffers fill.
// Connections made with Dial queue the store's writes in memory instead, so
// there a subscriber that stops reading costs memory rather than a stall.
package embedded

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

const (
	// tickInterval is how often the clock goroutine moves miniredis's clock
	// while the store holds few keys.
	tickInterval = 5 * time.Millisecond
	// maxTickInterval bounds the step when many keys make steps costly.
	maxTickInterval = 250 * time.Millisecond
	// tickCostFactor keeps the step at least this many times longer than
	// applying it took, so that walking the keys takes at most about a tenth
	// of the time.
	tickCostFactor = 10
)

// Store is an in-process Redis-compatible server whose keys expire with the
// real clock: on a loopback port (Start), or reachable only from its own
// process (StartPrivate).
type Store struct {
	mr        *miniredis.Miniredis
	stop      chan struct{} // closed by Close to stop the clock goroutine
	done      chan struct{} // closed when the clock goroutine has returned
	closeOnce sync.Once
	step      atomic.Int64 // the clock's current step, a time.Duration
	told      atomic.Int64 // microseconds: the clock as set, or the last TIME answered if later
}

// Start starts a Store listening on a random port of 127.0.0.1, without a
// password: any process on the host may connect. It serves tests and
// examples; lockd itself uses StartPrivate.
func Start() (*Store, error) {
	return start(func(mr *miniredis.Miniredis) error { return mr.StartAddr("127.0.0.1:0") })
}

// StartPrivate starts a Store that no other process can reach: it has no
// listener at all, and Dial is the only way in.
func StartPrivate() (*Store, error) {
	return start(func(mr *miniredis.Miniredis) error {
		// Dial starts the server without a listener.
		c, err := mr.Dial()
		if err != nil {
			return err
		}
		return c.Close()
	})
}

func start(serve func(*miniredis.Miniredis) error) (*Store, error) {
	mr := miniredis.NewMiniRedis()
	now := realClock()
	mr.SetTime(now())
	mr.ClockTTL(true)
	if err := serve(mr); err != nil {
		return nil, err
	}
	s := &Store{mr: mr, stop: make(chan struct{}), done: make(chan struct{})}
	s.set(now())
	mr.Server().SetPreHook(s.time)
	go s.tick(now)
	return s, nil
}

// set moves miniredis's clock to t, or to the last TIME answered if that
// is later, and only then has TIME answer from there: SetTime waits for a
// script that runs, so no TIME inside a script moves on by a whole step.
func (s *Store) set(t time.Time) {
	us := max(t.UnixMicro(), s.told.Load())
	s.mr.SetTime(time.UnixMicro(us))
	for {
		last := s.told.Load()
		if last >= us || s.told.CompareAndSwap(last, us) {
			return
		}
	}
}

// time answers TIME, also inside scripts, from the clock set last but a
// microsecond past every earlier answer, so that no two answers are alike
// however fast they come: the lock engine's fencing tokens are Redis's
// clock in microseconds. Within a step the answers run ahead of the
// store's clock by a microsecond per TIME at most. Every other command is
// left to miniredis.
func (s *Store) time(c *server.Peer, cmd string, args ...string) bool {
	if cmd != "TIME" || len(args) != 0 {
		return false
	}
	us := s.told.Add(1)
	c.WriteLen(2)
	c.WriteBulk(strconv.FormatInt(us/1_000_000, 10))
	c.WriteBulk(strconv.FormatInt(us%1_000_000, 10))
	return true
}

// Addr returns the address clients connect to, "127.0.0.1:port"; empty for
// a Store from StartPrivate.
func (s *Store) Addr() string {
	if srv := s.mr.Server(); srv == nil || srv.Addr() == nil {
		return ""
	}
	return s.mr.Addr()
}

// Dial opens an in-memory connection to the store, for go-redis's
// Options.Dialer: it needs no listener.
func (s *Store) Dial(context.Context, string, string) (net.Conn, error) {
	srv := s.mr.Server()
	if srv == nil {
		return nil, net.ErrClosed
	}
	c, end := connPair()
	srv.ServeConn(end)
	return c, nil
}

// Close stops the clock and the server and closes its connections. It is
// safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.mr.Close()
	})
	return nil
}

// tick moves miniredis's clock to now every step until Close. It applies
// each step to the TTLs itself, so that no command waits for that walk over
// all keys, and it lengthens the step while the walk is costly.
func (s *Store) tick(now func() time.Time) {
	defer close(s.done)
	step := tickInterval
	s.step.Store(int64(step))
	t := time.NewTimer(step)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		start := time.Now()
		s.set(now())
		s.mr.DB(0) // with ClockTTL, any database access applies the step
		step = min(max(tickInterval, tickCostFactor*time.Since(start)), maxTickInterval)
		s.step.Store(int64(step))
		t.Reset(step)
	}
}

// realClock returns a clock that reads the wall time of its creation plus
// the monotonic time elapsed since: real time that never goes back.
func realClock() func() time.Time {
	base := time.Now()
	return func() time.Time {
		// Round(0) drops the monotonic reading so that miniredis sees a
		// plain wall time.
		return base.Add(time.Since(base)).Round(0)
	}
}
