-- pause.lua pauses new grants on one hash slot after lockd saw its Redis
-- restart or fail over: it sets the slot's data-loss marker to pause them
-- until now + grace, unless it already pauses them longer.
--
-- KEYS[1] the data-loss marker
-- ARGV[1] grace_ms
-- Returns the pause's end (ms, Redis clock).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local paused = now_ms + tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur > paused then
  return cur
end
redis.call('SET', KEYS[1], string.format('%.0f', paused))
return paused
