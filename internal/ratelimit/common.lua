-- common.lua is prepended to every limiter script: the value's layout, its
-- arithmetic, and the data-loss check.
--
-- A limiter is ONE Redis string, KEYS[1] = <prefix>:rl:{<tag>}:
--
--   <limit>:<period>:<burst>|<tat_q>|<tat_r>|<born>|<at>|<kept_until>|<kept>
--
-- limit, period (µs) and burst are the limiter's parameters; a call with
-- others is refused while the limiter is in use. tat is its theoretical
-- arrival time (GCRA), tat_q µs + tat_r/limit µs: exact, so no rounding
-- ever lets more through than the limit. born is when this life of the
-- limiter began, at when it was last written (µs, Redis clock). kept are
-- the decisions kept for retries, oldest first, each
-- ";<request>,<expire>,<kind>,<remaining>,<reset_at>,<when>" (µs): kind 0
-- refused, 1 allowed, 2 a reserved turn, 3 a reserved turn a retry has
-- claimed; when is the reserved turn, or when a refused cost would have
-- been allowed. kept_until is when the last of them expires. They are
-- searched as a string (request digests have a fixed length and no
-- separator) and never parsed as a whole, so keeping them costs a call
-- without a request id nothing.
--
-- A limiter whose tat has passed is full: the same as no limiter at all.
-- So the key expires then (or once its kept decisions do), and only then
-- may other parameters take the key over.
--
-- KEYS[2], when given, is the data-loss marker of the key's hash slot,
-- shared with the lock engine: "paused until" (ms), 0 when no loss was
-- seen. A missing marker means Redis lost its data: it is made again
-- pausing until now + grace, as the lock scripts do. A loss seen at lost
-- (the pause's end less grace) means any limiter may have spent its
-- whole burst just before it, so a limiter missing, or last written before
-- lost, counts from tat >= lost + tau: never more than the limit across
-- the loss.
--
-- Every script binds ARGV[1..3] = limit, period, burst.

local key, marker = KEYS[1], KEYS[2]
local L = tonumber(ARGV[1])
local params = ARGV[1] .. ':' .. ARGV[2] .. ':' .. ARGV[3]
local period, burst = tonumber(ARGV[2]), tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function num(x)
  return string.format('%.0f', x)
end

-- Instants and spans are (q, r): q µs + r/L µs, 0 <= r < L.
local function add(aq, ar, bq, br)
  local q, r = aq + bq, ar + br
  if r >= L then
    q, r = q + 1, r - L
  end
  return q, r
end

local function sub(aq, ar, bq, br)
  local q, r = aq - bq, ar - br
  if r < 0 then
    q, r = q - 1, r + L
  end
  return q, r
end

-- up is the first whole µs at or after (q, r).
local function up(q, r)
  if r > 0 then
    return q + 1
  end
  return q
end

-- later reports whether (aq, ar) is after (bq, br).
local function later(aq, ar, bq, br)
  return aq > bq or (aq == bq and ar > br)
end

-- loss_seen returns when the marker last saw Redis lose its data (µs), 0
-- when never, making a missing marker again; 0 without a marker.
local function loss_seen(grace)
  if not marker then
    return 0
  end
  local m = redis.call('GET', marker)
  local paused = m and tonumber(m)
  if not paused then
    paused = math.floor(now / 1000) + grace
    redis.call('SET', marker, num(paused))
  end
  if paused > 0 then
    return (paused - grace) * 1000
  end
  return 0
end

-- The limiter, as read: a missing one is full (tat = now).
local tat_q, tat_r, born, at = now, 0, now, 0
local kept, kept_until = '', 0

-- MAX_KEPT bounds kept, in bytes: about 16 decisions.
local MAX_KEPT = 1536

-- read loads the limiter; it returns the parameters it is in use with
-- when they differ from params (the caller is refused), else nil.
local function read()
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  local p, q, r, b, a, u, rest = string.match(v, '^([^|]*)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  if not p then
    -- A value no script wrote: the limiter counts as spent until now.
    at = -1
    return nil
  end
  q, r = tonumber(q), tonumber(r)
  local busy = later(q, r, now, 0)
  if p ~= params then
    if busy then
      return p
    end
    return nil
  end
  if busy then
    tat_q, tat_r = q, r
  end
  born, at = tonumber(b), tonumber(a)
  u = tonumber(u)
  if u > now then
    kept, kept_until = rest, u
  end
  return nil
end

-- distrust raises tat to lost + tau when the limiter was not written since
-- a loss seen at lost (or holds a value no script wrote: at < 0).
local function distrust(lost, tau_q, tau_r)
  if at < 0 then
    lost = now
  end
  if lost > at then
    local lq, lr = add(lost, 0, tau_q, tau_r)
    if later(lq, lr, tat_q, tat_r) then
      tat_q, tat_r = lq, lr
    end
  end
end

-- find returns the kept decision of request, {kind, remaining, reset_at,
-- when, expire}, and where its entry lies in kept: from i to before j.
local function find(request)
  if request == '' or kept == '' then
    return nil
  end
  local i = string.find(kept, ';' .. request .. ',', 1, true)
  if not i then
    return nil
  end
  local j = string.find(kept, ';', i + 1, true) or #kept + 1
  local e, k, rem, reset, w = string.match(string.sub(kept, i, j - 1), '^;[^,]+,(%d+),(%d+),(%d+),(%d+),(%d+)$')
  if not e or tonumber(e) <= now then
    return nil
  end
  return {tonumber(k), tonumber(rem), tonumber(reset), tonumber(w), tonumber(e)}, i, j
end

-- entry encodes a kept decision of request.
local function entry(request, d)
  return ';' .. request .. ',' .. num(d[5]) .. ',' .. d[1] .. ',' .. num(d[2]) .. ',' .. num(d[3]) .. ',' .. num(d[4])
end

-- keep adds a decision of request, dropping the oldest beyond MAX_KEPT.
local function keep(request, d)
  kept = kept .. entry(request, d)
  kept_until = math.max(kept_until, d[5])
  while #kept > MAX_KEPT do
    local oldest_end = string.find(kept, ';', 2, true)
    kept = string.sub(kept, oldest_end)
  end
end

-- write stores the limiter with its kept decisions, or deletes it when
-- neither its tat nor any kept decision lies ahead.
local function write()
  if kept_until <= now then
    kept, kept_until = '', 0
  end
  local ttl_ms = math.ceil((math.max(up(tat_q, tat_r), kept_until) - now) / 1000)
  if ttl_ms <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, params .. '|' .. num(tat_q) .. '|' .. num(tat_r) .. '|' .. num(born) .. '|' .. num(now) .. '|' ..
    num(kept_until) .. '|' .. kept, 'PX', ttl_ms)
end
