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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

Clock = Callable[[], float]


class StoreUnavailable(Exception):
    """The store's backend cannot be reached; the caller applies its failure policy."""


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
        self._data: dict[str, tuple[bytes | int, float | None]] = {}

    async def get(self, key: str) -> bytes | None:
        """See :meth:`Store.get`."""
        entry = self._live(key)
        if entry is None:
            return None
        value = entry[0]
        return str(value).encode() if isinstance(value, int) else value

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

    def __len__(self) -> int:
        """The number of keys held, expired ones not yet swept included."""
        return len(self._data)

    def _expiry(self, ttl: float | None) -> float | None:
        if ttl is None:
            return None
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        return self._clock() + ttl

    def _live(self, key: str, now: float | None = None) -> tuple[bytes | int, float | None] | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires = entry[1]
        if expires is not None and expires <= (self._clock() if now is None else now):
            del self._data[key]
            return None
        return entry

    def _write(self, key: str, value: bytes | int, expires: float | None) -> None:
        data = self._data
        data.pop(key, None)  # re-insert so that dict order is write order (oldest first)
        data[key] = (value, expires)
        self._writes += 1
        if self._writes % self._sweep_every == 0:
            self._sweep()
        while len(data) > self._max_keys:
            del data[next(iter(data))]

    def _sweep(self) -> None:
        now = self._clock()
        dead = [
            k for k, (_, expires) in self._data.items() if expires is not None and expires <= now
        ]
        for key in dead:
            del self._data[key]
