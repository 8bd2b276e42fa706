-- leader.lua reads an election's leader: the key's write holder, while the
-- election's value (ev) names its lease. It writes nothing.
--
-- KEYS[1] the lock's record (see common.lua)
-- Returns {1, now_ms, term, owner, value, ttl_ms, expire_ms}, or {0, now_ms}
-- when the election has no leader.

local v = redis.call('HMGET', rec, 'h', 'ev')
local id, value = v[1] and string.match(v[1], '|([^|]+)$'), nil
if id and v[2] then
  local named, rest = string.match(v[2], '^([^|]*)|(.*)$')
  if named == id then
    value = rest
  end
end
if not value then
  return {0, now_ms}
end
local f = redis.call('HMGET', rec, 'l:' .. id, 'x:' .. id)
local l = decode(f[1], f[2])
if not l or l.mode ~= 'w' or l.expire <= now_ms or l.revoked then
  return {0, now_ms}
end
return {1, now_ms, l.token, l.owner, value, l.ttl, l.expire}
