-- unwait.lua withdraws a writer that stopped waiting, so readers it held
-- back may go in at once.
--
-- KEYS[1..3] state, holders, writers (see common.lua)
-- ARGV[1] waiter id
-- ARGV[2] channel that wakes waiters
-- ARGV[3] publish command: PUBLISH or SPUBLISH
-- Returns 1 if the waiter was queued, else 0.

local waiter, channel, publish_cmd = ARGV[1], ARGV[2], ARGV[3]

purge()
local removed = redis.call('ZREM', writers, waiter)
if removed == 1 and redis.call('ZCARD', writers) == 0 then
  publish(channel, publish_cmd)
end
tidy()
return removed
