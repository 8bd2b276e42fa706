-- release.lua takes one hold away from a lease and ends it at zero.
--
-- KEYS[1..3] state, holders, writers (see common.lua)
-- KEYS[4]    optional request key: request_id -> remaining hold_count
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

if request then
  local done = redis.call('GET', request)
  if done then
    return {1, tonumber(done)}
  end
end

local rec = redis.call('HGET', state, id)
if not rec then
  if expired then
    publish(channel, publish_cmd)
  end
  tidy()
  return {-1}
end

local l = decode(rec)
local remember = l.ttl
l.count = l.count - 1
if l.count > 0 then
  redis.call('HSET', state, id, encode(l))
else
  drop(id, l)
end
if request then
  redis.call('SET', request, num(l.count), 'PX', num(remember))
end
-- Waiters can only get in when a writer leaves or the last holder goes.
if expired or (l.count == 0 and (l.mode == 'w' or redis.call('ZCARD', holders) == 0)) then
  publish(channel, publish_cmd)
end
tidy()
return {1, l.count, l.mode, math.max(0, math.floor((now_us - l.token) / 1000))}
