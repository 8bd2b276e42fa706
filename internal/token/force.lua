-- force.lua takes one force_refresh from an app's budget: WeChat allows a
-- limited number a day, a minimum interval apart.
--
-- KEYS[1]  the force_refresh counter of the day (Asia/Shanghai)
-- KEYS[2]  the gate, present while the last force_refresh is too recent
-- ARGV[1]  per_day: the daily limit (0: none)
-- ARGV[2]  interval_ms: the least time between two (0: none)
-- ARGV[3]  counter_ttl_ms: how long day counters are kept
--
-- Returns {1} when a force_refresh may be sent now (and counts it),
-- {0, 'daily', used} or {0, 'interval', wait_ms} when not.
local counter_key, gate_key = KEYS[1], KEYS[2]
local per_day, interval, counter_ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]

local used = tonumber(redis.call('GET', counter_key)) or 0
if per_day > 0 and used >= per_day then
  return {0, 'daily', used}
end
if interval > 0 then
  local wait = redis.call('PTTL', gate_key)
  if wait > 0 then
    return {0, 'interval', wait}
  end
  redis.call('SET', gate_key, '1', 'PX', interval)
end
redis.call('INCR', counter_key)
redis.call('PEXPIRE', counter_key, counter_ttl)
return {1}
