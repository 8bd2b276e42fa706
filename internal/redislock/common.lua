-- common.lua is spliced into every lock script, after the script's fast
-- path (where it has one) and before the rest: only calls that leave the
-- fast path pay for defining these functions. It holds the record layout
-- and the bookkeeping every operation starts and ends with.
--
-- A lock is ONE Redis key, KEYS[1] = <prefix>:{<key>}, so that eviction or
-- expiry takes all of it or nothing. A lock held by one lease with nothing
-- else to keep (the common case, granted by acquire.lua's fast path) is a
-- string whose expiry is the lease's:
--
--   "<mode><owner_given>|<fencing_token>|<ttl_ms>|<lease_id>|<attempt>|
--    <request>|<keeper>|<owner>"
--
-- (mode r or w; the lease is held once; attempt, request and keeper as in
-- x: below, so lease ids never hold '|'). Release and Renew serve it in a
-- few commands; any other script first turns it into the hash it stands
-- for (promote, below). Otherwise the lock is a hash, with the fields:
--
--   h                the header, "<fence>|<nl>|<nw>|<nr>|<qs>|<qh>|<due>|
--                    <last>|<lim>|<rw>|<w>", one field read and written
--                    once per script (an empty number reads as zero; an
--                    empty due as nothing due):
--     fence          last fencing token issued for the key
--     nl             number of leases held
--     nw             number of waiters queued (q:): writers, and callers
--                    waiting for a semaphore's permit
--     nr             number of remembered Acquire results (ra:)
--     qs             arrival counter of the queue: the seq last given out
--     qh             the queue's head is the lowest live seq above qh;
--                    seqs up to qh are done with (granted, left, expired)
--     due            no lease, queued waiter or remembered result expires
--                    before this (ms, Redis clock): purge walks the hash only
--                    once it has passed, so operations stay O(1)
--     last           nothing expires after this (ms): the hash expires
--                    GRACE_MS later
--     lim            while semaphore permits are held: the semaphore's
--                    limit. Zero otherwise; then no lease is a permit. A
--                    key is a lock or a semaphore, never both.
--     rw             until when readers may be waiting (ms): a reader
--                    refused while willing to wait sets it, and only while
--                    it lies ahead does a release wake readers ('r')
--     w              lease_id of the write holder, if any (last: a lease id
--                    never holds '|')
--   ev               an election's leader and its value:
--                    "<lease_id>|<value>". The key's write holder leads the
--                    election while ev names its lease (proclaim.lua sets
--                    it: a campaign as soon as it holds the lock, then the
--                    leader at will); an ev naming any other lease is stale
--                    and means no leader. The term is the leader's fencing
--                    token.
--   l:<lease_id>     a lease: "<mode>|<hold_count>|<fencing_token>|<ttl_ms>|
--                    <owner>"; mode is r (read), w (write; an election's
--                    leader is one) or p (a semaphore permit)
--   x:<lease_id>     its changing part: "<expire_ms>|<keeper>|<attempts>|
--                    <remembered>";
--                    keeper is the id of the lease's newest KeepAlive, after
--                    a '!' once an administrator ended the lease while a
--                    KeepAlive kept it (force_release.lua): such a revoked
--                    lease is held by nobody (renewals, releases and
--                    re-entries find it not held) but still holds the key
--                    until it runs out: a moment after that keeper, told
--                    on the key's channel, renews, finds it not held and
--                    ends its stream (REVOKED_MS), so that the holder
--                    learns before anyone is granted the key;
--                    attempts lists the Acquire attempts (newest last, at most
--                    MAX_ATTEMPTS) whose hold the lease still counts, so an
--                    attempt whose reply was lost can be undone exactly;
--                    remembered lists the request keys whose ra: results
--                    name the lease, dropped with it (at most MAX_ATTEMPTS
--                    too; an older one runs out by its own expiry). (Two
--                    fields keep each value short, and with it the hash in
--                    Redis's compact encoding.)
--   o:<mode>:<owner> that owner's lease_id in that mode (reentrancy)
--   q:<attempt>      a queued waiter (the Acquire attempt's id):
--                    "<seq>|<deadline_ms>"; seq is its place in arrival
--                    order. The waiter renews deadline at each re-check;
--                    past it, the entry is dropped, so a waiter that died
--                    holds nobody up for longer.
--   s:<seq>          the place at seq: "<attempt>|<deadline_ms>", the
--                    attempt queued there and the same deadline as its q:
--                    (both are written together), so the head is found by
--                    walking up from qh (each seq is passed once), one
--                    field per place
--   ra:<request>     an Acquire's first result, replayed to its retries
--                    while its lease is held:
--                    "<expire_ms>|<owner_given>|<lease_id>|<mode>|<hold_count>|
--                    <fencing_token>|<ttl_ms>|<owner>"; <request> is a digest
--                    of the request_id (keys.go), so it is short and safe
--
-- A Release's first result, replayed to its retries, is a string key of
-- its own in the same hash slot, <prefix>:rr:{<key>}:<request>, holding
-- "<lease_id>|<hold_count>" for the lease's ttl: it outlives the lease it
-- ended, and never makes the hash grow with the releases of a busy key.
--
-- Leases, waiters and results each carry their own expiry; purge drops them
-- when it passes. Any state a script cannot make sense of (a field that does
-- not decode, a counter that disagrees, a pointer to nothing) is treated as
-- lost: the hash is wiped but for its fencing counter, so its holders get
-- NOT_FOUND and nobody is ever counted as holding it twice.
--
-- Queue: a writer, or a caller waiting for a permit, that is refused while
-- willing to wait takes a place in the queue; a writer is granted only at
-- its head (or with the queue empty), a permit likewise, so waiters go in
-- arrival order. While anyone is queued, new readers stay out (writer
-- preference); once the queue is empty and no writer holds the key,
-- readers go in together.
--
-- Channels (not keys): <prefix>:{<key>}:released wakes waiters when a
-- hold ends. Its message names who may now be granted: the attempt id at
-- the head of the queue, or 'r' for every waiting reader; when the head
-- of the queue moves on, "h:<head>|<take>|<next>|<ms>" tells the new head
-- (take 1: it may take the key now; 0: it keeps its place) and the one
-- next in line (how long the head's place runs); "x:<lease_id>" tells a
-- revoked lease's KeepAlive; any other message ('released') wakes every
-- waiter. <prefix>:{<key>}:leader tells
-- an election's observers that its leader or value changed (proclaim and
-- resign publish it; a lease that simply expires publishes nothing:
-- observers re-check at the leader's expiry).
--
-- KEYS[2], where a script takes it, is the data-loss marker of the lock's
-- hash slot: a string lockd creates at start-up holding "paused until" (ms). A
-- missing marker means Redis lost its data since; the script recreates it
-- holding new grants back for ARGV grace, so holders of leases that vanished
-- learn first. Expiry is decided only by Redis's own clock (TIME).

local rec = KEYS[1]

-- GRACE_MS is how long the hash outlives the last thing it serves.
local GRACE_MS = 1000
-- MAX_ATTEMPTS bounds the attempts a lease remembers for undoing.
local MAX_ATTEMPTS = 32

local t = pre_time or redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function num(x)
  return string.format('%.0f', x)
end

-- h is the hash's header (the field h), read once per script; save writes
-- it back when it changed. hv holds its parts as read and was the numbers
-- they stand for, so that save formats only those that changed.
local h = {}
local hv, was = {}, {}

local HEADER = {'fence', 'nl', 'nw', 'nr', 'qs', 'qh', 'due', 'last', 'lim', 'rw'}
local HEADER_PATTERN = '^' .. string.rep('(%d*)|', #HEADER) .. '(.*)$'
local NO_HEADER = {'', '', '', '', '', '', '', '', '', '', ''}

-- header_raw is the field h as it stands in Redis (false when absent), read
-- by promote before anything else.
local header_raw = false

-- lost_record reports whether this script found the record inconsistent.
local lost_record = false

-- head_seen is what queue_head last found, until the queue changes
-- (join_queue, leave_queue, scan, lose): a script asks more than once.
local head_seen = nil

-- places_seen keeps what live_place read of each place in this script:
-- {attempt, deadline}, false for a place that does not decode, 0 for none.
local places_seen = {}

-- number_or reads a header number: the number, or z when empty.
local function number_or(x, z)
  if x == '' then
    return z
  end
  return tonumber(x)
end

-- load parses the header, and tells whether it made sense. (Tables are
-- built whole, never grown field by field: this runs in every script.)
local function load()
  local v = NO_HEADER
  if header_raw then
    v = {string.match(header_raw, HEADER_PATTERN)}
    if not v[1] then
      return false
    end
  end
  h = {fence = number_or(v[1], 0), nl = number_or(v[2], 0), nw = number_or(v[3], 0), nr = number_or(v[4], 0),
    qs = number_or(v[5], 0), qh = number_or(v[6], 0), due = number_or(v[7], nil), last = number_or(v[8], 0),
    lim = number_or(v[9], 0), rw = number_or(v[10], 0), w = v[11] ~= '' and v[11] or nil}
  hv = v
  was = {fence = h.fence, nl = h.nl, nw = h.nw, nr = h.nr, qs = h.qs, qh = h.qh, due = h.due, last = h.last,
    lim = h.lim, rw = h.rw}
  return h.qh <= h.qs
end

-- part is the header's i-th part as save writes it: empty for a counter at
-- zero and for nothing due, the part as read while its number is unchanged.
local function part(i, name)
  local v = h[name]
  if v == nil or (v == 0 and i > 1) then
    return ''
  elseif v == was[name] and hv[i] ~= '' then
    return hv[i]
  end
  return num(v)
end

-- save writes the header back if it changed.
local function save()
  local v = part(1, 'fence') .. '|' .. part(2, 'nl') .. '|' .. part(3, 'nw') .. '|' .. part(4, 'nr') .. '|' ..
    part(5, 'qs') .. '|' .. part(6, 'qh') .. '|' .. part(7, 'due') .. '|' .. part(8, 'last') .. '|' ..
    part(9, 'lim') .. '|' .. part(10, 'rw') .. '|' .. (h.w or '')
  if v ~= header_raw then
    redis.call('HSET', rec, 'h', v)
    header_raw = v
  end
end

-- migrate rewrites a hash kept by an earlier lockd, whose header fields
-- stood each on its own and whose s: places named their attempt alone,
-- in the layout above.
local function migrate()
  local all = redis.call('HGETALL', rec)
  local f, old = {}, {'w'}
  for i = 1, #all, 2 do
    f[all[i]] = all[i + 1]
  end
  local parts = {}
  for i, name in ipairs(HEADER) do
    parts[i] = f[name] or ''
    table.insert(old, name)
  end
  parts[#HEADER + 1] = f['w'] or ''
  header_raw = table.concat(parts, '|')
  local fields = {'h', header_raw}
  for name, v in pairs(f) do
    if string.sub(name, 1, 2) == 's:' and not string.find(v, '|', 1, true) then
      local deadline = string.match(f['q:' .. v] or '', '|(%d+)$')
      table.insert(fields, name)
      table.insert(fields, v .. '|' .. (deadline or '0'))
    end
  end
  redis.call('HDEL', rec, unpack(old))
  redis.call('HSET', rec, unpack(fields))
end

-- promote turns a lock kept as a string (see above) into its hash: the
-- lease, its owner pointer, the write holder, the fencing counter and,
-- with a request, its remembered result. A string that does not parse is
-- treated as lost, as lose does: its holder gets NOT_FOUND.
local function promote()
  -- The header's HGET tells a hash (or no key) from a string, which it
  -- refuses.
  local raw = redis.pcall('HGET', rec, 'h')
  if type(raw) ~= 'table' then
    header_raw = raw
    if not raw and redis.call('EXISTS', rec) == 1 then
      migrate()
    end
    return
  end
  local v = redis.call('GET', rec)
  local at = redis.call('PEXPIRETIME', rec)
  redis.call('DEL', rec)
  local mode, given, token, ttl, id, attempt, request, keeper, owner =
    string.match(v, '^([rw])([01])|(%d+)|(%d+)|([^|]+)|([%w_%-]*)|([%w_%-]*)|([%w_%-]*)|(.*)$')
  if not mode then
    -- Lost: the next token still exceeds any this string may have held.
    header_raw = num(now_us) .. string.rep('|', #HEADER)
    redis.call('HSET', rec, 'h', header_raw)
    redis.call('PEXPIRE', rec, GRACE_MS)
    return
  elseif at <= now_ms then
    return
  end
  local expire = num(at)
  local remembered = request ~= '' and '1' or ''
  local writer = mode == 'w' and id or ''
  -- fence|nl|nw|nr|qs|qh|due|last|lim|rw|w
  header_raw = table.concat({token, '1', '', remembered, '', '', expire, expire, '', '', writer}, '|')
  local fields = {'h', header_raw, 'l:' .. id, mode .. '|1|' .. token .. '|' .. ttl .. '|' .. owner,
    'x:' .. id, expire .. '|' .. keeper .. '|' .. attempt .. '|' .. request,
    'o:' .. mode .. ':' .. owner, id}
  if request ~= '' then
    table.insert(fields, 'ra:' .. request)
    table.insert(fields, table.concat({expire, given, id, mode, '1', token, ttl, '@' .. attempt, owner}, '|'))
  end
  redis.call('HSET', rec, unpack(fields))
  redis.call('PEXPIREAT', rec, at + GRACE_MS)
end

-- expires notes an expiry in due and last.
local function expires(at)
  if not h.due or at < h.due then h.due = at end
  if at > h.last then h.last = at end
end

-- lose wipes an inconsistent record, keeping only a fencing counter that
-- every later token exceeds.
local function lose()
  lost_record = true
  head_seen = nil
  local fence = math.max(h.fence or 0, now_us)
  redis.call('DEL', rec)
  h = {fence = fence, nl = 0, nw = 0, nr = 0, qs = 0, qh = 0, due = nil, last = now_ms, lim = 0, rw = 0}
  was, header_raw = {}, false
end

-- decode reads a lease from its two fields, or returns nil.
local function decode(ls, xs)
  if not ls or not xs then
    return nil
  end
  local mode, count, token, ttl, owner = string.match(ls, '^([rwp])|(%d+)|(%d+)|(%d+)|(.*)$')
  local exp, keeper, attempts, remembered = string.match(xs, '^(%d+)|(!?[%w_%-]*)|([%w_,%-]*)|([%w_,%-]*)$')
  if not mode or not exp or tonumber(count) < 1 then
    return nil
  end
  return {mode = mode, count = tonumber(count), token = tonumber(token), ttl = tonumber(ttl),
    expire = tonumber(exp), keeper = keeper, attempts = attempts, remembered = remembered, owner = owner,
    revoked = string.sub(keeper, 1, 1) == '!'}
end

-- get_lease returns the record of a held lease, or nil. A lease that does
-- not decode makes the whole record lost. Lease fields have their own
-- prefix, so no lease_id can name another field.
local function get_lease(id)
  local v = redis.call('HMGET', rec, 'l:' .. id, 'x:' .. id)
  if not v[1] and not v[2] then
    return nil
  end
  local l = decode(v[1], v[2])
  if not l then
    lose()
    return nil
  end
  if l.expire <= now_ms then
    return nil
  end
  return l
end

-- put_lease writes a lease, with extra field-value pairs if given.
local function put_lease(id, l, extra)
  local args = {'l:' .. id, l.mode .. '|' .. num(l.count) .. '|' .. num(l.token) .. '|' .. num(l.ttl) .. '|' .. l.owner,
    'x:' .. id, num(l.expire) .. '|' .. l.keeper .. '|' .. l.attempts .. '|' .. l.remembered}
  for _, v in ipairs(extra or {}) do table.insert(args, v) end
  redis.call('HSET', rec, unpack(args))
  expires(l.expire)
end

-- forget_results drops the remembered Acquire results that name a lease
-- (those still there: one may have run out already).
local function forget_results(l)
  if l.remembered == '' then
    return
  end
  local fields = {}
  for r in string.gmatch(l.remembered, '[^,]+') do table.insert(fields, 'ra:' .. r) end
  h.nr = h.nr - redis.call('HDEL', rec, unpack(fields))
  l.remembered = ''
end

-- drop removes one lease and everything that points at it.
local function drop(id, l)
  if h.w == id then
    h.w = nil
  end
  redis.call('HDEL', rec, 'l:' .. id, 'x:' .. id, 'o:' .. l.mode .. ':' .. l.owner)
  h.nl = h.nl - 1
  forget_results(l)
end

-- has_attempt, add_attempt and remove_attempt keep a lease's attempt list.
local function has_attempt(l, a)
  return string.find(',' .. l.attempts .. ',', ',' .. a .. ',', 1, true) ~= nil
end

local function add_attempt(l, a)
  local list = {}
  for x in string.gmatch(l.attempts, '[^,]+') do table.insert(list, x) end
  table.insert(list, a)
  while #list > MAX_ATTEMPTS do table.remove(list, 1) end
  l.attempts = table.concat(list, ',')
end

local function remove_attempt(l, a)
  local list = {}
  for x in string.gmatch(l.attempts, '[^,]+') do
    if x ~= a then table.insert(list, x) end
  end
  l.attempts = table.concat(list, ',')
end

local function publish(channel, command)
  redis.call(command, channel, 'released')
end

-- scan walks the whole hash: it drops what has expired, recounts, and
-- finds due and last anew, or loses a record that does not add up. It
-- tells whether a lease was dropped.
local function scan()
  head_seen = nil
  local all = redis.call('HGETALL', rec)
  local nl, nw, nr, np = 0, 0, 0, 0
  local due, last = nil, now_ms
  local leases, xs, live, owners, gone, expired = {}, {}, {}, {}, {}, {}
  local queued, places = {}, {} -- live q: entries' seqs by attempt; s: fields
  local dropped = false
  local was = {l = 0, q = 0, ra = 0} -- expired entries of each kind
  local function note(at)
    if not due or at < due then due = at end
    if at > last then last = at end
  end
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    local kind = string.match(f, '^(%a+):')
    if kind == 'l' then
      leases[string.sub(f, 3)] = v
    elseif kind == 'x' then
      xs[string.sub(f, 3)] = v
    elseif kind == 'o' then
      table.insert(owners, {f, v})
    elseif kind == 's' then
      table.insert(places, {f, v})
    elseif kind == 'q' or kind == 'ra' then
      local seq, at
      if kind == 'q' then
        seq, at = string.match(v, '^(%d+)|(%d+)$')
      else
        at = string.match(v, '^(%d+)|')
      end
      at = tonumber(at)
      if not at then
        lose()
        return true
      end
      if at <= now_ms then
        table.insert(gone, f)
        if seq then table.insert(gone, 's:' .. seq) end
        was[kind] = was[kind] + 1
      else
        if kind == 'q' then
          nw = nw + 1
          queued[string.sub(f, 3)] = seq
        else
          nr = nr + 1
        end
        note(at)
      end
    end
  end
  for id, x in pairs(xs) do
    if not leases[id] then
      lose()
      return true
    end
  end
  for id, ls in pairs(leases) do
    local l = decode(ls, xs[id])
    if not l then
      lose()
      return true
    end
    if l.expire <= now_ms then
      local o = 'o:' .. l.mode .. ':' .. l.owner
      table.insert(gone, 'l:' .. id)
      table.insert(gone, 'x:' .. id)
      table.insert(gone, o)
      expired[o] = true
      if h.w == id then h.w = nil end
      dropped = true
      was.l = was.l + 1
    else
      live[id] = l
      nl = nl + 1
      if l.mode == 'p' then np = np + 1 end
      note(l.expire)
    end
  end
  -- The counters agree with what the hash holds.
  if nl + was.l ~= h.nl or nw + was.q ~= h.nw or nr + was.ra ~= h.nr then
    lose()
    return true
  end
  -- Every owner pointer names its live lease, or one that just expired.
  for _, o in ipairs(owners) do
    local l = live[o[2]]
    local fits = l and ('o:' .. l.mode .. ':' .. l.owner) == o[1]
    if not fits and not expired[o[1]] then
      lose()
      return true
    end
  end
  -- A queue place whose waiter is gone is dropped with it.
  for _, p in ipairs(places) do
    if queued[string.match(p[2], '^[^|]*')] ~= string.sub(p[1], 3) then
      table.insert(gone, p[1])
    end
  end
  if h.w and (not live[h.w] or live[h.w].mode ~= 'w') then
    lose()
    return true
  end
  -- Permits only under a limit, never more than it, never beside a lock.
  if (np > 0 and (h.lim == 0 or np ~= nl or np > h.lim)) or (h.lim > 0 and np < nl) then
    lose()
    return true
  end
  if #gone > 0 then
    redis.call('HDEL', rec, unpack(gone))
  end
  h.nl, h.nw, h.nr, h.due, h.last = nl, nw, nr, due, last
  return dropped
end

-- purge forgets what has run out, walking the hash only when something
-- is due, and tells whether any lease was dropped.
local function purge()
  if h.due and h.due <= now_ms then
    return scan()
  end
  return false
end

-- begin loads the header and loses a record that does not add up.
local function begin()
  if not load() or h.nl < 0 or h.nw < 0 or h.nr < 0 or (h.w and h.nl < 1) then
    lose()
  end
  return purge()
end

-- tidy writes the header back and gives the hash an expiry just past the
-- last thing it serves, so nothing outlives its use.
local function tidy()
  if h.nl == 0 then
    -- No permit held: the semaphore's limit is free to change.
    h.lim = 0
  end
  if h.nl == 0 and h.nw == 0 and h.nr > 0 then
    -- Only remembered results are left: find exactly how long they last.
    scan()
  end
  if h.nl == 0 and h.nw == 0 and h.nr == 0 then
    -- Nothing held, awaited or remembered: leave no trace. The next
    -- lease's fencing token comes from Redis's clock, in microseconds,
    -- past every token given so far.
    redis.call('DEL', rec)
    return
  end
  save()
  redis.call('PEXPIRE', rec, num(math.max(h.last, now_ms) - now_ms + GRACE_MS))
end

-- join_queue queues attempt until now + wait_ms, keeping its place if it
-- is queued already, and returns its seq.
local function join_queue(attempt, wait_ms)
  head_seen = nil
  local f = 'q:' .. attempt
  local q = redis.call('HGET', rec, f)
  local seq = q and string.match(q, '^(%d+)|')
  local deadline = num(now_ms + wait_ms)
  if not seq then
    h.qs = h.qs + 1
    h.nw = h.nw + 1
    seq = num(h.qs)
  end
  redis.call('HSET', rec, f, seq .. '|' .. deadline, 's:' .. seq, attempt .. '|' .. deadline)
  deadline = now_ms + wait_ms
  expires(deadline)
  return tonumber(seq)
end

-- leave_queue takes attempt out of the queue and tells whether it was in.
local function leave_queue(attempt)
  local f = 'q:' .. attempt
  if head_seen and head_seen[1] == attempt then
    -- The head, as queue_head just found it: both fields are there.
    redis.call('HDEL', rec, f, 's:' .. num(head_seen[3]))
    places_seen[num(head_seen[3])] = 0
    head_seen = nil
    if h.nw > 0 then
      h.nw = h.nw - 1
    end
    return true
  end
  head_seen = nil
  local q = redis.call('HGET', rec, f)
  if not q then
    return false
  end
  local seq = string.match(q, '^(%d+)|')
  if seq and string.match(redis.call('HGET', rec, 's:' .. seq) or '', '^[^|]*') == attempt then
    redis.call('HDEL', rec, f, 's:' .. seq)
    places_seen[seq] = 0
  else
    redis.call('HDEL', rec, f)
  end
  if h.nw > 0 then
    h.nw = h.nw - 1
  end
  return true
end

-- HEAD_MS is the most the head of the queue keeps its place without
-- trying again: a head whose process or replica died holds the key up no
-- longer than that. A live head tries several times within it
-- (acquire.go), and the waiter next in line re-checks when it would run
-- out.
local HEAD_MS = 1200

-- waker_channel and waker_cmd publish on the lock's channel, for the
-- scripts that move the queue (set by acquire.lua, semaphore_acquire.lua
-- and wake_next).
local waker_channel, waker_cmd = nil, nil

-- live_place returns the attempt queued at seq and its place's deadline,
-- or nil when the place is gone or past.

local function live_place(seq)
  local seen = places_seen[seq]
  if seen == nil then
    local v = redis.call('HGET', rec, 's:' .. seq)
    local a, deadline = string.match(v or '', '^([^|]+)|(%d+)$')
    seen = (a and {a, tonumber(deadline)}) or (v and false) or 0
    places_seen[seq] = seen
  end
  if type(seen) ~= 'table' or seen[2] <= now_ms then
    return nil
  end
  return seen[1], seen[2]
end

-- next_in_line returns the first live waiter behind the head (queued at
-- head_seq), looking a few places on.
local function next_in_line(head_seq)
  for seq = head_seq + 1, math.min(h.qs, head_seq + 16) do
    local a = live_place(num(seq))
    if a then
      return a
    end
  end
  return nil
end

-- queue_head returns the attempt at the head of the queue, until when its
-- place is kept, its seq, and whether it just became the head; nil when
-- no place is known. It walks up from qh, dropping places whose waiter
-- left or whose deadline passed; each seq is walked past once, so the walk
-- costs O(1) a call over time. The head's place is kept HEAD_MS at most;
-- a waiter that just became the head, and the one next in line, are told
-- (their attempt ids on the lock's channel), so that the head keeps its
-- place by trying again and the next one watches it (told until when,
-- so it need not ask).
local function queue_head()
  if h.nw == 0 then
    h.qh = h.qs
    return nil
  end
  if head_seen then
    return head_seen[1], head_seen[2], head_seen[3], false
  end
  local moved = false
  while h.qh < h.qs do
    local seq = num(h.qh + 1)
    local a, deadline = live_place(seq)
    if a then
      if deadline > now_ms + HEAD_MS then
        deadline = now_ms + HEAD_MS
        local d = num(deadline)
        redis.call('HSET', rec, 'q:' .. a, seq .. '|' .. d, 's:' .. seq, a .. '|' .. d)
        places_seen[seq] = {a, deadline}
      end
      if moved and waker_channel then
        -- One message for both: "h:<head>|<take>|<next>|<ms>". The head
        -- re-checks at once if it may take the key now (take 1), else it
        -- only keeps its place (and is woken again when the key is
        -- released); the next one in line, if any, watches the head's
        -- place, which runs ms more, and need not ask Redis now.
        local take = (h.nl == 0 or (h.lim > 0 and h.nl < h.lim)) and '1' or '0'
        local n = next_in_line(h.qh + 1)
        redis.call(waker_cmd, waker_channel, 'h:' .. a .. '|' .. take .. '|' .. (n or '') .. '|' .. num(deadline - now_ms))
      end
      head_seen = {a, deadline, h.qh + 1}
      return a, deadline, h.qh + 1, moved
    end
    -- A place whose waiter left or whose deadline passed: its waiter is
    -- dropped with it.
    local gone = places_seen[seq]
    if type(gone) == 'table' then
      redis.call('HDEL', rec, 'q:' .. gone[1], 's:' .. seq)
      h.nw = h.nw - 1
    elseif gone == false then
      redis.call('HDEL', rec, 's:' .. seq)
    end
    places_seen[seq] = nil
    h.qh = h.qh + 1
    moved = true
  end
  return nil
end

-- place_of tells a queued attempt (queued at my_seq) where it stands, for
-- its busy answer: 0 at the head, 2 next in line, 1 further behind; and
-- how long the head's place still runs (0 for the head itself). Only the
-- places between the head and the attempt are looked at, and only until a
-- live one is found: in a line with no gaps, none or one.
local function place_of(attempt, my_seq)
  local head, kept, seq = queue_head()
  if not head or head == attempt then
    return 0, 0
  end
  for s = seq + 1, my_seq - 1 do
    if live_place(num(s)) then
      return 1, kept - now_ms
    end
  end
  return 2, kept - now_ms
end

-- can_take reports whether the head of the queue could be granted now: the
-- key is free, or a semaphore has a permit left.
local function can_take()
  return h.nl == 0 or (h.lim > 0 and h.nl < h.lim)
end

-- wake_next tells the waiters who may now be granted: the head of the
-- queue, if it can take the key; with nobody queued and no writer holding,
-- every waiting reader (if any may be waiting: rw). A lost record, or
-- queued waiters of unknown order, wake everyone. Nobody waiting, nothing
-- is published.
local function wake_next(channel, command)
  if lost_record then
    redis.call(command, channel, 'released')
    return
  end
  waker_channel, waker_cmd = channel, command
  local head, _, _, told = queue_head()
  if head then
    if can_take() and not told then
      redis.call(command, channel, head)
    end
  elseif h.nw > 0 then
    redis.call(command, channel, 'released')
  elseif not h.w and h.lim == 0 and h.rw > now_ms then
    redis.call(command, channel, 'r')
  end
end

-- check_marker reads the data-loss marker (KEYS[2], if given, or the key
-- marker names; '' for none) and returns until when new grants are held back. A missing
-- marker means Redis lost lockd's data: it is made again, holding grants
-- back for grace_ms.
local function check_marker(grace_ms, marker)
  marker = marker or KEYS[2]
  if not marker or marker == '' then
    return 0
  end
  local m = pre_marker
  if m == nil then
    m = redis.call('GET', marker)
  end
  local paused = m and tonumber(m)
  if not paused then
    paused = now_ms + grace_ms
    redis.call('SET', marker, num(paused))
  elseif paused > 0 and paused <= now_ms then
    -- The pause is over: '0' lets the fast paths serve the slot again.
    redis.call('SET', marker, '0')
  end
  return paused
end

-- replay answers a retried grant request. A request whose first result
-- (ra:<request>) names a lease still held gets that result back
-- unchanged, as {2, now, paused, ...} like lease_reply, if it comes from the
-- same caller: the same mode and, when the first call named its owner, the
-- same owner; an owner-less first call replays only to an owner-less retry.
-- Otherwise replay returns nil and the request id to go on with: '' when
-- the id is another caller's (then this call is a new request, and does
-- not take the first one's place).
local function replay(request, mode, given, owner, paused, attempt)
  if request == '' then
    return nil, ''
  end
  local r = redis.call('HGET', rec, 'ra:' .. request)
  if not r then
    return nil, request
  end
  local exp, r_given, id, r_mode, count, token, r_ttl, tag, r_owner =
    string.match(r, '^(%d+)|([01])|([^|]*)|(%a)|(%d+)|(%d+)|(%d+)|@([%w_%-]*)|(.*)$')
  if not exp then
    exp, r_given, id, r_mode, count, token, r_ttl, r_owner =
      string.match(r, '^(%d+)|([01])|([^|]*)|(%a)|(%d+)|(%d+)|(%d+)|(.*)$')
  end
  local held = exp and tonumber(exp) > now_ms and get_lease(id)
  if not held or held.revoked then
    return nil, request
  end
  if r_mode == mode and r_given == given and (given == '0' or r_owner == owner) then
    if tag and tag ~= attempt and has_attempt(held, tag) then
      -- The retry claims the hold: it is tagged with the retry's attempt
      -- from now on, so that the undo of the try whose reply was lost
      -- finds nothing of its own, and the retry's own undo finds it.
      remove_attempt(held, tag)
      add_attempt(held, attempt)
      put_lease(id, held)
      redis.call('HSET', rec, 'ra:' .. request, table.concat({exp, r_given, id, r_mode, count, token, r_ttl,
        '@' .. attempt, r_owner}, '|'))
    end
    return {2, now_ms, paused, id, r_mode, tonumber(count), tonumber(token), tonumber(r_ttl), tonumber(exp), r_owner}, request
  end
  return nil, ''
end

-- remember keeps a grant's result for retries of request ('' for none),
-- and notes it in the lease (l.remembered), which the caller writes after,
-- so that it goes when the lease does. tag is the attempt whose hold the
-- result names: a retry that claims the result takes the hold over.
local function remember(request, given, id, l, tag)
  if request == '' then
    return
  end
  if redis.call('HSET', rec, 'ra:' .. request, table.concat({num(l.expire), given, id, l.mode,
      num(l.count), num(l.token), num(l.ttl), '@' .. tag, l.owner}, '|')) == 1 then
    h.nr = h.nr + 1
  end
  local list = {}
  for r in string.gmatch(l.remembered, '[^,]+') do
    if r ~= request then table.insert(list, r) end
  end
  table.insert(list, request)
  while #list > MAX_ATTEMPTS do table.remove(list, 1) end
  l.remembered = table.concat(list, ',')
end

-- reentered adds a hold to the lease the owner holds in mode, if any, and
-- returns its id and record. The lease never gets shorter: it runs until
-- the later of its expiry and now + ttl, and keeps the longer of its ttl
-- and this one. An owner pointer to no lease loses the record.
local function reentered(mode, owner, ttl)
  local own = redis.call('HGET', rec, 'o:' .. mode .. ':' .. owner)
  if not own then
    return nil
  end
  local l = get_lease(own)
  if not l then
    if not lost_record then
      lose()
    end
    return nil
  end
  if l.revoked then
    return nil
  end
  l.count = l.count + 1
  l.ttl = math.max(l.ttl, ttl)
  l.expire = math.max(l.expire, now_ms + ttl)
  return own, l
end

-- new_lease counts a fresh lease with the next fencing token and returns
-- its record (the caller writes it).
local function new_lease(mode, owner, ttl)
  local token = math.max(h.fence + 1, now_us)
  h.fence = token
  h.nl = h.nl + 1
  return {mode = mode, count = 1, token = token, ttl = ttl, expire = now_ms + ttl, keeper = '', attempts = '', remembered = '',
    owner = owner}
end

-- writer_lease returns the lease id if it holds the key for writing (an
-- election's leader does), else nil and why: -1 it is not held, -6 it is
-- held otherwise (it leads no election).
local function writer_lease(id)
  local l = get_lease(id)
  if not l or l.revoked then
    return nil, -1
  end
  if h.w ~= id then
    return nil, -6
  end
  return l
end

-- holder returns the owner of a lease holding the key, for a busy answer:
-- the write holder's (writer is its lease, if known), else that of the
-- first live lease a short walk of the hash finds; '' when none is found.
local function holder(writer)
  if writer then
    return writer.owner
  end
  if h.nl == 0 then
    return ''
  end
  local cursor = '0'
  for _ = 1, 4 do
    local r = redis.call('HSCAN', rec, cursor, 'MATCH', 'l:*', 'COUNT', 32)
    cursor = r[1]
    for i = 1, #r[2], 2 do
      local l = decode(r[2][i + 1], redis.call('HGET', rec, 'x:' .. string.sub(r[2][i], 3)))
      if l and l.expire > now_ms then
        return l.owner
      end
    end
    if cursor == '0' then
      break
    end
  end
  return ''
end

-- REVOKED_MS is how long a revoked lease still holds the key once its
-- holder or its KeepAlive has been told it is not held: long enough for
-- lockd to end the holder's stream before anyone else is granted the key.
local REVOKED_MS = 1000

-- revoked_seen tells whether the lease id is one an administrator revoked
-- (held by nobody: the call finds it not held). When the call comes from
-- its holder (keeper '') or from the KeepAlive that kept it, the lease
-- runs out REVOKED_MS from now at the latest; waiters re-check then, as a
-- busy answer tells them when the holders' leases run out.
local function revoked_seen(id, keeper)
  local l = get_lease(id)
  if not l or not l.revoked then
    return false
  end
  if (keeper == '' or l.keeper == '!' .. keeper) and l.expire > now_ms + REVOKED_MS then
    l.expire = now_ms + REVOKED_MS
    put_lease(id, l)
  end
  return true
end

-- lease_reply is the reply for a held lease.
local function lease_reply(status, paused, id, l)
  return {status, now_ms, paused, id, l.mode, l.count, l.token, l.ttl, l.expire, l.owner}
end

-- Every script that gets this far works on the hash.
promote()
