-- renew.lua extends a held lease to ttl from now.
--
-- KEYS[1] the lock's record (see common.lua)
-- KEYS[2] optional data-loss marker of its slot
-- ARGV[1] lease_id
-- ARGV[2] ttl_ms; 0 keeps the lease's own ttl
-- ARGV[3] keeper id of the KeepAlive renewing, or ''
-- ARGV[4] '1' makes that keeper the lease's newest
-- ARGV[5] grace_ms: how long new grants wait after Redis lost its data
-- Returns {1, now_ms, paused_until_ms, lease_id, mode, hold_count,
-- fencing_token, ttl_ms, expire_ms, owner} or {-1, now_ms, paused_until_ms}
-- when the lease is not held (expired, released, lost or unknown).

-- The fast path: a lone lease kept as a string (common.lua), with no
-- grant held back by a data loss, renewed by setting the string again
-- with its new expiry (GET, TIME, SET XX PX). Anything else falls through
-- to the full script below.
do
  if KEYS[2] then
    pre_marker = redis.call('GET', KEYS[2])
  end
  if not KEYS[2] or pre_marker == '0' then
    local v = redis.pcall('GET', KEYS[1])
    if type(v) == 'string' then
      local mode, given, token, ttl, id, mid, keeper, owner =
        string.match(v, '^([rw])([01])|(%d+)|(%d+)|([^|]+)|([%w_%-]*|[%w_%-]*)|([%w_%-]*)|(.*)$')
      if id == ARGV[1] then
        if ARGV[2] ~= '0' then
          ttl = ARGV[2]
        end
        if ARGV[4] == '1' then
          keeper = ARGV[3]
        end
        -- TIME first: the expiry told is never later than the real one.
        local t = redis.call('TIME')
        local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
        redis.call('SET', KEYS[1], mode .. given .. '|' .. token .. '|' .. ttl .. '|' .. id .. '|' .. mid .. '|' .. keeper ..
          '|' .. owner, 'XX', 'PX', ttl)
        return {1, now_ms, 0, id, mode, 1, tonumber(token), tonumber(ttl), now_ms + ttl, owner}
      elseif id then
        return {-1, 0, 0}
      end
    elseif not v then
      return {-1, 0, 0}
    end
  end
end

--[[common]]

local id, ttl, keeper, register, grace = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])

local paused = check_marker(grace)
begin()

-- A revoked lease is not held; told so, the KeepAlive that kept it ends,
-- and the lease a moment later.
if keeper ~= '' and revoked_seen(id, keeper) then
  tidy()
  return {-1, now_ms, paused}
end
local l = get_lease(id)
if l and l.revoked then
  l = nil
end
if not l then
  tidy()
  return {-1, now_ms, paused}
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
return lease_reply(1, paused, id, l)
