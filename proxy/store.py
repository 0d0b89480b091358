"""The state store interface: counters and keys with a time to live, shared by the plugins.

Anything that should be shared between workers or instances — deployment health, per-deployment
request and token counters, later cache entries and rate limits — goes through :class:`Store`.
The interface is the small subset of Redis a gateway needs, with Redis semantics, so that a
Redis backend can implement it one command per method. :class:`MemoryStore` is the in-process
backend (the embedded default): nothing to install, state lost on restart, not shared between
worker processes.

Every method is a coroutine. A backend raises :class:`StoreUnavailable` when it cannot answer
(a Redis outage); each caller decides its own failure policy (fail open or closed). The memory
backend never raises it.

Rate limits (:meth:`Store.rate_take`, :meth:`Store.rate_adjust`) use GCRA, the generic cell
rate algorithm, which is a token bucket kept as one number per bucket: its *theoretical arrival
time* (TAT). A bucket of ``limit`` units per ``period`` seconds refills one unit every
``period / limit`` seconds and holds at most ``limit``; ``debt = max(TAT - now, 0)`` is how far
the bucket is from full, in seconds. Taking ``cost`` units adds ``cost * period / limit`` to the
debt and is allowed while the debt stays within ``period``. Accuracy: a burst gets exactly
``limit`` units, and over any ``n`` consecutive periods at most ``(n + 1) * limit`` (a full
bucket, then its refill); the long-run rate is exact, and there is no boundary burst of the
kind fixed windows allow. A Redis backend implements each call as one Lua script over GET/SET
with ``PX`` expiry at the TAT (so an idle bucket costs nothing), with the server's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec

Clock = Callable[[], float]

# Slack for float arithmetic: 7 units of a 7-per-minute bucket add up to 60.000000000000007 s.
_SLACK = 1e-6


class StoreUnavailable(Exception):
    """The store's backend cannot be reached; the caller applies its failure policy."""


class RateBucket(msgspec.Struct, frozen=True):
    """One GCRA bucket: ``cost`` units to take from a bucket of ``limit`` per ``period`` s."""

    key: str
    cost: int
    limit: int
    period: float = 60.0


class RateState(msgspec.Struct, frozen=True):
    """A bucket after :meth:`Store.rate_take`: whether it ``allowed`` the take (had room for
    it; the take happened only if every bucket did), the units it has left (``remaining``),
    seconds until it is full again (``reset_after``) and, when it refused, seconds until the
    take would fit (``retry_after``; 0 when allowed)."""

    allowed: bool
    remaining: int
    reset_after: float
    retry_after: float = 0.0


