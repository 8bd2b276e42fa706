-- describe.lua tells who holds a lock and who waits for it, and changes
-- nothing: leases, waiters and results that ran out are left for the next
-- operation to purge, and are not shown.
--
-- KEYS[1] the lock's record (see common.lua)
-- ARGV[1] how many holders to return at most
-- Returns {now_ms, last fencing token, limit, waiting writers, holders
-- held, leader's value or false, holders}: holders lists, the write holder
-- first, {mode, hold_count, fencing_token, ttl_ms, expire_ms, owner, role}
-- for each live lease, role being 'w' for the write holder, 'l' for an
-- election's leader, '' for the others.

local max_holders = tonumber(ARGV[1])

local all = redis.call('HGETALL', rec)
local f = {}
for i = 1, #all, 2 do
  f[all[i]] = all[i + 1]
end

-- The header: fence|nl|nw|nr|qs|qh|due|last|lim|rw|w (common.lua).
local header = {}
for x in string.gmatch((f['h'] or '') .. '|', '([^|]*)|') do
  table.insert(header, x)
end
local writer = header[11] ~= '' and header[11] or nil
local lead_id, lead_value = nil, false
if f['ev'] then
  local id, value = string.match(f['ev'], '^([^|]*)|(.*)$')
  if id and id == writer then
    lead_id, lead_value = id, value
  end
end

local waiting = 0
local held = 0
local holders = {}
for name, v in pairs(f) do
  local kind, id = string.match(name, '^(%a+):(.*)$')
  if kind == 'q' then
    local deadline = tonumber(string.match(v, '|(%d+)$'))
    if not deadline or deadline > now_ms then
      waiting = waiting + 1
    end
  elseif kind == 'l' then
    local l = decode(v, f['x:' .. id])
    if l and l.expire > now_ms then
      held = held + 1
      local role = ''
      if id == lead_id then
        role = 'l'
      elseif id == writer then
        role = 'w'
      end
      local entry = {l.mode, l.count, l.token, l.ttl, l.expire, l.owner, role}
      if role ~= '' then
        table.insert(holders, 1, entry)
      elseif #holders < max_holders then
        table.insert(holders, entry)
      end
    end
  end
end
while #holders > max_holders do
  table.remove(holders)
end

return {now_ms, tonumber(header[1] or '') or 0, tonumber(header[9] or '') or 0, waiting, held, lead_value, holders}
