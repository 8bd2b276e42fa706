-- acquire.lua grants a read or write hold, or re-enters the owner's lease.
--
-- KEYS[1] the lock's record (see common.lua)
-- KEYS[2] optional data-loss marker of its slot
-- ARGV[1] mode, 'r' or 'w', then '1' when the caller named the owner or '0'
--         when lockd made one up: 'w1', 'r0', ...
-- ARGV[2] owner
-- ARGV[3] lease_id to use if a new lease is granted
-- ARGV[4] ttl_ms
-- ARGV[5] attempt id of this Acquire call: its place in the queue, and the
--         tag of the hold it adds, so that hold can be undone
-- ARGV[6] request (a digest of the request_id), or '' for none
-- ARGV[7] "<wait_ms>|<grace_ms>|<publish command>": wait_ms 0 tries once;
--         otherwise a write request that is refused takes (or keeps) a
--         place in the queue until now + wait_ms; grace_ms is how long new
--         grants wait after Redis lost its data; PUBLISH or SPUBLISH wakes
--         waiters on <record>:released
-- ARGV[8] not_after_ms: Redis's clock past which lockd has given up on this
--         call (its reply would reach nobody), or '0' for none: a call that
--         reaches Redis later does nothing and answers {-6, now}
-- The fast path answers a fresh lease on a free key with its fencing token
-- alone (a string), Redis's clock in microseconds at the grant: the lease
-- is the one asked for, held once, for ttl from that instant. Every other
-- reply starts {status, now_ms,
-- paused_until_ms}; paused_until is when grants held back after a data loss
-- resume (0 or past: none). Then:
--   granted:  {1, now, paused, lease_id, mode, hold_count, fencing_token, ttl_ms, expire_ms, owner}
--   replayed: {2, ...} the same fields, from a retried request_id's first result
--   busy:     {0, now, paused, retry_after_ms, holder, 0, behind, head_left};
--             holder is the owner of a lease holding the key ('' when
--             none, as when the key is free but others are queued ahead);
--             behind is 0 for the head of the queue (or a caller not
--             queued), 1 when the caller is queued behind others (it is
--             woken when its turn comes, so it need not re-check at the
--             holders' expiry), 2 when it is next in line: it re-checks
--             when the head's place would run out (head_left ms), in case
--             the head died
--   upgrade:  {-2, now, paused} an owner holding only a read lease asked for write
--   in use:   {-4, now, paused} the key's permits are held (it is a semaphore)
--   late:     {-6, now, 0} the call reached Redis after not_after_ms

-- The fast path: a key that does not exist (nobody holds it, nobody waits
-- for it), with no grant held back by a data loss (its slot's marker
-- reads '0'), becomes a lone lease in one SET NX PX: a GET, TIME and the
-- SET, and no Lua worth the name. The key's expiry is the lease's, and its
-- fencing token is Redis's clock in microseconds, past every token given
-- before. Anything else falls through to the full script below.
do
  if KEYS[2] then
    pre_marker = redis.call('GET', KEYS[2])
  end
  if not KEYS[2] or pre_marker == '0' then
    local t = redis.call('TIME')
    pre_time = t
    if ARGV[8] ~= '0' and tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[8]) then
      return {-6, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), 0}
    end
    local token = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
    if redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token .. '|' .. ARGV[4] .. '|' .. ARGV[3] .. '|' .. ARGV[5] .. '|' ..
        ARGV[6] .. '||' .. ARGV[2], 'NX', 'PX', ARGV[4]) then
      return token
    end
  end
end

--[[common]]

-- A call that reaches Redis after lockd gave up on it does nothing: lockd
-- is undoing whatever it might have done, and an undo that ran before it
-- would miss it.
if ARGV[8] ~= '0' and now_ms > tonumber(ARGV[8]) then
  return {-6, now_ms, 0}
end

local mode, given = string.sub(ARGV[1], 1, 1), string.sub(ARGV[1], 2, 2)
local owner, new_id, ttl, attempt, request = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local wait_ms, grace, publish_cmd = string.match(ARGV[7], '^(%d+)|(%d+)|(%a+)$')
wait_ms, grace = tonumber(wait_ms), tonumber(grace)
local channel = rec .. ':released'
waker_channel, waker_cmd = channel, publish_cmd

local paused = check_marker(grace)
begin()

-- remaining is how long a lease still runs, at least 1ms.
local function remaining(l)
  return math.max(1, l.expire - now_ms)
end

-- granted tags the hold with this attempt, leaves the queue, remembers
-- the result for retries of request, and replies. extra are more
-- field-value pairs to write with the lease.
local function granted(id, l, extra)
  add_attempt(l, attempt)
  remember(request, given, id, l, attempt)
  put_lease(id, l, extra)
  leave_queue(attempt)
  tidy()
  return lease_reply(1, paused, id, l)
end

local replayed
replayed, request = replay(request, mode, given, owner, paused, attempt)
if replayed then
  return replayed
end

-- A key whose permits are held is a semaphore, not a lock.
if h.lim > 0 and h.nl > 0 then
  tidy()
  return {-4, now_ms, paused}
end

-- Reentrancy: the same owner in the same mode re-enters its lease.
local own, held = reentered(mode, owner, ttl)
if own then
  return granted(own, held)
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
      return {-2, now_ms, paused}
    end
    -- The holders' leases run at least until due (the earliest expiry the
    -- record knows of); a lone writer's exactly until its own.
    blocked_for = writer and remaining(writer) or math.max(1, (h.due or now_ms) - now_ms)
  else
    -- The key is free: it goes to the head of the queue, in arrival
    -- order. A queued waiter re-checking wakes the head again, in case
    -- its wake-up was lost; the head takes its turn within its place's
    -- deadline or loses it.
    local head, kept = queue_head()
    if head and head ~= attempt then
      blocked_for = math.max(1, kept - now_ms)
      if redis.call('HEXISTS', rec, 'q:' .. attempt) == 1 then
        redis.call(publish_cmd, channel, head)
      end
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

-- After Redis lost its data, no new lease is granted until paused: leases
-- granted before may still be believed held by their holders.
if not blocked_for and paused > now_ms then
  blocked_for = paused - now_ms
end

if blocked_for then
  local behind, head_left = 0, 0
  if mode == 'w' and wait_ms > 0 then
    behind, head_left = place_of(attempt, join_queue(attempt, wait_ms))
  elseif wait_ms > 0 then
    -- A reader that waits is woken when readers may go in; releases
    -- publish that only while some reader may be waiting.
    h.rw = math.max(h.rw, now_ms + wait_ms)
  end
  tidy()
  return {0, now_ms, paused, blocked_for, holder(writer), 0, behind, head_left}
end

local l = new_lease(mode, owner, ttl)
if mode == 'w' then
  h.w = new_id
end
return granted(new_id, l, {'o:' .. mode .. ':' .. owner, new_id})