class Store(Protocol):
    """Keys with optional expiry, and atomic integer counters.

    ``ttl`` arguments are seconds (> 0); ``None`` means the key never expires. A counter is a
    key whose value is an integer: ``get`` returns its decimal text.
    """

    async def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None when it is missing or expired."""
        ...

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key`` (replacing any value and expiry)."""
        ...

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        """Add ``amount`` to the counter ``key`` (created at 0) and return the new value.

        ``ttl`` is applied only when the key is created, so that a counter keyed by a time
        window expires with its window however often it is incremented (Redis ``INCRBY`` then
        ``EXPIRE ... NX``). Raises :class:`ValueError` if ``key`` holds a non-integer value.
        """
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key`` (nothing happens if it is missing)."""
        ...

    async def ttl(self, key: str) -> float | None:
        """Seconds until ``key`` expires; None when it is missing or never expires."""
        ...

    async def rate_take(self, buckets: Sequence[RateBucket]) -> list[RateState]:
        """Take from every bucket, or from none: atomically, all or nothing (module docstring).

        Returns one state per bucket, in order. When any bucket refuses (``allowed`` False),
        none is charged, and each refusing bucket's state says when the take would fit. A
        ``cost`` above a bucket's ``limit`` never fits: callers cap it.
        """
        ...

    async def rate_adjust(self, buckets: Sequence[RateBucket]) -> None:
        """Charge each bucket's ``cost`` without a check (negative: give units back).

        Used to correct reservations once the real cost is known: a debt may exceed the period
        (later takes wait until it drains) and never goes below zero.
        """
        ...

    async def hold(self, keys: Sequence[str], limits: Sequence[int]) -> int | None:
        """Add one to every counter of ``keys`` unless one is already at its limit (the same
        index of ``limits``): atomically, all or nothing.

        Returns None when every counter was incremented, else the index of the first counter
        at its limit (nothing changed). Counters of requests in flight: :meth:`release` them.
        """
        ...

    async def release(self, keys: Sequence[str]) -> None:
        """Subtract one from every counter of ``keys`` (never below zero)."""
        ...

    async def admit(
        self, keys: Sequence[str], limits: Sequence[int], buckets: Sequence[RateBucket]
    ) -> tuple[int | None, list[RateState]]:
        """:meth:`hold` then :meth:`rate_take`, as one atomic step (one round trip for a
        remote backend): the slots are held and the buckets charged only if every slot had
        room and every bucket allowed the take.

        Returns ``(full, states)``: ``full`` is :meth:`hold`'s answer (then ``states`` is
        empty and nothing changed); otherwise ``states`` are :meth:`rate_take`'s (when one
        refuses, the slots are not held either).
        """
        ...

    async def settle(self, keys: Sequence[str], buckets: Sequence[RateBucket]) -> None:
        """:meth:`release` then :meth:`rate_adjust`, as one step (one round trip)."""
        ...

    async def incr_within(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
    ) -> tuple[int | None, list[int]]:
        """Add ``amount`` to every counter of ``keys`` — unless, with ``limits``, one of them
        already holds at least its limit (the same index): atomically, all or nothing.

        ``limits`` None adds unconditionally. ``ttls`` (one per key) apply as :meth:`incr`'s:
        only to a counter the call creates. Returns ``(None, values)`` with the counters' new
        values when the amount was added, else ``(index, values)``: the first counter at its
        limit and every counter's value as it is (nothing changed). Raises :class:`ValueError`
        (nothing changed) if a key holds a non-integer value.
        """
        ...


class MemoryStore:
    """The in-process :class:`Store`: a dict with lazy expiry on ``clock`` (seconds).

    Expired keys are dropped when read and, every ``sweep_every`` writes, all at once, so that
    memory holds only live keys plus at most that many writes' worth of dead ones. When more
    than ``max_keys`` keys are live the oldest written is evicted, which bounds memory whatever
    keys callers make up. Not thread-safe: use it from one event loop.
    """

    def __init__(
        self, clock: Clock = time.monotonic, *, max_keys: int = 100_000, sweep_every: int = 1024
    ) -> None:
        if max_keys < 1 or sweep_every < 1:
            raise ValueError("max_keys and sweep_every must be at least 1")
        self._clock = clock
        self._max_keys = max_keys
        self._sweep_every = sweep_every
        self._writes = 0
        self._data: dict[str, tuple[bytes | int | float, float | None]] = {}

    async def get(self, key: str) -> bytes | None:
        """See :meth:`Store.get`."""
        entry = self._live(key)
        if entry is None:
            return None
        value = entry[0]
        return value if isinstance(value, bytes) else str(value).encode()

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """See :meth:`Store.set`."""
        self._write(key, value, self._expiry(ttl))

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        """See :meth:`Store.incr`."""
        entry = self._live(key)
        if entry is None:
            count, expires = amount, self._expiry(ttl)
        else:
            current, expires = entry
            if isinstance(current, float):
                raise ValueError(f"key {key!r} holds a rate bucket, not an integer")
            if not isinstance(current, int):
                try:
                    current = int(current)
                except ValueError:
                    raise ValueError(f"key {key!r} does not hold an integer") from None
            count = current + amount
        self._write(key, count, expires)
        return count

    async def delete(self, key: str) -> None:
        """See :meth:`Store.delete`."""
        self._data.pop(key, None)

    async def ttl(self, key: str) -> float | None:
        """See :meth:`Store.ttl`."""
        now = self._clock()
        entry = self._live(key, now)
        if entry is None or entry[1] is None:
            return None
        return entry[1] - now

    async def rate_take(self, buckets: Sequence[RateBucket]) -> list[RateState]:
        """See :meth:`Store.rate_take`."""
        return self._take(buckets)[0]

    async def rate_adjust(self, buckets: Sequence[RateBucket]) -> None:
        """See :meth:`Store.rate_adjust`."""
        self._adjust(buckets)

    async def hold(self, keys: Sequence[str], limits: Sequence[int]) -> int | None:
        """See :meth:`Store.hold`."""
        full = self._full_slot(keys, limits)
        if full is None:
            self._hold(keys)
        return full

    async def release(self, keys: Sequence[str]) -> None:
        """See :meth:`Store.release`."""
        self._release(keys)

    async def admit(
        self, keys: Sequence[str], limits: Sequence[int], buckets: Sequence[RateBucket]
    ) -> tuple[int | None, list[RateState]]:
        """See :meth:`Store.admit`."""
        full = self._full_slot(keys, limits)
        if full is not None:
            return full, []
        states, allowed = self._take(buckets) if buckets else ([], True)
        if allowed:
            self._hold(keys)
        return None, states

    async def settle(self, keys: Sequence[str], buckets: Sequence[RateBucket]) -> None:
        """See :meth:`Store.settle`."""
        self._release(keys)
        self._adjust(buckets)

    # The rate and slot operations run synchronously below (one event-loop step per store
    # call); they read and write ``_data`` directly, as ``_write`` would, on the hot path.

    def _take(self, buckets: Sequence[RateBucket]) -> tuple[list[RateState], bool]:
        """:meth:`rate_take`'s states, and whether the take happened."""
        now = self._clock()
        data = self._data
        debts: list[float] = []
        allowed = True
        for bucket in buckets:
            entry = data.get(bucket.key)
            if entry is None:
                debt = 0.0
            else:  # _debt, inlined
                tat = entry[0]
                if type(tat) is not float:
                    raise ValueError(f"key {bucket.key!r} does not hold a rate bucket")
                debt = tat - now if tat > now else 0.0
            debts.append(debt)
            period = bucket.period
            if debt + bucket.cost * period / bucket.limit > period + _SLACK:
                allowed = False
        states: list[RateState] = []
        for index, bucket in enumerate(buckets):
            period = bucket.period
            interval = period / bucket.limit
            debt = debts[index]
            new = debt + bucket.cost * interval
            if allowed:
                if new > 0:
                    key = bucket.key
                    data.pop(key, None)  # re-inserted: dict order is write order
                    data[key] = (now + new, now + new)
                remaining = int((period - new) / interval + _SLACK)
                states.append(RateState(True, remaining if remaining > 0 else 0, new))
            else:
                remaining = int((period - debt) / interval + _SLACK)
                fits = new <= period + _SLACK
                retry = 0.0 if fits else new - period
                states.append(RateState(fits, remaining if remaining > 0 else 0, debt, retry))
        if allowed:
            self._wrote(len(buckets))
        return states, allowed

    def _adjust(self, buckets: Sequence[RateBucket]) -> None:
        now = self._clock()
        data = self._data
        for bucket in buckets:
            key = bucket.key
            entry = data.pop(key, None)
            if entry is None:
                debt = 0.0
            else:  # _debt, inlined
                tat = entry[0]
                if type(tat) is not float:
                    data[key] = entry
                    raise ValueError(f"key {key!r} does not hold a rate bucket")
                debt = tat - now if tat > now else 0.0
            new = debt + bucket.cost * bucket.period / bucket.limit
            if new > 0:
                data[key] = (now + new, now + new)
        self._wrote(len(buckets))

    def _full_slot(self, keys: Sequence[str], limits: Sequence[int]) -> int | None:
        """The index of the first counter of ``keys`` at its limit; None when none is."""
        for index, key in enumerate(keys):
            if self._count(key) >= limits[index]:
                return index
        return None

    def _hold(self, keys: Sequence[str]) -> None:
        data = self._data
        for key in keys:
            count = self._count(key) + 1
            data.pop(key, None)
            data[key] = (count, None)
        self._wrote(len(keys))

    def _release(self, keys: Sequence[str]) -> None:
        data = self._data
        for key in keys:
            count = self._count(key)
            data.pop(key, None)
            if count > 1:
                data[key] = (count - 1, None)
        self._wrote(len(keys))

    def _count(self, key: str) -> int:
        entry = self._data.get(key)
        if entry is None:
            return 0
        value = entry[0]
        if type(value) is not int:
            raise ValueError(f"key {key!r} does not hold an in-flight counter")
        return value

    def _debt(self, key: str, now: float) -> float:
        """Seconds a GCRA bucket is from full (its TAT minus now, at least 0). A bucket's
        entry expires at its TAT, so an expired one needs no expiry check: its debt is 0."""
        entry = self._data.get(key)
        if entry is None:
            return 0.0
        tat = entry[0]
        if type(tat) is not float:
            raise ValueError(f"key {key!r} does not hold a rate bucket")
        return tat - now if tat > now else 0.0

    def __len__(self) -> int:
        """The number of keys held, expired ones not yet swept included."""
        return len(self._data)

    def _expiry(self, ttl: float | None) -> float | None:
        if ttl is None:
            return None
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        return self._clock() + ttl

    def _live(
        self, key: str, now: float | None = None
    ) -> tuple[bytes | int | float, float | None] | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires = entry[1]
        if expires is not None and expires <= (self._clock() if now is None else now):
            del self._data[key]
            return None
        return entry

    def _write(self, key: str, value: bytes | int | float, expires: float | None) -> None:
        data = self._data
        data.pop(key, None)  # re-insert so that dict order is write order (oldest first)
        data[key] = (value, expires)
        self._wrote(1)

    def _wrote(self, writes: int) -> None:
        """Account for ``writes`` writes: sweep every ``sweep_every``, evict past ``max_keys``."""
        before = self._writes
        self._writes = before + writes
        if before // self._sweep_every != self._writes // self._sweep_every:
            self._sweep()
        data = self._data
        while len(data) > self._max_keys:
            del data[next(iter(data))]

    def _sweep(self) -> None:
        now = self._clock()
        dead = [
            k for k, (_, expires) in self._data.items() if expires is not None and expires <= now
        ]
        for key in dead:
            del self._data[key]

    async def incr_within(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
    ) -> tuple[int | None, list[int]]:
        """See :meth:`Store.incr_within` (one synchronous step)."""
        now = self._clock()
        data = self._data
        entries = list(map(data.get, keys))
        for entry in entries:  # the common case: live integer counters
            if (
                entry is None
                or type(entry[0]) is not int
                or (entry[1] is not None and entry[1] <= now)
            ):
                entries = self._counters(keys, entries, ttls, now)
                break
        if limits is not None:
            for index, limit in enumerate(limits):
                if entries[index][0] >= limit:  # type: ignore[index]
                    return index, [entry[0] for entry in entries]  # type: ignore[index,misc]
        values: list[int] = []
        for key, (value, expires) in zip(keys, entries, strict=True):
            value += amount
            data.pop(key, None)  # re-inserted: dict order is write order
            data[key] = (value, expires)
            values.append(value)
        self._wrote(len(values))
        return None, values

    def _counters(
        self,
        keys: Sequence[str],
        entries: list[tuple[bytes | int | float, float | None] | None],
        ttls: Sequence[float | None],
        now: float,
    ) -> list[tuple[int, float | None]]:
        """``entries`` of ``keys`` as counters: a missing or expired one at 0 with the expiry its
        TTL gives, text parsed; ValueError for anything else."""
        counters: list[tuple[int, float | None]] = []
        for index, entry in enumerate(entries):
            if entry is None or (entry[1] is not None and entry[1] <= now):
                ttl = ttls[index]
                if ttl is not None and ttl <= 0:
                    raise ValueError("ttl must be positive")
                counters.append((0, None if ttl is None else now + ttl))
            else:
                value = entry[0]
                counters.append(
                    (value if type(value) is int else _integer(keys[index], value), entry[1])
                )
        return counters


def _integer(key: str, value: bytes | float) -> int:
    """The counter ``value`` of ``key`` held as text; ValueError if it is not an integer."""
    if isinstance(value, float):
        raise ValueError(f"key {key!r} holds a rate bucket, not an integer")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"key {key!r} does not hold an integer") from None
