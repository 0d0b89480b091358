"""Where stored chat completions live (``store: true`` on ``POST /v1/chat/completions``): the
:class:`ChatStore` interface, the record, and the in-process implementation.

A record is the completion object as its client received it (plus its ``metadata``), the model
the request named, and the request's messages as OpenAI's messages list shows them. Every record
belongs to the key that created it (``Principal.key_id``; None for an anonymous caller): every
lookup names the owner, and a record of another owner is treated as missing, so that no caller
can learn whether another key's completion exists. Ids are the completions' own, scoped by owner:
two keys whose completions carry the same id (a cache hit replays the id it stored) each keep
their own record; a key storing an id it already holds replaces that record.

Lifetime and bounds are the stored responses' (:mod:`proxy.stored.response_store`: ``ttl``,
entries and bytes per owner and in all, a full store evicting the heaviest owner's oldest
records first, a record too large for a bound not stored): :class:`MemoryChatStore` keeps its
records in a :class:`~proxy.stored.response_store.MemoryResponseStore` of its own, so the two
kinds never share a bound or an id space. Listing is per owner, oldest first (or newest first),
filtered by ``model`` and ``metadata``, paged after an id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, Protocol

import msgspec
from msgspec import Struct

from proxy.stored.response_store import (
    MemoryResponseStore,
    Owner,
    StoredResponse,
    owner_bounds,
)

Clock = Callable[[], float]
Order = Literal["asc", "desc"]
MAX_PAGE = 100
"""The most records one list answers (OpenAI's bound on ``limit``)."""


class StoredChat(Struct, frozen=True):
    """One stored chat completion: ``body`` the completion object's JSON (with its
    ``metadata``), ``messages`` a JSON array of the request's messages in OpenAI's message-list
    shape (each with its ``id``), ``model`` the model the request named."""

    owner: str | None
    id: str
    model: str
    metadata: dict[str, str]
    body: bytes
    messages: bytes

    @property
    def size(self) -> int:
        """Bytes this record holds."""
        return len(self.body) + len(self.messages)


class Query(Struct, frozen=True):
    """A list request: records of ``owner`` whose request or response model is ``model`` (any
    when None) and whose metadata holds every pair of ``metadata``, in ``order`` of creation,
    starting after the record ``after`` (from the start when None; an id the owner does not
    hold gives an empty page), at most ``limit`` (1 to :data:`MAX_PAGE`)."""

    owner: str | None
    model: str | None = None
    metadata: dict[str, str] = {}
    after: str | None = None
    limit: int = 20
    order: Order = "asc"


class ChatStore(Protocol):
    """Stored chat completions by id, scoped to their owner. Every method is a coroutine; a
    backend that cannot answer raises, and its caller decides what that means (a completion that
    could not be stored is still answered)."""

    async def put(self, record: StoredChat) -> bool:
        """Store ``record`` (replacing the owner's record of the same id); False if it is too
        large to keep."""
        ...

    async def get(self, completion_id: str, owner: str | None) -> StoredChat | None:
        """The record if it exists, has not expired and belongs to ``owner``; else None."""
        ...

    async def search(self, query: Query) -> tuple[list[StoredChat], bool]:
        """The page ``query`` asks for, and whether more records follow it."""
        ...

    async def update(
        self, completion_id: str, owner: str | None, metadata: dict[str, str], body: bytes
    ) -> bool:
        """Give the owner's record ``metadata`` and the completion body ``body`` (which carries
        it); whether there was such a record."""
        ...

    async def delete(self, completion_id: str, owner: str | None) -> bool:
        """Remove the record if :meth:`get` would find it; whether there was one."""
        ...


def matches(record: StoredChat, query: Query, response_model: str) -> bool:
    """Whether ``record`` (whose completion names ``response_model``) passes ``query``'s
    filters."""
    if query.model is not None and query.model not in (record.model, response_model):
        return False
    return all(record.metadata.get(key) == value for key, value in query.metadata.items())


class _Extras(Struct):
    """What a record keeps beside its body in the inner store's ``messages`` field."""

    id: str
    model: str
    metadata: dict[str, str]
    response_model: str
    messages: msgspec.Raw


_EXTRAS = msgspec.json.Decoder(_Extras)
_ENCODER = msgspec.json.Encoder()
_MODEL = msgspec.json.Decoder(dict[str, msgspec.Raw])


def response_model(body: bytes) -> str:
    """The ``model`` a completion body names ("" if none)."""
    raw = _MODEL.decode(body).get("model")
    if raw is None:
        return ""
    model = msgspec.json.decode(raw)
    return model if isinstance(model, str) else ""


def record_key(owner: Owner, completion_id: str) -> str:
    """The id a record is kept under: its own, scoped by its owner."""
    return _ENCODER.encode([owner, completion_id]).decode()


class MemoryChatStore:
    """The in-process :class:`ChatStore` (see the module docstring). Not thread-safe: use it
        from one event loop. Each owner's ids are kept in creation order beside the inner store; an
        id the inner store has dropped (expired or evicted) is forgotten when a list or a write of
        that owner meets it (a write, once the owner's ids pass its entry bound), and all are swept
    when the forgotten could outnumber the live."""

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
        self._records = MemoryResponseStore(
            ttl=ttl,
            max_entries=max_entries,
            max_bytes=max_bytes,
            max_entries_per_owner=max_entries_per_owner,
            max_bytes_per_owner=max_bytes_per_owner,
            clock=clock,
        )
        self._max_entries = max_entries
        self._owner_entries = owner_bounds(
            ttl, max_entries, max_bytes, max_entries_per_owner, max_bytes_per_owner
        )[0]
        self._ids: dict[Owner, dict[str, None]] = {}
        self._indexed = 0

    async def put(self, record: StoredChat) -> bool:
        """See :meth:`ChatStore.put`."""
        extras = _Extras(
            id=record.id,
            model=record.model,
            metadata=record.metadata,
            response_model=response_model(record.body),
            messages=msgspec.Raw(record.messages),
        )
        inner = StoredResponse(
            owner=record.owner, body=record.body, messages=_ENCODER.encode(extras)
        )
        if not await self._records.put(record_key(record.owner, record.id), inner):
            return False
        ids = self._ids.setdefault(record.owner, {})
        if record.id in ids:
            del ids[record.id]
            self._indexed -= 1
        ids[record.id] = None
        self._indexed += 1
        if len(ids) > self._owner_entries:  # some of them are gone for certain
            await self._prune(record.owner)
        if self._indexed > 2 * self._max_entries:
            for owner in list(self._ids):
                await self._prune(owner)
        return True

    async def get(self, completion_id: str, owner: str | None) -> StoredChat | None:
        """See :meth:`ChatStore.get`."""
        found = await self._records.get(record_key(owner, completion_id), owner)
        return None if found is None else _record(owner, found)

    async def search(self, query: Query) -> tuple[list[StoredChat], bool]:
        """See :meth:`ChatStore.search`."""
        await self._prune(query.owner)
        ids = list(self._ids.get(query.owner, ()))
        if query.order == "desc":
            ids.reverse()
        if query.after is not None:
            ids = ids[ids.index(query.after) + 1 :] if query.after in ids else []
        page: list[StoredChat] = []
        for completion_id in ids:
            found = await self._records.get(record_key(query.owner, completion_id), query.owner)
            if found is None:
                continue
            extras = _EXTRAS.decode(found.messages)
            if not matches(_record(query.owner, found, extras), query, extras.response_model):
                continue
            if len(page) == query.limit:
                return page, True
            page.append(_record(query.owner, found, extras))
        return page, False

    async def update(
        self, completion_id: str, owner: str | None, metadata: dict[str, str], body: bytes
    ) -> bool:
        """See :meth:`ChatStore.update`. The record is written again: it lives ``ttl`` from
        now, and keeps its place in the owner's list."""
        record = await self.get(completion_id, owner)
        if record is None:
            return False
        ids = self._ids.get(owner, {})
        order = list(ids)
        kept = await self.put(msgspec.structs.replace(record, metadata=metadata, body=body))
        self._ids[owner] = dict.fromkeys(i for i in order if i in self._ids.get(owner, {}))
        return kept

    async def delete(self, completion_id: str, owner: str | None) -> bool:
        """See :meth:`ChatStore.delete`."""
        deleted = await self._records.delete(record_key(owner, completion_id), owner)
        ids = self._ids.get(owner)
        if ids is not None and completion_id in ids:
            del ids[completion_id]
            self._indexed -= 1
        return deleted

    async def _prune(self, owner: Owner) -> None:
        """Forget ``owner``'s ids the inner store no longer holds."""
        ids = self._ids.get(owner)
        if ids is None:
            return
        for completion_id in list(ids):
            if await self._records.get(record_key(owner, completion_id), owner) is None:
                del ids[completion_id]
                self._indexed -= 1
        if not ids:
            del self._ids[owner]


def _record(owner: Owner, found: StoredResponse, extras: _Extras | None = None) -> StoredChat:
    extras = extras or _EXTRAS.decode(found.messages)
    return StoredChat(
        owner=owner,
        id=extras.id,
        model=extras.model,
        metadata=extras.metadata,
        body=found.body,
        messages=bytes(extras.messages),
    )
