-- two-bucket.lua: the Redis + Lua script users hand-roll today to check two token
-- buckets at once (per user and per organisation, say), taking from both or from
-- neither; the baseline TB.MACQUIRE is benchmarked against (scripts/bench-groups.sh).
-- It is the classic token bucket (classic-token-bucket.lua) twice, with the check of
-- both buckets before either is written.
-- KEYS[1], KEYS[2] = bucket keys (on a Redis Cluster they must share a slot)
-- ARGV[1], ARGV[2] = capacity and rate (tokens/second) of KEYS[1]
-- ARGV[3], ARGV[4] = capacity and rate of KEYS[2]
-- ARGV[5] = cost, taken from each bucket
-- Returns 1 (allowed: both buckets gave cost) or 0 (denied: neither changed).
-- State: HASH {tokens, ts} per bucket; ts in microseconds from redis TIME.
local cost = tonumber(ARGV[5])

local t   = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- refilled returns bucket i's tokens at now.
local function refilled(i)
  local cap  = tonumber(ARGV[2 * i - 1])
  local rate = tonumber(ARGV[2 * i])
  local st     = redis.call('HMGET', KEYS[i], 'tokens', 'ts')
  local tokens = tonumber(st[1])
  local ts     = tonumber(st[2])
  if tokens == nil or ts == nil then
    return cap
  end
  local elapsed = now - ts
  if elapsed < 0 then elapsed = 0 end
  return math.min(cap, tokens + (elapsed / 1000000) * rate)
end

local tokens = { refilled(1), refilled(2) }
if tokens[1] < cost or tokens[2] < cost then
  return 0
end
for i = 1, 2 do
  local cap  = tonumber(ARGV[2 * i - 1])
  local rate = tonumber(ARGV[2 * i])
  redis.call('HSET', KEYS[i], 'tokens', tokens[i] - cost, 'ts', now)
  redis.call('PEXPIRE', KEYS[i], math.ceil(cap / rate * 1000))
end
return 1
