-- common.lua is prepended to every limiter script: the value's layout, its
-- arithmetic, and the data-loss check.
--
-- A limiter is ONE Redis string, KEYS[1] = <prefix>:rl:{<tag>}:
--
--   <limit>:<period>:<burst>|<tat_q>|<tat_r>|<born>|<at>|<replays>
--
-- limit, period (µs) and burst are the limiter's parameters; a call with
-- others is refused while the limiter is in use. tat is its theoretical
-- arrival time (GCRA), tat_q µs + tat_r/limit µs: exact, so no rounding
-- ever lets more through than the limit. born is when this life of the
-- limiter began, at when it was last written (µs, Redis clock). replays
-- are the decisions kept for retries, ';'-separated
-- "<request>,<expire>,<kind>,<remaining>,<reset_at>,<when>" (µs): kind 0
-- refused, 1 allowed, 2 a reserved turn, 3 a reserved turn a retry has
-- claimed; when is the reserved turn, or when a refused cost would have
-- been allowed.
--
-- A limiter whose tat has passed is full: the same as no limiter at all.
-- So the key expires then (or once its kept decisions do), and only then
-- may other parameters take the key over.
--
-- KEYS[2], when given, is the data-loss marker of the key's hash slot,
-- shared with the lock engine: "hold until" (ms), 0 when no loss was seen.
-- A missing marker means Redis lost its data: it is made again holding
-- until now + grace, as the lock scripts do. A loss seen at lost (the
-- hold less grace) means any limiter may have spent its whole burst just
-- before it, so a limiter missing, or last written before lost, counts
-- from tat >= lost + tau: never more than the limit across the loss.
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
  local hold = m and tonumber(m)
  if not hold then
    hold = math.floor(now / 1000) + grace
    redis.call('SET', marker, num(hold))
  end
  if hold > 0 then
    return (hold - grace) * 1000
  end
  return 0
end

-- The limiter, as read: a missing one is full (tat = now).
local tat_q, tat_r, born, at = now, 0, now, 0
local replays = {}

-- read loads the limiter; it returns the parameters it is in use with
-- when they differ from params (the caller is refused), else nil.
local function read()
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  local p, q, r, b, a, rest = string.match(v, '^([^|]*)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
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
  for d, e, k, rem, reset, w in string.gmatch(rest, '([^,;]+),(%d+),(%d+),(%d+),(%d+),(%d+)') do
    if tonumber(e) > now then
      replays[#replays + 1] = {d, tonumber(e), tonumber(k), tonumber(rem), tonumber(reset), tonumber(w)}
    end
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

local function encode(e)
  return e[1] .. ',' .. num(e[2]) .. ',' .. e[3] .. ',' .. num(e[4]) .. ',' .. num(e[5]) .. ',' .. num(e[6])
end

-- write stores the limiter with its kept decisions, or deletes it when
-- neither its tat nor any kept decision lies ahead.
local function write()
  local expire = up(tat_q, tat_r)
  local parts = {}
  for i, e in ipairs(replays) do
    parts[i] = encode(e)
    expire = math.max(expire, e[2])
  end
  local ttl_ms = math.ceil((expire - now) / 1000)
  if ttl_ms <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, params .. '|' .. num(tat_q) .. '|' .. num(tat_r) .. '|' .. num(born) .. '|' .. num(now) .. '|' .. table.concat(parts, ';'), 'PX', ttl_ms)
end

-- find returns the kept decision of request, and its index.
local function find(request)
  if request == '' then
    return nil
  end
  for i, e in ipairs(replays) do
    if e[1] == request then
      return e, i
    end
  end
  return nil
end
