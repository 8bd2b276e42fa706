-- fail.lua records a failed mint for every replica that mints with the
-- same credentials, until the next attempt is due, counts the failures in a
-- row, and wakes the replicas waiting for the mint so they report it.
--
-- KEYS[1]  the failure record of these credentials (hash: rec, until_ms,
--          attempts)
-- ARGV[1]  the failure (JSON, without secrets)
-- ARGV[2]  hold_ms: how long no replica calls the upstream again
-- ARGV[3]  keep_ms: how long the record outlives the hold, so that the
--          next failure counts as one more in a row
-- ARGV[4]  channel, ARGV[5] publish command (PUBLISH or SPUBLISH),
-- ARGV[6]  payload of the notice
--
-- Returns the failures in a row, this one included.
local failure_key = KEYS[1]
local failure, hold, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local channel, publish, payload = ARGV[4], ARGV[5], ARGV[6]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', failure_key, 'rec', failure, 'until_ms', now + hold)
local attempts = redis.call('HINCRBY', failure_key, 'attempts', 1)
redis.call('PEXPIRE', failure_key, hold + keep)
redis.call(publish, channel, payload)
return attempts
