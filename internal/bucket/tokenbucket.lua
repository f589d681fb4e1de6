-- tokenbucket.lua: bucketd's token bucket on Redis. It computes exactly what
-- bucket.Acquire, bucket.Peek, bucket.Check and State.IsFull compute in Go,
-- and in lease mode what bucket.Stored's methods compute (same float64
-- operations in the same order), so Redis and bucketd's memory agree bit for
-- bit; internal/bucket/differential_test.go and differential_lease_test.go
-- hold the two equal.
-- Full documentation: docs/lua.md.
--
-- KEYS[1]  the bucket's key (any prefix is the caller's choice)
-- ARGV[1]  capacity: tokens, finite, 0 < capacity <= 1e15
-- ARGV[2]  rate: tokens per second, finite, 0 < rate <= 1e15
-- ARGV[3]  cost: tokens, finite, 0 <= cost <= 1e15 (absent or empty: 1)
-- ARGV[4]  op (absent or empty: "acquire"):
--   "acquire"     spend cost tokens if the bucket holds them. cost 0 is a peek.
--   "peek"        what "acquire" with this cost would answer; writes nothing.
--   "put"         store a state computed elsewhere (replication): ARGV[5] is
--                 its ts, ARGV[6] its tokens; ARGV[3] is ignored.
--   "del"         forget the bucket as of ARGV[5]; ARGV[1..3] are ignored.
--   "acquireall"  a member of an all-or-nothing group (TB.MACQUIRE), below.
--   "lease"       lease mode: a holder's lease call (Stored.Lease), below;
--                 its arguments in ARGV[6].
--   "reset"       TB.RESET in lease mode (Stored.Reset), as of ARGV[5] (now;
--                 absent or empty: Redis TIME); ARGV[1..3] are ignored.
-- ARGV[5]  now (acquire, peek, acquireall) or ts (put, del): Unix time in
--          integer microseconds, 0 <= t < 2^53. For acquire, peek and
--          acquireall it may be absent or empty: the script then reads Redis
--          TIME.
-- ARGV[6]  tokens (put only): finite, >= 0. On the first key of a group: the
--          number of keys in the group. For lease: one string,
--          "<holder> <epoch> <consumed> <returned> <want> <ttl_us>" (the
--          holder is everything before the last five words; epoch and ttl
--          integer µs, ttl >= 1 and now + ttl < 2^53; consumed, returned
--          and want finite, 0 to 1e15), so that every call keeps six
--          arguments.
--
-- Reply to acquire, peek and acquireall: {allowed, remaining, retry_after_ms,
-- reset_after_ms}, the four numbers of TB.ACQUIRE ... WITHINFO:
--   allowed         1 or 0 (acquireall: whether this bucket alone held cost)
--   remaining       whole tokens left after the call (floor)
--   retry_after_ms  0 when allowed, -1 when cost > capacity, else the
--                   milliseconds until cost tokens are there (rounded up)
--   reset_after_ms  milliseconds until the bucket is full (rounded up)
-- A field that saturates at 2^63-1 is returned as the bulk string
-- "9223372036854775807": Redis turns a Lua number into an integer reply with
-- a C cast, and 2^63 (the nearest double) would come out as -2^63.
-- Reply to put and del: 1 when applied, 0 when skipped because the stored ts
-- is newer than ARGV[5] (an older state never overwrites a newer one).
-- Reply to lease: the four numbers of the call's own cost (remaining: what
-- the bucket holds after the call, leases not counted), then the holder's
-- record after the call: its epoch (0: no record) and held, the string
-- "%.17g" of the float64. Reply to reset: 1 when the key existed, else 0.
--
-- Several buckets in one call: with n > 1 keys, ARGV holds six arguments per
-- key, ARGV[6i-5 .. 6i] for KEYS[i] in the order above (an unused one
-- empty), and the reply is an array of the n replies; an invalid call is an
-- error element of that array and does not stop the others. The calls run in
-- key order, as n separate calls would, and read Redis TIME at most once, so
-- they decide at one instant. bucketd sends replication batches and
-- store-mode pipelines this way: Redis's cost per script call is paid once
-- for many buckets. On Redis Cluster all n keys must share a hash slot.
--
-- All-or-nothing groups (TB.MACQUIRE): a key whose op is "acquireall" and
-- whose ARGV[6] is a whole number m starts a group of m keys, itself and the
-- m - 1 keys after it (1 <= m <= the keys left), which must all have the op
-- "acquireall" and must all differ; their ARGV[6] is ignored. Each member
-- has its own capacity, rate, cost and now (bucketd gives every member the
-- same cost and the same now, or none: Redis TIME). The group is what
-- internal/shard's acquireAll does: every bucket is checked first
-- (bucket.Check: does it alone hold its cost? nothing is taken, and
-- remaining is what it holds now); if every one does, each gives its cost
-- exactly as acquire would (and answers as acquire does); otherwise no
-- bucket changes at all, not even the refill or clamp a denied acquire
-- stores, and each answers its check. A member that cannot be checked (an
-- invalid argument, a key named twice, a key of another type) answers its
-- error and the group takes nothing. A group is part of the reply array like
-- any calls, one element per key; a group of one key alone in the call gets
-- the plain reply. A bad group size is an error for that key alone, and the
-- keys after it are read as calls of their own.
--
-- Semantics, as in Go: refill is continuous, tokens + elapsed_us / 1e6 * rate,
-- clamped to the capacity of the call (a smaller capacity clamps the stored
-- tokens; a peek clamps nothing). A now at or before the stored ts adds
-- nothing and never moves ts back (ts = max(stored ts, now)). A bucket with
-- no (valid) stored state is full. cost 0, peek and a denied group write
-- nothing and create nothing, so cost 0 and peek also run under EVALSHA_RO.
-- cost > capacity never succeeds.
--
-- Stored form: HASH {tokens = "%.17g" of the float64, ts = integer Unix
-- microseconds}. A bucket that is full is deleted, never stored. The key's
-- PEXPIRE is the time from now until it is full again, in ms rounded up, at
-- least 2, at most MAX_TTL_MS (10 years).
--
-- Lease mode adds, per holder (an instance and its record generation), a
-- record: field l:<holder> = "<epoch> <held %.17g> <expiry>", the tokens
-- the holder may spend until expiry (Unix µs), and leases = the number of
-- record fields. Every op but lease reads HMGET tokens ts leases, and only
-- when leases > 0 the records (HGETALL), so plain store mode pays one field
-- more; lease, whose keys mostly have records, reads one HGETALL. A key
-- that had records is written field by field: HSET of the fields that
-- change and HDEL of those that go (a malformed record, a field the script
-- does not know), so that it holds what a DEL and an HSET of every field
-- would leave, while a renewal leaves the other holders' records alone.
-- With records: every op first lapses those with expiry <= now
-- (their held is spent; it never goes back into tokens), the bucket
-- refills only up to its room, capacity less what live records hold, and
-- piecewise: up to each lapse with the room of the records live until
-- then, so a bucket never refills for time its tokens were in a lease.
-- acquire, peek and acquireall work against the room (remaining excludes
-- leases; retry -1 only for a cost above the capacity). A key with records
-- is always stored (ts, tokens, leases, the records), its PEXPIRE the time
-- until it is full to capacity once every record has lapsed, so never
-- before the latest expiry; when its last record goes, it is stored as
-- above. Lease (Stored.Lease): the holder's record under another epoch
-- than the call's is dropped as spent; under its epoch, held -= consumed
-- (at least 0), then up to returned goes back into the bucket; the call's
-- cost is taken if the bucket holds it (cost > capacity: denied, retry
-- -1), and then up to want more moves into the record, which lives until
-- now + ttl; a record left with nothing is deleted. Its epoch is set when
-- it is made: max(now, the epoch of the holder's record dropped or lapsed
-- in this call + 1), so epochs do not repeat for a holder. Reset with live
-- records keeps them and stores the bucket as full to its room at ts (no
-- tokens field): tokens come back only by refill when the records lapse,
-- where a DEL would have let the bucket grant again what holders have.
-- Sums over records run in one order, by (expiry, holder bytes), from the
-- last to the first, as in Go. put and del ignore records (replication
-- never has any).
--
-- The script is deterministic apart from the TIME call; Redis 5 and later
-- replicate scripts by their effects, so no redis.replicate_commands() (gone
-- in Redis 7). It touches only its KEYS, so it runs on Redis Cluster too.

