-- restore.lua puts back a value Redis lost or rolled back (a restart from
-- an older snapshot, a failover to a lagging replica): the newest one a
-- replica saw, with the expiry it knew, unless the cache holds that
-- version or a newer one already. It keeps the day's mint counter from
-- going back below what the replica saw, and announces the value.
--
-- KEYS[1]  the value's hash
-- KEYS[2]  the mint counter of the day (Asia/Shanghai)
-- ARGV[1]  the value, ARGV[2] its version
-- ARGV[3]  expire_in_ms, ARGV[4] hi_in_ms: its bounds, from now
-- ARGV[5]  renew_in_ms: when a fresher value can be had, from now (-1: any time)
-- ARGV[6]  lifetime_ms, ARGV[7] written_ago_ms
-- ARGV[8]  keep_ms: how long the hash outlives hi_ms
-- ARGV[9]  mints: the day's mint count the replica saw
-- ARGV[10] counter_ttl_ms
-- ARGV[11] channel, ARGV[12] publish command, ARGV[13] payload of the notice
--
-- Returns {1, expire_ms, gen, now_ms} when restored, {0} when the cache
-- holds the version or a newer one.
local value_key, counter_key = KEYS[1], KEYS[2]
local value, ver = ARGV[1], tonumber(ARGV[2])
local expire_in, hi_in, renew_in = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local life, written_ago, keep = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local mints, counter_ttl = tonumber(ARGV[9]), ARGV[10]
local channel, publish, payload = ARGV[11], ARGV[12], ARGV[13]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HMGET', value_key, 'token', 'ver', 'written_ms')
if cur[1] and (tonumber(cur[2]) or tonumber(cur[3]) or 0) >= ver then
  return {0}
end
if (tonumber(redis.call('GET', counter_key)) or 0) < mints then
  redis.call('SET', counter_key, mints, 'PX', counter_ttl)
end
local renew = 0
if renew_in >= 0 then renew = now + renew_in end
local gen = redis.call('HINCRBY', value_key, 'gen', 1)
redis.call('HSET', value_key, 'token', value, 'expire_ms', now + expire_in, 'hi_ms', now + hi_in,
  'renew_ms', renew, 'lifetime_ms', life, 'written_ms', now - written_ago, 'cause', 'restore', 'ver', ver)
redis.call('PEXPIREAT', value_key, now + math.max(expire_in, hi_in) + keep)
redis.call(publish, channel, payload .. '@' .. ver)
return {1, now + expire_in, gen, now}
