-- write.lua stores a freshly minted token, counts the mint, clears the
-- recorded failure and announces the token to every replica.
--
-- KEYS[1]  the token hash
-- KEYS[2]  the failure record
-- KEYS[3]  the mint counter of the day (Asia/Shanghai)
-- ARGV[1]  the token
-- ARGV[2]  lifetime_ms: the expires_in the upstream announced
-- ARGV[3]  elapsed_ms: time since the mint request was sent, taken off the
--          lifetime so the cache never outlives the token
-- ARGV[4]  cause: demand | invalid | ahead
-- ARGV[5]  fence: the minter's lock fencing token; a write from a minter
--          older than the one that wrote the cache is refused
-- ARGV[6]  channel, ARGV[7] publish command (PUBLISH or SPUBLISH)
-- ARGV[8]  counter_ttl_ms: how long day counters are kept
--
-- Returns {1, expire_ms, gen} when stored; {0, token, expire_ms} when a newer
-- minter's token is cached; {-1} when the token expired before it was stored.
local token_key, failure_key, counter_key = KEYS[1], KEYS[2], KEYS[3]
local token, lifetime, elapsed, cause = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local fence, channel, publish, counter_ttl = tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('INCR', counter_key)
redis.call('PEXPIRE', counter_key, counter_ttl)

local cur = redis.call('HMGET', token_key, 'fence', 'token', 'expire_ms')
local cur_fence, cur_expire = tonumber(cur[1]), tonumber(cur[3])
if cur_fence and cur_fence > fence and cur_expire and cur_expire > now then
  return {0, cur[2], cur_expire}
end
local expire = now - elapsed + lifetime
if expire <= now then
  return {-1}
end
local same = 0
if cur[2] == token then
  same = 1
end
local gen = redis.call('HINCRBY', token_key, 'gen', 1)
redis.call('HSET', token_key, 'token', token, 'expire_ms', expire, 'lifetime_ms', lifetime,
  'written_ms', now, 'cause', cause, 'same', same, 'fence', fence)
redis.call('PEXPIREAT', token_key, expire)
redis.call('DEL', failure_key)
redis.call(publish, channel, gen)
return {1, expire, gen}
