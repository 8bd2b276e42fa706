-- take.lua spends cost from one limiter (GCRA, on Redis's clock); see
-- common.lua for the value.
--
-- KEYS[1] the limiter; KEYS[2] (optional) its slot's data-loss marker
-- ARGV[1] limit (L), ARGV[2] period (µs), ARGV[3] burst
-- ARGV[4] inc_q, ARGV[5] inc_r     cost × period / L as (µs, 1/L µs)
-- ARGV[6] tau_q, ARGV[7] tau_r     burst × period / L, the tolerance
-- ARGV[8] max_wait    µs the caller may wait for its turn; 0 decides at once
-- ARGV[9] grace       ms a missing marker holds lock grants back
-- ARGV[10] request    digest of the caller's request id, or ''
-- ARGV[11] keep       µs a decision is kept for the request's retries (after
--                     its turn, for a reserved one)
--
-- Returns {kind, now, remaining, after, reset, born, tat_q, tat_r}: kind
-- 1 allowed now, 2 allowed at now + after (a reserved turn: the caller
-- sleeps until then), 0 refused (after is the retry_after), +10 when
-- replayed for a retry; reset is how long until the limiter is full again (µs); born
-- names this life of the limiter, and tat is the one the call left (both
-- for refund.lua). Or {-1, params} when the limiter is in use with other
-- parameters.

local inc_q, inc_r = tonumber(ARGV[4]), tonumber(ARGV[5])
local tau_q, tau_r = tonumber(ARGV[6]), tonumber(ARGV[7])
local max_wait = tonumber(ARGV[8])
local grace = tonumber(ARGV[9])
local request = ARGV[10]
local keep_us = tonumber(ARGV[11])

local lost = loss_seen(grace)
local other = read()
if other then
  return {-1, other}
end
distrust(lost, tau_q, tau_r)

-- A retry gets its first call's decision. A reserved turn a retry claims
-- (kind 3) can no longer be given back by the first call (refund.lua):
-- the retry may be the one that uses it.
local e, i, j = find(request)
if e then
  local kind, after = e[1], math.max(e[4] - now, 0)
  if kind == 2 then
    e[1] = 3
    kept = string.sub(kept, 1, i - 1) .. entry(request, e) .. string.sub(kept, j)
    write()
  end
  if kind >= 2 then
    kind = 2
  end
  if kind == 2 and after == 0 then
    kind = 1
  end
  if kind == 1 then
    after = 0
  end
  return {kind + 10, now, e[2], after, math.max(e[3] - now, 0), born, -1, 0}
end

-- GCRA: the cost is allowed once its new tat, less the tolerance, is due.
local base_q, base_r = tat_q, tat_r
if base_q < now then
  base_q, base_r = now, 0
end
local new_q, new_r = add(base_q, base_r, inc_q, inc_r)
local allow_q, allow_r = sub(new_q, new_r, tau_q, tau_r)
local due = up(allow_q, allow_r)

local kind, remaining, after, reset_at = 0, 0, due - now, up(base_q, base_r)
if due <= now then
  -- How much more would pass at once: (now - allow) / (period / L).
  kind, after = 1, 0
  remaining = math.floor(((now - allow_q) * L - allow_r) / period)
  remaining = math.max(math.min(remaining, burst), 0)
elseif max_wait > 0 and due - now <= max_wait then
  kind = 2
end
if kind ~= 0 then
  tat_q, tat_r = new_q, new_r
  reset_at = up(new_q, new_r)
end

-- Write what changed: the new tat, or a refused call's decision kept for
-- its retries, or a limiter in place of a value no script wrote. A
-- refusal without a request id writes nothing.
if request ~= '' then
  keep(request, {kind, remaining, reset_at, now + after, now + after + keep_us})
end
if kind ~= 0 or request ~= '' or at < 0 then
  write()
end
return {kind, now, remaining, after, math.max(reset_at - now, 0), born, tat_q, tat_r}
