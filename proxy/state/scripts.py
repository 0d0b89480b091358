"""The Lua scripts behind :class:`~proxy.state.redis.RedisStore`'s multi-step operations, and the
names of the keys they keep beside the callers' (:func:`lease_key`, :func:`ops_key`).

Each runs atomically on the server (one round trip), on the server's clock (``TIME``) so that
instances with skewed clocks agree. Times inside are milliseconds (floats); replies are
integers, so durations come back in microseconds. They mirror
:class:`~proxy.state.memory_store.MemoryStore`: the store's tests run against both.
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


_NAMESPACE = "crossway:"


def hash_tag(name: str) -> str | None:
    """What Redis Cluster hashes ``name`` by when it has a hash tag (what the first ``{`` and
    the next ``}`` enclose, if not empty), else None."""
    start = name.find("{")
    end = name.find("}", start + 1) if start >= 0 else -1
    return name[start + 1 : end] if end > start + 1 else None


def lease_key(name: str, cluster: bool) -> str:
    """The lease set of the in-flight slot ``name`` (a key as sent, ``crossway:…``), in the same
    hash slot: ``crossway:leases:`` and the rest of ``name`` (its hash tag kept), or on a
    cluster, for a name without a tag, ``crossway:leases:{<name>}``."""
    if cluster and hash_tag(name) is None:
        return f"{_NAMESPACE}leases:{{{name}}}"
    return f"{_NAMESPACE}leases:{name.removeprefix(_NAMESPACE)}"


def ops_key(name: str, instance: str, block: int, cluster: bool) -> str:
    """The ops bitmap of one store ``instance`` for operations on keys of ``name``'s hash slot,
    ``block`` its part (a bitmap key holds a bounded number of operations): one key per
    instance and block, or on a cluster one per hash tag (per key for names without one)."""
    base = f"{_NAMESPACE}ops:{instance}:{block}"
    if not cluster:
        return base
    tag = hash_tag(name)
    return f"{_NAMESPACE}{{{tag}}}:ops:{instance}:{block}" if tag else f"{base}:{{{name}}}"


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

# In-flight slots, each a pair of keys from KEYS[k + 1]: its count K (decimal text, for readers)
# and its lease set L (member: a holder, score: when its lease ends, server ms). A lease ends
# on its own; K and L expire with their last lease. (proxy.state.redis: leases.)
_SLOTS = """
local function mirror(k, l)
  local last = redis.call('ZRANGE', l, -1, -1, 'WITHSCORES')
  if #last == 0 then redis.call('DEL', k) return end
  local ttl = math.ceil(tonumber(last[2]) - now)
  redis.call('SET', k, redis.call('ZCARD', l), 'PX', ttl)
  redis.call('PEXPIRE', l, ttl)
end

local function live(k, l)
  local count = redis.call('GET', k)
  if count and not string.match(count, '^%d+$') then return nil end
  local gone = redis.call('ZREMRANGEBYSCORE', l, '-inf', now)
  if gone > 0 then mirror(k, l) end
  return redis.call('ZCARD', l)
end

local function full_slot(k, n, a)
  for i = 1, n do
    local count = live(KEYS[k + 2 * i - 1], KEYS[k + 2 * i])
    if count == nil then return -2 end
    if count >= tonumber(ARGV[a + i - 1]) then return i - 1 end
  end
  return -1
end

local function hold(k, n, member, ttl)
  local ends = now + tonumber(ttl)
  for i = 1, n do
    redis.call('ZADD', KEYS[k + 2 * i], ends, member)
    mirror(KEYS[k + 2 * i - 1], KEYS[k + 2 * i])
  end
end

local function release(k, r, m)
  for i = 1, r do
    local key, l = KEYS[k + 2 * i - 1], KEYS[k + 2 * i]
    if live(key, l) == nil then return key end
    local member = ARGV[m + i - 1]
    if member == '' then redis.call('ZPOPMIN', l) else redis.call('ZREM', l, member) end
    mirror(key, l)
  end
  return nil
end
"""

# Operations given up on: each has two bits in an ops bitmap (proxy.state.redis): its first,
# set when it was applied; its second, when it was voided (a voided operation that runs late
# does nothing).
_VOIDED = "redis.call('GETBIT', {ops}, tonumber({bit}) + 1) == 1"

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

# KEYS: n slot pairs, then the ops bitmap; ARGV: their limits, the lease ms, the holder, its
# ops bit. Reply: -1 when every slot took the holder's lease, else the 0-based index of the
# first one at its limit (nothing changed); -2 when the hold was voided first.
HOLD = Script(
    "hold",
    _NOW
    + _SLOTS
    + f"""
