package redislock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed common.lua
	commonLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed renew.lua
	renewLua string
	//go:embed abandon.lua
	abandonLua string
	//go:embed pause.lua
	pauseLua string
	//go:embed leader.lua
	leaderLua string
	//go:embed proclaim.lua
	proclaimLua string
	//go:embed resign.lua
	resignLua string
	//go:embed semaphore_acquire.lua
	semaphoreAcquireLua string

	acquireScript = lockScript(acquireLua)
	releaseScript = lockScript(releaseLua)
	renewScript   = lockScript(renewLua).again()
	abandonScript = lockScript(abandonLua).again()
	pauseScript   = newScript(pauseLua).again()

	leaderScript   = lockScript(leaderLua).again()
	proclaimScript = lockScript(proclaimLua).again()
	resignScript   = lockScript(resignLua)

	semaphoreAcquireScript = lockScript(semaphoreAcquireLua)
)

// commonMark is the line of a lock script where common.lua goes: after its
// fast path, if it has one, so that calls the fast path serves never run
// the definitions of common.lua. A script without the line gets common.lua
// first.
const commonMark = "\n--[[common]]\n"

// lockScript returns the lock script src with common.lua spliced in,
// after a line declaring what a fast path hands on to common.lua when it
// falls through: Redis's TIME (pre_time) and the data-loss marker's value
// (pre_marker, false when missing), so the full script asks neither again.
func lockScript(src string) *script {
	const handed = "local pre_time, pre_marker\n"
	before, after, ok := strings.Cut(src, commonMark)
	if !ok {
		return newScript(handed + commonLua + src)
	}
	return newScript(handed + before + "\n" + commonLua + after)
}

// script is a Lua script run with EVALSHA, and with EVAL when Redis does not
// have it cached. Unlike go-redis's Script, its calls are never sent twice
// by the client, its pool or a pipeline: a call whose reply was lost (a
// timeout, a dropped connection) may have run, and running it again would
// act twice (one Release taking two holds away, one Acquire adding two).
// Only NOSCRIPT, which means it did not run, is followed by the EVAL. A
// script whose second run changes nothing more than its first (a renewal,
// an undo, a read) may be sent again as go-redis sees fit.
type script struct {
	src        string
	hash       string
	idempotent bool
}

// again marks s as one that may run twice for one call.
func (s *script) again() *script {
	s.idempotent = true
	return s
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, hash: hex.EncodeToString(sum[:])}
}

// processor sends commands: a go-redis client of any kind, its
// autopipeliner, or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceCmd is a command that no go-redis layer sends again after a failure.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to send the command again.
func (onceCmd) NoRetry() bool { return true }

func (s *script) cmd(ctx context.Context, name, body string, keys []string, args []any) redis.Cmder {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	if s.idempotent {
		return cmd
	}
	return onceCmd{cmd}
}

// plain is the go-redis command a Cmder of cmd is.
func plain(c redis.Cmder) *redis.Cmd {
	if o, ok := c.(onceCmd); ok {
		return o.Cmd
	}
	return c.(*redis.Cmd)
}

// EvalSha queues or sends the script by its hash.
func (s *script) EvalSha(ctx context.Context, p processor, keys []string, args ...any) *redis.Cmd {
	c := s.cmd(ctx, "evalsha", s.hash, keys, args)
	_ = p.Process(ctx, c)
	return plain(c)
}

// Eval queues or sends the script with its text.
func (s *script) Eval(ctx context.Context, p processor, keys []string, args ...any) *redis.Cmd {
	c := s.cmd(ctx, "eval", s.src, keys, args)
	_ = p.Process(ctx, c)
	return plain(c)
}

// Run sends the script by its hash, and with its text if Redis does not
// have it.
func (s *script) Run(ctx context.Context, p processor, keys []string, args ...any) *redis.Cmd {
	c := s.EvalSha(ctx, p, keys, args...)
	if isNoScript(c.Err()) {
		return s.Eval(ctx, p, keys, args...)
	}
	return c
}
