-- proclaim.lua sets the value of an election's leader and tells the
-- election's observers. A campaign runs it as soon as it holds the
-- election's lock: the holder leads from then on (see ev in common.lua),
-- and the campaign's keeper is made the lease's newest.
--
-- KEYS[1] the lock's record (see common.lua)
-- ARGV[1] lease_id of the leader
-- ARGV[2] the new value
-- ARGV[3] the election's channel (<prefix>:{<key>}:leader)
-- ARGV[4] publish command: PUBLISH or SPUBLISH
-- ARGV[5] keeper id of the campaign that won the lease, or '' (a Proclaim
--         call, which leaves the keeper as it is)
-- Returns {1, now_ms, 0, lease_id, mode, hold_count, fencing_token, ttl_ms,
-- expire_ms, owner}, {-1} when the lease is not held, and {-6} when it is
-- held but does not hold the key for writing (it leads no election).

local id, value, leader_channel, publish_cmd, keeper = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

begin()
local l, refused = writer_lease(id)
if not l then
  tidy()
  return {refused}
end
if keeper ~= '' then
  l.keeper = keeper
  put_lease(id, l)
end
redis.call('HSET', rec, 'ev', id .. '|' .. value)
publish(leader_channel, publish_cmd)
tidy()
return lease_reply(1, 0, id, l)