local n = (#KEYS - 1) / 2
if {_VOIDED.format(ops="KEYS[#KEYS]", bit="ARGV[n + 3]")} then return -2 end
local full = full_slot(0, n, 1)
if full == -2 then local bad = 'a slot'; {_WRONG} end
if full >= 0 then return full end
hold(0, n, ARGV[n + 2], ARGV[n + 1])
return -1
""",
)

# KEYS: r slot pairs to release and the buckets to adjust (the settlements this process had
# pending), then n slot pairs to hold, the ops bitmap (when n > 0) and the buckets to take.
# ARGV: r, a (the adjusted buckets), n, the lease ms, the holder, its ops bit, the r holders
# released ('': the lease that ends first), per adjusted bucket cost, limit, period ms, the n
# slots' limits, then per taken bucket cost, limit, period ms. The settlements apply first,
# whatever the admission's answer. Reply: {full (-1: none; -2: voided first), then rate_take's
# four numbers per taken bucket}; the holder's leases are taken only when the take happened.
ADMIT = Script(
    "admit",
    _NOW
    + _DEBT
    + _TAKE
    + _ADJUST
    + _SLOTS
    + f"""
local r, a, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local bad = release(0, r, 7)
if bad ~= nil then {_WRONG} end
bad = adjust(2 * r, a, 7 + r)
if bad ~= nil then {_WRONG} end
local k = 2 * r + a
local limits = 7 + r + 3 * a
local b = k + 2 * n
if n > 0 then
  b = b + 1
  if {_VOIDED.format(ops="KEYS[b]", bit="ARGV[6]")} then return {{-2}} end
end
local full = full_slot(k, n, limits)
if full == -2 then bad = 'a slot'; {_WRONG} end
if full >= 0 then return {{full}} end
local out, allowed = take(b, #KEYS - b, limits + n)
if out == nil then bad = allowed; {_WRONG} end
if allowed then hold(k, n, ARGV[5], ARGV[4]) end
table.insert(out, 1, -1)
return out
""",
)

# KEYS: r slot pairs, then buckets; ARGV: r, the r holders released ('': the lease that ends
# first), then per bucket cost, limit, period ms.
SETTLE = Script(
    "settle",
    _NOW
    + _DEBT
    + _ADJUST
    + _SLOTS
    + f"""
local r = tonumber(ARGV[1])
local bad = release(0, r, 2)
if bad ~= nil then {_WRONG} end
bad = adjust(2 * r, #KEYS - 2 * r, 2 + r)
if bad ~= nil then {_WRONG} end
return 0
""",
)

# KEYS: slot pairs; ARGV: the lease ms, then holders. Each holder's lease in every slot now ends
# a lease from now, taken again if it was lost (a failover that lost the write).
RENEW = Script(
    "renew",
    _NOW
    + _SLOTS
    + """
local ends = now + tonumber(ARGV[1])
for i = 1, #KEYS, 2 do
  if live(KEYS[i], KEYS[i + 1]) == nil then
    return redis.error_reply('WRONGTYPE not an in-flight slot: ' .. KEYS[i])
  end
  for j = 2, #ARGV do redis.call('ZADD', KEYS[i + 1], ends, ARGV[j]) end
  mirror(KEYS[i], KEYS[i + 1])
end
return 0
""",
)

# KEYS: the ops bitmap, then the operation's keys (slot pairs for a hold, counters for an add);
# ARGV: its ops bit, its holder ('' for an add), its amount, the bitmap's TTL ms. Voids the
# operation once: a hold's leases are released; an add that was applied is taken back (from the
# counters that still exist). Reply: 1, or 0 when it was voided already.
VOID = Script(
    "void",
    _NOW
    + _SLOTS
    + f"""
local ops, bit = KEYS[1], tonumber(ARGV[1])
if {_VOIDED.format(ops="ops", bit="bit")} then return 0 end
redis.call('SETBIT', ops, bit + 1, 1)
redis.call('PEXPIRE', ops, ARGV[4])
if ARGV[2] ~= '' then
  for i = 2, #KEYS, 2 do
    if live(KEYS[i], KEYS[i + 1]) ~= nil then
      redis.call('ZREM', KEYS[i + 1], ARGV[2])
      mirror(KEYS[i], KEYS[i + 1])
    end
  end
elseif redis.call('GETBIT', ops, bit) == 1 then
  for i = 2, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('DECRBY', KEYS[i], ARGV[3]) end
  end
end
return 1
""",
)

# KEYS: counters, then the ops bitmap; ARGV: amount, checked (1: check the limits), idle ms,
# the operation's ops bit, the bitmap's TTL ms, then per key its limit and its TTL ms (0: none).
# Reply: {-1 (added) or the 0-based index of the first counter at its limit (nothing changed),
# then every counter's value}, or {-2} when the operation was voided first. A TTL applies only
# to a counter the script creates; a counter without one has its idle expiry refreshed. Values
# are checked before anything is written, so that a non-integer changes nothing. An add sets
# the operation's first bit (what VOID reads).
INCR_WITHIN = Script(
    "incr_within",
    f"""
local n = #KEYS - 1
local ops, bit = KEYS[#KEYS], tonumber(ARGV[4])
if {_VOIDED.format(ops="ops", bit="bit")} then return {{-2}} end
local amount = tonumber(ARGV[1])
local values = {{}}
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v and not string.match(v, '^%-?%d+$') then
    return redis.error_reply('WRONGTYPE not a counter: ' .. KEYS[i])
  end
  values[i] = v and tonumber(v) or false
end
if ARGV[2] == '1' then
  for i = 1, n do
    if (values[i] or 0) >= tonumber(ARGV[4 + 2 * i]) then
      local out = {{i - 1}}
      for j = 1, n do out[j + 1] = values[j] or 0 end
      return out
    end
  end
end
local out = {{-1}}
for i = 1, n do
  local key = KEYS[i]
  out[i + 1] = redis.call('INCRBY', key, amount)
  local ttl = tonumber(ARGV[5 + 2 * i])
  if ttl > 0 then
    if not values[i] then redis.call('PEXPIRE', key, ttl) end
  else
    redis.call('PEXPIRE', key, ARGV[3])
  end
end
redis.call('SETBIT', ops, bit, 1)
redis.call('PEXPIRE', ops, ARGV[5])
return out
""",
)

ALL = (INCR, RATE_TAKE, RATE_ADJUST, HOLD, ADMIT, SETTLE, RENEW, VOID, INCR_WITHIN)
