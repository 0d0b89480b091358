"""An in-process map of byte strings bounded by their total size, least recently used out first.

:class:`ByteLRU` is the memory backend's storage. Each value is charged its length plus its key's
(the bound is on what callers store, not on Python's own object overhead). A write that would pass
``max_bytes`` first evicts the least recently used values; a value larger than the whole bound is
not stored at all (and replaces nothing). Reading a value makes it the most recently used. Values
expire at a deadline on ``clock`` and are dropped when next read; until then an expired value
still counts towards the bound, which keeps memory within ``max_bytes`` whatever the traffic.
:meth:`ByteLRU.resize` changes the bound (a config reload), evicting what no longer fits.
Not thread-safe: use it from one event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

Clock = Callable[[], float]


class ByteLRU:
    """See the module docstring."""

    __slots__ = ("_clock", "_items", "_max_bytes", "bytes", "evictions")

    def __init__(self, max_bytes: int, clock: Clock) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self._max_bytes = max_bytes
        self._clock = clock
        self._items: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self.bytes = 0
        """Bytes held: the lengths of every key and value stored."""
        self.evictions = 0
        """Values dropped to make room since this map was made."""

    def get(self, key: str) -> bytes | None:
        """The value under ``key``, None when missing or expired."""
        item = self._items.get(key)
        if item is None:
            return None
        if item[1] <= self._clock():
            self._drop(key)
            return None
        self._items.move_to_end(key)
        return item[0]

    def set(self, key: str, value: bytes, ttl: float) -> bool:
        """Store ``value`` for ``ttl`` seconds; False (and nothing changed) if it cannot fit."""
        size = len(key) + len(value)
        if size > self._max_bytes or ttl <= 0:
            return False
        self._drop(key)
        items = self._items
        while self.bytes + size > self._max_bytes:
            oldest = next(iter(items))
            self._drop(oldest)
            self.evictions += 1
        items[key] = (value, self._clock() + ttl)
        self.bytes += size
        return True

    def resize(self, max_bytes: int) -> None:
        """Bound the map by ``max_bytes`` from now on, first evicting the least recently used
        values until what it holds fits. Raises :class:`ValueError` for a bound below 1."""
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self._max_bytes = max_bytes
        items = self._items
        while self.bytes > max_bytes:
            self._drop(next(iter(items)))
            self.evictions += 1

    def delete(self, key: str) -> None:
        """Remove ``key`` (nothing happens if it is missing)."""
        self._drop(key)

    def __len__(self) -> int:
        """Values held, expired ones not yet dropped included."""
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        """Whether a live value is held under ``key`` (does not count as a use)."""
        item = self._items.get(key)
        return item is not None and item[1] > self._clock()

    def _drop(self, key: str) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self.bytes -= len(key) + len(item[0])
