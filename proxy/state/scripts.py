"""The Lua scripts behind :class:`~proxy.state.redis.RedisStore`'s multi-step operations.

Each runs atomically on the server (one round trip), on the server's clock (``TIME``) so that
instances with skewed clocks agree. Times inside are milliseconds (floats); replies are
integers, so durations come back in microseconds. They mirror
:class:`~proxy.store.MemoryStore` line for line: the store's tests run against both.
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

# KEYS: buckets; ARGV: per bucket cost, limit, period ms. Reply: per bucket allowed (0/1),
# remaining, reset_after µs, retry_after µs. All or nothing (module docstring of proxy.store).
RATE_TAKE = Script(
    "rate_take",
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local slack = 0.001
local n = #KEYS
local debts = {}
local allowed = true
for i = 1, n do
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat == nil then return redis.error_reply('WRONGTYPE not a rate bucket: ' .. KEYS[i]) end
  local debt = tat - now
  if debt < 0 then debt = 0 end
  debts[i] = debt
  local cost, limit, period = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  if debt + cost * period / limit > period + slack then allowed = false end
end
local out = {}
for i = 1, n do
  local cost, limit, period = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local interval = period / limit
  local debt = debts[i]
  local new = debt + cost * interval
  if allowed then
    if new > 0 then
      redis.call('SET', KEYS[i], string.format('%.3f', now + new), 'PX', math.ceil(new))
    end
    local remaining = math.floor((period - new) / interval + 0.000001)
    if remaining < 0 then remaining = 0 end
    out[#out+1] = 1; out[#out+1] = remaining
    out[#out+1] = math.floor(new * 1000); out[#out+1] = 0
  else
    local remaining = math.floor((period - debt) / interval + 0.000001)
    if remaining < 0 then remaining = 0 end
    local fits = new <= period + slack
    local retry = 0
    if not fits then retry = new - period end
    out[#out+1] = fits and 1 or 0; out[#out+1] = remaining
    out[#out+1] = math.floor(debt * 1000); out[#out+1] = math.ceil(retry * 1000)
  end
end
return out
""",
)

# KEYS: buckets; ARGV: per bucket cost, limit, period ms. Charges without a check.
RATE_ADJUST = Script(
    "rate_adjust",
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat == nil then return redis.error_reply('WRONGTYPE not a rate bucket: ' .. KEYS[i]) end
  local debt = tat - now
  if debt < 0 then debt = 0 end
  local cost, limit, period = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local new = debt + cost * period / limit
  if new > 0 then
    redis.call('SET', KEYS[i], string.format('%.3f', now + new), 'PX', math.ceil(new))
  else
    redis.call('DEL', KEYS[i])
  end
end
return 0
""",
)

# KEYS: in-flight counters; ARGV: their limits, then the idle ms. Reply: -1 when every counter
# was incremented, else the 0-based index of the first one at its limit (nothing changed).
HOLD = Script(
    "hold",
    """
local n = #KEYS
for i = 1, n do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if count == nil then return redis.error_reply('WRONGTYPE not a counter: ' .. KEYS[i]) end
  if count >= tonumber(ARGV[i]) then return i - 1 end
end
for i = 1, n do
  redis.call('INCR', KEYS[i])
  redis.call('PEXPIRE', KEYS[i], ARGV[n + 1])
end
return -1
""",
)

# KEYS: in-flight counters; ARGV: the idle ms. Never below zero.
RELEASE = Script(
    "release",
    """
for i = 1, #KEYS do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if count == nil then return redis.error_reply('WRONGTYPE not a counter: ' .. KEYS[i]) end
  if count > 1 then
    redis.call('DECR', KEYS[i])
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
  else
    redis.call('DEL', KEYS[i])
  end
end
return 0
""",
)

ALL = (INCR, RATE_TAKE, RATE_ADJUST, HOLD, RELEASE)
