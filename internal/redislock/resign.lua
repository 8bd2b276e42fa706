-- resign.lua ends an election's leadership: the leader's whole lease,
-- every hold of it, and its value. It wakes the candidates and tells the
-- election's observers.
--
-- KEYS[1] the lock's record (see common.lua)
-- ARGV[1] lease_id of the leader
-- ARGV[2] keeper id: '' ends the lease whoever keeps it; otherwise only if
--         this is the lease's newest keeper (a campaign whose stream closed)
-- ARGV[3] channel that wakes waiters
-- ARGV[4] the election's channel (<prefix>:{<key>}:leader)
-- ARGV[5] publish command: PUBLISH or SPUBLISH
-- Returns {1, held_ms} (held_ms is how long since the lease was granted),
-- {-1} when the lease is not held, {-3} when a newer keeper keeps it, and
-- {-6} when it is held but does not hold the key for writing.

local id, keeper, channel, leader_channel, publish_cmd = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local expired = begin()
if revoked_seen(id, keeper) then
  tidy()
  return {-1}
end
local l, refused = writer_lease(id)
if not l then
  if expired or lost_record then
    wake_next(channel, publish_cmd)
  end
  tidy()
  return {refused}
end
if keeper ~= '' and l.keeper ~= keeper then
  tidy()
  return {-3}
end
drop(id, l)
local ev = redis.call('HGET', rec, 'ev')
if ev and string.sub(ev, 1, #id + 1) == id .. '|' then
  redis.call('HDEL', rec, 'ev')
end
wake_next(channel, publish_cmd)
publish(leader_channel, publish_cmd)
tidy()
return {1, math.max(0, math.floor((now_us - l.token) / 1000))}
