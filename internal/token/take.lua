-- take.lua takes one from a budget counted in a window: the refreshes a
-- client may cause in an hour, or the reports that may mint for an app.
-- With a marker, a charge already taken for the same thing (one client
-- reporting one token) is not taken again.
--
-- KEYS[1]  the window's counter
-- KEYS[2]  optional marker of what is charged
-- ARGV[1]  limit: the budget of the window (0: none)
-- ARGV[2]  ttl_ms: how long the counter and the marker are kept
--
-- Returns {1, used} when taken (or taken before), {0, used} when the budget
-- is spent.
local counter_key, marker_key = KEYS[1], KEYS[2]
local limit, ttl = tonumber(ARGV[1]), ARGV[2]

local used = tonumber(redis.call('GET', counter_key)) or 0
if marker_key and redis.call('EXISTS', marker_key) == 1 then
  return {1, used}
end
if limit > 0 and used >= limit then
  return {0, used}
end
used = redis.call('INCR', counter_key)
redis.call('PEXPIRE', counter_key, ttl)
if marker_key then
  redis.call('SET', marker_key, '1', 'PX', ttl)
end
return {1, used}
