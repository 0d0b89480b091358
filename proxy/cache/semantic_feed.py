"""How semantic entries reach every process that shares a state store (Redis).

Each scope has a log in the store: a counter ``crossway:semantic:v1:<scope>:seq`` and one key per
entry, ``crossway:semantic:v1:<scope>:<n>``, holding the entry's record (the exact cache key of
its answer, its expiry and its vector) for the entry's TTL. A process that caches an answer
takes the next number from the counter (``INCR``) and writes the record under it (``SET ... EX``).

A process learns of the entries others wrote *when it next searches that scope*: it reads the
counter (one ``GET``) and, when it moved, the records it has not seen (one ``GET`` each, sent
together on the pipelined connection; at most ``max_fetch`` per search, newest first). So there
is no delay beyond the store's own: an answer cached by one instance is found by the next
similar question on any other. An entry whose number was taken but whose record is not written
yet (the writer is between its two commands) is looked for again at the next search, once. A
counter that expired (it lives ``ttl`` seconds from its first entry) starts again from 1; a
reader that sees it go back starts again from 0.

The store raises :class:`~proxy.state.store.StoreUnavailable` during an outage; the caller owns the
policy (the semantic cache treats it as a miss).
"""

from __future__ import annotations

import asyncio

import msgspec

from proxy.state.store import Store

PREFIX = "crossway:semantic:v1:"
MAX_FETCH = 512
"""Records read per search, at most (the newest; a process far behind skips older ones)."""
MAX_SCOPES = 10_000
"""Scopes whose read position is remembered (beyond, all are forgotten and read again)."""
_RETRIES = 64  # numbers taken but not yet written, per scope, looked for again


class Record(msgspec.Struct, array_like=True):
    """One semantic entry: the exact cache key of its answer, its expiry (wall-clock seconds)
    and its vector (float32 bytes, little-endian)."""

    key: str
    expires: float
    vector: bytes


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Record)


class _Cursor:
    """What one process has read of one scope's log."""

    __slots__ = ("missing", "own", "seen")

    def __init__(self) -> None:
        self.seen = 0
        self.own: set[int] = set()  # numbers this process wrote (already indexed)
        self.missing: set[int] = set()  # numbers taken whose record was not there yet


class SemanticFeed:
    """See the module docstring. ``ttl`` bounds the counters' life (seconds)."""

    def __init__(
        self, store: Store, *, ttl: float, max_fetch: int = MAX_FETCH, max_scopes: int = MAX_SCOPES
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._max_fetch = max_fetch
        self._max_scopes = max_scopes
        self._cursors: dict[str, _Cursor] = {}

    async def publish(self, scope: str, record: Record, ttl: float) -> None:
        """Append ``record`` to ``scope``'s log for ``ttl`` seconds."""
        number = await self._store.incr(PREFIX + scope + ":seq", ttl=self._ttl)
        self._cursor(scope).own.add(number)
        await self._store.set(f"{PREFIX}{scope}:{number}", _ENCODER.encode(record), ttl=ttl)

    async def fetch(self, scope: str) -> list[Record]:
        """The records of ``scope`` written by other processes since the last call."""
        cursor = self._cursor(scope)
        raw = await self._store.get(PREFIX + scope + ":seq")
        current = int(raw) if raw else 0
        if current < cursor.seen:  # the counter expired and started again
            cursor.seen = 0
            cursor.own.clear()
            cursor.missing.clear()
        first = max(cursor.seen, current - self._max_fetch) + 1
        wanted = [n for n in range(first, current + 1) if n not in cursor.own]
        retried = sorted(cursor.missing)
        cursor.missing.clear()
        cursor.seen = current
        cursor.own = {n for n in cursor.own if n > current}
        numbers = retried + wanted
        if not numbers:
            return []
        values = await asyncio.gather(*(self._store.get(f"{PREFIX}{scope}:{n}") for n in numbers))
        records: list[Record] = []
        for number, value in zip(numbers, values, strict=True):
            if value is None:
                if number not in retried and len(cursor.missing) < _RETRIES:
                    cursor.missing.add(number)
                continue
            try:
                records.append(_DECODER.decode(value))
            except msgspec.DecodeError:
                continue  # a foreign or truncated value: nothing to index
        return records

    def _cursor(self, scope: str) -> _Cursor:
        cursor = self._cursors.get(scope)
        if cursor is None:
            if len(self._cursors) >= self._max_scopes:
                self._cursors.clear()  # forgetting only costs re-reading up to max_fetch
            cursor = self._cursors[scope] = _Cursor()
        return cursor
