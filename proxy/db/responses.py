"""The ``responses`` table: stored Responses-API responses in the gateway's database.

:class:`DatabaseResponseStore` is the :class:`~proxy.response_store.ResponseStore` that keeps
them durably and shares them between worker processes and instances (the memory store is per
process). Semantics are the memory store's: a record is found only by its owner and before it
expires; a write first drops expired records, then the oldest ones while the entry or byte
bound would be passed; a record larger than the byte bound is not stored. Each method is one
transaction; the database is opened (created, migrated) on first use. A database that cannot
answer raises what its driver raises: the caller decides (a response is still answered when it
cannot be stored).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.db import Database
from proxy.db.schema import responses
from proxy.response_store import StoredResponse

Clock = Callable[[], float]


class DatabaseResponseStore:
    """See the module docstring. ``clock`` gives the time in epoch seconds."""

    def __init__(
        self,
        database: Database,
        *,
        ttl: float,
        max_entries: int,
        max_bytes: int,
        clock: Clock = time.time,
    ) -> None:
        if ttl <= 0 or max_entries < 1 or max_bytes < 1:
            raise ValueError("ttl, max_entries and max_bytes must be positive")
        self._database = database
        self._ttl = ttl
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._clock = clock

    async def put(self, response_id: str, record: StoredResponse) -> bool:
        """See :meth:`proxy.response_store.ResponseStore.put`."""
        size = record.size
        if size > self._max_bytes:
            return False
        now = self._clock()
        await self._database.open()
        async with self._database.connect() as connection:
            await connection.execute(responses.delete().where(responses.c.id == response_id))
            await connection.execute(responses.delete().where(responses.c.expires_at <= _at(now)))
            await self._make_room(connection, size)
            await connection.execute(
                responses.insert().values(
                    id=response_id,
                    owner=record.owner,
                    body=record.body,
                    messages=record.messages,
                    size=size,
                    created_at=_at(now),
                    expires_at=_at(now + self._ttl),
                )
            )
        return True

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        """See :meth:`proxy.response_store.ResponseStore.get`."""
        await self._database.open()
        query = sa.select(responses.c.body, responses.c.messages).where(
            self._visible(response_id, owner)
        )
        async with self._database.connect() as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            return None
        return StoredResponse(owner=owner, body=bytes(row.body), messages=bytes(row.messages))

    async def delete(self, response_id: str, owner: str | None) -> bool:
        """See :meth:`proxy.response_store.ResponseStore.delete`."""
        await self._database.open()
        async with self._database.connect() as connection:
            result = await connection.execute(
                responses.delete().where(self._visible(response_id, owner))
            )
        return bool(result.rowcount)

    def _visible(self, response_id: str, owner: str | None) -> sa.ColumnElement[bool]:
        """The record ``response_id`` of ``owner`` that has not expired."""
        mine = responses.c.owner.is_(None) if owner is None else responses.c.owner == owner
        live = responses.c.expires_at > _at(self._clock())
        return sa.and_(responses.c.id == response_id, mine, live)

    async def _make_room(self, connection: AsyncConnection, size: int) -> None:
        """Delete the oldest records until one more of ``size`` bytes fits both bounds."""
        totals = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(responses.c.size), 0))
        count, total = (await connection.execute(totals)).one()
        if count < self._max_entries and total + size <= self._max_bytes:
            return
        oldest = sa.select(responses.c.id, responses.c.size).order_by(
            responses.c.created_at, responses.c.id
        )
        doomed: list[str] = []
        for response_id, record_size in await connection.execute(oldest):
            if count < self._max_entries and total + size <= self._max_bytes:
                break
            doomed.append(response_id)
            count -= 1
            total -= record_size
        await connection.execute(responses.delete().where(responses.c.id.in_(doomed)))


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
