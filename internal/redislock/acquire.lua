-- acquire.lua grants a read or write hold, or re-enters the owner's lease.
--
-- KEYS[1] the lock's record (see common.lua)
-- KEYS[2] optional data-loss marker of its slot
-- ARGV[1] mode: 'r' or 'w'
-- ARGV[2] owner
-- ARGV[3] lease_id to use if a new lease is granted
-- ARGV[4] ttl_ms
-- ARGV[5] wait_ms: 0 tries once; otherwise a write request that is refused
--         queues as a waiting writer until now + wait_ms (writer preference)
-- ARGV[6] attempt id of this Acquire call: its place in the writers' queue,
--         and the tag of the hold it adds, so that hold can be undone
-- ARGV[7] '1' when the caller named the owner, '0' when lockd made one up
-- ARGV[8] request_id, or '' for none
-- ARGV[9] grace_ms: how long new grants wait after Redis lost its data
-- Every reply starts {status, now_ms, hold_until_ms}; hold_until is when
-- grants held back after a data loss resume (0 or past: none). Then:
--   granted:  {1, now, hold, lease_id, mode, hold_count, fencing_token, ttl_ms, expire_ms, owner}
--   replayed: {2, ...} the same fields, from a retried request_id's first result
--   busy:     {0, now, hold, retry_after_ms, holder}; holder is the owner of a
--             lease holding the key ('' when none)
--   upgrade:  {-2, now, hold} an owner holding only a read lease asked for write
--   in use:   {-4, now, hold} the key's permits are held (it is a semaphore)

local mode, owner, new_id = ARGV[1], ARGV[2], ARGV[3]
local ttl, wait_ms, attempt = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local given, request, grace = ARGV[7], ARGV[8], tonumber(ARGV[9])

local hold = check_marker(grace)
begin()

-- remaining is how long a lease still runs, at least 1ms.
local function remaining(l)
  return math.max(1, l.expire - now_ms)
end

-- queue keeps this call in the writers' queue until now + wait_ms,
-- keeping its place if it is queued already.
local function queue()
  local f = 'q:' .. attempt
  local q = redis.call('HGET', rec, f)
  local seq = q and string.match(q, '^(%d+)|')
  if not seq then
    h.qs = h.qs + 1
    h.nw = h.nw + 1
    seq = num(h.qs)
  end
  local deadline = now_ms + wait_ms
  redis.call('HSET', rec, f, seq .. '|' .. num(deadline))
  expires(deadline)
end

-- unqueue takes this call out of the writers' queue.
local function unqueue()
  if h.nw > 0 and redis.call('HDEL', rec, 'q:' .. attempt) == 1 then
    h.nw = h.nw - 1
  end
end

-- hold_granted tags the hold with this attempt, leaves the queue,
-- remembers the result for retries of request, and replies. extra are
-- more field-value pairs to write with the lease.
local function hold_granted(id, l, extra)
  add_attempt(l, attempt)
  put_lease(id, l, extra)
  unqueue()
  if request ~= '' then
    local f = 'ra:' .. request
    if redis.call('HSET', rec, f, table.concat({num(l.expire), given, id, l.mode, num(l.count),
        num(l.token), num(l.ttl), l.owner}, '|')) == 1 then
      h.nr = h.nr + 1
    end
  end
  tidy()
  return lease_reply(1, hold, id, l)
end

-- A retried request whose lease is still held gets the first result back
-- unchanged, if it comes from the same caller: the same mode and, when the
-- first call named its owner, the same owner; an owner-less first call
-- replays only to an owner-less retry. Any other call with that request id
-- is a new request (and does not take the first one's place).
local replayable = true
if request ~= '' then
  local r = redis.call('HGET', rec, 'ra:' .. request)
  if r then
    local exp, r_given, id, r_mode, count, token, r_ttl, r_owner =
      string.match(r, '^(%d+)|([01])|([^|]*)|(%a)|(%d+)|(%d+)|(%d+)|(.*)$')
    if exp and tonumber(exp) > now_ms and get_lease(id) then
      if r_mode == mode and r_given == given and (given == '0' or r_owner == owner) then
        return {2, now_ms, hold, id, r_mode, tonumber(count), tonumber(token), tonumber(r_ttl), tonumber(exp), r_owner}
      end
      replayable = false
    end
  end
end
if not replayable then
  request = ''
end

-- A key whose permits are held is a semaphore, not a lock.
if h.lim > 0 and h.nl > 0 then
  tidy()
  return {-4, now_ms, hold}
end

-- Reentrancy: the same owner in the same mode re-enters its lease. The
-- lease never gets shorter: it runs until the later of its expiry and now +
-- ttl, and keeps the longer of its ttl and this one.
local own = redis.call('HGET', rec, 'o:' .. mode .. ':' .. owner)
if own then
  local l = get_lease(own)
  if l then
    l.count = l.count + 1
    l.ttl = math.max(l.ttl, ttl)
    l.expire = math.max(l.expire, now_ms + ttl)
    return hold_granted(own, l)
  end
  if not lost_record then
    -- An owner pointer to no lease: the record does not add up.
    lose()
  end
end

local blocked_for = nil
local writer = h.w and get_lease(h.w)
if h.w and not writer and not lost_record then
  lose()
end
if lost_record then
  writer = nil
end

if mode == 'w' then
  if h.nl > 0 then
    if redis.call('HEXISTS', rec, 'o:r:' .. owner) == 1 then
      tidy()
      return {-2, now_ms, hold}
    end
    -- The holders' leases run at least until due (the earliest expiry the
    -- record knows of); a lone writer's exactly until its own.
    blocked_for = writer and remaining(writer) or math.max(1, (h.due or now_ms) - now_ms)
    if wait_ms > 0 then
      queue()
    end
  end
elseif writer then
  if writer.owner ~= owner then
    blocked_for = remaining(writer)
  end
  -- The write holder taking the read lock is a downgrade: allowed.
elseif h.nw > 0 then
  -- Writer preference: new readers wait while a writer waits, which is
  -- until the current holders go (or, with none left, until a queued
  -- writer takes the key or stops waiting).
  blocked_for = math.max(1, (h.due or now_ms) - now_ms)
end

-- After Redis lost its data, no new lease is granted until hold: leases
-- granted before may still be believed held by their holders.
if not blocked_for and hold > now_ms then
  blocked_for = hold - now_ms
end

if blocked_for then
  tidy()
  return {0, now_ms, hold, blocked_for, holder(writer)}
end

local token = math.max(h.fence + 1, now_us)
h.fence = token
h.nl = h.nl + 1
local l = {mode = mode, count = 1, token = token, ttl = ttl, expire = now_ms + ttl, keeper = '', attempts = '', owner = owner}
local extra = {'o:' .. mode .. ':' .. owner, new_id}
if mode == 'w' then
  table.insert(extra, 'w')
  table.insert(extra, new_id)
  h.w = new_id
end
return hold_granted(new_id, l, extra)
