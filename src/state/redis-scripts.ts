/**
 * Lua sources of the Redis state driver (redis.ts). Each check-and-reserve is one script, so it is atomic
 * across gateway processes sharing the Redis.
 *
 * Expiry is logical: scripts compare stored instants with the `now` the caller passes, never Redis's clock,
 * so tests can inject time. Key TTLs set here are garbage collection only, computed by the caller.
 *
 * Amounts and instants are written from ARGV strings as given: Lua 5.1 formats numbers with 14 significant
 * digits, which would round nano-USD amounts above 1e14 (100,000 USD).
 *
 * Layouts:
 *   counter  hash {paid, byok, exp}; no `exp` for a lifetime counter
 *   holds    hash holdId -> amount, plus <key>:exp (sorted set holdId by until) and <key>:sum (the total),
 *            so reading a group's total is O(1) and expired holds are dropped in O(log n) each, however
 *            many requests are in flight or settling. The two companion keys are derived from the declared
 *            key inside the scripts: fine on one Redis, not on Redis Cluster
 *   rate     hash {count, resetAt}
 */

const helpers = `
-- A counter's paid and byok spend, or nil when it does not exist or its window has ended.
local function counter(key, now)
  local v = redis.call('HMGET', key, 'paid', 'byok', 'exp')
  if not v[1] then return nil end
  if v[3] and tonumber(v[3]) <= now then
    redis.call('DEL', key)
    return nil
  end
  return tonumber(v[1]), tonumber(v[2])
end

-- A rate window's count, or nil when it does not exist or has ended.
local function window(key, now)
  local v = redis.call('HMGET', key, 'count', 'resetAt')
  if not v[1] then return nil end
  if tonumber(v[2]) <= now then
    redis.call('DEL', key)
    return nil
  end
  return tonumber(v[1])
end

-- Sum of a group's live holds; drops expired holds
-- in batches (unpack takes a bounded number of values).
local function holds(key, now)
  local exp, sumKey = key .. ':exp', key .. ':sum'
  while true do
    local expired = redis.call('ZRANGEBYSCORE', exp, '-inf', now, 'LIMIT', 0, 500)
    if #expired == 0 then break end
    local amounts = redis.call('HMGET', key, unpack(expired))
    local drop = 0
    for i = 1, #expired do
      if amounts[i] then drop = drop + tonumber(amounts[i]) end
    end
    redis.call('HDEL', key, unpack(expired))
    redis.call('ZREM', exp, unpack(expired))
    if drop > 0 then redis.call('DECRBY', sumKey, drop) end
  end
  return tonumber(redis.call('GET', sumKey) or '0')
end

-- The earliest expiry of a group's live holds (call after holds()), or false when none.
local function nextExpiry(key)
  local first = redis.call('ZRANGE', key .. ':exp', 0, 0, 'WITHSCORES')
  return first[2] and tonumber(first[2]) or false
end

-- Removes a hold from a group (no-op when absent); whether it was there.
local function dropHold(key, id)
  local old = redis.call('HGET', key, id)
  if not old then return false end
  redis.call('HDEL', key, id)
  redis.call('ZREM', key .. ':exp', id)
  redis.call('DECRBY', key .. ':sum', old)
  return true
end

-- Adds a hold under an id not yet in the group; amount and untilMs are ARGV strings, written as given.
local function addHold(key, id, amount, untilMs)
  redis.call('HSET', key, id, amount)
  redis.call('ZADD', key .. ':exp', untilMs, id)
  redis.call('INCRBY', key .. ':sum', amount)
end

-- Sets (or replaces) a hold.
local function setHold(key, id, amount, untilMs)
  dropHold(key, id)
  addHold(key, id, amount, untilMs)
end

-- Extends a holds group's TTL (its three keys), never shortens it: other holds may live longer than this one.
local function keepFor(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
    redis.call('PEXPIRE', key .. ':exp', ttl)
    redis.call('PEXPIRE', key .. ':sum', ttl)
  end
end
`;

/**
 * KEYS: n counters, the n lines' groups, then the in-flight group when there is one.
 * ARGV: holdId, now, estimate, holdUntil, holdTtl, balanceBlocked (1|0), capNano, the in-flight estimate, then
 * per line limit and includeByok (1|0). The lines' groups hold `estimate`, the in-flight group its own.
 * Returns {'missing', lineIndex…} | {'budget', line, spent, held} | {'balance'} | {'in_flight', held, nextExpiry}
 * | {'ok'}, in MemoryState's order of checks.
 */
