-- refund.lua gives back a reserved turn its caller will not use (it went
-- away before its turn), when it is the last turn taken: the limiter is
-- then as if the turn had never been reserved. A turn with others queued
-- behind it is not given back: they sleep until turns computed behind it,
-- and moving tat back would let a newcomer share one of their instants.
-- See common.lua for the value.
--
-- KEYS[1] the limiter; KEYS[2] (optional) its slot's data-loss marker
-- ARGV[1] limit (L), ARGV[2] period (µs), ARGV[3] burst
-- ARGV[4] inc_q, ARGV[5] inc_r     the turn's cost × period / L
-- ARGV[6] born        the limiter's life the turn was reserved in
-- ARGV[7] when        the turn (µs)
-- ARGV[8] tat_q, ARGV[9] tat_r     the limiter's tat the turn left
-- ARGV[10] grace      ms a missing marker holds lock grants back
-- ARGV[11] request    digest of the turn's request id, or ''
--
-- Returns 1 when given back, 0 when not: the turn has come, another turn
-- or take came after it, the limiter is another (expired, lost, other
-- parameters), Redis lost data since it was written, or a retry of the
-- request has claimed the turn.

local inc_q, inc_r = tonumber(ARGV[4]), tonumber(ARGV[5])
local turn_born, turn = tonumber(ARGV[6]), tonumber(ARGV[7])
local left_q, left_r = tonumber(ARGV[8]), tonumber(ARGV[9])
local grace = tonumber(ARGV[10])
local request = ARGV[11]

if now >= turn then
  return 0
end
if marker and not redis.call('GET', marker) then
  return 0
end
local lost = loss_seen(grace)
if read() or born ~= turn_born or at < 0 or lost > at or tat_q ~= left_q or tat_r ~= left_r then
  return 0
end
if request ~= '' then
  local e, i, j = find(request)
  if not e or e[1] ~= 2 then
    return 0
  end
  kept = string.sub(kept, 1, i - 1) .. string.sub(kept, j)
end
tat_q, tat_r = sub(tat_q, tat_r, inc_q, inc_r)
write()
return 1
