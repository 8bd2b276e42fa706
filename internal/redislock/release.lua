-- release.lua takes one hold away from a lease and ends it at zero.
--
-- KEYS[1..3] state, holders, writers (see common.lua)
-- KEYS[4]    optional request key: request_id -> "<lease_id>|<hold_count left>"
-- ARGV[1] lease_id
-- ARGV[2] channel that wakes waiters
-- ARGV[3] publish command: PUBLISH or SPUBLISH
-- Returns {1, hold_count, mode, held_ms} (hold_count 0 when the lease ended;
-- held_ms is how long since the lease was granted, read off its fencing
-- token, which is Redis's clock in microseconds at the grant) or {-1} when
-- the lease is not held. A retried request returns {1, hold_count}.

local id, channel, publish_cmd = ARGV[1], ARGV[2], ARGV[3]
local request = KEYS[4]

local expired = purge()

-- A retried request for the same lease returns its first result.
if request then
  local done = redis.call('GET', request)
  if done then
    local done_id, count = string.match(done, '^(.*)|(%d+)$')
    if done_id == id then
      return {1, tonumber(count)}
    end
  end
end

local l = get_lease(id)
if not l then
  if expired then
    publish(channel, publish_cmd)
  end
  tidy()
  return {-1}
end

local remember = l.ttl
l.count = l.count - 1
if l.count > 0 then
  put_lease(id, l)
else
  drop(id, l)
end
if request then
  redis.call('SET', request, id .. '|' .. num(l.count), 'PX', num(remember))
end
-- Waiters can only get in when a writer leaves or the last holder goes.
if expired or (l.count == 0 and (l.mode == 'w' or redis.call('ZCARD', holders) == 0)) then
  publish(channel, publish_cmd)
end
tidy()
return {1, l.count, l.mode, math.max(0, math.floor((now_us - l.token) / 1000))}
