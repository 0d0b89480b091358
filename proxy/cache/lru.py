"""An in-process map of byte strings bounded by their total size, least recently used out first.

:class:`ByteLRU` is the memory backend's storage. Each value is charged its length plus its key's
(the bound is on what callers store, not on Python's own object overhead). A write that would pass
``max_bytes`` first evicts the least recently used values; a value larger than the whole bound is
not stored at all (and replaces nothing). Reading a value makes it the most recently used. Values
expire at a deadline on ``clock`` and are dropped when next read; until then an expired value
still counts towards the bound, which keeps memory within ``max_bytes`` whatever the traffic.
:meth:`ByteLRU.resize` changes the bound (a config reload), evicting what no longer fits.

:meth:`ByteLRU.get_decoded` reads a value as the caller decodes it, and keeps that decoded form
with the value, so that the next reads of the same value skip decoding (the memory cache's hits
then cost no entry decoding). A decoded form is charged the value's length again (an estimate
of its objects' size), evicting the least recently used other values if that passes the bound,
so a map whose values were all read still holds about ``max_bytes`` in all. It is made once per
stored value (storing under a key drops the old one's), and shared by every reader, who must
therefore never change it. Not thread-safe: use it from one event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

Clock = Callable[[], float]
Decoded = TypeVar("Decoded")


class ByteLRU:
    """See the module docstring."""

    __slots__ = ("_clock", "_items", "_max_bytes", "bytes", "evictions")

    def __init__(self, max_bytes: int, clock: Clock) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self._max_bytes = max_bytes
        self._clock = clock
        # key -> (value, deadline on the clock, the value's decoded form or None)
        self._items: OrderedDict[str, tuple[bytes, float, Any]] = OrderedDict()
        self.bytes = 0
        """Bytes held: the lengths of every key and value stored, and of every value again
        that is also held decoded."""
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

    def get_decoded(self, key: str, decode: Callable[[bytes], Decoded]) -> Decoded | None:
        """``decode`` of the value under ``key``, None when missing or expired; a use, as
        :meth:`get` is. The value is decoded on its first such read only: later ones return
        the same object (see the module docstring), whatever ``decode`` they pass. What
        ``decode`` raises propagates, and the value is left as it is."""
        items = self._items
        item = items.get(key)
        if item is None:
            return None
        value, deadline, decoded = item
        if deadline <= self._clock():
            self._drop(key)
            return None
        items.move_to_end(key)
        if decoded is None:
            decoded = decode(value)
            items[key] = (value, deadline, decoded)
            self.bytes += len(value)  # the decoded form's charge (module docstring)
            while self.bytes > self._max_bytes:
                oldest = next(iter(items))
                if oldest == key:  # only this value is left: it stays, as set() let it
                    break
                self._drop(oldest)
                self.evictions += 1
        return decoded  # type: ignore[no-any-return]  # the first decode's object (see get_decoded)

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
        items[key] = (value, self._clock() + ttl, None)
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
            value, _, decoded = item
            self.bytes -= len(key) + (len(value) if decoded is None else 2 * len(value))
