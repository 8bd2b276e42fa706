-- release.lua takes one hold away from a lease and ends it at zero, or,
-- for a KeepAlive closing with release_on_close, ends the whole lease if
-- that KeepAlive is still the lease's newest keeper.
--
-- KEYS[1] the lock's record (see common.lua)
-- KEYS[2] with a request: its remembered result, <prefix>:rr:{<key>}:<request>
-- ARGV[1] lease_id
-- ARGV[2] request (a digest of the request_id), or '' for none
-- ARGV[3] keeper id: '' takes one hold; otherwise the whole lease goes,
--         but only if this is its newest keeper
-- ARGV[4] publish command, PUBLISH or SPUBLISH, that wakes waiters on
--         <record>:released
-- ARGV[5] optional: a writer waiting in this lockd that believes it heads
--         the queue, handed the key in this script if it does and the key
--         comes free (see Handing over, below):
--         "<attempt>|<given>|<ttl_ms>|<not_after_ms>|<grace_ms>|<lease_id>|
--         <request>|<marker>|<owner>", each as acquire.lua takes it;
--         marker 1 when the slot's data-loss marker is the last key, 0
--         when there is none
-- Returns {1, hold_count, mode, held_ms} (hold_count 0 when the lease ended;
-- held_ms is how long since the lease was granted, read off its fencing
-- token, which is Redis's clock in microseconds at the grant), {1,
-- hold_count} for a retried request, {-1} when the lease is not held, and
-- {-3} when a newer KeepAlive keeps the lease. The fast path ends a lone
-- lease with {5, fencing_token} (write) or {6, fencing_token} (read).
-- A lease ended with the key handed over answers {1, 0, mode, held_ms,
-- grant}, grant being acquire.lua's granted reply to the writer handed it.

-- The fast path: the lock is a lone lease kept as a string (common.lua),
-- which only exists while the lease runs and which nobody waits for: it
-- ends with a GET and a DEL. Held once,
-- the lease cannot be found by a retried request: the first call ended it.
-- A key that does not exist, or holds another lease, means
-- this one is not held, but for a retried request, whose result the full
-- script finds. A request adds the SET of its remembered result. Anything
-- else falls through to the full script below.
do
  local id, request = ARGV[1], ARGV[2]
  if ARGV[3] == '' then
    local v = redis.pcall('GET', KEYS[1])
    local mode, token, ttl, held
    if type(v) == 'string' then
      mode, token, ttl, held = string.match(v, '^([rw])[01]|(%d+)|(%d+)|([^|]+)|')
    end
    if held == id then
      redis.call('DEL', KEYS[1])
      if request ~= '' then
        redis.call('SET', KEYS[2], id .. '|0', 'PX', ttl)
      end
      if mode == 'w' then
        return {5, token}
      end
      return {6, token}
    elseif request == '' and (not v or held) then
      return {-1}
    end
  end
end

--[[common]]

local id, request, keeper, publish_cmd = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local channel = rec .. ':released'

local expired = begin()

-- A retried request for the same lease returns its first result.
if request ~= '' then
  local done = redis.call('GET', KEYS[2])
  if done then
    local done_id, count = string.match(done, '^(.*)|(%d+)$')
    if done_id == id then
      tidy()
      return {1, tonumber(count)}
    end
  end
end

if revoked_seen(id, keeper) then
  tidy()
  return {-1}
end
local l = get_lease(id)
if not l then
  if expired or lost_record then
    wake_next(channel, publish_cmd)
  end
  tidy()
  return {-1}
end
if keeper ~= '' and l.keeper ~= keeper then
  tidy()
  return {-3}
end

if keeper ~= '' then
  l.count = 0
else
  l.count = l.count - 1
end
if l.count > 0 then
  put_lease(id, l)
else
  drop(id, l)
end
if request ~= '' then
  redis.call('SET', KEYS[2], id .. '|' .. num(l.count), 'PX', num(l.ttl))
end

-- Handing over: the key comes free and the writer at the head of the queue
-- waits in the lockd that sends this release. It is granted here, as its
-- own acquire.lua would grant it once woken, and its lockd hands it the
-- grant: a handoff costs one script and one round trip instead of a wake-up
-- message, a second script and a second round trip. Only a waiter alive
-- in the releasing lockd is handed the key (a dead one never is: it holds
-- nobody up beyond its place); anything else wakes it as usual.
local function hand_over()
  local attempt, given, ttl, not_after, grace, new_id, hreq, marker, owner = string.match(ARGV[5] or '',
    '^([%w_%-]+)|([01])|(%d+)|(%d+)|(%d+)|([^|]+)|([%w_%-]*)|([01])|(.*)$')
  if not attempt or lost_record or h.nl > 0 or h.lim > 0 or (not_after ~= '0' and now_ms > tonumber(not_after)) then
    return nil
  end
  waker_channel, waker_cmd = channel, publish_cmd
  -- With no lease held, the writer has none to re-enter or upgrade: it
  -- gets a fresh lease, as acquire.lua would give it.
  if queue_head() ~= attempt then
    return nil
  end
  local paused = check_marker(tonumber(grace), marker == '1' and KEYS[#KEYS] or '')
  if paused > now_ms then
    return nil
  end
  local replayed
  replayed, hreq = replay(hreq, 'w', given, owner, paused, attempt)
  if replayed then
    return nil
  end
  local hl = new_lease('w', owner, tonumber(ttl))
  h.w = new_id
  add_attempt(hl, attempt)
  remember(hreq, given, new_id, hl, attempt)
  put_lease(new_id, hl, {'o:w:' .. owner, new_id})
  leave_queue(attempt)
  -- The queue moves on now: the new head learns it at once (it keeps its
  -- place while the key is held, and offers its acquire in turn), and the
  -- one next in line how long to watch it.
  queue_head()
  return lease_reply(1, paused, new_id, hl)
end

local grant = nil
if l.count == 0 and not expired then
  grant = hand_over()
end
-- Waiters can only get in when a writer leaves or the last holder goes,
-- or, on a semaphore, when a permit comes free; then only those who can
-- be granted are woken.
if not grant and (expired or (l.count == 0 and (l.mode ~= 'r' or h.nl == 0))) then
  wake_next(channel, publish_cmd)
end
tidy()
return {1, l.count, l.mode, math.max(0, math.floor((now_us - l.token) / 1000)), grant}
