-- renew.lua extends a held lease to ttl from now.
--
-- KEYS[1] the lock's record (see common.lua)
-- KEYS[2] optional data-loss marker of its slot
-- ARGV[1] lease_id
-- ARGV[2] ttl_ms; 0 keeps the lease's own ttl
-- ARGV[3] keeper id of the KeepAlive renewing, or ''
-- ARGV[4] '1' makes that keeper the lease's newest
-- ARGV[5] grace_ms: how long new grants wait after Redis lost its data
-- Returns {1, now_ms, hold_until_ms, lease_id, mode, hold_count,
-- fencing_token, ttl_ms, expire_ms, owner} or {-1, now_ms, hold_until_ms}
-- when the lease is not held (expired, released, lost or unknown).

local id, ttl, keeper, register, grace = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])

local hold = check_marker(grace)
begin()

local l = get_lease(id)
if not l then
  tidy()
  return {-1, now_ms, hold}
end
if ttl > 0 then
  l.ttl = ttl
end
l.expire = now_ms + l.ttl
if register == '1' then
  l.keeper = keeper
end
put_lease(id, l)
tidy()
return lease_reply(1, hold, id, l)
