"""Where stored Responses-API responses live: the :class:`ResponseStore` interface and its
in-process implementation.

A stored response is what ``GET /v1/responses/{id}`` answers and what a later request's
``previous_response_id`` continues: the response object as its client received it, and the
conversation through that response's output in canonical form. Every record belongs to the key
that created it (``Principal.key_id``; None for an anonymous caller): a lookup names the owner,
and a record of another owner is treated as missing, so that no caller can learn whether another
key's response exists.

Records expire ``ttl`` seconds after they are written and are bounded in number and bytes twice:
per owner (``max_entries_per_owner``, ``max_bytes_per_owner``) and in all (``max_entries``,
``max_bytes``), so that one key cannot push another's conversations out. A write first drops
expired records; then, while the writer's own bound would be passed, the writer's oldest
records; then, while the store's bound would be passed, the oldest record of the *heaviest*
owner (:func:`victim`: the most entries, or bytes when only the byte bound is passed; the
writer counted with its new record and chosen on a tie). So a key at its own bound evicts only
its own records, and a full store never takes a record from an owner holding less than the
writer will. Records without an owner (no ``auth`` plugin: every caller is the same anonymous
one, so there are no tenants to keep apart) have only the store's bound. A record larger than a
byte bound it is subject to by itself is not stored (``put`` says so). The memory store is per
process: with several workers a response is found only by the worker that stored it (the
database store, which the embedded database makes possible, lifts that).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
from msgspec import Struct

Clock = Callable[[], float]
Owner = str | None

LEASE_SECONDS = 10.0
"""How long a shared store holds a running background response for the process running it
without news from that process (:meth:`ResponseStore.renew`); past it, the response is reported
``failed`` (its process stopped), and the sweep at start-up writes it so."""


class StoredResponse(Struct, frozen=True):
    """One stored response. ``body`` is the response object's JSON; ``messages`` a JSON array
    of canonical :class:`~proxy.core.canonical.Message` values — the conversation through this
    response's output, its instructions excluded (they do not carry over); ``input`` the same
    kind of array holding only what this response's request contributed (its ``input``: what
    ``input_items`` lists; empty: none recorded); ``running`` marks a background response still
    ``queued`` or ``in_progress`` (a store shared between processes holds it under a lease, see
    :data:`LEASE_SECONDS`)."""

    owner: str | None
    body: bytes
    messages: bytes
    input: bytes = b""
    running: bool = False

    @property
    def size(self) -> int:
        """Bytes this record holds."""
        return len(self.body) + len(self.messages) + len(self.input)


class ResponseStore(Protocol):
    """Stored responses by id, scoped to their owner. Every method is a coroutine; a backend
    that cannot answer raises, and its caller decides what that means (a response that could
    not be stored is still answered)."""

    async def put(self, response_id: str, record: StoredResponse) -> bool:
        """Store ``record`` (replacing one of the same id), evicting as the module docstring
        says; False if it is too large to keep."""
        ...

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        """The record if it exists, has not expired and belongs to ``owner``; else None."""
        ...

    async def delete(self, response_id: str, owner: str | None) -> bool:
        """Remove the record if :meth:`get` would find it; whether there was one."""
        ...

    async def renew(self, response_ids: list[str]) -> list[str]:
        """The process running these background responses is alive: extend their leases (a
        store that only this process reads holds none). Returns those of them it no longer holds
        as running (cancelled or deleted meanwhile, perhaps by another process)."""
        ...

    async def sweep(self) -> int:
        """Write every running background response whose lease has passed as ``failed`` (its
        process stopped before it ended); how many. Run at start-up."""
        ...


def victim(heaviest: tuple[Owner, int], writer: Owner, mine: int, adding: int) -> Owner:
    """The owner whose oldest record goes when the whole store is full: ``heaviest`` (an owner
    holding the most entries, or bytes, and that weight), unless ``writer``, which holds
    ``mine`` and adds ``adding``, would then weigh as much (it goes first on a tie) — so no
    owner loses a record to a writer that will hold less."""
    if mine and mine + adding >= heaviest[1]:
        return writer
    return heaviest[0]


class _Ranking:
    """Owners by one weight (entries or bytes), the heaviest found in amortised O(log owners):
    a max-heap gets an entry on every change, entries no longer true are skipped when met, and
    the heap is rebuilt once they outnumber the true ones."""

    __slots__ = ("_heap", "_order", "_weights")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Owner]] = []
        self._weights: dict[Owner, int] = {}
        self._order = itertools.count()  # ties never compare owners (None among them)

    def weight(self, owner: Owner) -> int:
        """``owner``'s weight (0 when it holds nothing)."""
        return self._weights.get(owner, 0)

    def set(self, owner: Owner, weight: int) -> None:
        """``owner`` now weighs ``weight`` (0: it holds nothing)."""
        if not weight:
            self._weights.pop(owner, None)
            return
        self._weights[owner] = weight
        heapq.heappush(self._heap, (-weight, next(self._order), owner))
        if len(self._heap) > 2 * len(self._weights) + 64:
            self._heap = [(-w, next(self._order), o) for o, w in self._weights.items()]
            heapq.heapify(self._heap)

    def heaviest(self) -> tuple[Owner, int]:
        """An owner of the greatest weight, and that weight; raises :class:`IndexError` when
        no owner holds anything."""
        heap, weights = self._heap, self._weights
        while weights.get(heap[0][2]) != -heap[0][0]:
            heapq.heappop(heap)
        return heap[0][2], -heap[0][0]


