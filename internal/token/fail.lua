-- fail.lua records a failed mint for every replica until the next attempt
-- is due, and wakes the replicas waiting for the mint so they report it.
--
-- KEYS[1]  the failure record
-- ARGV[1]  the failure (JSON, without secrets)
-- ARGV[2]  hold_ms: how long no replica calls the upstream again
-- ARGV[3]  channel, ARGV[4] publish command (PUBLISH or SPUBLISH)
--
-- Returns 1.
local failure_key = KEYS[1]
local failure, hold, channel, publish = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

redis.call('SET', failure_key, failure, 'PX', hold)
redis.call(publish, channel, 'failed')
return 1
