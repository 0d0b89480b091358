"""The Lua scripts behind :class:`~proxy.state.redis.RedisStore`'s multi-step operations.

Each runs atomically on the server (one round trip), on the server's clock (``TIME``) so that
instances with skewed clocks agree. Times inside are milliseconds (floats); replies are
integers, so durations come back in microseconds. They mirror
:class:`~proxy.state.memory_store.MemoryStore` line for line: the store's tests run against both.
"""

from __future__ import annotations

import hashlib


class Script:
    """A Lua source and its SHA-1 (what ``EVALSHA`` names it by)."""

    __slots__ = ("name", "sha", "source")

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


# KEYS[1]; ARGV: amount, ttl ms (0: none), idle ms. A TTL applies only to a key it creates;
# a write without one refreshes the idle expiry.
INCR = Script(
    "incr",
    """
local key = KEYS[1]
local created = redis.call('EXISTS', key) == 0
local value = redis.call('INCRBY', key, ARGV[1])
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  if created then redis.call('PEXPIRE', key, ttl) end
else
  redis.call('PEXPIRE', key, ARGV[3])
end
return value
""",
)

# Lua functions the scripts below share. Bucket arguments are triples (cost, limit, period ms)
# in ARGV from ``a`` on, for the keys KEYS[k + 1] .. KEYS[k + n].
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
"""

_DEBT = """
local function debt_of(key)
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat == nil then return nil end
  local debt = tat - now
  if debt < 0 then debt = 0 end
  return debt
