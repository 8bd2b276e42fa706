-- pace.lua takes one call of the upstream from a value's budget: at most
-- one call per interval, and per_hour calls an hour, whatever the upstream
-- answers, so that no answer can drive the fleet into a loop of calls.
--
-- KEYS[1]  the gate, present while the last call is under interval old
-- KEYS[2]  the calls of the hour, counted from the first
-- ARGV[1]  interval_ms (0: none)
-- ARGV[2]  per_hour (0: no bound)
--
-- Returns {1, used} when a call may go now (and counts it); {0, 'pace',
-- wait_ms} or {0, 'hour', wait_ms} when not.
local gate_key, hour_key = KEYS[1], KEYS[2]
local interval, per_hour = tonumber(ARGV[1]), tonumber(ARGV[2])

local wait = redis.call('PTTL', gate_key)
if wait > 0 then
  return {0, 'pace', wait}
end
local used = tonumber(redis.call('GET', hour_key)) or 0
if per_hour > 0 and used >= per_hour then
  local left = redis.call('PTTL', hour_key)
  if left < 0 then
    redis.call('DEL', hour_key)
  else
    return {0, 'hour', left}
  end
end
if interval > 0 then
  redis.call('SET', gate_key, '1', 'PX', interval)
end
used = redis.call('INCR', hour_key)
if used == 1 then
  redis.call('PEXPIRE', hour_key, 3600000)
end
return {1, used}
