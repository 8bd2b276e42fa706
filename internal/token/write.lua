-- write.lua stores a value (access_token or ticket) the upstream just
-- handed out, counts it when it is new, clears the failure record and
-- announces it to every replica.
--
-- It works out when the value expires from what the upstream said and when
-- the request went and the reply came, by Redis's clock: expires_in is
-- whole seconds, so unless the value was just minted (the classic API, a
-- force_refresh, or a new value announcing the full lifetime) the true
-- expiry may lie up to slack_ms either side. expire_ms is the earliest it
-- may be (the value is never served past it), hi_ms the latest (after it
-- the upstream surely hands out a new one). A value handed out again never
-- gains life: the earlier of the old and the new bounds stands. The hash
-- outlives hi_ms by keep_ms, so that the next value can be compared with it.
--
-- KEYS[1]  the value's hash
-- KEYS[2]  the failure record of the minting credentials
-- KEYS[3]  the mint counter of the day (Asia/Shanghai)
-- ARGV[1]  the value
-- ARGV[2]  expires_in_ms as the upstream announced it
-- ARGV[3]  sent_ago_ms: how long ago the request was sent
-- ARGV[4]  recv_ago_ms: how long ago the reply arrived
-- ARGV[5]  slack_ms: how far a rounded expires_in may be off
-- ARGV[6]  fresh_window_ms: -1 when every call mints a new value; else how
--          long before expiry the upstream starts handing out a successor
-- ARGV[7]  forced: 1 for a force_refresh
-- ARGV[8]  gen: the generation the minter read; a value stored by anyone
--          else since (still valid) wins
-- ARGV[9]  cause: demand | invalid | ahead
-- ARGV[10] channel, ARGV[11] publish command (PUBLISH or SPUBLISH),
-- ARGV[12] payload of the notice
-- ARGV[13] counter_ttl_ms: how long day counters are kept
-- ARGV[14] keep_ms: how long the hash outlives hi_ms
--
-- Returns {1, expire_ms, gen, renew_ms, same, now_ms} when stored (same: 1
-- when the upstream handed out the value already cached); {0, token,
-- expire_ms} when another minter's still valid value is cached instead.
local value_key, failure_key, counter_key = KEYS[1], KEYS[2], KEYS[3]
local value, expires_in, sent_ago, recv_ago = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local slack, fresh_window, forced, want_gen = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8])
local cause, channel, publish, payload, counter_ttl = ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13]
local keep = tonumber(ARGV[14])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local cur = redis.call('HMGET', value_key, 'token', 'expire_ms', 'hi_ms', 'gen', 'lifetime_ms')
local cur_expire, cur_hi = tonumber(cur[2]) or 0, tonumber(cur[3]) or 0
local cur_gen, cur_life = tonumber(cur[4]) or 0, tonumber(cur[5]) or 0
if cur[1] and cur[1] ~= value and cur_gen ~= want_gen and cur_expire > now then
  return {0, cur[1], cur_expire}
end

local same = cur[1] == value
local exact = forced or fresh_window < 0 or (cur[1] and not same and expires_in == cur_life)
if exact then
  slack = 0
end
local lo = now - sent_ago + expires_in - slack
local hi = now - recv_ago + expires_in + slack
local life = expires_in
if same then
  if cur_expire > 0 and cur_expire < lo then lo = cur_expire end
  if cur_hi > 0 and cur_hi < hi then hi = cur_hi end
  if cur_life > life then life = cur_life end
end
if hi <= now then
  hi = now + 1
end
local renew = 0
if same then
  renew = hi
elseif fresh_window >= 0 then
  renew = hi - fresh_window
end

if not same then
  redis.call('INCR', counter_key)
  redis.call('PEXPIRE', counter_key, counter_ttl)
end
local gen = redis.call('HINCRBY', value_key, 'gen', 1)
redis.call('HSET', value_key, 'token', value, 'expire_ms', lo, 'hi_ms', hi, 'renew_ms', renew,
  'lifetime_ms', life, 'written_ms', now, 'cause', cause)
redis.call('PEXPIREAT', value_key, math.max(lo, hi) + keep)
redis.call('DEL', failure_key)
redis.call(publish, channel, payload)
local s = 0
if same then s = 1 end
return {1, lo, gen, renew, s, now}
