"""The ``request_logs`` table: the request logs' records, written in batches, read by the admin
API, pruned by age.

:meth:`RequestLogRepository.write` is the batching writer's sink (:mod:`proxy.governance.ledger
.writer`): an insert that skips ids the table already has (``ON CONFLICT DO NOTHING``,
SQLite and PostgreSQL alike), so that replaying a journal never duplicates a record; on SQLite
the rows go to the driver as plain tuples (``executemany``), past SQLAlchemy's per-row
processing, which cost three times the database's own work.
:meth:`find` lists records newest first with the spend API's opaque cursors; :meth:`get` finds a
record by its id, else the newest with that request id. Each call opens the database on first
use; a database that cannot answer raises what its driver raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from msgspec.structs import astuple
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import RowMapping

from proxy.db import Database
from proxy.db.schema import request_logs as table
from proxy.governance.ledger.spend_db import decode_cursor, encode_cursor
from proxy.request_logs.records import RequestLogRecord

_FIELDS = RequestLogRecord.__struct_fields__
_TIME = _FIELDS.index("time")
_SQLITE_INSERT = (
    f"INSERT INTO request_logs ({', '.join(_FIELDS)}) VALUES ({', '.join('?' * len(_FIELDS))})"
    " ON CONFLICT (id) DO NOTHING"
)


class LogFilter:
    """Which records a listing covers: ``start`` (inclusive) to ``end`` (exclusive), and only
    a ``key_id``, a ``team``, a ``model`` (as the client asked for it) or statuses from
    ``statuses[0]`` to ``statuses[1]`` (both inclusive) when given."""

    __slots__ = ("end", "key_id", "model", "start", "statuses", "team")

    def __init__(
        self,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        key_id: str | None = None,
        team: str | None = None,
        model: str | None = None,
        statuses: tuple[int, int] | None = None,
    ) -> None:
        self.start = start
        self.end = end
        self.key_id = key_id
        self.team = team
        self.model = model
        self.statuses = statuses

    def apply(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``query`` restricted to the filter."""
        c = table.c
        if self.start is not None:
            query = query.where(c.time >= self.start)
        if self.end is not None:
            query = query.where(c.time < self.end)
        if self.key_id is not None:
            query = query.where(c.key_id == self.key_id)
        if self.team is not None:
            query = query.where(c.team == self.team)
        if self.model is not None:
            query = query.where(c.model == self.model)
        if self.statuses is not None:
            query = query.where(c.status.between(*self.statuses))
        return query


class RequestLogRepository:
    """See the module docstring."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def write(self, records: Sequence[RequestLogRecord]) -> None:
        """Store ``records``, skipping ids already stored."""
        if not records:
            return
        await self._database.open()
        async with self._database.connect() as connection:
            if connection.dialect.name == "sqlite":  # plain tuples: no per-row processing
                await connection.exec_driver_sql(_SQLITE_INSERT, [_sqlite_row(r) for r in records])
                return
            await connection.execute(
                postgresql.insert(table).on_conflict_do_nothing(index_elements=["id"]),
                [_row(record) for record in records],
            )

    async def get(self, record_id: str) -> RequestLogRecord | None:
        """The record with id ``record_id``, else the newest whose request id it is."""
        await self._database.open()
        query = (
            table.select()
            .where(sa.or_(table.c.id == record_id, table.c.request_id == record_id))
            .order_by((table.c.id == record_id).desc(), table.c.time.desc())
            .limit(1)
        )
        async with self._database.connect() as connection:
            row = (await connection.execute(query)).first()
        return None if row is None else _record(row._mapping)

    async def find(
        self, where: LogFilter, limit: int, cursor: str | None = None
    ) -> tuple[list[RequestLogRecord], str | None]:
        """Records newest first (without their payloads), at most ``limit``, after
        ``cursor``; and the next page's cursor (None at the end). Raises :class:`ValueError`
        for a cursor this never made."""
        await self._database.open()
        columns = [column for column in table.c if column.name not in ("request", "response")]
        query = where.apply(sa.select(*columns))
        if cursor is not None:
            moment, record_id = decode_cursor(cursor)
            query = query.where(
                sa.or_(
                    table.c.time < moment, sa.and_(table.c.time == moment, table.c.id < record_id)
                )
            )
        query = query.order_by(table.c.time.desc(), table.c.id.desc()).limit(limit + 1)
        async with self._database.connect() as connection:
            rows = list(await connection.execute(query))
        records = [_record(row._mapping) for row in rows[:limit]]
        last = rows[limit - 1]._mapping if len(rows) > limit else None
        return records, None if last is None else encode_cursor(last["time"], last["id"])

    async def prune(self, before: datetime) -> int:
        """Delete the records older than ``before``; how many."""
        await self._database.open()
        async with self._database.connect() as connection:
            result = await connection.execute(table.delete().where(table.c.time < before))
        return int(result.rowcount or 0)


def _sqlite_row(record: RequestLogRecord) -> tuple[Any, ...]:
    """The record as a row of :data:`_SQLITE_INSERT`: the time as SQLAlchemy keeps a
    :class:`~proxy.db.schema.UtcDateTime` in SQLite (naive UTC text, to the microsecond)."""
    values = astuple(record)
    moment = datetime.fromtimestamp(record.time, UTC)
    return (*values[:_TIME], f"{moment:%Y-%m-%d %H:%M:%S.%f}", *values[_TIME + 1 :])


def _row(record: RequestLogRecord) -> dict[str, Any]:
    row = {name: getattr(record, name) for name in _FIELDS}
    row["time"] = datetime.fromtimestamp(record.time, UTC)
    return row


def _record(row: Mapping[str, Any] | RowMapping) -> RequestLogRecord:
    values: dict[str, Any] = {name: row.get(name) for name in _FIELDS}
    moment = row["time"]
    values["time"] = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    values["stream"] = bool(values["stream"])
    values["truncated"] = bool(values["truncated"])
    return RequestLogRecord(**values)
