"""Where stored Responses-API responses live: the :class:`ResponseStore` interface and its
in-process implementation.

A stored response is what ``GET /v1/responses/{id}`` answers and what a later request's
``previous_response_id`` continues: the response object as its client received it, and the
conversation through that response's output in canonical form. Every record belongs to the key
that created it (``Principal.key_id``; None for an anonymous caller): a lookup names the owner,
and a record of another owner is treated as missing, so that no caller can learn whether another
key's response exists.

Records expire ``ttl`` seconds after they are written and are bounded in number and bytes: when a
write would pass either bound, the oldest records are evicted first. A record larger than the
byte bound by itself is not stored (``put`` says so). The memory store is per process: with
several workers a response is found only by the worker that stored it (the database store,
which the embedded database makes possible, lifts that).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from msgspec import Struct

Clock = Callable[[], float]


class StoredResponse(Struct, frozen=True):
    """One stored response. ``body`` is the response object's JSON; ``messages`` a JSON array
    of canonical :class:`~proxy.canonical.Message` values — the conversation through this
    response's output, its instructions excluded (they do not carry over)."""

    owner: str | None
    body: bytes
    messages: bytes

    @property
    def size(self) -> int:
        """Bytes this record holds."""
        return len(self.body) + len(self.messages)


class ResponseStore(Protocol):
    """Stored responses by id, scoped to their owner. Every method is a coroutine; a backend
    that cannot answer raises, and its caller decides what that means (a response that could
    not be stored is still answered)."""

    async def put(self, response_id: str, record: StoredResponse) -> bool:
        """Store ``record`` (replacing one of the same id); False if it is too large to keep."""
        ...

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        """The record if it exists, has not expired and belongs to ``owner``; else None."""
        ...

    async def delete(self, response_id: str, owner: str | None) -> bool:
        """Remove the record if :meth:`get` would find it; whether there was one."""
        ...


class MemoryResponseStore:
    """The in-process :class:`ResponseStore`: insertion-ordered, expired lazily on reads and
    from the oldest end on writes. Not thread-safe: use it from one event loop."""

    def __init__(
        self,
        *,
        ttl: float,
        max_entries: int,
        max_bytes: int,
        clock: Clock = time.monotonic,
    ) -> None:
        if ttl <= 0 or max_entries < 1 or max_bytes < 1:
            raise ValueError("ttl, max_entries and max_bytes must be positive")
        self._ttl = ttl
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._clock = clock
        self._records: OrderedDict[str, tuple[StoredResponse, float]] = OrderedDict()
        self._bytes = 0

    @property
    def bytes(self) -> int:
        """Bytes held by the records kept (expired ones not yet dropped included)."""
        return self._bytes

    def __len__(self) -> int:
        """Records kept (expired ones not yet dropped included)."""
        return len(self._records)

    async def put(self, response_id: str, record: StoredResponse) -> bool:
        """See :meth:`ResponseStore.put`."""
        size = record.size
        if size > self._max_bytes:
            return False
        self._drop(response_id)
        now = self._clock()
        self._expire(now)
        while self._records and (
            len(self._records) >= self._max_entries or self._bytes + size > self._max_bytes
        ):
            self._drop(next(iter(self._records)))
        self._records[response_id] = (record, now + self._ttl)
        self._bytes += size
        return True

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        """See :meth:`ResponseStore.get`."""
        entry = self._records.get(response_id)
        if entry is None:
            return None
        record, expires = entry
        if expires <= self._clock():
            self._drop(response_id)
            return None
        return record if record.owner == owner else None

    async def delete(self, response_id: str, owner: str | None) -> bool:
        """See :meth:`ResponseStore.delete`."""
        if await self.get(response_id, owner) is None:
            return False
        self._drop(response_id)
        return True

    def _drop(self, response_id: str) -> None:
        entry = self._records.pop(response_id, None)
        if entry is not None:
            self._bytes -= entry[0].size

    def _expire(self, now: float) -> None:
        """Drop expired records from the oldest end (they expire in insertion order)."""
        records = self._records
        while records:
            response_id, (_, expires) = next(iter(records.items()))
            if expires > now:
                return
            self._drop(response_id)
