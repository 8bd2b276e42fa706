-- common.lua is prepended to every lock script. It holds the record layout
-- and the bookkeeping every operation starts and ends with.
--
-- Every script takes the same first three KEYS, all under one hash tag:
--   KEYS[1] state   HASH  fence -> last fencing token issued
--                         wl -> lease_id of the write holder, if any
--                         o:<mode>:<owner> -> that owner's lease_id in <mode>
--                         l:<lease_id> -> "<mode>|<hold_count>|<fencing_token>|<ttl_ms>|<owner>"
--   KEYS[2] holders ZSET  lease_id -> expire time (ms, Redis clock)
--   KEYS[3] writers ZSET  waiting writer id -> end of its wait (ms, Redis clock)
-- Expiry is decided only by Redis's own clock (TIME).

local state, holders, writers = KEYS[1], KEYS[2], KEYS[3]

-- GRACE_MS is how long the state outlives its last holder or waiter, so the
-- fencing counter survives quick release/acquire cycles.
local GRACE_MS = 1000

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function num(x)
  return string.format('%.0f', x)
end

-- decode splits a lease record into its fields.
local function decode(rec)
  local mode, count, token, ttl, owner = string.match(rec, '^(%a)|(%d+)|(%d+)|(%d+)|(.*)$')
  return {mode = mode, count = tonumber(count), token = tonumber(token), ttl = tonumber(ttl), owner = owner}
end

local function encode(l)
  return l.mode .. '|' .. num(l.count) .. '|' .. num(l.token) .. '|' .. num(l.ttl) .. '|' .. l.owner
end

-- get_lease returns the record of a held lease, or nil. Lease fields have
-- their own prefix, so no lease_id can name another field.
local function get_lease(id)
  local rec = redis.call('HGET', state, 'l:' .. id)
  if not rec then
    return nil
  end
  return decode(rec)
end

local function put_lease(id, l)
  redis.call('HSET', state, 'l:' .. id, encode(l))
end

local function publish(channel, command)
  redis.call(command, channel, 'released')
end

-- drop removes one lease and everything that points at it.
local function drop(id, l)
  redis.call('HDEL', state, 'l:' .. id, 'o:' .. l.mode .. ':' .. l.owner)
  if l.mode == 'w' then
    redis.call('HDEL', state, 'wl')
  end
  redis.call('ZREM', holders, id)
end

-- purge forgets leases whose time is up and writers that stopped waiting,
-- and tells whether any lease was dropped.
local function purge()
  local gone = redis.call('ZRANGEBYSCORE', holders, '-inf', now_ms)
  for _, id in ipairs(gone) do
    local l = get_lease(id)
    if l then
      drop(id, l)
    else
      redis.call('ZREM', holders, id)
    end
  end
  redis.call('ZREMRANGEBYSCORE', writers, '-inf', now_ms)
  return #gone > 0
end

-- tidy gives every key of the lock an expiry just past the last lease or
-- wait it serves, so nothing outlives its use.
local function tidy()
  local last = now_ms
  local h = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  if h[2] then last = math.max(last, tonumber(h[2])) end
  local w = redis.call('ZRANGE', writers, -1, -1, 'WITHSCORES')
  if w[2] then last = math.max(last, tonumber(w[2])) end
  local px = num(last - now_ms + GRACE_MS)
  redis.call('PEXPIRE', state, px)
  if h[2] then redis.call('PEXPIRE', holders, px) end
  if w[2] then redis.call('PEXPIRE', writers, px) end
end

-- lease_reply is the reply for a lease that is held.
local function lease_reply(status, id, l)
  local exp = tonumber(redis.call('ZSCORE', holders, id))
  return {status, id, l.mode, l.count, l.token, l.ttl, exp, now_ms, l.owner}
end

