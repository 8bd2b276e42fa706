-- release.lua takes one hold away from a lease and ends it at zero, or,
-- for a KeepAlive closing with release_on_close, ends the whole lease if
-- that KeepAlive is still the lease's newest keeper.
--
-- KEYS[1] the lock's record (see common.lua)
-- ARGV[1] lease_id
-- ARGV[2] request_id, or '' for none
-- ARGV[3] channel that wakes waiters
-- ARGV[4] publish command: PUBLISH or SPUBLISH
-- ARGV[5] keeper id: '' takes one hold; otherwise the whole lease goes,
--         but only if this is its newest keeper
-- Returns {1, hold_count, mode, held_ms} (hold_count 0 when the lease ended;
-- held_ms is how long since the lease was granted, read off its fencing
-- token, which is Redis's clock in microseconds at the grant), {1,
-- hold_count} for a retried request, {-1} when the lease is not held, and
-- {-3} when a newer KeepAlive keeps the lease.

local id, request, channel, publish_cmd, keeper = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local expired = begin()

-- A retried request for the same lease returns its first result.
if request ~= '' then
  local done = redis.call('HGET', rec, 'rr:' .. request)
  if done then
    local _, done_id, count = string.match(done, '^(%d+)|(.*)|(%d+)$')
    if done_id == id then
      return {1, tonumber(count)}
    end
  end
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
  local until_ms = now_ms + l.ttl
  if redis.call('HSET', rec, 'rr:' .. request, num(until_ms) .. '|' .. id .. '|' .. num(l.count)) == 1 then
    h.nr = h.nr + 1
  end
  expires(until_ms)
end
-- Waiters can only get in when a writer leaves or the last holder goes,
-- or, on a semaphore, when a permit comes free; then only those who can
-- be granted are woken.
if expired or (l.count == 0 and (l.mode ~= 'r' or h.nl == 0)) then
  wake_next(channel, publish_cmd)
end
tidy()
return {1, l.count, l.mode, math.max(0, math.floor((now_us - l.token) / 1000))}
