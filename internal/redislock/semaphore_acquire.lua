-- semaphore_acquire.lua grants one permit of a semaphore, or re-enters the
-- owner's. At most limit permits (leases of mode p) are held at once; the
-- record keeps the limit in lim while any is (see common.lua).
--
-- KEYS[1] the semaphore's record (see common.lua)
-- KEYS[2] optional data-loss marker of its slot
-- ARGV[1] limit: how many permits may be held at once, at least 1
-- ARGV[2] owner
-- ARGV[3] lease_id to use if a new permit is granted
-- ARGV[4] ttl_ms
-- ARGV[5] attempt id of this Acquire call: the tag of the hold it adds, so
--         that hold can be undone
-- ARGV[6] '1' when the caller named the owner, '0' when lockd made one up
-- ARGV[7] request_id, or '' for none
-- ARGV[8] grace_ms: how long new grants wait after Redis lost its data
-- ARGV[9] wait_ms: 0 tries once; otherwise a request that is refused takes
--         (or keeps) a place in the queue until now + wait_ms, and permits
--         go to the queue in arrival order
-- ARGV[10] channel that wakes waiters
-- ARGV[11] publish command: PUBLISH or SPUBLISH
-- ARGV[12] not_after_ms, or '0': as in acquire.lua, a call that reaches
--          Redis later does nothing and answers {-6, now, 0}
-- Every reply starts {status, now_ms, paused_until_ms}, as acquire.lua's. Then:
--   granted:  {1, now, paused, lease_id, 'p', hold_count, fencing_token, ttl_ms,
--             expire_ms, owner, available}
--   replayed: {2, ...} the same fields, from a retried request_id's first result
--   busy:     {0, now, paused, retry_after_ms, '', available, behind,
--             head_left}; behind and head_left as in acquire.lua
--   in use:   {-4, now, paused} the key is held as a lock
--   limit:    {-5, now, paused, limit} the permits held have another limit
-- available is how many permits are left free.

local limit, owner, new_id, ttl = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local attempt, given, request, grace = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local wait_ms, channel, publish_cmd = tonumber(ARGV[9]), ARGV[10], ARGV[11]
waker_channel, waker_cmd = channel, publish_cmd

if ARGV[12] ~= '0' and now_ms > tonumber(ARGV[12]) then
  return {-6, now_ms, 0}
end

local paused = check_marker(grace)
begin()

-- free is how many permits are left.
local function free()
  return math.max(0, limit - h.nl)
end

-- granted tags the hold with this attempt, leaves the queue, remembers
-- the result for retries of request, and replies. With a permit still
-- free, the next in the queue is woken for it.
local function granted(id, l, extra)
  add_attempt(l, attempt)
  remember(request, given, id, l, attempt)
  put_lease(id, l, extra)
  h.lim = limit
  if leave_queue(attempt) and h.nl < limit then
    local head = queue_head()
    if head then
      redis.call(publish_cmd, channel, head)
    end
  end
  tidy()
  local reply = lease_reply(1, paused, id, l)
  table.insert(reply, free())
  return reply
end

local replayed
replayed, request = replay(request, 'p', given, owner, paused, attempt)
if replayed then
  table.insert(replayed, free())
  return replayed
end

if h.nl > 0 and h.lim == 0 then
  tidy()
  return {-4, now_ms, paused}
end
if h.nl > 0 and h.lim ~= limit then
  tidy()
  return {-5, now_ms, paused, h.lim}
end

-- Reentrancy: the same owner re-enters its permit.
local own, held = reentered('p', owner, ttl)
if own then
  return granted(own, held)
end

-- Busy until the first permit held runs out, or until grants held back
-- after a data loss resume. A free permit goes to the head of the queue;
-- a queued waiter re-checking wakes the head again, in case its wake-up
-- was lost.
local blocked_for = nil
if h.nl >= limit then
  blocked_for = math.max(1, (h.due or now_ms) - now_ms)
else
  local head, kept = queue_head()
  if head and head ~= attempt then
    blocked_for = math.max(1, kept - now_ms)
    if redis.call('HEXISTS', rec, 'q:' .. attempt) == 1 then
      redis.call(publish_cmd, channel, head)
    end
  elseif paused > now_ms then
    blocked_for = paused - now_ms
  end
end
if blocked_for then
  local behind, head_left = 0, 0
  if wait_ms > 0 then
    behind, head_left = place_of(attempt, join_queue(attempt, wait_ms))
  end
  tidy()
  return {0, now_ms, paused, blocked_for, '', free(), behind, head_left}
end

local l = new_lease('p', owner, ttl)
return granted(new_id, l, {'o:p:' .. owner, new_id})