class _Holding:
    """One owner's records in the memory store: their ids, oldest first, and their bytes."""

    __slots__ = ("bytes", "ids")

    def __init__(self) -> None:
        self.ids: dict[str, None] = {}
        self.bytes = 0


class MemoryResponseStore:
    """The in-process :class:`ResponseStore`: insertion-ordered, expired lazily on reads and
    from the oldest end on writes. Not thread-safe: use it from one event loop. A per-owner
    bound left None is the store's."""

    def __init__(
        self,
        *,
        ttl: float,
        max_entries: int,
        max_bytes: int,
        max_entries_per_owner: int | None = None,
        max_bytes_per_owner: int | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._owner_entries, self._owner_bytes = owner_bounds(
            ttl, max_entries, max_bytes, max_entries_per_owner, max_bytes_per_owner
        )
        self._clock = clock
        self._records: OrderedDict[str, tuple[StoredResponse, float]] = OrderedDict()
        self._owners: dict[Owner, _Holding] = {}
        self._by_entries = _Ranking()
        self._by_bytes = _Ranking()
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
        owner = record.owner
        if size > self._max_bytes or (owner is not None and size > self._owner_bytes):
            return False
        self._drop(response_id)
        now = self._clock()
        self._expire(now)
        if owner is not None:
            self._within_owner(owner, size)
        self._within_store(owner, size)
        self._records[response_id] = (record, now + self._ttl)
        self._bytes += size
        holding = self._owners.get(owner)
        if holding is None:
            holding = self._owners[owner] = _Holding()
        holding.ids[response_id] = None
        holding.bytes += size
        self._rank(owner, holding)
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

    async def renew(self, response_ids: list[str]) -> list[str]:
        """See :meth:`ResponseStore.renew` (no lease: this store dies with its process)."""
        records = self._records
        return [i for i in response_ids if i not in records or not records[i][0].running]

    async def sweep(self) -> int:
        """See :meth:`ResponseStore.sweep`: none (this store dies with its process)."""
        return 0

    def _within_owner(self, owner: str, size: int) -> None:
        """Drop ``owner``'s oldest records until one more of ``size`` bytes fits its bound."""
        holding = self._owners.get(owner)
        while holding is not None and holding.ids:
            if len(holding.ids) < self._owner_entries and holding.bytes + size <= self._owner_bytes:
                return
            self._drop(next(iter(holding.ids)))

    def _within_store(self, owner: Owner, size: int) -> None:
        """Drop the heaviest owners' oldest records until one more of ``size`` bytes, written
        by ``owner``, fits the store's bound (O(log owners) per record dropped)."""
        while self._records:
            if len(self._records) >= self._max_entries:
                ranking, adding = self._by_entries, 1
            elif self._bytes + size > self._max_bytes:
                ranking, adding = self._by_bytes, size
            else:
                return
            chosen = victim(ranking.heaviest(), owner, ranking.weight(owner), adding)
            self._drop(next(iter(self._owners[chosen].ids)))

    def _rank(self, owner: Owner, holding: _Holding) -> None:
        self._by_entries.set(owner, len(holding.ids))
        self._by_bytes.set(owner, holding.bytes)

    def _drop(self, response_id: str) -> None:
        entry = self._records.pop(response_id, None)
        if entry is None:
            return
        record = entry[0]
        self._bytes -= record.size
        holding = self._owners[record.owner]
        del holding.ids[response_id]
        holding.bytes -= record.size
        self._rank(record.owner, holding)
        if not holding.ids:
            del self._owners[record.owner]

    def _expire(self, now: float) -> None:
        """Drop expired records from the oldest end (they expire in insertion order)."""
        records = self._records
        while records:
            response_id, (_, expires) = next(iter(records.items()))
            if expires > now:
                return
            self._drop(response_id)


STOPPED = "the gateway stopped before this background response finished; create it again"
"""The error message of a background response its process did not finish."""

_JSON = msgspec.json.Decoder(dict[str, Any])
_ENCODER = msgspec.json.Encoder()


def interrupted(body: bytes) -> bytes:
    """The response object ``body`` as ``failed`` with a ``server_error`` saying that the gateway
    stopped (:data:`STOPPED`)."""
    response = _JSON.decode(body)
    response["status"] = "failed"
    response["error"] = {"code": "server_error", "message": STOPPED}
    return _ENCODER.encode(response)


def owner_bounds(
    ttl: float,
    max_entries: int,
    max_bytes: int,
    max_entries_per_owner: int | None,
    max_bytes_per_owner: int | None,
) -> tuple[int, int]:
    """The per-owner entry and byte bounds (None: the store's). Raises :class:`ValueError`
    unless ``ttl`` and every bound are positive."""
    entries = max_entries if max_entries_per_owner is None else max_entries_per_owner
    held = max_bytes if max_bytes_per_owner is None else max_bytes_per_owner
    if ttl <= 0 or min(max_entries, max_bytes, entries, held) < 1:
        raise ValueError("ttl, max_entries and max_bytes (per owner too) must be positive")
    return entries, held
