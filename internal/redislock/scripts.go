package redislock

import (
	_ "embed"

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
	//go:embed hold.lua
	holdLua string
	//go:embed leader.lua
	leaderLua string
	//go:embed proclaim.lua
	proclaimLua string
	//go:embed resign.lua
	resignLua string
	//go:embed semaphore_acquire.lua
	semaphoreAcquireLua string

	acquireScript = redis.NewScript(commonLua + acquireLua)
	releaseScript = redis.NewScript(commonLua + releaseLua)
	renewScript   = redis.NewScript(commonLua + renewLua)
	abandonScript = redis.NewScript(commonLua + abandonLua)
	holdScript    = redis.NewScript(holdLua)

	leaderScript   = redis.NewScript(commonLua + leaderLua)
	proclaimScript = redis.NewScript(commonLua + proclaimLua)
	resignScript   = redis.NewScript(commonLua + resignLua)

	semaphoreAcquireScript = redis.NewScript(commonLua + semaphoreAcquireLua)
)
