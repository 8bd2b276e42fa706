-- write.lua stores a value (access_token or ticket) the upstream just
-- handed out, counts it when it is new, clears the failure record and
-- announces it to every replica.
--
-- It works out when the value expires from what the upstream said and when
-- the request went and the reply came, by Redis's clock: expires_in is
-- whole seconds, so unless the value was just minted (a new value from an
-- upstream that mints on every call, a force_refresh, or a new value
-- announcing the full lifetime) the true expiry may lie up to slack_ms
-- either side. expire_ms is the earliest it may be (the value is never
-- served past it), hi_ms the latest. A value handed out again keeps the
-- tighter of its old and new bounds, unless the upstream renewed it: an
-- earliest expiry past the latest one known cannot be rounding, so the new
-- bounds stand (DingTalk renews on every call; so may a proxy, or another
-- system calling the same upstream). renew_ms is when a fresher value can
-- be had: 0 at any time (also for a value the upstream renews: asking
-- again renews it); for a value handed out again by an upstream that may
-- or may not mint (fresh_window_ms -1), halfway to its expiry, so that the
-- fleet tries again, paced, before callers have to wait.
--
-- Every write carries a version: above the cached one, above min_ver (the
-- newest this replica has seen, so that a Redis that came back with older
-- data never gets a version the fleet already used), and at least Redis's
-- clock. The hash outlives hi_ms by keep_ms, so that the next value can be
-- compared with it.
--
-- KEYS[1]  the value's hash
-- KEYS[2]  the failure record of the minting credentials
-- KEYS[3]  the mint counter of the day (Asia/Shanghai)
-- ARGV[1]  the value
-- ARGV[2]  expires_in_ms as the upstream announced it
-- ARGV[3]  sent_ago_ms: how long ago the request was sent
-- ARGV[4]  recv_ago_ms: how long ago the reply arrived
-- ARGV[5]  slack_ms: how far a rounded expires_in may be off
-- ARGV[6]  fresh_window_ms: -1 when the upstream may mint on any call; else
--          how long before expiry it starts handing out a successor
-- ARGV[7]  forced: 1 for a force_refresh
-- ARGV[8]  gen: the generation the minter read; a value stored by anyone
--          else since (still valid) wins
-- ARGV[9]  cause: demand | invalid | ahead
-- ARGV[10] channel, ARGV[11] publish command (PUBLISH or SPUBLISH),
-- ARGV[12] payload of the notice (the version is appended after '@')
-- ARGV[13] counter_ttl_ms: how long day counters are kept
-- ARGV[14] keep_ms: how long the hash outlives hi_ms
-- ARGV[15] renews: 1 when the upstream renews a value it hands out again
-- ARGV[16] min_ver: the newest version the writer has seen
-- ARGV[17] retry_ms: the least wait before trying for a fresher value again
--
-- Returns {1, expire_ms, gen, renew_ms, same, now_ms, ver, renewed, hi_ms,
-- lifetime_ms} when stored (same: 1 when the upstream handed out the value already cached;
-- renewed: 1 when it also renewed its life); {0, token, expire_ms, ver}
-- when another minter's still valid value is cached instead.
local value_key, failure_key, counter_key = KEYS[1], KEYS[2], KEYS[3]
local value, expires_in, sent_ago, recv_ago = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local slack, fresh_window, forced, want_gen = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8])
local cause, channel, publish, payload, counter_ttl = ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13]
local keep, renews, min_ver, retry = tonumber(ARGV[14]), ARGV[15] == '1', tonumber(ARGV[16]), tonumber(ARGV[17])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local cur = redis.call('HMGET', value_key, 'token', 'expire_ms', 'hi_ms', 'gen', 'lifetime_ms', 'ver', 'written_ms')
local cur_expire, cur_hi = tonumber(cur[2]) or 0, tonumber(cur[3]) or 0
local cur_gen, cur_life = tonumber(cur[4]) or 0, tonumber(cur[5]) or 0
local cur_ver = tonumber(cur[6]) or tonumber(cur[7]) or 0
if cur[1] and cur[1] ~= value and cur_gen ~= want_gen and cur_expire > now and cur_ver >= min_ver then
  return {0, cur[1], cur_expire, cur_ver}
end

local same = cur[1] == value
local exact = not same and (forced or fresh_window < 0 or (cur[1] and expires_in == cur_life))
if exact then
  slack = 0
end
local lo = now - sent_ago + expires_in - slack
local hi = now - recv_ago + expires_in + slack
local life = expires_in
local renewed = false
if same then
  if renews or lo > cur_hi then
    renewed = true
  else
    if cur_expire > 0 and cur_expire < lo then lo = cur_expire end
    if cur_hi > 0 and cur_hi < hi then hi = cur_hi end
  end
  if cur_life > life then life = cur_life end
end
if hi <= now then
  hi = now + 1
end
local renew = 0
if renews or renewed then
  renew = 0
elseif same and fresh_window < 0 then
  renew = now + math.max(math.floor((lo - now) / 2), retry)
  if renew > hi then renew = hi end
elseif same and fresh_window > 0 and hi - now > fresh_window + slack then
  renew = hi - fresh_window
elseif same then
  renew = hi
elseif fresh_window >= 0 then
  renew = hi - fresh_window
end

if not same then
  redis.call('INCR', counter_key)
  redis.call('PEXPIRE', counter_key, counter_ttl)
end
local ver = math.max(now, cur_ver + 1, min_ver + 1)
local gen = redis.call('HINCRBY', value_key, 'gen', 1)
redis.call('HSET', value_key, 'token', value, 'expire_ms', lo, 'hi_ms', hi, 'renew_ms', renew,
  'lifetime_ms', life, 'written_ms', now, 'cause', cause, 'ver', ver)
redis.call('PEXPIREAT', value_key, math.max(lo, hi) + keep)
redis.call('DEL', failure_key)
redis.call(publish, channel, payload .. '@' .. ver)
local s, r = 0, 0
if same then s = 1 end
if renewed then r = 1 end
return {1, lo, gen, renew, s, now, ver, r, hi, life}