local MAX_INT = '9223372036854775807' -- 2^63-1, which a Lua number cannot hold
local TWO_63 = 9223372036854775808 -- 2^63, exact as a double
local TWO_53 = 9007199254740992 -- integers up to here are exact as doubles
local MAX_NUM = 1e15
local MAX_TTL_MS = 315360000000 -- 10 years of 365 days, in milliseconds
local HUGE = math.huge
-- The library functions the lease ops call most, as locals: a global is a
-- table lookup (two for string.format) on every use.
local format, match, sub, floor = string.format, string.match, string.sub, math.floor
-- INT formats a whole number in [0, 2^53) (a ts, an epoch, an expiry, a
-- TTL): %d, which Lua 5.1 prints through a C long, is about three times as
-- fast as %.0f and prints the same digits; on a server whose long cannot
-- hold 2^53 (a 32-bit build) it falls back to %.0f.
local INT = format('%d', 9007199254740991) == '9007199254740991' and '%d' or '%.0f'

-- number parses an argument; nil when absent, empty or not a number. Note
-- that Lua's tonumber accepts "nan" and "inf": callers check ranges with
-- comparisons, which NaN fails.
local function number(s)
  if s == nil or s == '' then
    return nil
  end
  return tonumber(s)
end

-- micros parses a time argument: an integer in [0, 2^53), or nil.
local function micros(s)
  local t = number(s)
  if t and t >= 0 and t < TWO_53 and t % 1 == 0 then
    return t
  end
  return nil
