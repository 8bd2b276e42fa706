-- force_release.lua ends the leases of one owner of a key (in every mode it
-- holds the key), or of every holder, whoever keeps them alive: an
-- administrator's way out of a stuck lock. A lease a KeepAlive keeps is
-- revoked rather than dropped (see x: in common.lua): its keeper is told
-- on the key's channel ('x:<lease_id>'), ends its stream NOT_FOUND, and
-- the lease runs out a moment later, so the holder learns before anyone
-- is granted the key; a lease nobody keeps alive, or one revoked already
-- (a second ForceRelease: the administrator insists), goes at once. An
-- election whose leader it ends loses its value and tells its observers;
-- waiters are woken when a lease goes. The fencing counter stays, so every
-- later token exceeds the ended leases' tokens.
--
-- KEYS[1] the lock's record (see common.lua)
-- ARGV[1] owner, or '' for every holder
-- ARGV[2] channel that wakes waiters
-- ARGV[3] the election's channel (<prefix>:{<key>}:leader)
-- ARGV[4] publish command: PUBLISH or SPUBLISH
-- Returns the leases ended, each {mode, hold_count, fencing_token, ttl_ms,
-- expire_ms, owner}; none when no lease matched.

local owner, channel, leader_channel, publish_cmd = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local wake = begin() or lost_record

local ids = {}
if owner ~= '' then
  for _, mode in ipairs({'w', 'r', 'p'}) do
    local id = redis.call('HGET', rec, 'o:' .. mode .. ':' .. owner)
    if id then table.insert(ids, id) end
  end
else
  local cursor = '0'
  repeat
    local r = redis.call('HSCAN', rec, cursor, 'MATCH', 'l:*', 'COUNT', 1000)
    cursor = r[1]
    for i = 1, #r[2], 2 do
      table.insert(ids, string.sub(r[2][i], 3))
    end
  until cursor == '0'
end

local ended = {}
local lead = false
for _, id in ipairs(ids) do
  local l = get_lease(id)
  if lost_record then
    break
  end
  if l then
    if l.keeper ~= '' and not l.revoked then
      l.keeper = '!' .. l.keeper
      put_lease(id, l)
      redis.call(publish_cmd, channel, 'x:' .. id)
    else
      drop(id, l)
      wake = true
    end
    table.insert(ended, {l.mode, l.count, l.token, l.ttl, l.expire, l.owner})
    local ev = redis.call('HGET', rec, 'ev')
    if ev and string.sub(ev, 1, #id + 1) == id .. '|' then
      redis.call('HDEL', rec, 'ev')
      lead = true
    end
  end
end

if wake or lost_record then
  wake_next(channel, publish_cmd)
end
if lead then
  publish(leader_channel, publish_cmd)
end
tidy()
return ended
