"""The ``responses`` table: stored Responses-API responses in the gateway's database.

:class:`DatabaseResponseStore` is the :class:`~proxy.stored.response_store.ResponseStore` that keeps
them durably and shares them between worker processes and instances (the memory store is per
process). Semantics are the memory store's (:mod:`proxy.stored.response_store`): a record is found
only by its owner and before it expires; a write first drops expired records, then the
writer's oldest while its own bounds would be passed, then the heaviest owner's oldest while the
store's would be; a record larger than a byte bound it is subject to is not stored. A running
background response (``StoredResponse.running``) is held under a lease of ``lease`` seconds that
the process running it renews (:meth:`DatabaseResponseStore.renew`); one whose lease has passed
is read as ``failed`` (:func:`~proxy.stored.response_store.interrupted`), and written so by
:meth:`DatabaseResponseStore.sweep` at start-up. Each method
is one transaction; the database is opened (created, migrated) on first use. A database that cannot
answer raises what its driver raises: the caller decides (a response is still answered when it
cannot be stored).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.db import Database
from proxy.db.schema import responses
from proxy.stored.response_store import (
    LEASE_SECONDS,
    Owner,
    StoredResponse,
    interrupted,
    owner_bounds,
    victim,
)

Clock = Callable[[], float]


class DatabaseResponseStore:
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
        lease: float = LEASE_SECONDS,
        clock: Clock = time.time,
    ) -> None:
        self._owner_entries, self._owner_bytes = owner_bounds(
            ttl, max_entries, max_bytes, max_entries_per_owner, max_bytes_per_owner
        )
        self._database = database
        self._ttl = ttl
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._lease = lease
        self._clock = clock

    async def put(self, response_id: str, record: StoredResponse) -> bool:
        """See :meth:`proxy.stored.response_store.ResponseStore.put`."""
        size = record.size
        owner = record.owner
        if size > self._max_bytes or (owner is not None and size > self._owner_bytes):
            return False
        now = self._clock()
        await self._database.open()
        async with self._database.connect() as connection:
            await connection.execute(responses.delete().where(responses.c.id == response_id))
            await connection.execute(responses.delete().where(responses.c.expires_at <= _at(now)))
            if owner is not None:
                await self._within_owner(connection, owner, size)
            await self._within_store(connection, owner, size)
            await connection.execute(
                responses.insert().values(
                    id=response_id,
                    owner=owner,
                    body=record.body,
                    messages=record.messages,
                    input=record.input,
                    size=size,
                    created_at=_at(now),
                    expires_at=_at(now + self._ttl),
                    lease_until=_at(now + self._lease) if record.running else None,
                )
            )
        return True

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        """See :meth:`proxy.stored.response_store.ResponseStore.get`."""
        await self._database.open()
        columns = (responses.c.body, responses.c.messages, responses.c.input)
        query = sa.select(*columns, responses.c.lease_until).where(
            self._visible(response_id, owner)
        )
        async with self._database.connect() as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            return None
        stored_input = bytes(row.input) if row.input is not None else b""  # stored before 0006
        body, running = bytes(row.body), row.lease_until is not None
        if running and row.lease_until <= _at(self._clock()):  # its process stopped
            body, running = interrupted(body), False
        return StoredResponse(
            owner=owner,
            body=body,
            messages=bytes(row.messages),
            input=stored_input,
            running=running,
        )

    async def renew(self, response_ids: list[str]) -> list[str]:
        """See :meth:`proxy.stored.response_store.ResponseStore.renew`."""
        if not response_ids:
            return []
        await self._database.open()
        held = sa.and_(responses.c.id.in_(response_ids), responses.c.lease_until.is_not(None))
        until = _at(self._clock() + self._lease)
        async with self._database.connect() as connection:
            kept = {
                row.id for row in await connection.execute(sa.select(responses.c.id).where(held))
            }
            await connection.execute(responses.update().where(held).values(lease_until=until))
        return [i for i in response_ids if i not in kept]

    async def sweep(self) -> int:
        """See :meth:`proxy.stored.response_store.ResponseStore.sweep`."""
        await self._database.open()
        passed = responses.c.lease_until <= _at(self._clock())
        query = sa.select(responses.c.id, responses.c.body, responses.c.size).where(passed)
        async with self._database.connect() as connection:
            rows = list(await connection.execute(query))
            for row in rows:
                body = interrupted(bytes(row.body))
                size = row.size - len(row.body) + len(body)
                await connection.execute(
                    responses.update()
                    .where(sa.and_(responses.c.id == row.id, passed))
                    .values(body=body, size=size, lease_until=None)
                )
        return len(rows)

    async def delete(self, response_id: str, owner: str | None) -> bool:
        """See :meth:`proxy.stored.response_store.ResponseStore.delete`."""
        await self._database.open()
        async with self._database.connect() as connection:
            result = await connection.execute(
                responses.delete().where(self._visible(response_id, owner))
            )
        return bool(result.rowcount)

    def _visible(self, response_id: str, owner: str | None) -> sa.ColumnElement[bool]:
        """The record ``response_id`` of ``owner`` that has not expired."""
        live = responses.c.expires_at > _at(self._clock())
        return sa.and_(responses.c.id == response_id, _owned_by(owner), live)

    async def _within_owner(self, connection: AsyncConnection, owner: str, size: int) -> None:
        """Delete ``owner``'s oldest records until one more of ``size`` bytes fits its bounds."""
        mine = responses.c.owner == owner
        count, total = await _totals(connection, mine)
        doomed: list[str] = []
        if count >= self._owner_entries or total + size > self._owner_bytes:
            for response_id, record_size in await _oldest(connection, mine):
                if count < self._owner_entries and total + size <= self._owner_bytes:
                    break
                doomed.append(response_id)
                count -= 1
                total -= record_size
        await _delete(connection, doomed)

    async def _within_store(self, connection: AsyncConnection, owner: Owner, size: int) -> None:
        """Delete the heaviest owners' oldest records, one at a time, until one more of
        ``size`` bytes, written by ``owner``, fits the store's bounds (the heaviest owner is
        found by the database: one grouped query per record deleted)."""
        count, total = await _totals(connection, sa.true())
        while count >= self._max_entries or total + size > self._max_bytes:
            by_entries = count >= self._max_entries
            mine = await _totals(connection, _owned_by(owner))
            weight = sa.func.count() if by_entries else sa.func.sum(responses.c.size)
            heaviest = (
                await connection.execute(
                    sa.select(responses.c.owner, weight)
                    .group_by(responses.c.owner)
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
            ((response_id, record_size),) = await _oldest(connection, _owned_by(chosen), 1)
            await _delete(connection, [response_id])
            count -= 1
            total -= record_size


def _owned_by(owner: Owner) -> sa.ColumnElement[bool]:
    return responses.c.owner.is_(None) if owner is None else responses.c.owner == owner


async def _totals(connection: AsyncConnection, where: sa.ColumnElement[bool]) -> tuple[int, int]:
    """How many records ``where`` covers, and their bytes."""
    query = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(responses.c.size), 0))
    count, total = (await connection.execute(query.where(where))).one()
    return int(count), int(total)


async def _oldest(
    connection: AsyncConnection, where: sa.ColumnElement[bool], limit: int | None = None
) -> list[Any]:
    """``(id, size)`` of the records ``where`` covers, oldest first (at most ``limit``)."""
    query = sa.select(responses.c.id, responses.c.size).where(where)
    query = query.order_by(responses.c.created_at, responses.c.id).limit(limit)
    return list(await connection.execute(query))


async def _delete(connection: AsyncConnection, ids: list[str]) -> None:
    if ids:
        await connection.execute(responses.delete().where(responses.c.id.in_(ids)))


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
