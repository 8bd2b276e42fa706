-- acquire.lua grants a read or write hold, or re-enters the owner's lease.
--
-- KEYS[1..3] state, holders, writers (see common.lua)
-- KEYS[4]    optional request key: request_id -> lease_id, for idempotent retries
-- ARGV[1] mode: 'r' or 'w'
-- ARGV[2] owner
-- ARGV[3] lease_id to use if a new lease is granted
-- ARGV[4] ttl_ms
-- ARGV[5] wait_ms: 0 tries once; otherwise a write request that is refused
--         queues as a waiting writer until now + wait_ms (writer preference)
-- ARGV[6] waiter id of this call
-- ARGV[7] '1' when the caller named the owner, '0' when lockd made one up
-- Returns {1, lease_id, mode, hold_count, fencing_token, ttl_ms, expire_ms, now_ms, owner}
-- when granted ({2, ...} when a retried request_id replays its lease),
-- {0, retry_after_ms} when the key is busy, and {-2} when an owner holding
-- only a read lease asks for the write lock.

local mode, owner, new_id = ARGV[1], ARGV[2], ARGV[3]
local ttl, wait_ms, waiter = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local owner_given = ARGV[7] == '1'
local request = KEYS[4]

purge()

-- last_holder is how long until the last current holder's lease ends.
local function last_holder()
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  return math.max(1, tonumber(last[2]) - now_ms)
end

local function remaining(id)
  local score = redis.call('ZSCORE', holders, id)
  if not score then return 1 end
  return math.max(1, tonumber(score) - now_ms)
end

-- hold starts the lease's ttl now, takes this call out of the writers'
-- queue, remembers its request id and replies with the lease.
local function hold(id, l)
  redis.call('ZADD', holders, num(now_ms + ttl), id)
  redis.call('ZREM', writers, waiter)
  if request then
    redis.call('SET', request, id, 'PX', num(ttl))
  end
  tidy()
  return lease_reply(1, id, l)
end

local function grant_existing(id, l)
  l.count = l.count + 1
  l.ttl = ttl
  put_lease(id, l)
  return hold(id, l)
end

-- A retried request whose lease is still held gets it back unchanged, as
-- long as it asks for the same mode (and owner, when it names one): a
-- request_id never hands one caller another's lease.
if request then
  local id = redis.call('GET', request)
  local l = id and get_lease(id)
  if l and l.mode == mode and (l.owner == owner or not owner_given) then
    return lease_reply(2, id, l)
  end
end

-- Reentrancy: the same owner in the same mode re-enters its lease.
local own = redis.call('HGET', state, 'o:' .. mode .. ':' .. owner)
if own then
  return grant_existing(own, get_lease(own))
end

local writer = redis.call('HGET', state, 'wl')
local blocked_for = nil

if mode == 'w' then
  if redis.call('ZCARD', holders) > 0 then
    if redis.call('HEXISTS', state, 'o:r:' .. owner) == 1 then
      return {-2}
    end
    blocked_for = last_holder()
    if wait_ms > 0 then
      redis.call('ZADD', writers, num(now_ms + wait_ms), waiter)
    end
  end
else
  if writer then
    if get_lease(writer).owner ~= owner then
      blocked_for = remaining(writer)
    end
    -- The write holder taking the read lock is a downgrade: allowed.
  elseif redis.call('ZCARD', writers) > 0 then
    -- Writer preference: new readers wait while a writer waits, which is
    -- until the current holders go (or, with none left, until a queued
    -- writer takes the key or stops waiting).
    if redis.call('ZCARD', holders) > 0 then
      blocked_for = last_holder()
    else
      local first = redis.call('ZRANGE', writers, 0, 0, 'WITHSCORES')
      blocked_for = math.max(1, tonumber(first[2]) - now_ms)
    end
  end
end

if blocked_for then
  tidy()
  return {0, blocked_for}
end

local fence = tonumber(redis.call('HGET', state, 'fence') or '0')
local token = math.max(fence + 1, now_us)
local l = {mode = mode, count = 1, token = token, ttl = ttl, owner = owner}
redis.call('HSET', state, 'fence', num(token), 'l:' .. new_id, encode(l), 'o:' .. mode .. ':' .. owner, new_id)
if mode == 'w' then
  redis.call('HSET', state, 'wl', new_id)
end
return hold(new_id, l)