end

-- saturate mirrors bucket.saturate for the non-negative whole numbers it is
-- given: values from 2^63 up (and NaN) become the string 2^63-1.
local function saturate(f)
  if not (f < TWO_63) then
    return MAX_INT
  end
  return f
end

-- round mirrors Go's math.Round (half away from zero) for x >= 0: x - floor(x)
-- is exact in floating point, so the comparison with 0.5 is too.
local function round(x)
  local r = math.floor(x)
  if x - r >= 0.5 then
    r = r + 1
  end
  return r
end

-- ceil_ms mirrors bucket.ceilMillis: amount / rate seconds in ms, rounded up,
-- but snapped to a whole number within min(1e-9 relative, 1e-6 ms) of it.
local function ceil_ms(amount, rate)
  if amount <= 0 then
    return 0
  end
  local ms = amount / rate * 1000
  local r = round(ms)
  local tolerance = ms * 1e-9
  if tolerance > 1e-6 then
    tolerance = 1e-6
  end
  if math.abs(ms - r) <= tolerance then
    return saturate(r)
  end
  return saturate(math.ceil(ms))
end

-- tokens_at mirrors State.TokensAt: refill since ts, clamped to capacity; a
-- now at or before ts adds nothing.
local function tokens_at(tokens, ts, capacity, rate, now)
  local elapsed = now - ts
  if elapsed > 0 then
    tokens = tokens + elapsed / 1000000 * rate
  end
  if capacity < tokens then
    return capacity
  end
  return tokens
end

-- decide mirrors bucket.decide.
local function decide(capacity, rate, cost, after, allowed)
  local retry
  if allowed then
    retry = 0
  elseif cost > capacity then
    retry = -1
  else
    retry = ceil_ms(cost - after, rate)
  end
  return {
    allowed and 1 or 0,
    saturate(math.floor(after)),
    retry,
    ceil_ms(capacity - after, rate),
  }
end

-- ttl_ms is the PEXPIRE of a stored state: the ms from now until tokens
-- stamped ts are refilled to capacity, rounded up, in [2, MAX_TTL_MS].
-- Redis expires a key once its clock in whole ms is past the deadline, so
-- never early, except that PEXPIRE 1 deletes the key at once when Redis's
-- millisecond ticks inside the command; 2 is the smallest safe value.
local function ttl_ms(capacity, rate, tokens, ts, now)
  local ms = (capacity - tokens) / rate * 1000 + (ts - now) / 1000
  if not (ms < MAX_TTL_MS) then
    return MAX_TTL_MS
  end
  ms = math.ceil(ms)
  if ms < 2 then
    return 2
  end
  return ms
end

-- store writes a state, or deletes the key when the state is full: a full
-- bucket is the same as no bucket, and bucketd's shards delete them too.
-- Numbers are formatted here rather than left to redis.call, whose own
-- conversion differs between Redis versions: %.17g reads back as the same
-- float64 in every language, INT (%d) writes a whole number without exponent.
local function store(key, capacity, rate, tokens, ts, now)
  if tokens >= capacity then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'tokens', format('%.17g', tokens), 'ts', format(INT, ts))
  redis.call('PEXPIRE', key, format(INT, ttl_ms(capacity, rate, tokens, ts, now)))
end

-- read runs a read command with redis.pcall: a key that holds another type
-- answers WRONGTYPE for this bucket only, instead of aborting the whole
-- script and the other buckets of a batch with it. It returns the reply, or
-- nil and the error reply.
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    return nil, r
  end
  return r
end

-- redis_now is Redis TIME in microseconds, read once per script call.
local time_now
local function redis_now()
  if not time_now then
    local t = redis.call('TIME')
    time_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return time_now
end

-- limit parses the capacity and the rate at A[base+1] and A[base+2]; nil
-- and an error reply when either is invalid.
local function limit(A, base)
  local capacity = number(A[base + 1])
  if not (capacity and capacity > 0 and capacity <= MAX_NUM) then
    return nil, nil, redis.error_reply('ERR invalid capacity: must be a finite number > 0')
  end
  local rate = number(A[base + 2])
  if not (rate and rate > 0 and rate <= MAX_NUM) then
    return nil, nil, redis.error_reply('ERR invalid rate: must be a finite number > 0')
  end
  return capacity, rate
end

