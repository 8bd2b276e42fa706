-- read.lua returns an app's cached token and its recorded upstream failure,
-- with Redis's clock, in one round trip.
--
-- KEYS[1]  the token hash (token, expire_ms, lifetime_ms, written_ms, cause,
--          same, gen, fence)
-- KEYS[2]  the failure record (JSON, expiring when the next attempt is due)
--
-- Returns {now_ms, token|nil, expire_ms, lifetime_ms, written_ms, cause|nil,
--          same, gen, failure|nil, failure_pttl_ms}.
local token_key, failure_key = KEYS[1], KEYS[2]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', token_key, 'token', 'expire_ms', 'lifetime_ms', 'written_ms', 'cause', 'same', 'gen')
local failure = redis.call('GET', failure_key)
local failure_pttl = -2
if failure then
  failure_pttl = redis.call('PTTL', failure_key)
end
return {now, h[1], tonumber(h[2]) or 0, tonumber(h[3]) or 0, tonumber(h[4]) or 0, h[5],
  tonumber(h[6]) or 0, tonumber(h[7]) or 0, failure, failure_pttl}
