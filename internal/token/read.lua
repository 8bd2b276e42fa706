-- read.lua returns one cached value (an app's access_token or one of its
-- tickets), its recorded upstream failure, whether anyone asked for it
-- lately, the day's mint count and the verdict on the last reported token,
-- with Redis's clock, in one round trip. It marks the value as in demand
-- when asked to.
--
-- KEYS[1]  the value's hash (token, expire_ms, hi_ms, renew_ms, lifetime_ms,
--          written_ms, cause, gen, ver)
-- KEYS[2]  the failure record of these credentials (hash: rec, until_ms,
--          attempts)
-- KEYS[3]  the demand marker, present while someone asked within idle_ms
-- KEYS[4]  the mint counter of the day (Asia/Shanghai)
-- KEYS[5]  the verdict on the last reported token (hash: hash, kind, at_ms,
--          until_ms, why, errcode, count, and r:<client> for each client
--          whose report the last check answered)
-- ARGV[1]  idle_ms: when positive, mark the value in demand for that long
-- ARGV[2]  reporter: the client reporting a token, or ""
--
-- Returns {now_ms, token|false, expire_ms, hi_ms, renew_ms, lifetime_ms,
--          written_ms, gen, failure_rec|false, failure_until_ms, attempts,
--          demand, mints_today, verdict_hash|false, verdict_kind|false,
--          verdict_at_ms, verdict_until_ms, verdict_why|false,
--          verdict_errcode, verdict_count, ver, reporter_known}; ver is 0
-- without a value, and written_ms for a value written without one.
local value_key, failure_key, demand_key, counter_key, verdict_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local idle, reporter = tonumber(ARGV[1]), ARGV[2]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if idle > 0 then
  redis.call('SET', demand_key, '1', 'PX', idle)
end
local h = redis.call('HMGET', value_key, 'token', 'expire_ms', 'hi_ms', 'renew_ms', 'lifetime_ms', 'written_ms', 'gen', 'ver')
local f = redis.call('HMGET', failure_key, 'rec', 'until_ms', 'attempts')
local demand = redis.call('EXISTS', demand_key)
local mints = tonumber(redis.call('GET', counter_key)) or 0
local v = redis.call('HMGET', verdict_key, 'hash', 'kind', 'at_ms', 'until_ms', 'why', 'errcode', 'count')
local known = 0
if reporter ~= '' then
  known = redis.call('HEXISTS', verdict_key, 'r:' .. reporter)
end
local ver = 0
if h[1] then
  ver = tonumber(h[8]) or tonumber(h[6]) or 0
end
return {now, h[1], tonumber(h[2]) or 0, tonumber(h[3]) or 0, tonumber(h[4]) or 0, tonumber(h[5]) or 0,
  tonumber(h[6]) or 0, tonumber(h[7]) or 0, f[1], tonumber(f[2]) or 0, tonumber(f[3]) or 0,
  demand, mints, v[1], v[2], tonumber(v[3]) or 0, tonumber(v[4]) or 0, v[5], tonumber(v[6]) or 0,
  tonumber(v[7]) or 0, ver, known}
