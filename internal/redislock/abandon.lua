-- abandon.lua undoes what one Acquire attempt did when its caller never
-- heard of it: the hold the attempt added (tagged with its attempt id), and
-- its place in the queue. Running it again does nothing more. Whoever can
-- be granted once it is undone is woken.
--
-- KEYS[1] the lock's record (see common.lua)
-- ARGV[1] attempt id
-- ARGV[2] mode of the attempt: 'r', 'w' or 'p'
-- ARGV[3] owner of the attempt
-- ARGV[4] '1' to undo the attempt's hold, '0' to only leave the queue
-- ARGV[5] channel that wakes waiters
-- ARGV[6] publish command: PUBLISH or SPUBLISH
-- ARGV[7] the attempt's request_id, or '': its remembered result goes with
--         the hold
-- Returns {hold undone (0/1), left the queue (0/1), now_ms}: Redis's clock,
-- by which an undo that found nothing knows whether the attempt could still
-- reach Redis (see not_after_ms in acquire.lua).

local attempt, mode, owner, undo_hold = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local channel, publish_cmd, request = ARGV[5], ARGV[6], ARGV[7]

local wake = begin() or lost_record

local left = 0
if leave_queue(attempt) then
  left = 1
  -- The next in the queue, or the readers held back, may go in.
  wake = true
end

local undone = 0
if undo_hold == '1' then
  local id = redis.call('HGET', rec, 'o:' .. mode .. ':' .. owner)
  local l = id and get_lease(id)
  if l and has_attempt(l, attempt) then
    remove_attempt(l, attempt)
    if request ~= '' then
      if redis.call('HDEL', rec, 'ra:' .. request) == 1 then
        h.nr = h.nr - 1
      end
      local list = {}
      for r in string.gmatch(l.remembered, '[^,]+') do
        if r ~= request then table.insert(list, r) end
      end
      l.remembered = table.concat(list, ',')
    end
    l.count = l.count - 1
    if l.count > 0 then
      put_lease(id, l)
    else
      drop(id, l)
      if l.mode ~= 'r' or h.nl == 0 then wake = true end
    end
    undone = 1
  end
end

if wake then
  wake_next(channel, publish_cmd)
end
tidy()
return {undone, left, now_ms}