-- cost_now parses the cost at A[base+3] (absent or empty: 1) and the now at
-- A[base+5] (absent or empty: Redis TIME); nil and an error reply when
-- either is invalid.
local function cost_now(A, base)
  local cost = 1
  if A[base + 3] ~= nil and A[base + 3] ~= '' then
    cost = tonumber(A[base + 3])
    if not (cost and cost >= 0 and cost <= MAX_NUM) then
      return nil, nil, redis.error_reply('ERR invalid cost: must be a finite number >= 0')
    end
  end
  if A[base + 5] == nil or A[base + 5] == '' then
    return cost, redis_now()
  end
  local now = micros(A[base + 5])
  if not now then
    return nil, nil, redis.error_reply('ERR invalid now: must be an integer number of microseconds in [0, 2^53)')
  end
  return cost, now
end

-- lease_mode builds the functions of lease mode (the records, the piecewise
-- refill, the lease and reset ops) the first time a call needs them: the
-- script's body creates every local function anew on each EVALSHA, so a
-- plain acquire pays for two closures here instead of a dozen. It is one
-- container, longer than a function should be, each function in it short,
-- on purpose: every function at the script's top level costs Redis about
-- 440 instructions plus 165 per upvalue on every EVALSHA (callgrind on
-- redis-server 7.0, 2,000 one-key calls), and five builders of a few
-- functions each measured 4,900 instructions more per one-key plain
-- acquire than this one container (236.1 -> 245.9 M over the 2,000 calls,
-- 2%), a cost plain store mode would pay for nothing.
local function lease_mode()
  -- less orders two strings byte by byte, as Go compares them: Lua's own <
  -- follows the server's locale (Redis sets LC_COLLATE from the environment).
  local function less(a, b)
    for i = 1, math.min(#a, #b) do
      local x, y = string.byte(a, i), string.byte(b, i)
      if x ~= y then
        return x < y
      end
    end
    return #a < #b
  end

  -- before orders records as bucket.Stored's walks do: by expiry, then holder.
  local function before(a, b)
    if a.expiry ~= b.expiry then
      return a.expiry < b.expiry
    end
    return less(a.holder, b.holder)
  end

  -- records_of returns the lease records of a key, read from h, its
  -- HGETALL reply: the fields l:<holder> = "<epoch> <held> <expiry>",
  -- sorted by before; a malformed one is ignored. recs.fields is the
  -- key's fields (field = value) and recs.count their number, which
  -- store_leased compares with what it writes, and a record's raw is its
  -- field's value, written back as it is while the record does not
  -- change. One pass over h does both.
  local function records_of(h)
    local recs, n, f = {}, 0, {}
    for i = 1, #h, 2 do
      local name, v = h[i], h[i + 1]
      f[name] = v
      if sub(name, 1, 2) == 'l:' then
        local e, held, x = match(v, '^(%S+) (%S+) (%S+)$')
        e, held, x = tonumber(e), tonumber(held), tonumber(x)
        if e and held and x and held >= 0 and held < HUGE and e >= 0 and e < TWO_53 and e % 1 == 0
            and x >= 0 and x < TWO_53 and x % 1 == 0 then
          n = n + 1
          recs[n] = {holder = sub(name, 3), epoch = e, held = held, expiry = x, raw = v}
        end
      end
    end
    if n == 2 then
      if before(recs[2], recs[1]) then
        recs[1], recs[2] = recs[2], recs[1]
      end
    elseif n > 2 then
      table.sort(recs, before)
    end
    recs.fields, recs.count = f, #h / 2
    return recs
  end

  -- records reads key's lease records (records_of). Only keys whose
  -- leases field is > 0 pay for it.
  local function records(key)
    local h, err = read('HGETALL', key)
    if err then
      return nil, err
    end
    return records_of(h)
  end

  -- sum_from is what recs[i..#recs] hold, summed from the last to the i-th
  -- (bucket's sumHeld, in its order, so that the float64 sums agree).
  local function sum_from(recs, i)
    local sum = 0
    for j = #recs, i, -1 do
      sum = sum + recs[j].held
    end
    return sum
  end

  -- room mirrors bucket's room: capacity less what leases hold, at least 0.
  local function room(capacity, sum)
    local r = capacity - sum
    if r < 0 then
      return 0
    end
    return r
  end

  -- live returns recs[i..#recs].
  local function live_from(recs, i)
    local out = {}
    for j = i, #recs do
      out[#out + 1] = recs[j]
    end
    return out
  end

  -- refill mirrors Stored.refill: the records with expiry <= now lapse, and
  -- the bucket refills to now piecewise, up to each lapse with the room of
  -- the records live until then, then with the room of those still live.
  -- It returns the tokens and n, the number of records that lapsed
  -- (recs[1..n]). A bucket with no state holds its room.
  local function refill(tokens, ts, exists, capacity, rate, recs, now)
    local n = 0
    while n < #recs and recs[n + 1].expiry <= now do
      n = n + 1
    end
    if not exists then
      return room(capacity, sum_from(recs, n + 1)), n
    end
    for i = 1, n do
      local e = recs[i].expiry
      tokens = tokens_at(tokens, ts, room(capacity, sum_from(recs, i)), rate, e)
      if e > ts then
        ts = e
      end
    end
    return tokens_at(tokens, ts, room(capacity, sum_from(recs, n + 1)), rate, now), n
  end

  -- decide_room mirrors bucket.decideRoom: decide against the room, with
  -- retry -1 only for a cost above the capacity itself.
  local function decide_room(capacity, rate, rm, cost, after, allowed)
    local d = decide(rm, rate, cost, after, allowed)
    if not allowed and cost <= capacity and cost > rm then
      d[3] = ceil_ms(cost - after, rate)
    end
    return d
  end

  -- store_leased mirrors Stored.store and Stored.ExpireMillis for a key that
  -- had records (old: its fields, as records_of read them) or has them
  -- (live, sorted): with none left, store; with some, always stored, the
  -- key's PEXPIRE the time until the bucket, refilled through every lapse,
  -- is full to capacity, so never before the latest record's expiry.
  -- tokens = math.huge is reset's form: no tokens field, full once the
  -- records lapse. A key that had records ends up holding exactly the new
  -- fields, as a DEL and an HSET of them all would leave it, but only the
  -- fields that change are written and only the others deleted: a renewal
  -- leaves the other holders' records as they are.
  local record_form = INT .. ' %.17g ' .. INT -- a record's value: "<epoch> <held> <expiry>"
  local COUNTS = {'1', '2', '3', '4', '5', '6', '7', '8'} -- the leases field of a few records
  local function store_leased(key, capacity, rate, tokens, ts, live, old, old_count, now)
    if #live == 0 then
      if old then
        redis.call('DEL', key)
      end
      store(key, capacity, rate, tokens, ts, now)
      return
    end
    -- HSET of the fields that differ from old; HDEL, first, of old's
    -- fields that are not written, unless every one of them is.
    -- names[k] = values[k] are the fields to store; kept counts those
    -- old has, changed or not.
    local names, values = {'ts', 'leases'}, {format(INT, ts), COUNTS[#live] or format('%d', #live)}
    local m = 2
    if tokens < HUGE then
      m = 3
      names[m], values[m] = 'tokens', format('%.17g', tokens)
    end
    for i = 1, #live do
      local r = live[i]
      m = m + 1
      names[m], values[m] = 'l:' .. r.holder, r.raw or format(record_form, r.epoch, r.held, r.expiry)
    end
    local args, n, kept, had = {'HSET', key}, 2, 0, old or {}
    for k = 1, m do
      local name, v = names[k], values[k]
      local was = had[name]
      if was then
        kept = kept + 1
      end
      if was ~= v then
        args[n + 1], args[n + 2] = name, v
        n = n + 2
      end
    end
    if old and kept < old_count then
      local keep = {ts = true, leases = true, tokens = tokens < HUGE}
      for _, r in ipairs(live) do
        keep['l:' .. r.holder] = true
      end
      local gone = {'HDEL', key}
      for name in pairs(old) do
        if not keep[name] then
          gone[#gone + 1] = name
        end
      end
      redis.call(unpack(gone))
    end
    if #args > 2 then
      redis.call(unpack(args))
    end
    local latest = live[#live].expiry
    local ms
    if tokens == math.huge then
      ms = ttl_ms(0, 1, 0, latest, now)
    else
      local full = refill(tokens, ts, true, capacity, rate, live, latest)
      if latest > ts then
        ts = latest
      end
      ms = ttl_ms(capacity, rate, full, ts, now)
    end
    redis.call('PEXPIRE', key, format(INT, ms))
  end

  -- acquire_leased mirrors Stored.Acquire for a key with records; cost 0 is
  -- Stored.Peek, which writes nothing.
  local function acquire_leased(key, capacity, rate, cost, now, tokens, ts, exists, recs)
    local t, n = refill(tokens, ts, exists, capacity, rate, recs, now)
    local live = live_from(recs, n + 1)
    local allowed = t >= cost
    if allowed then
      t = t - cost
    end
    if cost ~= 0 then
      local last = now
      if exists and ts > now then
        last = ts
      end
      store_leased(key, capacity, rate, t, last, live, recs.fields, recs.count, now)
    end
    return decide_room(capacity, rate, room(capacity, sum_from(live, 1)), cost, t, allowed)
  end

  -- lease_args parses the lease op's ARGV[6], "<holder> <epoch> <consumed>
  -- <returned> <want> <ttl_us>" (the holder is all before the last five
  -- words); nil and an error reply when it is invalid.
  local function lease_args(s, now)
    local holder, e, consumed, returned, want, ttl
    if s then
      holder, e, consumed, returned, want, ttl = string.match(s, '^(..-) (%S+) (%S+) (%S+) (%S+) (%S+)$')
    end
    if not holder then
      return nil, redis.error_reply('ERR invalid lease: ARGV[6] must be "<holder> <epoch> <consumed> <returned> <want> <ttl_us>"')
    end
    local c = {holder = holder, epoch = micros(e), consumed = number(consumed),
      returned = number(returned), want = number(want), ttl = micros(ttl)}
    local x, y, z = c.consumed, c.returned, c.want
    if not (x and x >= 0 and x <= MAX_NUM and y and y >= 0 and y <= MAX_NUM and z and z >= 0 and z <= MAX_NUM) then
      return nil, redis.error_reply('ERR invalid lease: consumed, returned and want must be finite numbers >= 0')
    end
    if not (c.epoch and c.ttl and c.ttl >= 1 and now + c.ttl < TWO_53) then
      return nil, redis.error_reply('ERR invalid lease: epoch and ttl must be integer microseconds, ttl >= 1, now + ttl < 2^53')
    end
    return c
  end

  -- lease mirrors Stored.Lease: the holder's record of another epoch is
  -- dropped as spent; under its epoch the report is taken in (consumed is
  -- spent, returned goes back into the bucket); the call's own cost is
  -- taken if the bucket holds it, and then up to want more goes into the
  -- record, which lives until now + ttl. A new record's epoch is
  -- max(now, the dropped or lapsed record's + 1), so it never repeats for a
  -- holder. Reply: the four numbers, the record's epoch and held (%.17g).
  local function lease(key, capacity, rate, cost, now, tokens, ts, exists, recs, c)
    local old, old_count = recs and recs.fields, recs and recs.count
    recs = recs or {}
    local t, n = refill(tokens, ts, exists, capacity, rate, recs, now)
    local prev = -1
    for i = 1, n do
      if recs[i].holder == c.holder then
        prev = recs[i].epoch
      end
    end
    local live, own = {}, nil
    for i = n + 1, #recs do
      local r = recs[i]
      if r.holder ~= c.holder then
        live[#live + 1] = r
      elseif r.epoch ~= c.epoch then
        prev = r.epoch
      else
        own = {holder = r.holder, epoch = r.epoch, held = r.held - c.consumed}
        if own.held < 0 then
          own.held = 0
        end
        local give = c.returned
        if own.held < give then
          give = own.held
        end
        own.held = own.held - give
        t = t + give
      end
    end
    local allowed = t >= cost
    local held = own and own.held or 0
    if allowed then
      t = t - cost
      local g = c.want
      if t < g then
        g = t
      end
      if g < 0 then
        g = 0
      end
      t = t - g
      held = held + g
    end
    local epoch = 0
    if held > 0 then
      epoch = own and own.epoch or math.max(now, prev + 1, 1)
      local r = {holder = c.holder, epoch = epoch, held = held, expiry = now + c.ttl}
      local at = #live + 1
      while at > 1 and before(r, live[at - 1]) do
        live[at] = live[at - 1]
        at = at - 1
      end
      live[at] = r
    else
      held = 0
    end
    local last = now
    if exists and ts > now then
      last = ts
    end
    store_leased(key, capacity, rate, t, last, live, old, old_count, now)
    local d = decide_room(capacity, rate, room(capacity, sum_from(live, 1)), cost, t, allowed)
    d[5], d[6] = epoch, string.format('%.17g', held)
    return d
  end

  return {records_of = records_of, records = records, sum_from = sum_from, room = room, refill = refill,
    decide_room = decide_room, acquire_leased = acquire_leased,
    lease_args = lease_args, lease = lease, store_leased = store_leased, live_from = live_from}
end

local leasing
local function leased()
  if not leasing then
    leasing = lease_mode()
  end
  return leasing
end

-- stored reads key's state: tokens, ts and whether they are a valid state
-- (anything else, no key or a missing or malformed field, is a bucket nobody
-- has used: full); or, as a fourth value, the error reply of a key of
-- another type. The fifth value is the lease records (sorted, see
-- records) when the key's leases field says it has any, else nil: a key
-- in plain store mode costs one HMGET, as before leases. whole (the lease
-- op, whose keys mostly have records) reads the key with one HGETALL
-- instead of an HMGET and then an HGETALL. A key with records and a ts
-- but no tokens is the form reset leaves: full to its room at ts, tokens =
-- math.huge (Go: +Inf).
local function stored(key, whole)
  local tok, tss, cnt, recs
  if whole then
    local h, err = read('HGETALL', key)
    if err then
      return nil, nil, false, err
    end
    recs = leased().records_of(h)
    local f = recs.fields
    tok, tss, cnt = f.tokens, f.ts, f.leases
  else
    local st, err = read('HMGET', key, 'tokens', 'ts', 'leases')
    if err then
      return nil, nil, false, err
    end
    tok, tss, cnt = st[1], st[2], st[3]
  end
  local tokens, ts = number(tok), micros(tss)
  local n = number(cnt)
  if not (n and n > 0) then
    recs = nil
  else
    if not recs then
      local err
      recs, err = leased().records(key)
      if err then
        return nil, nil, false, err
      end
    end
    if not tok and ts then
      return math.huge, ts, true, nil, recs
    end
  end
  return tokens, ts, tokens ~= nil and ts ~= nil and tokens >= 0 and tokens < math.huge, nil, recs
end

-- holding mirrors the start of bucket.Peek and bucket.Check: the tokens the
-- bucket holds at now, capacity when it has no state.
local function holding(tokens, ts, exists, capacity, rate, now)
  if exists then
    return tokens_at(tokens, ts, capacity, rate, now)
  end
  return capacity
end

-- acquire mirrors bucket.Acquire on the state read by stored, and stores
-- the outcome as the shards do; cost 0 is bucket.Peek: nothing is written
-- and nothing is created.
local function acquire(key, capacity, rate, cost, now, tokens, ts, exists, recs)
  if recs then
    return leased().acquire_leased(key, capacity, rate, cost, now, tokens, ts, exists, recs)
  end
  if cost == 0 then
    local t = holding(tokens, ts, exists, capacity, rate, now)
    return decide(capacity, rate, cost, t, t >= cost)
  end
  if not exists then
    tokens, ts = capacity, now
  end
  local t = tokens_at(tokens, ts, capacity, rate, now)
  local allowed = t >= cost
  if allowed then
    t = t - cost
  end
  if now > ts then
    ts = now
  end
  store(key, capacity, rate, t, ts, now)
  return decide(capacity, rate, cost, t, allowed)
end

-- reset mirrors Stored.Reset (TB.RESET in lease mode; ARGV[5] is now,
-- absent or empty: Redis TIME): with no live records the key is deleted,
-- as TB.RESET's DEL, whatever it holds; with records the bucket's state is
-- forgotten and the records stay, so the tokens holders have are still
-- counted. Reply: 1 when the key existed, else 0.
local function reset(key, A, base)
  local now
  if A[base + 5] == nil or A[base + 5] == '' then
    now = redis_now()
  else
    now = micros(A[base + 5])
    if not now then
      return redis.error_reply('ERR invalid now: must be an integer number of microseconds in [0, 2^53)')
    end
  end
  local tokens, ts, exists, err, recs = stored(key)
  if err or not recs then
    return redis.call('DEL', key)
  end
  local n = 0
  while n < #recs and recs[n + 1].expiry <= now do
    n = n + 1
  end
  if n == #recs then
    return redis.call('DEL', key)
  end
  local last = now
  if exists and ts > now then
    last = ts
  end
  local L = leased()
  L.store_leased(key, 0, 1, math.huge, last, L.live_from(recs, n + 1), recs.fields, recs.count, now)
  return 1
end

-- write_state runs the replication ops, put and del (see the top), on key
-- with its arguments at A[base+1 .. base+6]. Each writes only when key's
-- stored ts is not newer than the ts it is given (an older state never
-- overwrites a newer one; the reply is then 0); a key of another type
-- answers its error.
local function write_state(op, key, A, base)
  local capacity, rate, err
  if op == 'put' then
    capacity, rate, err = limit(A, base)
    if err then
      return err
    end
  end
  local ts = micros(A[base + 5])
  if not ts then
    return redis.error_reply('ERR invalid ts: must be an integer number of microseconds in [0, 2^53)')
  end
  local tokens
  if op == 'put' then
    tokens = number(A[base + 6])
    if not (tokens and tokens >= 0 and tokens < math.huge) then
      return redis.error_reply('ERR invalid tokens: must be a finite number >= 0')
    end
  end
  local cur
  cur, err = read('HGET', key, 'ts')
  if err then
    return err
  end
  cur = micros(cur)
  if cur and cur > ts then
    return 0
  end
  if op == 'del' then
    redis.call('DEL', key)
  else
    store(key, capacity, rate, tokens, ts, ts)
  end
  return 1
end

-- call runs one bucket's call: key, and its arguments at A[base+1 .. base+6].
local function call(key, A, base)
  local op = A[base + 4]
  if op == nil or op == '' then
    op = 'acquire'
  end
  if op == 'reset' then
    return reset(key, A, base)
  end
  if op == 'del' or op == 'put' then
    return write_state(op, key, A, base)
  end
  if op ~= 'acquire' and op ~= 'peek' and op ~= 'lease' then
    return redis.error_reply('ERR invalid op: must be acquire, peek, put, del, lease, reset or acquireall')
  end

  local capacity, rate, err = limit(A, base)
  if err then
    return err
  end
  local cost, now
  cost, now, err = cost_now(A, base)
  if err then
    return err
  end
  local lc
  if op == 'lease' then
    lc, err = leased().lease_args(A[base + 6], now)
    if err then
      return err
    end
  end
  local tokens, ts, exists, recs
  tokens, ts, exists, err, recs = stored(key, op == 'lease')
  if err then
    return err
  end
  if op == 'lease' then
    return leased().lease(key, capacity, rate, cost, now, tokens, ts, exists, recs, lc)
  end
  if op == 'peek' then
    -- bucket.Peek (Stored.Peek): nothing is written and nothing is created.
    if recs then
      local L = leased()
      local t, n = L.refill(tokens, ts, exists, capacity, rate, recs, now)
      local allowed = t >= cost
      if allowed then
        t = t - cost
      end
      return L.decide_room(capacity, rate, L.room(capacity, L.sum_from(recs, n + 1)), cost, t, allowed)
    end
    local t = holding(tokens, ts, exists, capacity, rate, now)
    local allowed = t >= cost
    if allowed then
      t = t - cost
    end
    return decide(capacity, rate, cost, t, allowed)
  end
  return acquire(key, capacity, rate, cost, now, tokens, ts, exists, recs)
end

-- check reads and checks one member of a group: key, its arguments at
-- A[base+1 .. base+6], the keys of the group seen so far, and whether it is
-- a member after the first. It returns the member (its arguments, its
-- state, whether it alone holds its cost, and bucket.Check's reply), or nil
-- and the error reply of a member that cannot be checked.
local function check(key, A, base, seen, later)
  if later and A[base + 4] ~= 'acquireall' then
    return nil, redis.error_reply('ERR invalid group: every key of a group must have the op acquireall')
  end
  if seen[key] then
    return nil, redis.error_reply('ERR invalid group: a key is named twice')
  end
  seen[key] = true
  local capacity, rate, err = limit(A, base)
  if err then
    return nil, err
  end
  local cost, now
  cost, now, err = cost_now(A, base)
  if err then
    return nil, err
  end
  local tokens, ts, exists, recs
  tokens, ts, exists, err, recs = stored(key)
  if err then
    return nil, err
  end
  local m = {capacity = capacity, rate = rate, cost = cost, now = now,
    tokens = tokens, ts = ts, exists = exists, recs = recs}
  if recs then -- Stored.Check
    local L = leased()
    local t, n = L.refill(tokens, ts, exists, capacity, rate, recs, now)
    m.ok = t >= cost
    m.reply = L.decide_room(capacity, rate, L.room(capacity, L.sum_from(recs, n + 1)), cost, t, m.ok)
    return m
  end
  local t = holding(tokens, ts, exists, capacity, rate, now)
  m.ok = t >= cost
  m.reply = decide(capacity, rate, cost, t, m.ok)
  return m
end

-- group runs the all-or-nothing group KEYS[first .. first+n-1] as
-- internal/shard's acquireAll does (see the top): every member is checked,
-- and only when every one alone holds its cost does each acquire. The
-- members' states are read once: the group's keys differ, so no member's
-- write changes another's state.
local function group(first, n, replies)
  local members, all, seen = {}, true, {}
  for i = first, first + n - 1 do
    local m, err = check(KEYS[i], ARGV, 6 * (i - 1), seen, i > first)
    if m then
      members[i], replies[i] = m, m.reply
      all = all and m.ok
    else
      replies[i], all = err, false
    end
  end
  if not all then
    return -- nothing is written: each member answers its check
  end
  for i = first, first + n - 1 do
    local m = members[i]
    replies[i] = acquire(KEYS[i], m.capacity, m.rate, m.cost, m.now, m.tokens, m.ts, m.exists, m.recs)
  end
end

-- unit runs the call or the group that starts at KEYS[i], puts its replies
-- in replies, and returns the index of the key after it.
local function unit(i, replies)
  local base = 6 * (i - 1)
  if ARGV[base + 4] ~= 'acquireall' then
    replies[i] = call(KEYS[i], ARGV, base)
    return i + 1
  end
  local n = micros(ARGV[base + 6])
  if not (n and n >= 1 and n <= #KEYS - i + 1) then
    replies[i] = redis.error_reply('ERR invalid group size: ARGV[6] of the first key of a group must be its number of keys, 1 to the keys left')
    return i + 1
  end
  group(i, n, replies)
  return i + n
end

if #KEYS <= 1 then
  local replies = {}
  unit(1, replies)
  return replies[1]
end
if #ARGV ~= 6 * #KEYS then
  return redis.error_reply('ERR invalid batch: ' .. #KEYS .. ' keys need ' .. 6 * #KEYS .. ' arguments, six per key; got ' .. #ARGV)
end
local replies, i = {}, 1
while i <= #KEYS do
  i = unit(i, replies)
end
return replies
