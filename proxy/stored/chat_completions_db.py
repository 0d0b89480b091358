"""The ``chat_completions`` table: stored chat completions in the gateway's database.

:class:`DatabaseChatStore` is the :class:`~proxy.stored.chat_store.ChatStore` that keeps them
durably and shares them between worker processes and instances (the memory store is per
process). Semantics are the memory store's (:mod:`proxy.stored.chat_store`): a record is found
only by its owner and before it expires; a write first drops expired records, then the
writer's oldest while its own bounds would be passed, then the heaviest owner's oldest while the
store's would be (:func:`~proxy.stored.response_store.victim`); a record larger than a byte
bound it is subject to is not stored, nor one whose id is longer than 256 characters. An update
rewrites the record in place (it keeps its place in the list and lives ``ttl`` from then). Each
method is one transaction; the database is opened (created, migrated) on first use. A database
that cannot answer raises what its driver raises: the caller decides (a completion is still
answered when it cannot be stored).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.db import Database
from proxy.db.schema import chat_completions as table
from proxy.stored.chat_store import Query, StoredChat, matches, record_key, response_model
from proxy.stored.response_store import Owner, owner_bounds, victim

Clock = Callable[[], float]
MAX_ID = 256
_METADATA = msgspec.json.Decoder(dict[str, str])


class DatabaseChatStore:
    """See the module docstring. ``clock`` gives the time in epoch seconds; a per-owner bound
    left None is the store's."""

    def __init__(
        self,
        database: Database,
        *,
        ttl: float,
        max_entries: int,
        max_bytes: int,
        max_entries_per_owner: int | None = None,
        max_bytes_per_owner: int | None = None,
        clock: Clock = time.time,
    ) -> None:
        self._owner_entries, self._owner_bytes = owner_bounds(
            ttl, max_entries, max_bytes, max_entries_per_owner, max_bytes_per_owner
        )
        self._database = database
        self._ttl = ttl
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._clock = clock

    async def put(self, record: StoredChat) -> bool:
        """See :meth:`proxy.stored.chat_store.ChatStore.put`."""
        size = record.size
        owner = record.owner
        too_large = size > self._max_bytes or (owner is not None and size > self._owner_bytes)
        if too_large or len(record.id) > MAX_ID:
            return False
        now = self._clock()
        key = record_key(owner, record.id)
        await self._database.open()
        async with self._database.connect() as connection:
            await connection.execute(table.delete().where(table.c.key == key))
            await connection.execute(table.delete().where(table.c.expires_at <= _at(now)))
            if owner is not None:
                await self._within_owner(connection, owner, size)
            await self._within_store(connection, owner, size)
            await connection.execute(
                table.insert().values(
                    key=key,
                    id=record.id,
                    owner=owner,
                    model=record.model,
                    response_model=response_model(record.body),
                    metadata=msgspec.json.encode(record.metadata),
                    body=record.body,
                    messages=record.messages,
                    size=size,
                    created_at=_at(now),
                    expires_at=_at(now + self._ttl),
                )
            )
        return True

    async def get(self, completion_id: str, owner: str | None) -> StoredChat | None:
        """See :meth:`proxy.stored.chat_store.ChatStore.get`."""
        await self._database.open()
        query = sa.select(table).where(self._visible(completion_id, owner))
        async with self._database.connect() as connection:
            row = (await connection.execute(query)).first()
        return None if row is None else _record(row)

    async def search(self, query: Query) -> tuple[list[StoredChat], bool]:
        """See :meth:`proxy.stored.chat_store.ChatStore.search`: the owner's live records'
        filter fields are read in order and filtered here (at most the owner's bound of them),
        then the page's bodies."""
        await self._database.open()
        live = sa.and_(_owned_by(query.owner), table.c.expires_at > _at(self._clock()))
        order = table.c.seq.asc() if query.order == "asc" else table.c.seq.desc()
        columns = (table.c.seq, table.c.id, table.c.model, table.c.response_model)
        heads = sa.select(*columns, table.c.metadata).where(live).order_by(order)
        async with self._database.connect() as connection:
            rows = list(await connection.execute(heads))
            ids = [row.id for row in rows]
            if query.after is not None:
                rows = rows[ids.index(query.after) + 1 :] if query.after in ids else []
            chosen: list[int] = []
            for row in rows:
                head = StoredChat(
                    owner=query.owner,
                    id=row.id,
                    model=row.model,
                    metadata=_METADATA.decode(row.metadata),
                    body=b"",
                    messages=b"",
                )
                if matches(head, query, row.response_model):
                    chosen.append(row.seq)
                    if len(chosen) > query.limit:
                        break
            more = len(chosen) > query.limit
            page = chosen[: query.limit]
            found = await connection.execute(sa.select(table).where(table.c.seq.in_(page)))
            by_seq = {row.seq: _record(row) for row in found}
        return [by_seq[seq] for seq in page if seq in by_seq], more

    async def update(
        self, completion_id: str, owner: str | None, metadata: dict[str, str], body: bytes
    ) -> bool:
        """See :meth:`proxy.stored.chat_store.ChatStore.update`."""
        now = self._clock()
        await self._database.open()
        async with self._database.connect() as connection:
            messages = (
                await connection.execute(
                    sa.select(table.c.messages).where(self._visible(completion_id, owner))
                )
            ).scalar()
            if messages is None:
                return False
            await connection.execute(
                table.update()
                .where(self._visible(completion_id, owner))
                .values(
                    metadata=msgspec.json.encode(metadata),
                    body=body,
                    size=len(body) + len(messages),
                    expires_at=_at(now + self._ttl),
                )
            )
        return True

    async def delete(self, completion_id: str, owner: str | None) -> bool:
        """See :meth:`proxy.stored.chat_store.ChatStore.delete`."""
        await self._database.open()
        async with self._database.connect() as connection:
            result = await connection.execute(
                table.delete().where(self._visible(completion_id, owner))
            )
        return bool(result.rowcount)

    def _visible(self, completion_id: str, owner: str | None) -> sa.ColumnElement[bool]:
        """The record ``completion_id`` of ``owner`` that has not expired."""
        live = table.c.expires_at > _at(self._clock())
        return sa.and_(table.c.key == record_key(owner, completion_id), live)

    async def _within_owner(self, connection: AsyncConnection, owner: str, size: int) -> None:
        """Delete ``owner``'s oldest records until one more of ``size`` bytes fits its bounds."""
        mine = table.c.owner == owner
        count, total = await _totals(connection, mine)
        doomed: list[int] = []
        if count >= self._owner_entries or total + size > self._owner_bytes:
            for seq, record_size in await _oldest(connection, mine):
                if count < self._owner_entries and total + size <= self._owner_bytes:
                    break
                doomed.append(seq)
                count -= 1
                total -= record_size
        if doomed:
            await connection.execute(table.delete().where(table.c.seq.in_(doomed)))

    async def _within_store(self, connection: AsyncConnection, owner: Owner, size: int) -> None:
        """Delete the heaviest owners' oldest records, one at a time, until one more of
        ``size`` bytes, written by ``owner``, fits the store's bounds."""
        count, total = await _totals(connection, sa.true())
        while count >= self._max_entries or total + size > self._max_bytes:
            by_entries = count >= self._max_entries
            mine = await _totals(connection, _owned_by(owner))
            weight = sa.func.count() if by_entries else sa.func.sum(table.c.size)
            heaviest = (
                await connection.execute(
                    sa.select(table.c.owner, weight)
                    .group_by(table.c.owner)
                    .order_by(weight.desc())
                    .limit(1)
                )
            ).one()
            chosen = victim(
                (heaviest[0], int(heaviest[1])),
                owner,
                mine[0] if by_entries else mine[1],
                1 if by_entries else size,
            )
            ((seq, record_size),) = await _oldest(connection, _owned_by(chosen), 1)
            await connection.execute(table.delete().where(table.c.seq == seq))
            count -= 1
            total -= record_size


def _record(row: Any) -> StoredChat:
    return StoredChat(
        owner=row.owner,
        id=row.id,
        model=row.model,
        metadata=_METADATA.decode(row.metadata),
        body=bytes(row.body),
        messages=bytes(row.messages),
    )


def _owned_by(owner: Owner) -> sa.ColumnElement[bool]:
    return table.c.owner.is_(None) if owner is None else table.c.owner == owner


async def _totals(connection: AsyncConnection, where: sa.ColumnElement[bool]) -> tuple[int, int]:
    """How many records ``where`` covers, and their bytes."""
    query = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(table.c.size), 0))
    count, total = (await connection.execute(query.where(where))).one()
    return int(count), int(total)


async def _oldest(
    connection: AsyncConnection, where: sa.ColumnElement[bool], limit: int | None = None
) -> list[Any]:
    """``(seq, size)`` of the records ``where`` covers, oldest first (at most ``limit``)."""
    query = sa.select(table.c.seq, table.c.size).where(where).order_by(table.c.seq).limit(limit)
    return list(await connection.execute(query))


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