end
"""

_TAKE = """
local function take(k, n, a)
  local slack = 0.001
  local debts = {}
  local allowed = true
  for i = 1, n do
    local debt = debt_of(KEYS[k + i])
    if debt == nil then return nil, KEYS[k + i] end
    debts[i] = debt
    local j = a + 3 * (i - 1)
    local cost, limit, period = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    if debt + cost * period / limit > period + slack then allowed = false end
  end
  local out = {}
  for i = 1, n do
    local j = a + 3 * (i - 1)
    local cost, limit, period = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    local interval = period / limit
    local debt = debts[i]
    local new = debt + cost * interval
    if allowed then
      if new > 0 then
        redis.call('SET', KEYS[k + i], string.format('%.3f', now + new), 'PX', math.ceil(new))
      end
      local remaining = math.floor((period - new) / interval + 0.000001)
      if remaining < 0 then remaining = 0 end
      out[#out + 1] = 1; out[#out + 1] = remaining
      out[#out + 1] = math.floor(new * 1000); out[#out + 1] = 0
    else
      local remaining = math.floor((period - debt) / interval + 0.000001)
      if remaining < 0 then remaining = 0 end
      local retry = 0
      local fits = new <= period + slack
      if not fits then retry = new - period end
      out[#out + 1] = fits and 1 or 0; out[#out + 1] = remaining
      out[#out + 1] = math.floor(debt * 1000); out[#out + 1] = math.ceil(retry * 1000)
    end
  end
  return out, allowed
end
"""

_ADJUST = """
local function adjust(k, n, a)
  for i = 1, n do
    local key = KEYS[k + i]
    local debt = debt_of(key)
    if debt == nil then return key end
    local j = a + 3 * (i - 1)
    local cost, limit, period = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    local new = debt + cost * period / limit
    if new > 0 then
      redis.call('SET', key, string.format('%.3f', now + new), 'PX', math.ceil(new))
    else
      redis.call('DEL', key)
    end
  end
  return nil
end
"""

# In-flight counters KEYS[k + 1 ..]: limits ARGV[a ..].
_SLOTS = """
local function full_slot(k, n, a)
  for i = 1, n do
    local count = tonumber(redis.call('GET', KEYS[k + i]) or '0')
    if count == nil then return -2 end
    if count >= tonumber(ARGV[a + i - 1]) then return i - 1 end
  end
  return -1
end

local function hold(k, n, idle)
  for i = 1, n do
    redis.call('INCR', KEYS[k + i])
    redis.call('PEXPIRE', KEYS[k + i], idle)
  end
end

local function release(k, n, idle)
  for i = 1, n do
    local key = KEYS[k + i]
    local count = tonumber(redis.call('GET', key) or '0')
    if count == nil then return key end
    if count > 1 then
      redis.call('DECR', key)
      redis.call('PEXPIRE', key, idle)
    else
      redis.call('DEL', key)
    end
  end
  return nil
end
"""

_WRONG = "return redis.error_reply('WRONGTYPE not a counter or rate bucket: ' .. tostring(bad))"

# KEYS: buckets; ARGV: per bucket cost, limit, period ms. Reply: per bucket allowed (0/1),
# remaining, reset_after µs, retry_after µs. All or nothing (module docstring of proxy.state.store).
RATE_TAKE = Script(
    "rate_take",
    _NOW
    + _DEBT
    + _TAKE
    + f"""
local out, bad = take(0, #KEYS, 1)
if out == nil then {_WRONG} end
return out
""",
)

# KEYS: buckets; ARGV: per bucket cost, limit, period ms. Charges without a check.
RATE_ADJUST = Script(
    "rate_adjust",
    _NOW
    + _DEBT
    + _ADJUST
    + f"""
local bad = adjust(0, #KEYS, 1)
if bad ~= nil then {_WRONG} end
return 0
""",
)

# KEYS: in-flight counters; ARGV: their limits, then the idle ms. Reply: -1 when every counter
# was incremented, else the 0-based index of the first one at its limit (nothing changed).
HOLD = Script(
    "hold",
    _SLOTS
    + f"""
local n = #KEYS
local full = full_slot(0, n, 1)
if full == -2 then local bad = 'a slot'; {_WRONG} end
if full >= 0 then return full end
hold(0, n, ARGV[n + 1])
return -1
""",
)

# KEYS: in-flight counters; ARGV: the idle ms. Never below zero.
RELEASE = Script(
    "release",
    _SLOTS
    + f"""
local bad = release(0, #KEYS, ARGV[1])
if bad ~= nil then {_WRONG} end
return 0
""",
)

# KEYS: r slots to release and a buckets to adjust (the settlements this process had pending),
# then n slots to hold and the buckets to take. ARGV: r, a, n, the idle ms, per adjusted bucket
# cost, limit, period ms, the n slots' limits, then per taken bucket cost, limit, period ms. The
# settlements apply first, whatever the admission's answer. Reply: {full (-1: none), then
# rate_take's four numbers per taken bucket}; slots are held only when the take happened.
ADMIT = Script(
    "admit",
    _NOW
    + _DEBT
    + _TAKE
    + _ADJUST
    + _SLOTS
    + f"""
local r, a, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local idle = ARGV[4]
local bad = release(0, r, idle)
if bad ~= nil then {_WRONG} end
bad = adjust(r, a, 5)
if bad ~= nil then {_WRONG} end
local k = r + a
local limits = 5 + 3 * a
local full = full_slot(k, n, limits)
if full == -2 then bad = 'a slot'; {_WRONG} end
if full >= 0 then return {{full}} end
local out, allowed = take(k + n, #KEYS - k - n, limits + n)
if out == nil then bad = allowed; {_WRONG} end
if allowed then hold(k, n, idle) end
table.insert(out, 1, -1)
return out
""",
)

# KEYS: n slots, then buckets; ARGV: n, the idle ms, then per bucket cost, limit, period ms.
SETTLE = Script(
    "settle",
    _NOW
    + _DEBT
    + _ADJUST
    + _SLOTS
    + f"""
local n = tonumber(ARGV[1])
local bad = release(0, n, ARGV[2])
if bad ~= nil then {_WRONG} end
bad = adjust(n, #KEYS - n, 3)
if bad ~= nil then {_WRONG} end
return 0
""",
)

# KEYS: counters; ARGV: amount, checked (1: check the limits), idle ms, then per key its limit
# and its TTL ms (0: none). Reply: {-1 (added) or the 0-based index of the first counter at its
# limit (nothing changed), then every counter's value}. A TTL applies only to a counter the
# script creates; a counter without one has its idle expiry refreshed. Values are checked
# before anything is written, so that a non-integer changes nothing.
INCR_WITHIN = Script(
    "incr_within",
    """
local amount = tonumber(ARGV[1])
local values = {}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v and not string.match(v, '^%-?%d+$') then
    return redis.error_reply('WRONGTYPE not a counter: ' .. key)
  end
  values[i] = v and tonumber(v) or false
end
if ARGV[2] == '1' then
  for i = 1, #KEYS do
    if (values[i] or 0) >= tonumber(ARGV[2 + 2 * i]) then
      local out = {i - 1}
      for j = 1, #KEYS do out[j + 1] = values[j] or 0 end
      return out
    end
  end
end
local out = {-1}
for i, key in ipairs(KEYS) do
  out[i + 1] = redis.call('INCRBY', key, amount)
  local ttl = tonumber(ARGV[3 + 2 * i])
  if ttl > 0 then
    if not values[i] then redis.call('PEXPIRE', key, ttl) end
  else
    redis.call('PEXPIRE', key, ARGV[3])
  end
end
return out
""",
)

ALL = (INCR, RATE_TAKE, RATE_ADJUST, HOLD, RELEASE, ADMIT, SETTLE, INCR_WITHIN)