export const reserveLua =
  helpers +
  `
local holdId, now, estimate, holdUntil = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local holdTtl, balanceBlocked, cap, inFlightEstimate = tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7]), ARGV[8]
local n = (#ARGV - 8) / 2

local missing, paids, byoks = {}, {}, {}
for i = 1, n do
  local paid, byok = counter(KEYS[i], now)
  if not paid then missing[#missing + 1] = i - 1 end
  paids[i], byoks[i] = paid, byok
end
if #missing > 0 then return {'missing', unpack(missing)} end

local heldIn = {}
for i = 1, n do
  local paid, byok = paids[i], byoks[i]
  local spent = paid + (ARGV[8 + 2 * i] == '1' and byok or 0)
  local group = KEYS[n + i]
  if heldIn[group] == nil then heldIn[group] = holds(group, now) end
  if spent + heldIn[group] >= tonumber(ARGV[7 + 2 * i]) then return {'budget', i - 1, spent, heldIn[group]} end
end

if balanceBlocked then return {'balance'} end

local inFlight = KEYS[2 * n + 1]
if inFlight then
  local held = holds(inFlight, now)
  if held + tonumber(inFlightEstimate) > cap then return {'in_flight', held, nextExpiry(inFlight)} end
end

if tonumber(estimate) > 0 then
  local done = {}
  for i = n + 1, 2 * n do
    if not done[KEYS[i]] then
      done[KEYS[i]] = true
      addHold(KEYS[i], holdId, estimate, holdUntil)
      keepFor(KEYS[i], holdTtl)
    end
  end
end
if inFlight and tonumber(inFlightEstimate) > 0 then
  addHold(inFlight, holdId, inFlightEstimate, holdUntil)
  keepFor(inFlight, holdTtl)
end
return {'ok'}
`;

/**
 * KEYS: g groups, c counters, then the in-flight group when there is one.
 * ARGV: holdId, now, byok (1|0), cost, g, c, until, holdTtl, retry (1|0).
 * A retry counts the cost only if the hold was still in a group: a first attempt that ran removed it.
 */
export const settleLua =
  helpers +
  `
local holdId, now, field, cost = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1' and 'byok' or 'paid', ARGV[4]
local g, c = tonumber(ARGV[5]), tonumber(ARGV[6])
local held = false
for i = 1, g do
  if dropHold(KEYS[i], holdId) then held = true end
end
if ARGV[9] == '1' and not held then c = 0 end
for i = g + 1, g + c do
  -- A missing counter is rebuilt from the ledger, which already has this cost.
  if counter(KEYS[i], now) then redis.call('HINCRBY', KEYS[i], field, cost) end
end
local inFlight = KEYS[g + tonumber(ARGV[6]) + 1]
if inFlight then
  if tonumber(cost) > 0 and tonumber(ARGV[7]) > now then
    setHold(inFlight, holdId, cost, ARGV[7])
    keepFor(inFlight, tonumber(ARGV[8]))
  else
    dropHold(inFlight, holdId)
  end
end
return 0
`;

/** KEYS: the rate window. ARGV: now. One back, if the window exists and counts any. */
export const unhitLua =
  helpers +
  `
local count = window(KEYS[1], tonumber(ARGV[1]))
if count and count > 0 then redis.call('HINCRBY', KEYS[1], 'count', -1) end
return 0
`;

/** KEYS: the counter. ARGV: now, paid, byok, expiresAt ('' for lifetime), ttl. First writer wins. */
export const initCounterLua =
  helpers +
  `
if counter(KEYS[1], tonumber(ARGV[1])) then return 0 end
redis.call('HSET', KEYS[1], 'paid', ARGV[2], 'byok', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'exp', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
return 1
`;

/**
 * KEYS: the hold's groups. ARGV: holdId, amount, until, now, ttl. Puts the hold into each group that does not
 * have it (one there is the live one, left as it is), unless it has lapsed.
 */
export const restoreLua =
  helpers +
  `
local id, amount, untilMs = ARGV[1], ARGV[2], ARGV[3]
if tonumber(untilMs) <= tonumber(ARGV[4]) then return 0 end
for i = 1, #KEYS do
  if redis.call('HEXISTS', KEYS[i], id) == 0 then
    addHold(KEYS[i], id, amount, untilMs)
    keepFor(KEYS[i], tonumber(ARGV[5]))
  end
end
return 0
`;

/** KEYS: the group. ARGV: now. */
export const heldLua =
  helpers +
  `
local sum = holds(KEYS[1], tonumber(ARGV[1]))
return sum
`;

/**
 * KEYS: one rate window per line. ARGV: now, then per line limit, resetAt, rebuild (1|0), ttl.
 * Returns {'missing', lineIndex…} | {'limited', line, count} | {'ok', count…}. All or nothing.
 */
export const hitLua =
  helpers +
  `
local now = tonumber(ARGV[1])
local missing = {}
for i = 1, #KEYS do
  if ARGV[4 * i] == '1' and not window(KEYS[i], now) then missing[#missing + 1] = i - 1 end
end
if #missing > 0 then return {'missing', unpack(missing)} end
for i = 1, #KEYS do
  local count = window(KEYS[i], now) or 0
  if count >= tonumber(ARGV[4 * i - 2]) then return {'limited', i - 1, count} end
end
local counts = {'ok'}
for i = 1, #KEYS do
  if window(KEYS[i], now) then
    counts[#counts + 1] = redis.call('HINCRBY', KEYS[i], 'count', 1)
  else
    redis.call('HSET', KEYS[i], 'count', 1, 'resetAt', ARGV[4 * i - 1])
    redis.call('PEXPIRE', KEYS[i], ARGV[4 * i + 1])
    counts[#counts + 1] = 1
  end
end
return counts
`;

/** KEYS: the rate window. ARGV: now, count, resetAt, ttl. First writer wins. */
export const initRateLua =
  helpers +
  `
if window(KEYS[1], tonumber(ARGV[1])) then return 0 end
redis.call('HSET', KEYS[1], 'count', ARGV[2], 'resetAt', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`;
