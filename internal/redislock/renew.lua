-- renew.lua extends a held lease to ttl from now.
--
-- KEYS[1..3] state, holders, writers (see common.lua)
-- ARGV[1] lease_id
-- ARGV[2] ttl_ms; 0 keeps the lease's own ttl
-- Returns {1, lease_id, mode, hold_count, fencing_token, ttl_ms, expire_ms, now_ms, owner}
-- or {-1} when the lease is not held (expired, released or unknown).

local id, ttl = ARGV[1], tonumber(ARGV[2])

purge()

local l = get_lease(id)
if not l then
  tidy()
  return {-1}
end

if ttl > 0 and ttl ~= l.ttl then
  l.ttl = ttl
  put_lease(id, l)
end
redis.call('ZADD', holders, num(now_ms + l.ttl), id)
tidy()
return lease_reply(1, id, l)
