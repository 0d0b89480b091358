"""Where cache entries live: the process's memory, or the shared state store.

A :class:`Backend` is three coroutines over opaque bytes. It may raise anything when it cannot
answer (the store raises :class:`~proxy.state.store.StoreUnavailable` during an outage); the cache
plugin owns the failure policy — any error is a miss, counted — so a backend never needs to hide
its errors.

- :class:`MemoryBackend`: a :class:`~proxy.cache.lru.ByteLRU` in this process (the cache
  plugin keeps one per process, across config reloads); not shared between worker processes;
  it never raises.
- :class:`StoreBackend`: the process's :class:`~proxy.state.store.Store` (shared by every worker and
  instance once that store is Redis), with the store's own expiry and memory policy.
"""

from __future__ import annotations

import math
from typing import Protocol

from proxy.cache.lru import ByteLRU
from proxy.state.store import Store


class Backend(Protocol):
    """Entry storage. ``ttl`` is in seconds (> 0)."""

    async def get(self, key: str) -> bytes | None:
        """The bytes under ``key``, None when missing or expired."""
        ...

    async def set(self, key: str, value: bytes, ttl: float) -> None:
        """Store ``value`` under ``key`` for ``ttl`` seconds (a value that cannot fit is
        silently not stored)."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key`` (nothing happens if it is missing)."""
        ...

    @property
    def bytes(self) -> int | None:
        """Bytes held by this process, None when the storage is not this process's."""
        ...


class MemoryBackend:
    """See the module docstring."""

    __slots__ = ("lru",)

    def __init__(self, lru: ByteLRU) -> None:
        self.lru = lru

    async def get(self, key: str) -> bytes | None:
        """See :meth:`Backend.get`."""
        return self.lru.get(key)

    async def set(self, key: str, value: bytes, ttl: float) -> None:
        """See :meth:`Backend.set`."""
        self.lru.set(key, value, ttl)

    async def delete(self, key: str) -> None:
        """See :meth:`Backend.delete`."""
        self.lru.delete(key)

    @property
    def bytes(self) -> int | None:
        """See :meth:`Backend.bytes`."""
        return self.lru.bytes


class StoreBackend:
    """See the module docstring. TTLs are rounded up to whole seconds (Redis ``EX``)."""

    __slots__ = ("_store",)

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, key: str) -> bytes | None:
        """See :meth:`Backend.get`."""
        return await self._store.get(key)

    async def set(self, key: str, value: bytes, ttl: float) -> None:
        """See :meth:`Backend.set`."""
        await self._store.set(key, value, ttl=max(1, math.ceil(ttl)))

    async def delete(self, key: str) -> None:
        """See :meth:`Backend.delete`."""
        await self._store.delete(key)

    @property
    def bytes(self) -> int | None:
        """See :meth:`Backend.bytes`: the store's memory is not this process's."""
        return None
