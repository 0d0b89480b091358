"""The ``batches`` and ``batch_lines`` tables: each batch's object, owner and lease, and each of
its input lines with its result once it ran — the progress that lets a batch resume after a
restart.

A line's result is written once (``result`` is None until then): the executor asks only for the
lines without one, so a line whose result is stored never runs again. A batch being run is held
under a lease (``lease_until``) that its process renews; a batch still to be taken to its end
(:data:`~proxy.batches.objects.RUNNABLE`) whose lease is absent or passed is free for any
process to claim (:meth:`BatchStore.claim`: one conditional update, so two processes never
both hold it). A batch written ended gets its ``ended_at``, by which the retention sweep finds
it (:meth:`BatchStore.ended_before`, :meth:`BatchStore.purge`). Each method is one
transaction; the database is opened on first use, and one that cannot answer raises what its
driver raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import msgspec
import sqlalchemy as sa

from proxy.batches.files import is_id
from proxy.batches.objects import (
    BATCH_DECODER,
    ENCODER,
    MESSAGES,
    RUNNABLE,
    Batch,
    RequestCounts,
)
from proxy.core.canonical import Principal
from proxy.core.errors import NotFound
from proxy.db import Database
from proxy.db.schema import batch_lines, batches

INSERT_ROWS = 500
"""Lines inserted per statement when a batch is created."""
_PRINCIPAL = msgspec.json.Decoder(Principal)


class Line(msgspec.Struct, frozen=True):
    """One input line still to run: its number (from 0), ``custom_id`` and request body."""

    number: int
    custom_id: str
    body: bytes


class Result(msgspec.Struct, frozen=True):
    """What one line did: its output-file line, and whether it failed."""

    number: int
    line: bytes
    failed: bool


class Held(msgspec.Struct, frozen=True):
    """A batch a process claimed: its object, who its lines run as, and its native plan (the
    encoded :class:`~proxy.batches.native.NativePlan`; None: gateway-executed)."""

    batch: Batch
    principal: Principal
    native: bytes | None = None


class BatchStore:
    """See the module docstring. ``clock`` gives the time in epoch seconds."""

    def __init__(self, database: Database, clock: Callable[[], float] = time.time) -> None:
        self._database = database
        self._clock = clock

    def now(self) -> int:
        """The time in epoch seconds, as this store reads it (its ``clock``)."""
        return int(self._clock())

    async def create(
        self,
        batch: Batch,
        principal: Principal,
        lines: Sequence[tuple[str, bytes]],
        native: bytes | None = None,
        *,
        output_expires_after: int | None = None,
    ) -> None:
        """Store ``batch`` of ``principal`` with its input ``lines`` (``custom_id``, body), its
        encoded native plan (None: gateway-executed) and the seconds its output files are to be
        kept (None: as ``batches.retention_days`` says)."""
        await self._database.open()
        async with self._database.connect() as connection:
            await connection.execute(
                batches.insert().values(
                    id=batch.id,
                    owner=principal.key_id,
                    team=principal.team,
                    endpoint=batch.endpoint,
                    principal=ENCODER.encode(principal),
                    body=ENCODER.encode(batch),
                    native=native,
                    status=batch.status,
                    lease_until=None,
                    ended_at=_ended_at(batch),
                    output_expires_after=output_expires_after,
                )
            )
            for start in range(0, len(lines), INSERT_ROWS):
                rows = [
                    {"batch_id": batch.id, "line": number, "custom_id": custom_id, "body": body}
                    for number, (custom_id, body) in enumerate(
                        lines[start : start + INSERT_ROWS], start
                    )
                ]
                await connection.execute(batch_lines.insert(), rows)

    async def get(self, batch_id: str, owner: Principal) -> Batch:
        """``owner``'s batch ``batch_id``; a 404 when it has none such."""
        if not is_id(batch_id):
            raise missing_batch(batch_id)
        await self._database.open()
        query = sa.select(batches.c.body).where(_visible(batch_id, owner))
        async with self._database.connect() as connection:
            body = (await connection.execute(query)).scalar()
        if body is None:
            raise missing_batch(batch_id)
        return BATCH_DECODER.decode(body)

    async def page(
        self, owner: Principal, *, after: str | None, limit: int, messages: bool = False
    ) -> tuple[list[Batch], bool]:
        """``owner``'s batches (``messages``: its message batches, else its others), newest
        first, after the one named ``after``; at most ``limit`` and whether more follow. An
        ``after`` the owner does not have is a 404."""
        await self._database.open()
        kind = batches.c.endpoint == MESSAGES if messages else batches.c.endpoint != MESSAGES
        where = [_owned(owner), kind]
        async with self._database.connect() as connection:
            if after is not None:
                if not is_id(after):
                    raise missing_batch(after)
                query = sa.select(batches.c.seq).where(_visible(after, owner))
                seq = (await connection.execute(query)).scalar()
                if seq is None:
                    raise missing_batch(after)
                where.append(batches.c.seq < seq)
            query = (
                sa.select(batches.c.body)
                .where(*where)
                .order_by(batches.c.seq.desc())
                .limit(limit + 1)
            )
            bodies = list((await connection.execute(query)).scalars())
        return [BATCH_DECODER.decode(body) for body in bodies[:limit]], len(bodies) > limit

    async def save(self, batch: Batch, *, lease: float | None) -> bool:
        """Write ``batch`` as it now stands, holding it ``lease`` seconds more (None: released);
        whether it was written. A batch asked to cancel meanwhile is not written back to
        ``validating``, ``in_progress`` or ``finalizing`` (False: it is to be cancelled)."""
        until = None if lease is None else _at(self._clock() + lease)
        where = batches.c.id == batch.id
        if batch.status in ("validating", "in_progress", "finalizing"):
            where = sa.and_(where, batches.c.status != "cancelling")
        async with self._database.connect() as connection:
            written = await connection.execute(
                batches.update()
                .where(where)
                .values(
                    body=ENCODER.encode(batch),
                    status=batch.status,
                    lease_until=until,
                    ended_at=_ended_at(batch),
                )
            )
        return bool(written.rowcount)

    async def request_cancel(self, batch_id: str, owner: Principal) -> Batch:
        """Mark ``owner``'s batch ``cancelling`` (its process sees it at its next renewal, or
        the next process to claim it); the batch as it then stands. One already ended is left
        as it is. A 404 when the owner has none such."""
        batch = await self.get(batch_id, owner)
        if batch.status in ("validating", "in_progress"):
            batch.status = "cancelling"
            batch.cancelling_at = int(self._clock())
            async with self._database.connect() as connection:
                await connection.execute(
                    batches.update()
                    .where(
                        batches.c.id == batch_id,
                        batches.c.status.in_(("validating", "in_progress")),
                    )
                    .values(body=ENCODER.encode(batch), status="cancelling")
                )
            return await self.get(batch_id, owner)
        return batch

    async def claim(self, lease: float, exclude: Sequence[str]) -> Held | None:
        """Hold for ``lease`` seconds the oldest batch still to be run whose lease is absent or
        passed (none of ``exclude``, those this process holds already); None if there is none."""
        await self._database.open()
        now = _at(self._clock())
        free = sa.and_(
            batches.c.status.in_(RUNNABLE),
            sa.or_(batches.c.lease_until.is_(None), batches.c.lease_until <= now),
        )
        if exclude:
            free = sa.and_(free, batches.c.id.not_in(exclude))
        async with self._database.connect() as connection:
            rows = list(
                await connection.execute(
                    sa.select(batches.c.id).where(free).order_by(batches.c.seq).limit(8)
                )
            )
            for row in rows:
                taken = await connection.execute(
                    batches.update()
                    .where(batches.c.id == row.id, free)
                    .values(lease_until=_at(self._clock() + lease))
                )
                if taken.rowcount == 1:
                    query = sa.select(batches.c.body, batches.c.principal, batches.c.native)
                    held = (await connection.execute(query.where(batches.c.id == row.id))).one()
                    native = None if held.native is None else bytes(held.native)
                    return Held(
                        BATCH_DECODER.decode(held.body), _PRINCIPAL.decode(held.principal), native
                    )
        return None

    async def save_native(self, batch_id: str, native: bytes) -> None:
        """Write ``batch_id``'s native plan as it now stands (its upstream batch's id)."""
        async with self._database.connect() as connection:
            await connection.execute(
                batches.update().where(batches.c.id == batch_id).values(native=native)
            )

    async def renew(self, batch_id: str, lease: float) -> str | None:
        """Hold ``batch_id`` ``lease`` seconds more; its status as stored (None: deleted)."""
        async with self._database.connect() as connection:
            await connection.execute(
                batches.update()
                .where(batches.c.id == batch_id)
                .values(lease_until=_at(self._clock() + lease))
            )
            status = (
                await connection.execute(
                    sa.select(batches.c.status).where(batches.c.id == batch_id)
                )
            ).scalar()
        return None if status is None else str(status)

    async def pending(self, batch_id: str, after: int, limit: int) -> list[Line]:
        """At most ``limit`` lines of ``batch_id`` after line ``after`` that have no result yet,
        in order."""
        query = (
            sa.select(batch_lines.c.line, batch_lines.c.custom_id, batch_lines.c.body)
            .where(
                batch_lines.c.batch_id == batch_id,
                batch_lines.c.line > after,
                batch_lines.c.result.is_(None),
            )
            .order_by(batch_lines.c.line)
            .limit(limit)
        )
        async with self._database.connect() as connection:
            rows = list(await connection.execute(query))
        return [Line(row.line, row.custom_id, bytes(row.body)) for row in rows]

    async def record(self, batch_id: str, results: Sequence[Result]) -> None:
        """Store the ``results`` of lines of ``batch_id`` (one transaction)."""
        if not results:
            return
        async with self._database.connect() as connection:
            for result in results:
                await connection.execute(
                    batch_lines.update()
                    .where(batch_lines.c.batch_id == batch_id, batch_lines.c.line == result.number)
                    .values(result=result.line, failed=result.failed)
                )

    async def counts(self, batch_id: str) -> RequestCounts:
        """How many lines ``batch_id`` has, and how many of them ran well or failed."""
        query = sa.select(batch_lines.c.failed, sa.func.count()).group_by(batch_lines.c.failed)
        async with self._database.connect() as connection:
            rows = list(await connection.execute(query.where(batch_lines.c.batch_id == batch_id)))
        counts = RequestCounts()
        for failed, count in rows:
            counts.total += int(count)
            if failed is True:
                counts.failed += int(count)
            elif failed is False:
                counts.completed += int(count)
        return counts

    async def results(self, batch_id: str, failed: bool, after: int, limit: int) -> list[Result]:
        """At most ``limit`` stored results of ``batch_id`` that failed (or did not), after line
        ``after``, in line order."""
        query = (
            sa.select(batch_lines.c.line, batch_lines.c.result)
            .where(
                batch_lines.c.batch_id == batch_id,
                batch_lines.c.failed.is_(failed),
                batch_lines.c.line > after,
            )
            .order_by(batch_lines.c.line)
            .limit(limit)
        )
        async with self._database.connect() as connection:
            rows = list(await connection.execute(query))
        return [Result(row.line, bytes(row.result), failed) for row in rows]

    async def outcomes(
        self, batch_id: str, after: int, limit: int
    ) -> list[tuple[int, str, bytes | None]]:
        """At most ``limit`` lines of ``batch_id`` after line ``after``, in order: each line's
        number, ``custom_id`` and stored result (None: it did not run)."""
        query = (
            sa.select(batch_lines.c.line, batch_lines.c.custom_id, batch_lines.c.result)
            .where(batch_lines.c.batch_id == batch_id, batch_lines.c.line > after)
            .order_by(batch_lines.c.line)
            .limit(limit)
        )
        async with self._database.connect() as connection:
            rows = list(await connection.execute(query))
        return [
            (row.line, row.custom_id, None if row.result is None else bytes(row.result))
            for row in rows
        ]

    async def delete(self, batch_id: str, owner: Principal) -> None:
        """Delete ``owner``'s batch ``batch_id`` and its lines (a 404 when it has none such)."""
        await self.get(batch_id, owner)
        async with self._database.connect() as connection:
            await connection.execute(batch_lines.delete().where(batch_lines.c.batch_id == batch_id))
            await connection.execute(batches.delete().where(_visible(batch_id, owner)))

    async def output_expires_after(self, batch_id: str) -> int | None:
        """The seconds ``batch_id``'s output files are to be kept, as its creator asked (None:
        not asked)."""
        query = sa.select(batches.c.output_expires_after).where(batches.c.id == batch_id)
        async with self._database.connect() as connection:
            seconds = (await connection.execute(query)).scalar()
        return None if seconds is None else int(seconds)

    async def ended_before(self, age: float, limit: int) -> list[Batch]:
        """At most ``limit`` batches, of any owner, that ended more than ``age`` seconds ago,
        the longest ended first."""
        await self._database.open()
        query = (
            sa.select(batches.c.body)
            .where(batches.c.ended_at <= _at(self._clock() - age))
            .order_by(batches.c.ended_at)
            .limit(limit)
        )
        async with self._database.connect() as connection:
            bodies = list((await connection.execute(query)).scalars())
        return [BATCH_DECODER.decode(body) for body in bodies]

    async def purge(self, batch_id: str) -> None:
        """Delete batch ``batch_id`` and its lines, whoever owns it (one transaction; none
        such: nothing happens)."""
        async with self._database.connect() as connection:
            await connection.execute(batch_lines.delete().where(batch_lines.c.batch_id == batch_id))
            await connection.execute(batches.delete().where(batches.c.id == batch_id))


def missing_batch(batch_id: str) -> NotFound:
    """The 404 of a batch the caller does not have."""
    return NotFound(f"No such batch: {batch_id[:80]}", param="batch_id")


def _owned(owner: Principal) -> sa.ColumnElement[bool]:
    key = owner.key_id
    return batches.c.owner.is_(None) if key is None else batches.c.owner == key


def _visible(batch_id: str, owner: Principal) -> sa.ColumnElement[bool]:
    return sa.and_(batches.c.id == batch_id, _owned(owner))


def _ended_at(batch: Batch) -> datetime | None:
    """When ``batch`` ended (None: it is still to be taken to its end)."""
    if batch.status in RUNNABLE:
        return None
    ended = batch.completed_at or batch.expired_at or batch.cancelled_at or batch.failed_at
    return _at(batch.created_at if ended is None else ended)


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
